"""kNN graph with real FAISS: exact neighbour lists, no self-edges, IVF recall."""
from __future__ import annotations

import numpy as np
import pytest

from sciencemap.storage import read_table
from mapping.io import l2_normalise
from mapping.knn import KnnConfig, knn_edges, run_knn


def brute_knn(X, k):
    Xn = l2_normalise(X)
    S = Xn @ Xn.T
    np.fill_diagonal(S, -np.inf)
    idx = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(S, idx, axis=1)


def test_flat_knn_matches_bruteforce():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 16)).astype(np.float32)
    k = 7
    summary, src, dst, sim, rank = knn_edges(l2_normalise(X), KnnConfig(k=k, index="flat"))
    assert summary["index"] == "flat" and summary["edges"] == 300 * k
    assert not np.any(src == dst), "self-matches must be dropped"
    assert np.array_equal(np.bincount(src, minlength=300), np.full(300, k))
    idx, sims = brute_knn(X, k)
    order = np.lexsort((rank, src))
    got = dst[order].reshape(300, k)
    # Random gaussian data has no exact ties, so the neighbour lists must agree exactly.
    assert np.array_equal(got, idx)
    np.testing.assert_allclose(sim[order].reshape(300, k), sims, atol=1e-5)
    assert np.array_equal(rank[order].reshape(300, k), np.tile(np.arange(1, k + 1), (300, 1)))


def test_duplicates_never_create_self_edges():
    X = np.repeat(np.random.default_rng(0).normal(size=(5, 8)), 6, axis=0).astype(np.float32)  # 6 copies each
    _, src, dst, _, rank = knn_edges(l2_normalise(X), KnnConfig(k=3, index="flat"))
    assert not np.any(src == dst)
    assert np.array_equal(np.bincount(src, minlength=30), np.full(30, 3))


def test_ivf_reports_recall_on_clustered_data(tmp_path, make_run):
    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=60, dim=24, noise=0.2)
    s = run_knn(KnnConfig(k=10, index="ivf", nlist=6, nprobe=6, recall_queries=100), layout)
    assert s["index"] == "ivf"
    assert s["recall_at_k"] == pytest.approx(1.0)  # nprobe = nlist: IVF visits every list = exact
    e = read_table(layout.table("edges")).to_pandas()
    assert len(e) == 360 * 10
    assert (e["src"] != e["dst"]).all()
    assert e.groupby("src").size().eq(10).all()
    s2 = run_knn(KnnConfig(k=10, index="ivf", nlist=6, nprobe=1, recall_queries=100), layout)
    assert 0 < s2["recall_at_k"] <= 1.0
