"""Leiden (CPM) clustering with real igraph on real FAISS kNN graphs."""
from __future__ import annotations

import numpy as np
import pytest

from sciencemap.runtime import UserError
from sciencemap.storage import read_table
from mapping.cluster import (ClusterConfig, build_graph, cluster_graph, merge_small_clusters,
                             resolution_for_target, run_cluster)
from mapping.io import l2_normalise
from mapping.knn import KnnConfig, knn_edges, run_knn


def test_undirected_union_keeps_max_similarity():
    g = build_graph(np.array(["a", "b", "a"], object), np.array(["b", "a", "c"], object), np.array([0.5, 0.9, 0.3]))
    pairs = {(g.ids[l], g.ids[h]): a for l, h, a in zip(g.lo, g.hi, g.a)}
    assert pairs == {("a", "b"): 0.9, ("a", "c"): 0.3}
    # CWTS normalisation: w_ab = 0.9/s_a + 0.9/s_b with s_a = 1.2, s_b = 0.9
    w = dict(zip(zip(g.ids[g.lo], g.ids[g.hi]), g.w))
    assert w[("a", "b")] == pytest.approx(0.9 / 1.2 + 1.0)


@pytest.fixture
def planted_graph(clustered_vectors):
    """kNN graph of 5 planted clusters of 50 points: (graph, true labels, ids)."""
    X, labels = clustered_vectors(5, 50, 20, 0.25, 1)
    _, src, dst, sim, _ = knn_edges(l2_normalise(X), KnnConfig(k=12, index="flat"))
    ids = np.array([f"n{i}" for i in range(len(X))], object)
    return build_graph(ids[src], ids[dst], sim), labels, ids


def test_leiden_recovers_planted_clusters(planted_graph):
    from sklearn.metrics import adjusted_rand_score

    graph, labels, ids = planted_graph
    mem, info = cluster_graph(graph, 0.005, ClusterConfig(min_cluster_size=1, seed=7))
    truth = labels[np.array([int(s[1:]) for s in graph.ids])]
    assert adjusted_rand_score(truth, mem) == pytest.approx(1.0)
    assert info["clusters"] == 5
    again, _ = cluster_graph(graph, 0.005, ClusterConfig(min_cluster_size=1, seed=7))
    assert np.array_equal(mem, again), "same seed, same partition"


def test_merge_rule_leaves_no_small_cluster_and_follows_cwts_choice(planted_graph):
    graph, _, _ = planted_graph
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


def test_run_cluster_writes_all_resolutions_and_target(tmp_path, make_run):
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


def test_resolution_bisection_hits_target(planted_graph):
    graph, _, _ = planted_graph
    gamma, c = resolution_for_target(graph, 20, ClusterConfig(min_cluster_size=1))
    assert abs(c - 20) <= 2 and gamma > 0
