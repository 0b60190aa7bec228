"""Issue 16's evaluation: accuracy by its definition, the known values of trivial clusterings,
relative accuracy, hybrids, the text graphs' scores and the comparison section of a run."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from mapping.cluster import ClusterConfig, run_cluster
from mapping.evaluation.compare import label_vectors, parse_hybrid
from mapping.evaluation.curves import Clusterer, Criterion, accuracy_at, relative_accuracies, sweep
from mapping.evaluation.evaluate import EvaluateConfig, run_evaluate
from mapping.knn import KnnConfig, run_knn
from mapping.evaluation.mesh_accuracy import accuracy, granularity
from mapping.evaluation.relatedness import RelGraph, from_pairs, hybrid
from mapping.evaluation.text_graphs import bm25_graph, bm25_weights, random_regular_graph, sparse_topk, tfidf_graph, vector_graph
from sciencemap.runtime import UserError


def _direct_sum(V: sp.csr_matrix, labels) -> float:
    """A = (1/N) Σ_i Σ_{j≠i, c_j=c_i} r_ij / Σ_{k≠i} r_ik, term by term."""
    D = V.toarray()
    N = len(D)
    total = 0.0
    for i in range(N):
        r = [float(D[i] @ D[j]) for j in range(N)]
        den = sum(r[k] for k in range(N) if k != i)
        if den > 0:
            total += sum(r[j] for j in range(N) if j != i and labels[j] == labels[i]) / den
    return total / N


def _random_criterion(n=40, d=12, seed=0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    M = rng.random((n, d)) * (rng.random((n, d)) < 0.3)
    M[np.arange(n), rng.integers(0, d, n)] += 1.0            # every paper has a descriptor
    M /= np.linalg.norm(M, axis=1, keepdims=True)
    return sp.csr_matrix(M)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_accuracy_equals_the_direct_sum(seed):
    V = _random_criterion(seed=seed)
    labels = np.random.default_rng(seed + 10).integers(0, 5, V.shape[0])
    assert accuracy(V, labels)[0] == pytest.approx(_direct_sum(V, labels), abs=1e-12)


def test_all_in_one_and_singleton_clusterings():
    V = _random_criterion()
    N = V.shape[0]
    assert accuracy(V, np.zeros(N, int))[0] == pytest.approx(1.0)       # every related pair inside
    assert granularity(np.zeros(N, int)) == pytest.approx(1.0)
    assert accuracy(V, np.arange(N))[0] == pytest.approx(0.0, abs=1e-12)    # nothing inside
    assert granularity(np.arange(N)) == pytest.approx(N)


def test_relative_accuracy_of_identical_methods_is_one():
    curve = {"points": [{"resolution": r, "seed": s, "granularity": g, "accuracy": a}
                        for s in (0, 1) for r, g, a in [(0.1, 5.0, 0.6), (0.2, 12.0, 0.4), (0.4, 30.0, 0.25)]],
             "seeds": [0, 1]}
    rel = relative_accuracies({"a": curve, "b": json.loads(json.dumps(curve))})
    assert rel["a"]["mean"] == pytest.approx(1.0) and rel["b"]["mean"] == pytest.approx(1.0)
    worse = {**curve, "points": [{**p, "accuracy": p["accuracy"] / 2} for p in curve["points"]]}
    rel = relative_accuracies({"a": curve, "b": worse})
    assert rel["a"]["mean"] == pytest.approx(4 / 3) and rel["b"]["mean"] == pytest.approx(2 / 3)
    # the floor does not enter the mean it is compared with
    rel = relative_accuracies({"a": curve, "b": curve, "floor": worse}, reference=["a", "b"])
    assert rel["a"]["mean"] == pytest.approx(1.0) and rel["floor"]["mean"] == pytest.approx(0.5)


def test_accuracy_at_interpolates_in_log_granularity():
    pts = [{"resolution": 1, "seed": 0, "granularity": 10.0, "accuracy": 0.4},
           {"resolution": 2, "seed": 0, "granularity": 100.0, "accuracy": 0.2}]
    at = accuracy_at({"points": pts, "seeds": [0]}, [np.sqrt(1000.0), 5.0])
    assert at[float(np.sqrt(1000.0))]["mean"] == pytest.approx(0.4 - 0.2 * 0.5)
    assert np.isnan(at[5.0]["mean"])                                    # outside the curve: not extrapolated


def test_hybrid_with_weight_one_on_one_graph_is_that_graph(clustered_vectors):
    X, _ = clustered_vectors(4, 25, 16, 0.4)
    g = vector_graph(X, 8, "enc")
    other = random_regular_graph(len(X), 6, seed=3)
    h = hybrid("h", [(g, 1.0), (other, 0.0)])
    assert np.array_equal(h.lo, g.lo) and np.array_equal(h.hi, g.hi)
    assert np.allclose(h.normalised(), g.normalised(), rtol=0, atol=1e-15)
    assert np.array_equal(Clusterer(h).membership(0.05, 1), Clusterer(g).membership(0.05, 1))
    mixed = hybrid("m", [(g, 3.0), (other, 1.0)])                       # weights rescaled to 0.75 / 0.25
    assert mixed.normalised().sum() == pytest.approx(0.75 * g.normalised().sum() + 0.25 * other.normalised().sum())
    with pytest.raises(ValueError, match="same nodes"):
        hybrid("x", [(g, 1.0), (RelGraph("e", len(X), len(X) + 1, g.lo, g.hi, g.a), 1.0)])


def test_parse_hybrid():
    assert parse_hybrid("mix=encoder:0.5,bm25:0.5") == ("mix", [("encoder", 0.5), ("bm25", 0.5)])
    assert parse_hybrid("encoder:2,dc") == ("encoder + dc", [("encoder", 2.0), ("dc", 1.0)])
    with pytest.raises(UserError, match="not a number"):
        parse_hybrid("encoder:x")


def test_bm25_scores_and_sparse_topk_against_their_definitions():
    texts = ["protein folding kinetics protein", "protein structure prediction", "folding of rna",
             "graph clustering leiden", "leiden clustering of citation graph graph"]
    from sklearn.feature_extraction.text import CountVectorizer
    C = CountVectorizer().fit_transform(texts).tocsr().astype(float)
    Q, D = bm25_weights(C, k1=1.2, b=0.75)
    tf, n = C.toarray(), len(texts)
    df = (tf > 0).sum(axis=0)
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
    dl = tf.sum(axis=1)
    want = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            for t in np.flatnonzero(tf[i]):
                want[i, j] += idf[t] * tf[j, t] * 2.2 / (tf[j, t] + 1.2 * (0.25 + 0.75 * dl[j] / dl.mean()))
    assert np.allclose((Q @ D.T).toarray(), want)
    s, d, v = sparse_topk(Q, D, 2, block_pairs=3)                       # tiny blocks: several passes
    for i in range(n):
        row = want[i].copy()
        row[i] = -1
        best = [j for j in np.argsort(-row, kind="stable") if row[j] > 0][:2]
        assert d[s == i].tolist() == best and np.allclose(v[s == i], row[best])
    g = bm25_graph(texts, k=1, max_df=1.0)
    assert (0, 1) in set(zip(g.lo.tolist(), g.hi.tolist())) and (3, 4) in set(zip(g.lo.tolist(), g.hi.tolist()))
    t = tfidf_graph(texts, k=1, max_df=1.0)
    assert (3, 4) in set(zip(t.lo.tolist(), t.hi.tolist()))


def test_label_vectors_weigh_rare_labels_more():
    V, rows = label_vectors([["Neuroscience"], [], ["neuroscience", "Ecology"], ["Ecology"], ["Neuroscience"]])
    assert rows.tolist() == [0, 2, 3, 4]
    M = V.toarray()
    assert np.allclose(np.linalg.norm(M, axis=1), 1.0)
    assert M[1].max() == M[1][np.argmax(M[2])]        # paper 2: ecology (2 of 5) outweighs neuroscience (3 of 5)


def test_sweep_orders_floor_method_and_ceiling(clustered_vectors):
    X, labels = clustered_vectors(6, 30, 16, 0.9, seed=4)
    V = sp.csr_matrix(np.eye(6)[labels])                                # the planted topics are the criterion
    crit = Criterion("planted", V, np.arange(len(X)))
    graphs = {"enc": vector_graph(X, 10), "random": random_regular_graph(len(X), 10, seed=1),
              "ceiling": from_pairs("ceiling", *np.nonzero(np.triu(labels[:, None] == labels[None, :], 1)),
                                    np.ones(int(np.triu(labels[:, None] == labels[None, :], 1).sum())), len(X))}
    at = {k: accuracy_at(sweep(g, crit, (3, 20), points=8, seeds=(0, 1)), [6.0, 12.0]) for k, g in graphs.items()}
    for G in (6.0, 12.0):
        assert at["random"][G]["mean"] < at["enc"][G]["mean"] <= at["ceiling"][G]["mean"] + 1e-9
    assert at["ceiling"][6.0]["mean"] > 0.95


def test_run_evaluate_compares_methods(tmp_path, make_run):
    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=30, dim=16, noise=0.3)
    run_knn(KnnConfig(k=8), layout)
    run_cluster(ClusterConfig(resolutions=[0.05], min_cluster_size=2), layout)
    run_evaluate(EvaluateConfig(sweep_points=6, leiden_seeds=[0, 1], granularities=[3.0, 6.0]), layout)
    m = json.loads(layout.metrics_json.read_text())
    mesh = m["comparison"]["mesh"]
    assert mesh["evaluated"] == 60 and mesh["granularities"] == [3.0, 6.0]
    g = mesh["graphs"]
    assert {"encoder", "random", "criterion", "encoder + BM25"} <= set(g)
    rel = {k: v["relative_accuracy"]["mean"] for k, v in g.items()}
    assert rel["random"] < rel["encoder"] < rel["criterion"]
    assert (layout.root / "relatedness" / "mesh.png").stat().st_size > 10_000
    assert (layout.root / "relatedness" / "mesh" / "encoder.parquet").exists()
    report = layout.report_md.read_text()
    assert "## Methods compared on the same papers" in report and "| random (floor) |" in report


def test_g_cover_is_the_range_every_seed_reaches():
    from mapping.evaluation.compare import g_cover
    pts = [{"seed": 0, "granularity": 5.0}, {"seed": 0, "granularity": 80.0},
           {"seed": 1, "granularity": 8.0}, {"seed": 1, "granularity": 60.0}]
    assert g_cover({"points": pts, "seeds": [0, 1]}) == (8.0, 60.0)


def test_extra_encoders_from_a_parquet_of_vectors(tmp_path, make_run, clustered_vectors):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from mapping.evaluation.compare import focal_vectors

    ids = pa.array(["p3", "p1", "p2", "p9"])
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    pq.write_table(pa.table({"paper_id": ["p1", "p2", "p3", "p1", "zz"],
                             "vector": [X[0].tolist(), X[1].tolist(), X[2].tolist(), X[3].tolist(), [0.0, 0, 0]]}),
                   tmp_path / "v.parquet")
    pos, V = focal_vectors(tmp_path / "v.parquet", ids)
    assert pos.tolist() == [0, 1, 2]                 # p3, p1, p2 in focal order; p9 has none
    assert np.array_equal(V, X[[2, 0, 1]])           # p1's first vector, not its repeat
