"""Network statistics of the kNN graph on graphs small enough to count by hand."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from mapping.cluster import build_graph
from mapping.netstats import link_keys, links_in_graph, network_stats


def _graph(n, lo, hi):
    """The cluster stage's Graph on rows 0..n-1 (rows without edges included)."""
    lo, hi = np.asarray(lo, np.int32), np.asarray(hi, np.int32)
    g = build_graph(lo, hi, np.ones(len(lo), np.float32), n=n)
    assert g.n == n and len(g.lo) == len(lo)
    return g


def test_network_stats_on_known_graph():
    # two triangles (0-1-2, 3-4-5), one separate edge (6-7) and row 8 without edges
    g = _graph(9, [0, 1, 0, 3, 4, 3, 6], [1, 2, 2, 4, 5, 5, 7])
    s = network_stats(g, path_sample=10, citation_pairs=(np.array([0, 1, 2, 6]), np.array([1, 0, 3, 6])))
    assert s["nodes"] == 9 and s["edges"] == 7
    assert s["connected_components"] == 4 and s["isolated_nodes"] == 1 and s["largest_component"] == 3
    assert s["average_degree"] == pytest.approx(14 / 9)
    assert s["density"] == pytest.approx(7 / 36)
    assert s["average_clustering"] == pytest.approx(6 / 9)   # triangle nodes 1; pair and isolated nodes 0
    assert s["average_shortest_path"] == pytest.approx(1.0)
    assert s["shortest_path_sources"] == 9 and s["shortest_path_targets"] == 9
    # links {0,1} (cited both ways: once), {2,3}; the self-citation 6-6 is no link
    assert s["citation_links"] == 2 and s["citation_links_in_knn"] == 1 and s["citation_overlap"] == pytest.approx(0.5)


def _random_graph(n, m, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keys = link_keys(a, b, n)                      # distinct, no self-links
    return _graph(n, keys // n, keys % n)


def test_sampled_path_length_is_exact_when_the_samples_cover_every_node():
    g = _random_graph(300, 330, seed=1)            # sparse: several components and isolated rows
    adj = csr_matrix((np.ones(len(g.lo)), (g.lo, g.hi)), shape=(g.n, g.n))
    d = shortest_path(adj, directed=False, unweighted=True)
    exact = d[np.isfinite(d) & (d > 0)].mean()
    s = network_stats(g, path_sample=g.n, path_targets=g.n)
    assert s["connected_components"] > 1 and s["isolated_nodes"] > 0
    assert s["average_shortest_path"] == pytest.approx(exact, rel=1e-12)
    assert network_stats(g, path_sample=g.n, path_targets=0)["average_shortest_path"] == pytest.approx(exact, rel=1e-12)
    # a sample: seeded (same figure twice), an estimate of the same quantity
    part = [network_stats(g, path_sample=60, path_targets=80, seed=3)["average_shortest_path"] for _ in range(2)]
    assert part[0] == part[1] and part[0] == pytest.approx(exact, rel=0.15)


def test_sampled_clustering_coefficient():
    # 30 disjoint triangles: every node's coefficient is 1, so any sample averages 1
    lo = np.concatenate([[3 * t, 3 * t + 1, 3 * t] for t in range(30)])
    hi = np.concatenate([[3 * t + 1, 3 * t + 2, 3 * t + 2] for t in range(30)])
    s = network_stats(_graph(90, lo, hi), path_sample=0, clustering_sample=10)
    assert s["average_clustering"] == pytest.approx(1.0) and s["clustering_sample"] == 10
    g = _random_graph(200, 900, seed=2)
    assert network_stats(g, path_sample=0, clustering_sample=0)["average_clustering"] == pytest.approx(
        float(np.mean(g.igraph().transitivity_local_undirected(mode="zero"))))


def test_link_keys_and_chunked_overlap():
    n = 50
    g = _random_graph(n, 400, seed=4)
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, n, 700), rng.integers(0, n, 700)
    keys = link_keys(a, b, n)
    assert np.all(np.diff(keys) > 0)
    expect = len({(min(x, y), max(x, y)) for x, y in zip(a.tolist(), b.tolist()) if x != y}
                 & set(zip(g.lo.tolist(), g.hi.tolist())))
    assert expect > 0
    assert links_in_graph(keys, g.lo, g.hi, n) == links_in_graph(keys, g.lo, g.hi, n, chunk=7) == expect
    assert _graph(5, [0], [1]).igraph().vcount() == 5         # isolated rows are nodes
