"""Network statistics, edge overlap and the random graph G(n, m) on graphs small enough to count by hand."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from mapping.cluster import build_graph
from mapping.evaluation.netstats import (CLUSTERING_NODES, PATH_SOURCES, PATH_TARGETS, SOURCES_A_PASS, Links,
                                         bit_parallel_sums, edge_overlap, link_keys, links_in_graph, network_stats,
                                         random_graph, sample_sizes, sampled_path_length, search_graph, sorted_unique)


def _graph(n, lo, hi):
    """The cluster stage's Graph on rows 0..n-1 (rows without edges included)."""
    lo, hi = np.asarray(lo, np.int32), np.asarray(hi, np.int32)
    g = build_graph(lo, hi, np.ones(len(lo), np.float32), n=n)
    assert g.n == n and len(g.lo) == len(lo)
    return g


def test_network_stats_on_known_graph():
    # two triangles (0-1-2, 3-4-5), one separate edge (6-7) and row 8 without edges
    g = _graph(9, [0, 1, 0, 3, 4, 3, 6], [1, 2, 2, 4, 5, 5, 7])
    s = network_stats(g, path_sample=10)
    assert s["nodes"] == 9 and s["edges"] == 7
    assert s["connected_components"] == 4 and s["isolated_nodes"] == 1 and s["largest_component"] == 3
    assert s["largest_component_share"] == pytest.approx(3 / 9)
    assert s["average_degree"] == pytest.approx(14 / 9)
    assert s["density"] == pytest.approx(7 / 36)
    assert s["average_clustering"] == pytest.approx(6 / 9)   # triangle nodes 1; pair and isolated nodes 0
    assert s["average_shortest_path"] == pytest.approx(1.0)
    assert s["shortest_path_sources"] == 9 and s["shortest_path_targets"] == 9
    assert s["shortest_path_pairs"] == 2 * 6 + 2                # ordered pairs within the triangles and the pair
    # the same graph as bare arrays gives the same figures
    assert network_stats(Links(9, g.lo, g.hi), path_sample=10) == s


def test_network_stats_of_a_path_and_a_star():
    # path 0-1-2-3 and star 4-(5,6,7): distances within the path 1,2,3 (x2 each ordered way:
    # sum 2·(3·1 + 2·2 + 1·3) = 20 over 12 pairs), within the star 1 (6 pairs) and 2 (6 pairs)
    s = network_stats(Links.from_keys(link_keys(np.array([0, 1, 2, 4, 4, 4]), np.array([1, 2, 3, 5, 6, 7]), 8), 8),
                      path_sample=8, path_targets=0)
    assert s["edges"] == 6 and s["connected_components"] == 2 and s["largest_component"] == 4
    assert s["isolated_nodes"] == 0 and s["average_clustering"] == 0.0       # no triangle
    assert s["shortest_path_pairs"] == 24
    assert s["average_shortest_path"] == pytest.approx((20 + 6 * 1 + 6 * 2) / 24)
    # closing the star's triangle 5-6: nodes 5 and 6 get 1, node 4 gets 1/3 (one of its 3 pairs linked)
    s = network_stats(Links.from_keys(link_keys(np.array([0, 1, 2, 4, 4, 4, 5]), np.array([1, 2, 3, 5, 6, 7, 6]), 8),
                                      8), path_sample=0)
    assert s["average_clustering"] == pytest.approx((1 + 1 + 1 / 3) / 8)
    assert "average_shortest_path" not in s


def test_edge_overlap_by_hand():
    n = 6
    a = Links.from_keys(link_keys(np.array([0, 1, 2, 3, 4]), np.array([1, 2, 3, 4, 5]), n), n)   # path
    b = Links.from_keys(link_keys(np.array([1, 2, 0, 5, 3]), np.array([0, 0, 3, 3, 3]), n), n)   # 01 02 03 35
    o = edge_overlap(a, b)
    # common: {0,1}; the pairs are 15, so chance gives 5 · 4 / 15
    assert o["edges_a"] == 5 and o["edges_b"] == 4 and o["common"] == 1
    assert o["share_of_a"] == pytest.approx(1 / 5) and o["share_of_b"] == pytest.approx(1 / 4)
    assert o["jaccard"] == pytest.approx(1 / 8)
    assert o["common_expected"] == pytest.approx(20 / 15) and o["common_over_expected"] == pytest.approx(15 / 20)
    r = edge_overlap(b, a)
    assert r["common"] == 1 and r["share_of_a"] == pytest.approx(1 / 4) and r["share_of_b"] == pytest.approx(1 / 5)
    # a graph with itself: everything in common
    assert edge_overlap(a, a)["jaccard"] == 1.0 and edge_overlap(a, a)["common"] == 5
    # edges handed in unsorted are still counted
    assert edge_overlap(Links(n, a.lo[::-1], a.hi[::-1]), b)["common"] == 1
    with pytest.raises(ValueError, match="different node sets"):
        edge_overlap(a, Links(7, b.lo, b.hi))


def _pair_keys(g):
    return np.asarray(g.lo, np.int64) * g.n + g.hi


@pytest.mark.parametrize("n,m", [(1000, 5000), (20, 180), (7, 21), (5, 0)])
def test_random_graph_has_m_distinct_edges(n, m):
    # sparse, dense (180 of 190 pairs: several rounds), complete, empty
    g = random_graph(n, m, seed=3, chunk=64)
    k = _pair_keys(g)
    assert g.n == n and g.m == m
    assert np.all(g.lo < g.hi) and g.lo.min(initial=0) >= 0 and g.hi.max(initial=0) < n   # no self-links
    assert len(np.unique(k)) == m and np.all(np.diff(k) > 0)                          # distinct, sorted
    again = random_graph(n, m, seed=3, chunk=64)
    assert np.array_equal(again.lo, g.lo) and np.array_equal(again.hi, g.hi)          # seeded
    if 0 < m < n * (n - 1) // 2:
        assert not np.array_equal(_pair_keys(random_graph(n, m, seed=4, chunk=64)), k)
    with pytest.raises(ValueError, match="at most"):
        random_graph(n, n * (n - 1) // 2 + 1, seed=0)


def test_random_graph_is_uniform_over_pairs():
    # each of the 15 pairs of 6 nodes is an edge with probability m / 15, at low and high density
    for m in (3, 12):
        count = np.zeros(36, int)
        for seed in range(2000):
            g = random_graph(6, m, seed)
            count[_pair_keys(g)] += 1
        keys = link_keys(*np.triu_indices(6, 1), 6)
        assert count.sum() == 2000 * m and count[keys].sum() == 2000 * m
        # binomial sd at 2000 draws is 0.009 (p = 0.2 or 0.8): 0.04 is > 4 sd
        assert np.abs(count[keys] / 2000 - m / 15).max() < 0.04


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
    assert s["shortest_path_pairs"] == int((np.isfinite(d) & (d > 0)).sum())
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
    # chunks counted in threads: each chunk once, whatever order they finish in
    assert links_in_graph(keys, g.lo, g.hi, n, chunk=7, workers=3) == expect
    assert _graph(5, [0], [1]).igraph().vcount() == 5         # isolated rows are nodes


def test_sorted_unique_equals_numpy_unique():
    rng = np.random.default_rng(6)
    for k in (rng.integers(0, 50, 400), rng.integers(-5, 5, 3), np.array([7]), np.zeros(0, np.int64),
              np.repeat(rng.integers(0, 10**12, 60), rng.integers(1, 9, 60))):
        for chunk in (1, 2, 7, 64, 1 << 22):     # runs of equal values across the blocks' borders
            mine = k.astype(np.int64)
            got = sorted_unique(mine, chunk=chunk)
            assert np.array_equal(got, np.unique(k))
            # compacted in its own memory: a view while at least half the values are distinct, else a copy
            if len(k):
                assert np.shares_memory(got, mine) == (2 * len(got) >= len(k))


def test_sample_sizes_follow_n_unless_set():
    # every node below the caps
    assert sample_sizes(14_000) == (14_000, PATH_SOURCES, PATH_TARGETS)
    assert sample_sizes(150) == (150, 150, 150)
    # large graphs: fixed samples whose cost and standard error do not grow with n
    assert sample_sizes(33_000_000) == (CLUSTERING_NODES, PATH_SOURCES, PATH_TARGETS)
    assert sample_sizes(CLUSTERING_NODES + 1)[0] == CLUSTERING_NODES
    # explicit settings win, 0 included (every node / no path lengths / every target)
    assert sample_sizes(33_000_000, clustering=0, sources=0, targets=0) == (0, 0, 0)
    assert sample_sizes(14_000, clustering=100, sources=7, targets=9) == (100, 7, 9)


def test_unset_samples_give_the_figures_of_the_previous_defaults():
    g = _random_graph(1500, 4000, seed=4)
    unset = network_stats(g)
    old_defaults = network_stats(g, path_sample=200, path_targets=1000, clustering_sample=0)
    assert unset == old_defaults and "clustering_sample" not in unset
    assert unset["shortest_path_sources"] == 200 and unset["shortest_path_targets"] == 1000


def test_parallel_breadth_first_searches_give_the_sequential_answer():
    graph = _random_graph(2000, 2600, seed=5)           # sparse: unreachable pairs too
    g = search_graph(graph.n, graph.lo, graph.hi)
    rng = np.random.default_rng(0)
    src, tgt = np.sort(rng.choice(2000, 70, replace=False)), np.sort(rng.choice(2000, 300, replace=False))
    one = sampled_path_length(g, src, tgt, per_call=4, workers=1)
    for workers, per_call in ((2, 4), (3, 16), (8, 1)):
        assert sampled_path_length(g, src, tgt, per_call=per_call, workers=workers) == one
    # igraph's distances, the reference
    d = np.asarray(graph.igraph().distances(source=src.tolist(), target=tgt.tolist()), float)
    ok = np.isfinite(d) & (d > 0)
    assert one[:2] == (d[ok].mean(), int(ok.sum()))
    # the standard error: the ratio estimator over the sources, against its formula written out
    s, c = np.where(ok, d, 0).sum(axis=1), ok.sum(axis=1)
    k, r = len(s), s.sum() / c.sum()
    assert one[2] == pytest.approx(np.sqrt(np.sum(((s - r * c) / c.mean()) ** 2) / (k * (k - 1))), rel=1e-12)


def test_path_sources_stop_at_the_target_standard_error_the_same_with_any_workers():
    graph = _random_graph(3000, 9000, seed=6)
    g = search_graph(graph.n, graph.lo, graph.hi)
    rng = np.random.default_rng(1)
    src, tgt = rng.choice(3000, 120, replace=False), np.sort(rng.choice(3000, 400, replace=False))
    every = sampled_path_length(g, src, tgt, per_call=8, rel_se=0.0)
    assert every[3] == 120
    # a loose target: the first block at >= 32 sources stops it, and the figures are those of that prefix
    loose = sampled_path_length(g, src, tgt, per_call=8, rel_se=0.5)
    assert loose[3] == 32 and loose == sampled_path_length(g, src[:32], tgt, per_call=8)
    assert loose[2] <= 0.5 * loose[0]
    # a target between: it stops at the first block whose standard error meets it, whatever the workers
    mid = every[2] * 1.5 / every[0]
    stops = [sampled_path_length(g, src, tgt, per_call=8, workers=w, rel_se=mid) for w in (1, 3)]
    assert stops[0] == stops[1] and 32 <= stops[0][3] < 120 and stops[0][2] <= mid * stops[0][0]
    k = stops[0][3]
    before = sampled_path_length(g, src[:k - 8], tgt, per_call=8)
    assert k == 32 or before[2] > mid * before[0]   # the block before did not meet it
    # an unreachable target: every source
    assert sampled_path_length(g, src, tgt, per_call=8, rel_se=1e-9)[3] == 120


def test_path_workers_are_as_many_as_the_free_memory_holds(monkeypatch, caplog):
    import logging

    from mapping.evaluation import netstats
    from mapping.evaluation.netstats import path_workers_that_fit

    each = 16_000_000
    assert path_workers_that_fit(8, each, None) == 8          # no /proc/meminfo: the setting
    assert path_workers_that_fit(8, each, 3 * each + 5) == 3
    assert path_workers_that_fit(8, each, 100 * each) == 8
    assert path_workers_that_fit(8, each, each // 2) == 1     # one search runs anyway
    # through network_stats: short of memory, one worker, and the figures of any number of workers
    g = _random_graph(2000, 5000, seed=3)
    want = network_stats(g, path_sample=64, path_targets=300, path_workers=1)
    monkeypatch.setattr(netstats, "available_memory", lambda: 1)
    with caplog.at_level(logging.INFO, logger="mapping.evaluation.netstats"):
        assert network_stats(g, path_sample=64, path_targets=300, path_workers=4) == want
    assert "in 1 worker(s), not 4" in caplog.text


def test_bits_set_counts_each_bit_in_blocks_of_any_size():
    from mapping.evaluation.netstats import _bits_set

    words = np.random.default_rng(3).integers(0, 2**64, 1000, dtype=np.uint64)
    words[:5] = [0, 1, 2**63, 2**64 - 1, 2**32]
    want = np.array([int(((words >> np.uint64(j)) & np.uint64(1)).sum()) for j in range(64)])
    for chunk in (1, 7, 1000, 1 << 16):
        assert np.array_equal(_bits_set(words, chunk=chunk), want)
    assert not _bits_set(words[:0]).any()


@pytest.mark.parametrize("n,m", [(1500, 1700), (1500, 15000)])   # sparse (components, isolated rows); dense
def test_bit_parallel_passes_equal_igraphs_distances_whatever_the_edge_order_and_blocks(n, m):
    graph = _random_graph(n, m, seed=8)
    rng = np.random.default_rng(2)
    shuffled = rng.permutation(len(graph.lo))          # edges in no order, and some given hi-first
    flip = rng.random(len(shuffled)) < 0.5
    a, b = graph.lo[shuffled], graph.hi[shuffled]
    g = search_graph(graph.n, np.where(flip, b, a), np.where(flip, a, b))
    assert g.has_sorted_indices and g.nnz == 2 * len(graph.lo)
    # each edge both ways and nothing else, as SciPy's components read it without a copy: int32, float64
    # ones that take no memory (a zero-stride view)
    both = np.zeros((graph.n, graph.n), bool)
    both[graph.lo, graph.hi] = both[graph.hi, graph.lo] = True
    assert np.array_equal(g.toarray() != 0, both)
    assert g.indices.dtype == g.indptr.dtype == np.int32 and g.data.dtype == np.float64 and (g.data == 1).all()
    assert g.data.strides == (0,) and not g.data.flags.writeable
    targets = np.sort(rng.choice(graph.n, 400, replace=False))
    sources = rng.choice(graph.n, SOURCES_A_PASS, replace=False)
    sources[:3] = targets[:3]                          # a source among the targets: its own distance 0 is left out
    d = np.asarray(graph.igraph().distances(source=sources.tolist(), target=targets.tolist()), float)
    ok = np.isfinite(d) & (d > 0)
    want = (np.where(ok, d, 0).sum(axis=1).astype(np.int64), ok.sum(axis=1))
    assert (~np.isfinite(d)).any() == (m < 5000)       # the sparse graph leaves pairs unreachable
    for chunk in (1, 37, 1 << 22):                      # pull and push blocks of any size
        got = bit_parallel_sums(g, sources, targets, chunk=chunk)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    few = bit_parallel_sums(g, sources[:5], targets)   # fewer sources than bits
    assert np.array_equal(few[0], want[0][:5]) and np.array_equal(few[1], want[1][:5])
    with pytest.raises(ValueError, match="a pass takes at most 64"):
        bit_parallel_sums(g, np.arange(SOURCES_A_PASS + 1), targets)


def test_a_graph_beyond_scipys_searches_is_searched_with_igraph_and_gives_the_same_figures(monkeypatch, caplog):
    import logging

    from mapping.evaluation import netstats

    g = _random_graph(2500, 4000, seed=9)
    m = len(g.lo)
    want = network_stats(g, path_sample=48, path_targets=500, path_workers=2)
    monkeypatch.setattr(netstats, "SEARCH_MAX_ENTRIES", 2 * m - 1)
    with caplog.at_level(logging.INFO, logger="mapping.evaluation.netstats"):
        assert network_stats(g, path_sample=48, path_targets=500, path_workers=2) == want
    assert f"with igraph: {m:,} edges are more than the int32 CSR graph takes" in caplog.text
    with pytest.raises(ValueError, match="the int32 CSR graph takes at most"):
        search_graph(g.n, g.lo, g.hi)


def test_ranges_concatenate_aranges_and_skip_empty_ones():
    from mapping.evaluation.netstats import _ranges

    starts, lengths = np.array([5, 0, 9, 2, 7]), np.array([3, 0, 1, 4, 0])
    want = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])
    assert np.array_equal(_ranges(starts, lengths), want)
    assert len(_ranges(np.array([3]), np.array([0]))) == 0


@pytest.mark.parametrize("chunk,workers", [(1, 1), (50, 1), (1 << 22, 1), (50, 3), (1 << 22, 600)])
def test_local_clustering_from_the_csr_equals_igraphs(chunk, workers):
    """Each node's coefficient from the CSR graph equals igraph's local transitivity (mode "zero"),
    on a graph with hubs, triangles, isolated and degree-1 nodes, whatever the nodes' order, however
    small the blocks and however many threads share the nodes (more threads than nodes included)."""
    from mapping.evaluation.netstats import local_clustering

    rng = np.random.default_rng(4)
    n, r = 709, 700                           # rows 700..708: three triangles apart
    tri = np.arange(700, 709).reshape(3, 3)
    a = np.concatenate([rng.integers(0, r, 2500), np.zeros(200, np.int64), rng.integers(0, 60, 600), tri[:, [0, 0, 1]].ravel()])
    b = np.concatenate([rng.integers(0, r, 2500), rng.integers(0, r, 200), rng.integers(0, 60, 600), tri[:, [1, 2, 2]].ravel()])
    keys = link_keys(a, b, n)
    g = _graph(n, keys // n, keys % n)
    csr = search_graph(g.n, g.lo, g.hi)
    ref = np.asarray(g.igraph().transitivity_local_undirected(mode="zero"))
    assert (ref == 0).sum() > 10 and (ref == 1).sum() > 0    # degree < 2 or no triangle; a closed neighbourhood
    assert ((ref > 0) & (ref < 1)).sum() > 100
    nodes = np.concatenate([rng.permutation(n)[:500], [701, 705]])
    assert local_clustering(csr, nodes, chunk=chunk, workers=workers) == pytest.approx(ref[nodes], rel=1e-12, abs=0)


def test_a_clustering_sample_needs_no_igraph_graph_and_gives_igraphs_figures(monkeypatch):
    """With a clustering sample the components and the sampled coefficients come from the CSR graph
    (igraph never builds the graph); every figure equals what igraph gives for the same nodes."""
    from mapping.evaluation import netstats

    g = _random_graph(3000, 5200, seed=11)       # sparse: many components, isolated rows
    full = network_stats(g, path_sample=40, path_targets=300, clustering_sample=0)
    nodes = np.sort(np.random.default_rng([0, 1]).choice(g.n, 900, replace=False))
    want = float(np.mean(g.igraph().transitivity_local_undirected(vertices=nodes.tolist(), mode="zero")))

    def no_igraph(*args):
        raise AssertionError("igraph graph built")

    monkeypatch.setattr(netstats, "igraph_from_arrays", no_igraph)
    got = network_stats(g, path_sample=40, path_targets=300, clustering_sample=900)
    assert got["average_clustering"] == pytest.approx(want, rel=1e-12) and got["clustering_sample"] == 900
    assert want != pytest.approx(full["average_clustering"], rel=1e-3)   # a sample, not every node
    for k in ("connected_components", "largest_component", "largest_component_share", "isolated_nodes",
              "average_shortest_path", "shortest_path_pairs", "shortest_path_se"):
        assert got[k] == full[k], k
