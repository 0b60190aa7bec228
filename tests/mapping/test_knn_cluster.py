"""kNN graph with real FAISS and Leiden clustering with real igraph."""
from __future__ import annotations

import numpy as np
import pytest
from mapping_data import clustered_vectors, make_run  # first: puts the repo root on sys.path

from sciencemap.runtime import UserError

from sciencemap.storage import read_table
from mapping.cluster import (ClusterConfig, build_graph, cluster_graph, merge_small_clusters,
                             resolution_for_target, run_cluster)
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


def test_ivf_reports_recall_on_clustered_data(tmp_path):
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


def test_undirected_union_keeps_max_similarity():
    g = build_graph(np.array(["a", "b", "a"], object), np.array(["b", "a", "c"], object), np.array([0.5, 0.9, 0.3]))
    pairs = {(g.ids[l], g.ids[h]): a for l, h, a in zip(g.lo, g.hi, g.a)}
    assert pairs == {("a", "b"): 0.9, ("a", "c"): 0.3}
    # CWTS normalisation: w_ab = 0.9/s_a + 0.9/s_b with s_a = 1.2, s_b = 0.9
    w = dict(zip(zip(g.ids[g.lo], g.ids[g.hi]), g.w))
    assert w[("a", "b")] == pytest.approx(0.9 / 1.2 + 1.0)


def _planted_graph(n_clusters=5, per=50, k=12, seed=1):
    X, labels = clustered_vectors(n_clusters, per, 20, 0.25, seed)
    _, src, dst, sim, _ = knn_edges(l2_normalise(X), KnnConfig(k=k, index="flat"))
    ids = np.array([f"n{i}" for i in range(len(X))], object)
    return build_graph(ids[src], ids[dst], sim), labels, ids


def test_leiden_recovers_planted_clusters():
    from sklearn.metrics import adjusted_rand_score

    graph, labels, ids = _planted_graph()
    mem, info = cluster_graph(graph, 0.005, ClusterConfig(min_cluster_size=1, seed=7))
    truth = labels[np.array([int(s[1:]) for s in graph.ids])]
    assert adjusted_rand_score(truth, mem) == pytest.approx(1.0)
    assert info["clusters"] == 5
    again, _ = cluster_graph(graph, 0.005, ClusterConfig(min_cluster_size=1, seed=7))
    assert np.array_equal(mem, again), "same seed, same partition"


def test_merge_rule_leaves_no_small_cluster_and_follows_cwts_choice():
    graph, _, _ = _planted_graph()
    mem, info = cluster_graph(graph, 0.3, ClusterConfig(min_cluster_size=12, seed=1))
    assert info["clusters_leiden"] > info["clusters"]
    assert np.bincount(mem).min() >= 12
    # Hand example: cluster 2 (1 node) links 1.0 to cluster 0 (size 10) and 0.5 to cluster 1 (size 2):
    # weight/size = 0.1 vs 0.25 -> it joins cluster 1 although the raw link to 0 is stronger.
    membership = np.array([0] * 10 + [1, 1, 2])
    lo, hi, w = np.array([0, 10, 0, 10]), np.array([12, 12, 1, 11]), np.array([1.0, 0.5, 1.0, 1.0])
    new, stranded = merge_small_clusters(membership, lo, hi, w, min_size=2)
    assert new[12] == new[10] and stranded == 0
    # A small cluster with no neighbour cannot merge and is reported.
    new, stranded = merge_small_clusters(np.array([0, 0, 1]), np.array([0]), np.array([1]), np.array([1.0]), 2)
    assert stranded == 1


def test_run_cluster_writes_all_resolutions_and_target(tmp_path):
    layout, _ = make_run(tmp_path / "r", n_clusters=5, per=40, dim=16, noise=0.3)
    run_knn(KnnConfig(k=10), layout)
    s = run_cluster(ClusterConfig(resolutions=[0.01, 0.1], min_cluster_size=3, target_topics=10), layout)
    c = read_table(layout.table("clusters")).to_pandas()
    assert set(c["resolution"]) >= {0.01, 0.1}
    assert len(set(c["resolution"])) == 3
    assert c.groupby("resolution").size().eq(200).all()
    assert abs(s["target_topics"]["clusters"] - 10) <= 3
    counts = [r["clusters"] for r in s["resolutions"]]
    assert counts == sorted(counts), "more clusters at higher resolution"
    with pytest.raises(UserError):
        run_cluster(ClusterConfig(resolutions=[-1.0]), layout)


def test_resolution_bisection_hits_target():
    graph, _, _ = _planted_graph()
    gamma, c = resolution_for_target(graph, 20, ClusterConfig(min_cluster_size=1))
    assert abs(c - 20) <= 2 and gamma > 0


def test_load_embeddings_honours_manifest(tmp_path):
    import json

    from mapping.io import load_embeddings

    layout, _ = make_run(tmp_path / "r", n_clusters=2, per=5, dim=4)
    ids, X = load_embeddings(layout)
    assert len(ids) == 10 and X.shape == (10, 4) and X.dtype == np.float32
    (layout.embeddings_dir / "manifest.json").write_text(json.dumps({"complete": False, "n_shards": 2}))
    with pytest.raises(UserError, match="incomplete"):
        load_embeddings(layout)
    (layout.embeddings_dir / "manifest.json").write_text(json.dumps({"complete": True, "n_shards": 1}))
    ids, _ = load_embeddings(layout)
    assert len(ids) == 5                         # only the listed shard
