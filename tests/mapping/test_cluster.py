"""Leiden (CPM) clustering with real igraph on real FAISS kNN graphs and on generated graphs.

The construction from paper ids and the dict-based merge that the module had before it worked on
vector rows are kept here as references: the array versions must give the same graph and the same
merges."""
from __future__ import annotations

import heapq
import json
import logging
import random
from collections import defaultdict

import igraph as ig
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sciencemap.contracts import EDGES_META_KEY, SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import read_table
from sciencemap.vectors import ensure_vectors, unit_rows
from mapping.cluster import (ClusterConfig, Graph, LeidenRuns, ParallelCPM, build_graph, cluster_graph, cpm_quality,
                             leiden, load_graph, merge_small_clusters, pair_keys, polish_cap, read_pair_keys, refine_within,
                             resolution_for_target, run_cluster, undirected)
from mapping.evaluation.netstats import Links, sorted_unique
from mapping.knn import KnnConfig, knn_edges, run_knn


# ---------------------------------------------------------------- the references (ids and dicts)

def reference_graph(src_ids, dst_ids, sim):
    """The construction from paper ids: node order = first appearance in (src, dst)."""
    idx, ids = pd.factorize(np.concatenate([np.asarray(src_ids, object), np.asarray(dst_ids, object)]))
    n, m = len(ids), len(src_ids)
    lo = np.minimum(idx[:m], idx[m:]).astype(np.int64)
    hi = np.maximum(idx[:m], idx[m:]).astype(np.int64)
    s = np.clip(np.asarray(sim, np.float64), 0, None)
    ok = lo != hi
    lo, hi, s = lo[ok], hi[ok], s[ok]
    key = lo * n + hi
    order = np.argsort(key, kind="stable")
    key, s = key[order], s[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    a = np.maximum.reduceat(s, starts)
    k = key[starts]
    lo, hi = k // n, k % n
    keep = a > 0
    lo, hi, a = lo[keep], hi[keep], a[keep]
    st = np.bincount(lo, weights=a, minlength=n) + np.bincount(hi, weights=a, minlength=n)
    st = np.where(st > 0, st, 1.0)
    return np.asarray(ids, object), lo, hi, a, a / st[lo] + a / st[hi]


def reference_merge(membership, lo, hi, w, min_size):
    """CWTS's rule with a dict of dicts over every between-cluster edge."""
    membership = np.asarray(membership, np.int64)
    if min_size <= 1 or len(membership) == 0:
        return membership, 0
    nc = int(membership.max()) + 1
    size = np.bincount(membership, minlength=nc).astype(np.int64)
    cu, cv = membership[lo], membership[hi]
    between = cu != cv
    adj = defaultdict(lambda: defaultdict(float))
    for x, y, ww in zip(cu[between].tolist(), cv[between].tolist(), np.asarray(w)[between].tolist()):
        adj[x][y] += ww
        adj[y][x] += ww
    parent = np.arange(nc)
    heap = [(int(size[c]), c) for c in range(nc) if 0 < size[c] < min_size]
    heapq.heapify(heap)
    stranded = 0
    while heap:
        s, c = heapq.heappop(heap)
        if parent[c] != c or s != size[c]:
            continue
        nb = adj.get(c)
        if not nb:
            stranded += 1
            continue
        best = max(nb.items(), key=lambda kv: (kv[1] / size[kv[0]], -kv[0]))[0]
        parent[c] = best
        size[best] += size[c]
        size[c] = 0
        for d, ww in adj.pop(c).items():
            del adj[d][c]
            if d != best:
                adj[best][d] += ww
                adj[d][best] += ww
        if size[best] < min_size:
            heapq.heappush(heap, (int(size[best]), best))
    root = parent.copy()
    while not np.array_equal(root[root], root):
        root = root[root]
    return root[membership], stranded


# ---------------------------------------------------------------- graph from arrays

def test_undirected_union_keeps_max_similarity_and_every_row_is_a_node():
    # rows 0-1 both ways (0.5, 0.9), 0-2 once, a self link, a negative pair 1-2; row 3 has no edge
    g = build_graph(np.array([0, 1, 0, 2, 1], np.int32), np.array([1, 0, 2, 2, 2], np.int32),
                    np.array([0.5, 0.9, 0.3, 1.0, -0.2], np.float32), n=4)
    assert g.n == 4 and g.lo.dtype == np.int32 and g.a.dtype == np.float32 and g.w.dtype == np.float64
    assert list(zip(g.lo.tolist(), g.hi.tolist(), g.a.tolist())) == [(0, 1, pytest.approx(0.9)), (0, 2, pytest.approx(0.3))]
    # CWTS normalisation: w_01 = a/s_0 + a/s_1 with s_0 = 0.9 + 0.3, s_1 = 0.9
    a01, a02 = float(np.float32(0.9)), float(np.float32(0.3))
    assert g.w[0] == pytest.approx(a01 / (a01 + a02) + 1.0)
    G = g.igraph()
    assert G.vcount() == 4 and G.ecount() == 2 and G.degree() == [2, 1, 1, 0]
    assert G.get_edgelist() == [(0, 1), (0, 2)] and "weight" not in G.es.attributes()
    with pytest.raises(UserError):
        build_graph(np.array([0, 5]), np.array([1, 0]), np.ones(2), n=4)


def _knn_like(n, k, seed, ties=False):
    """Directed kNN-style lists: row i's k neighbours (rows in order), similarities in (-0.1, 1)."""
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(n, dtype=np.int32), k)
    dst = ((src + rng.integers(1, n, len(src))) % n).astype(np.int32)
    sim = (rng.integers(0, 5, len(src)) / 4 if ties else rng.random(len(src)) * 1.1 - 0.1).astype(np.float32)
    return src, dst, sim


@pytest.mark.parametrize("ties", [False, True])
def test_pairs_sorted_in_threads_equal_one_thread(monkeypatch, ties):
    """Key ranges sorted in threads, joined in order: the one-thread graph exactly (both directions
    of a pair in one range, ties and dropped edges included), with more threads than the keys
    have distinct quantiles."""
    import mapping.cluster as cluster

    n = 4000
    src, dst, sim = _knn_like(n, 10, 5, ties)
    src, dst = np.r_[src, dst[:5000]].astype(np.int32), np.r_[dst, src[:5000]].astype(np.int32)   # mutual pairs
    sim = np.r_[sim, sim[:5000][::-1]].astype(np.float32)
    want = undirected(src, dst, sim, n)
    calls = []
    real = cluster._distinct_max
    monkeypatch.setattr(cluster, "_distinct_max", lambda pair: calls.append(len(pair[0])) or real(pair))
    monkeypatch.setattr(cluster, "UNDIRECTED_SPLIT_MIN", 1000)
    for workers in (2, 3, 7, 64):
        calls.clear()
        got = undirected(src, dst, sim, n, workers)
        kept = int(((src != dst) & (sim > 0)).sum())
        assert len(calls) == min(workers, kept // 1000) and sum(calls) == kept
        assert max(calls) < 2 * len(src) / len(calls), "ranges of about equal size"
        for x, y in zip(got, want):
            assert x.dtype == y.dtype and np.array_equal(x, y)
    g = build_graph(src, dst, sim, n, workers=3)
    assert np.array_equal(g.w, build_graph(src, dst, sim, n).w)


@pytest.mark.parametrize("seed,ties", [(0, False), (1, False), (2, True)])
def test_graph_from_rows_is_the_graph_from_ids(seed, ties):
    n = 3000
    src, dst, sim = _knn_like(n, 8, seed, ties)
    ids = np.array([f"doi:{i * 7919 % 100003}" for i in range(n)], object)   # not sorted like the rows
    ref_ids, lo, hi, a, w = reference_graph(ids[src], ids[dst], sim)
    assert np.array_equal(ref_ids, ids), "every row has an edge: first appearance = row order"
    g = build_graph(src, dst, sim, n)
    assert np.array_equal(g.lo, lo) and np.array_equal(g.hi, hi)
    assert np.array_equal(g.a.astype(np.float64), a)
    assert np.array_equal(g.w, w), "CWTS weights bit for bit: Leiden sees the same graph"
    G = g.igraph()
    assert np.array_equal(np.asarray(G.get_edgelist()), np.column_stack([lo, hi]))
    # the evaluate stage's kNN links, from the keys alone (no weights): the same edges, self links too dropped
    src, dst, sim = np.r_[src, 7, 7].astype(np.int32), np.r_[dst, 7, 8].astype(np.int32), np.r_[sim, 0.5, -0.05]
    g = build_graph(src, dst, sim, n)
    links = Links.from_keys(sorted_unique(pair_keys(src, dst, sim, n)[0]), n)
    assert np.array_equal(links.lo, g.lo) and np.array_equal(links.hi, g.hi) and links.lo.dtype == g.lo.dtype


def test_load_graph_reads_int_rows_with_isolated_rows_from_the_knn_summary(tmp_path):
    layout = RunLayout(tmp_path / "r")
    _write_edges(layout, np.array([0, 1, 2], np.int32), np.array([1, 2, 0], np.int32), np.ones(3, np.float32),
                 papers=6)
    g = load_graph(layout)
    assert g.n == 6 and g.m == 3, "rows 3-5 have no edge and stay nodes (papers = 6 in the knn summary)"
    _write_edges(layout, np.array([0, 1, 2], np.int32), np.array([1, 2, 0], np.int32), np.ones(3, np.float32))
    assert load_graph(layout).n == 3, "no summary, no vectors: max row + 1"
    old = pa.table({"src": ["a", "b"], "dst": ["b", "a"], "similarity": pa.array([1.0, 1.0], pa.float32()),
                    "rank": pa.array([1, 1], pa.int16())})
    pq.write_table(old, layout.table("edges") / "part-00000.parquet")
    with pytest.raises(UserError, match="re-run the knn stage"):
        load_graph(layout)



def test_read_pair_keys_reads_in_batches_what_pair_keys_gives_on_the_whole_table(tmp_path):
    layout = RunLayout(tmp_path / "r")
    rng = np.random.default_rng(3)
    src = rng.integers(0, 40, 300).astype(np.int32)
    dst = rng.integers(0, 40, 300).astype(np.int32)
    sim = rng.uniform(-0.2, 1.0, 300).astype(np.float32)     # some dropped (≤ 0), some self links
    _write_edges(layout, src, dst, sim, papers=45)
    want = pair_keys(src, dst, sim, 45)[0]
    assert 0 < len(want) < 300
    for batch_rows in (1, 7, 1 << 22):
        keys, n = read_pair_keys(layout, batch_rows=batch_rows)
        assert n == 45 and np.array_equal(keys, want)
    _write_edges(layout, src, dst, sim)                         # nothing states the rows: max row + 1
    keys, n = read_pair_keys(layout, batch_rows=16)
    top = int(max(src.max(), dst.max()))
    assert n == top + 1 and np.array_equal(keys, pair_keys(src, dst, sim, top + 1)[0])
    _write_edges(layout, src, dst, sim, papers=top)             # a row beyond the stated rows
    with pytest.raises(UserError, match="outside the vector store's"):
        read_pair_keys(layout, batch_rows=16)

# ---------------------------------------------------------------- Leiden iterations

@pytest.fixture
def planted_graph(clustered_vectors):
    """kNN graph of 5 planted clusters of 50 points: (graph, true labels)."""
    X, labels = clustered_vectors(5, 50, 20, 0.25, 1)
    _, src, dst, sim, _ = knn_edges(unit_rows(X), KnnConfig(k=12, index="flat"))
    return build_graph(src, dst, sim, len(X)), labels


def _bare(G, w, resolution, seed, n_iterations):
    random.seed(seed)
    ig.set_random_number_generator(random)
    return G.community_leiden(objective_function="CPM", weights=w, resolution=resolution, beta=0.01,
                              n_iterations=n_iterations)


def test_leiden_iterations_capped_and_equal_to_until_stable_when_converged():
    src, dst, sim = _knn_like(2000, 10, 3)
    g = build_graph(src, dst, sim, 2000)
    G = g.igraph()
    needed = {}
    for r in [0.003, 0.03, 0.3]:
        stable = _bare(G, g.w, r, 42, -1)
        mem, info = leiden(G, g.w, r, 42, max_iterations=-1)
        assert info["converged"] and np.array_equal(mem, stable.membership), "bit-identical to until-stable"
        assert info["quality"] == pytest.approx(stable.quality, abs=1e-12)
        needed[r] = info["iterations"]
        mem, _ = leiden(G, g.w, r, 42, max_iterations=needed[r])
        assert np.array_equal(mem, stable.membership), "a cap the run does not reach changes nothing"
        for cap in (1, 2):
            mem, info = leiden(G, g.w, r, 42, max_iterations=cap)
            assert info["iterations"] == min(cap, needed[r])
            assert info["converged"] == (needed[r] <= cap)
            assert np.array_equal(mem, _bare(G, g.w, r, 42, cap).membership), "a cap of N = igraph's N iterations"
    assert max(needed.values()) >= 4, f"some resolution needs several iterations (else the test proves little): {needed}"
    r = max(needed, key=needed.get)
    capped, _ = leiden(G, g.w, r, 42, max_iterations=2)
    assert not np.array_equal(capped, _bare(G, g.w, r, 42, -1).membership), "the cap does stop the iterations"


def test_cap_by_graph_size_small_graphs_until_stable_large_ones_capped():
    src, dst, sim = _knn_like(2000, 10, 3)
    g = build_graph(src, dst, sim, 2000)
    G = g.igraph()
    stable = _bare(G, g.w, 0.03, 42, -1)
    mem, info = cluster_graph(g, 0.03, ClusterConfig(min_cluster_size=1), G)
    assert info["max_iterations"] == 100 and info["converged"] and info["iterations"] > 3
    assert info["quality"] == pytest.approx(stable.quality, abs=1e-12)
    # the same graph treated as large: the fixed cap
    mem, info = cluster_graph(g, 0.03, ClusterConfig(min_cluster_size=1, stable_below=g.m, max_iterations=2), G)
    assert info["max_iterations"] == 2 and info["iterations"] == 2 and not info["converged"]
    assert info["quality"] == pytest.approx(_bare(G, g.w, 0.03, 42, 2).quality, abs=1e-12)
    _, info = cluster_graph(g, 0.03, ClusterConfig(min_cluster_size=1, stable_below=g.m, max_iterations=-1), G)
    assert info["max_iterations"] == -1 and info["quality"] == pytest.approx(stable.quality, abs=1e-12)


def test_leiden_recovers_planted_clusters(planted_graph):
    from sklearn.metrics import adjusted_rand_score

    graph, labels = planted_graph
    mem, info = cluster_graph(graph, 0.005, ClusterConfig(min_cluster_size=1, seed=7))
    assert adjusted_rand_score(labels, mem) == pytest.approx(1.0)
    assert info["clusters"] == 5 and info["converged"]
    again, _ = cluster_graph(graph, 0.005, ClusterConfig(min_cluster_size=1, seed=7), graph.igraph())
    assert np.array_equal(mem, again), "same seed, same partition"


# ---------------------------------------------------------------- merging small clusters

def test_merge_rule_leaves_no_small_cluster_and_follows_cwts_choice(planted_graph):
    graph, _ = planted_graph
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


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_merge_equals_the_reference_rule(seed):
    rng = np.random.default_rng(seed)
    n = 4000
    # Many tiny clusters beside a few big ones, some isolated nodes; integer weights on odd seeds (ties).
    sizes = np.concatenate([rng.integers(1, 5, 600), rng.integers(5, 200, 15)])
    membership = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))[:n]
    membership = np.unique(membership, return_inverse=True)[1]
    n = len(membership)
    src, dst, sim = _knn_like(n, 3, seed + 10, ties=bool(seed % 2))
    keep = rng.random(len(src)) > 0.02 * (seed + 1)       # drop some edges: small islands appear
    g = build_graph(src[keep], dst[keep], sim[keep], n)
    for min_size in (2, 5, 30):
        new, stranded = merge_small_clusters(membership, g.lo, g.hi, g.w, min_size)
        ref, ref_stranded = reference_merge(membership, g.lo, g.hi, g.w, min_size)
        assert np.array_equal(new, ref) and stranded == ref_stranded
        left = np.bincount(new)[np.unique(new)]
        assert (left >= min_size).sum() + stranded == len(left)
    # Leiden's own membership on this graph, at a resolution that leaves many small clusters.
    mem, _ = leiden(g.igraph(), g.w, 0.5, seed, max_iterations=2)
    new, stranded = merge_small_clusters(mem, g.lo, g.hi, g.w, 5)
    ref, ref_stranded = reference_merge(mem, g.lo, g.hi, g.w, 5)
    assert np.array_equal(new, ref) and stranded == ref_stranded


def test_merge_with_tied_ratios_chooses_the_lowest_id():
    # cluster 2 (node 4) links 1.0 to cluster 1 (size 2) and, listed second, 1.0 to cluster 0 (size 2):
    # equal weight/size, so the lowest id (0) wins whatever the edge order.
    membership = np.array([0, 0, 1, 1, 2])
    lo, hi = np.array([2, 0, 0, 2]), np.array([4, 4, 1, 3])
    w = np.array([1.0, 1.0, 1.0, 1.0])
    new, stranded = merge_small_clusters(membership, lo, hi, w, min_size=2)
    ref, _ = reference_merge(membership, lo, hi, w, min_size=2)
    assert np.array_equal(new, ref) and new[4] == new[0] != new[2] and stranded == 0


# ---------------------------------------------------------------- the stage

def _write_edges(layout: RunLayout, src, dst, sim, papers: int | None = None) -> None:
    schema = SCHEMAS["edges"]
    if papers is not None:
        schema = schema.with_metadata({EDGES_META_KEY: json.dumps({"papers": papers}).encode()})
    d = layout.table("edges")
    d.mkdir(parents=True, exist_ok=True)
    for f in d.glob("*.parquet"):
        f.unlink()
    rank = np.ones(len(src), np.int16)
    pq.write_table(pa.table([pa.array(src, pa.int32()), pa.array(dst, pa.int32()), pa.array(sim, pa.float32()),
                             pa.array(rank)], schema=schema), d / "part-00000.parquet")


def test_stage_on_vectors_and_row_edges_with_isolated_papers(tmp_path, make_run):
    layout, labels = make_run(tmp_path / "r", n_clusters=4, per=30, dim=16, noise=0.2)
    vec = ensure_vectors(layout)
    n = vec.n
    X = vec.block(0, n)
    S = X @ X.T
    np.fill_diagonal(S, -np.inf)
    nb = np.argsort(-S, axis=1)[:, :8]
    src = np.repeat(np.arange(n), 8)
    dst = nb.ravel()
    lonely = np.array([5, 77])                       # papers whose kNN lists were lost: no edge at all
    keep = ~np.isin(src, lonely) & ~np.isin(dst, lonely)
    _write_edges(layout, src[keep], dst[keep], S[src, dst][keep], papers=n)
    s = run_cluster(ClusterConfig(resolutions=[0.01, 0.1], min_cluster_size=3), layout)
    assert s["papers"] == n and all(r["converged"] for r in s["resolutions"]), "a small graph: until stable"
    files = sorted(p.name for p in layout.table("clusters").glob("*.parquet"))
    assert files == ["part-00000.parquet", "part-00001.parquet"], "one part file per resolution"
    t = read_table(layout.table("clusters"))
    assert t.schema.equals(SCHEMAS["clusters"])
    c = t.to_pandas()
    assert c.groupby("resolution").size().eq(n).all()
    ids = vec.ids()
    low = c[c.resolution == 0.01].sort_values("row")
    assert np.array_equal(low["row"], np.arange(n)) and np.array_equal(low["paper_id"], ids)
    from sklearn.metrics import adjusted_rand_score
    busy = ~np.isin(np.arange(n), lonely)
    assert adjusted_rand_score(labels[busy], low["cluster"].to_numpy()[busy]) > 0.95
    sizes = low.groupby("cluster").size()
    assert sizes[low.set_index("row").loc[lonely, "cluster"]].eq(1).all(), "isolated papers: stranded singletons"
    assert s["resolutions"][0]["stranded_small"] == 2


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
    graph, _ = planted_graph
    gamma, c, mem, info = resolution_for_target(graph, 20, ClusterConfig(min_cluster_size=1), g=graph.igraph())
    assert abs(c - 20) <= 2 and gamma > 0
    assert int(mem.max()) + 1 == c == info["clusters"] and info["resolution"] == gamma


def test_speculative_bisection_walks_the_sequential_path(planted_graph):
    """Three workers probe two bisection levels at once; the probes on the path taken are those of
    the plain bisection, so the γ, the count and the partition are the same."""
    graph, _ = planted_graph
    cfg = ClusterConfig(min_cluster_size=1)
    g = graph.igraph()
    # a target the bisection cannot meet within tolerance: every step runs, both ways
    one = resolution_for_target(graph, 23, cfg, g=g, rel_tol=0.0, max_steps=7)
    with LeidenRuns(graph, g, cfg, 3) as runs:
        three = resolution_for_target(graph, 23, cfg, rel_tol=0.0, max_steps=7, runs=runs)
    assert three[:2] == one[:2]
    assert np.array_equal(three[2], one[2])


def test_parallel_resolutions_give_the_sequential_partitions(tmp_path, make_run):
    """Resolutions in forked workers sharing the graph: the same clusters table, part by part, as
    one after another (each resolution seeds its own Leiden)."""
    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=60, dim=16, noise=0.4)
    run_knn(KnnConfig(k=10), layout)
    res = [0.003, 0.01, 0.03, 0.1]
    one = run_cluster(ClusterConfig(resolutions=res, workers=1, target_topics=12), layout)
    want = read_table(layout.table("clusters"))
    two = run_cluster(ClusterConfig(resolutions=res, workers=2, target_topics=12), layout)
    got = read_table(layout.table("clusters"))
    assert got.equals(want)
    assert two["target_topics"]["resolution"] == one["target_topics"]["resolution"]
    res = sorted(res + [one["target_topics"]["resolution"]])
    assert [r["resolution"] for r in two["resolutions"]] == res and all(r["workers"] == 2 for r in two["resolutions"])
    assert two["workers"] == 2 and one["workers"] == 1
    assert [r["clusters"] for r in two["resolutions"]] == [r["clusters"] for r in one["resolutions"]]
    assert two["total_cpu_s"] > 0


def test_cpm_quality_is_igraphs(planted_graph):
    graph, _ = planted_graph
    G = graph.igraph()
    for r in (0.01, 0.1, 0.5):
        mem, info = leiden(G, graph.w, r, 3, max_iterations=2)
        assert cpm_quality(mem, graph.lo, graph.hi, graph.w, r) == pytest.approx(info["quality"], rel=1e-9)
    # every node alone: no weight inside, n nodes of size 1
    alone = np.arange(graph.n)
    assert cpm_quality(alone, graph.lo, graph.hi, graph.w, 0.1) == pytest.approx(-0.1 * graph.n / (2 * graph.w.sum()))


def _same_partition(a, b) -> bool:
    pairs = np.unique(np.stack([a, b]), axis=1)
    return len(np.unique(pairs[0])) == len(np.unique(pairs[1])) == pairs.shape[1]


def test_refine_within_stays_inside_the_parents_for_any_worker_count(tmp_path, make_run):
    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=60, dim=16, noise=0.4)
    run_knn(KnnConfig(k=10), layout)
    graph = load_graph(layout)
    cfg = ClusterConfig(min_cluster_size=1)
    parent, _ = cluster_graph(graph, 0.03, cfg)   # 25 clusters, edges between them
    one, info = refine_within(graph, parent, 0.1, cfg, workers=1)
    assert info["parents"] == int(parent.max()) + 1 and info["clusters"] == len(np.unique(one)) > info["parents"]
    assert info["edges_inside"] == int(np.sum(parent[graph.lo] == parent[graph.hi])) < graph.m
    # each refined cluster lies inside one parent
    assert len(np.unique(np.stack([one, parent]), axis=1)[0]) == len(np.unique(one))
    for workers in (2, 3):   # other ranges of parents, other processes: each parent seeds its own run
        again, _ = refine_within(graph, parent, 0.1, cfg, workers=workers)
        assert np.array_equal(again, one)
    # a parent's refinement does not depend on the edges leaving it: cut them, same result
    inside = parent[graph.lo] == parent[graph.hi]
    cut = Graph(graph.n, graph.lo[inside], graph.hi[inside], graph.a[inside], graph.w[inside])
    assert np.array_equal(refine_within(cut, parent, 0.1, cfg)[0], one)


def test_polish_cap_follows_the_stage_iteration_rule():
    assert polish_cap(10, ClusterConfig()) == 100                         # small graphs: until stable
    assert polish_cap(5_000_000, ClusterConfig()) == 1
    assert polish_cap(5_000_000, ClusterConfig(polish_iterations=2)) == 2
    assert polish_cap(5_000_000, ClusterConfig(max_iterations=-1)) == -1


def test_warm_start_sweep_is_the_same_for_any_worker_count_and_as_good(tmp_path, make_run):
    """warm_start: the coarsest resolution as an independent run; each finer one from the coarser
    clusters, of CPM quality near the independent run's, the same with 1 or 2 workers."""
    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=60, dim=16, noise=0.4)
    run_knn(KnnConfig(k=10), layout)
    res = [0.003, 0.01, 0.03, 0.1]
    # graphs this small iterate until stable; stable_below=1 gives the large-graph regime (3 iterations, 1 polish)
    for extra in (dict(), dict(stable_below=1)):
        ind = run_cluster(ClusterConfig(resolutions=res, workers=1, **extra), layout)
        t_ind = read_table(layout.table("clusters")).to_pandas()
        one = run_cluster(ClusterConfig(resolutions=res, workers=1, warm_start=True, **extra), layout)
        t_one = read_table(layout.table("clusters"))
        two = run_cluster(ClusterConfig(resolutions=res, workers=2, warm_start=True, **extra), layout)
        assert read_table(layout.table("clusters")).equals(t_one)
        assert one["warm_start"] and not ind["warm_start"] and two["workers"] == 2
        assert [r.get("warm_from") for r in one["resolutions"]] == [None] + res[:-1]
        assert all(r["refine_within"]["parents"] == prev["clusters"]
                   for prev, r in zip(one["resolutions"], one["resolutions"][1:]))
        if extra:
            assert all(r["iterations"] <= 1 for r in one["resolutions"][1:])
        graph = load_graph(layout)
        t_one = t_one.to_pandas()
        for r in res:
            a = t_ind[t_ind.resolution == r].sort_values("row")["cluster"].to_numpy()
            b = t_one[t_one.resolution == r].sort_values("row")["cluster"].to_numpy()
            if r == res[0]:
                assert np.array_equal(a, b), "the coarsest resolution is the independent run"
            qa, qb = cpm_quality(a, graph.lo, graph.hi, graph.w, r), cpm_quality(b, graph.lo, graph.hi, graph.w, r)
            assert qb >= qa - 0.01 * abs(qa), (r, qa, qb)


def test_warm_start_refuses_a_topic_target(tmp_path, make_run):
    layout, _ = make_run(tmp_path / "r", n_clusters=3, per=30, dim=8)
    run_knn(KnnConfig(k=8), layout)
    with pytest.raises(UserError, match="target_topics and warm_start"):
        run_cluster(ClusterConfig(resolutions=[0.01], warm_start=True, target_topics=5), layout)


# ---------------------------------------------------------------- engine networkit (ParallelCPM)

def test_parallel_cpm_loops_give_every_node_one_volume(planted_graph):
    """The self-loops make every node's volume (loop counted twice) the largest degree D, and the
    graph's total weight is the edges' plus the loops'."""
    graph, _ = planted_graph
    graph = Graph(graph.n + 1, graph.lo, graph.hi, graph.a, graph.w)       # one isolated node
    p = ParallelCPM(graph, threads=1)
    deg = np.bincount(graph.lo, weights=graph.w, minlength=graph.n) + np.bincount(graph.hi, weights=graph.w,
                                                                                 minlength=graph.n)
    assert p.D == pytest.approx(deg.max()) and deg.min() == 0 < deg.max()
    vol = np.array([p.g.weightedDegree(u, True) for u in range(graph.n)])
    assert np.allclose(vol, p.D)
    assert p.W == pytest.approx(graph.w.sum() + 0.5 * (p.D * graph.n - deg.sum()))


@pytest.mark.parametrize("block", [ParallelCPM.BLOCK, 7])
def test_parallel_cpm_graph_is_the_one_adding_edges_then_loops_gives(planted_graph, monkeypatch, block):
    """The CSR build holds each undirected edge at both its nodes with its CWTS weight and each
    node's loop last: node by node the same lists, in the same order, as adding the sorted edges
    and then the loops one by one (the build before it), so one thread gives the same partitions;
    the same on every build, and whatever the blocks the edges are placed in."""
    import networkit as nk

    monkeypatch.setattr(ParallelCPM, "BLOCK", block)
    graph, _ = planted_graph
    graph = Graph(graph.n + 1, graph.lo, graph.hi, graph.a, graph.w)       # one isolated node
    p = ParallelCPM(graph, threads=2)
    ref = nk.Graph(graph.n, weighted=True, directed=False)
    ref.addEdges((graph.w, (graph.lo.astype(np.uint64), graph.hi.astype(np.uint64))), checkMultiEdge=False)
    loops = np.arange(graph.n)[[p.D > ref.weightedDegree(u) for u in range(graph.n)]]
    ref.addEdges((0.5 * (p.D - np.array([ref.weightedDegree(u) for u in loops])),
                  (loops.astype(np.uint64), loops.astype(np.uint64))), checkMultiEdge=False)
    assert p.g.numberOfEdges() == graph.m + len(loops) and p.g.numberOfSelfLoops() == len(loops) > 0
    again = ParallelCPM(graph, threads=2)
    for u in range(graph.n):
        got, want = list(p.g.iterNeighborsWeights(u)), list(ref.iterNeighborsWeights(u))
        assert [v for v, _ in got] == [v for v, _ in want], u
        assert np.allclose([w for _, w in got], [w for _, w in want])
        assert list(again.g.iterNeighborsWeights(u)) == got
    assert p.W == pytest.approx(ref.totalEdgeWeight())


@pytest.mark.parametrize("resolution", [0.01, 0.05])
def test_parallel_cpm_optimises_igraphs_cpm(tmp_path, make_run, resolution):
    """networkit's ParallelLeiden on the looped graph at γ_mod = 2Wγ/D² finds partitions of igraph's
    CPM quality at γ (a wrong mapping of γ gives other cluster counts and a lower CPM quality), and
    on one thread the same partition for the same seed."""
    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=60, dim=16, noise=0.4)
    run_knn(KnnConfig(k=10), layout)
    graph = load_graph(layout)
    ref, info = leiden(graph.igraph(), graph.w, resolution, 42, max_iterations=-1, progress=False)
    p = ParallelCPM(graph, threads=1)
    mem, pinfo = p.leiden(resolution, 42, 8)
    assert pinfo["quality"] == pytest.approx(cpm_quality(mem, graph.lo, graph.hi, graph.w, resolution))
    assert pinfo["quality"] >= info["quality"] - 0.01 * abs(info["quality"]), (pinfo["quality"], info["quality"])
    assert abs(int(mem.max()) + 1 - (int(ref.max()) + 1)) <= 0.15 * (int(ref.max()) + 1)
    assert np.array_equal(p.leiden(resolution, 42, 8)[0], mem), "one thread, one seed: one partition"


def test_networkit_engine_stage_and_its_refusals(tmp_path, make_run):
    """The stage with engine networkit: every row in every resolution, fewer clusters at coarser γ,
    the target bisection, the summary says the engine and whether the partitions are reproducible;
    warm start and an unknown engine are refused."""
    from sciencemap.config import check_settings

    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=60, dim=16, noise=0.4)
    run_knn(KnnConfig(k=10), layout)
    s = run_cluster(ClusterConfig(resolutions=[0.003, 0.03], engine="networkit", workers=2, runs_at_once=1,
                                  target_topics=12, min_cluster_size=3), layout)
    c = read_table(layout.table("clusters")).to_pandas()
    assert c.groupby("resolution").size().eq(360).all() and len(set(c["resolution"])) == 3
    counts = [r["clusters"] for r in s["resolutions"]]
    assert counts == sorted(counts) and abs(s["target_topics"]["clusters"] - 12) <= 2
    assert s["engine"] == "networkit" and s["threads"] == 2 and not s["reproducible"] and s["workers"] == 1
    assert all(r["iterations"] == ClusterConfig().parallel_iterations and r["threads"] == 2 for r in s["resolutions"])
    one = run_cluster(ClusterConfig(resolutions=[0.03], engine="networkit", workers=1), layout)
    assert one["reproducible"] and one["threads"] == 1
    with pytest.raises(UserError, match="warm_start needs engine"):
        run_cluster(ClusterConfig(resolutions=[0.01], engine="networkit", warm_start=True), layout)
    with pytest.raises(UserError, match="engine"):
        check_settings(ClusterConfig, {"engine": "graph-tool"}, "[cluster]")


def test_networkit_runs_side_by_side_give_the_one_thread_partitions(tmp_path, make_run):
    """Resolutions at once in forked processes on one thread each: the partitions of the sweep one
    after another on one thread, bit for bit, in the same files; the bisection's probes too."""
    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=60, dim=16, noise=0.4)
    run_knn(KnnConfig(k=10), layout)
    cfg = dict(resolutions=[0.003, 0.01, 0.03, 0.1], engine="networkit", min_cluster_size=3, target_topics=12)
    one = run_cluster(ClusterConfig(workers=1, **cfg), layout)
    first = read_table(layout.table("clusters")).to_pandas()
    side = run_cluster(ClusterConfig(workers=2, **cfg), layout)
    again = read_table(layout.table("clusters")).to_pandas()
    assert one["workers"] == 1 and side["workers"] == 2 and side["threads"] == 2
    assert one["reproducible"] and side["reproducible"] and all(r["threads"] == 1 for r in side["resolutions"])
    assert side["target_topics"] == {**one["target_topics"], "seconds": side["target_topics"]["seconds"]}
    assert len(first) == 5 * 360
    pd.testing.assert_frame_equal(first, again)
    assert [r["quality"] for r in one["resolutions"]] == [r["quality"] for r in side["resolutions"]]


def test_networkit_stage_keeps_its_arrays_as_file_pages(tmp_path, make_run, monkeypatch, caplog):
    """file_backed: the graph's arrays written and mapped read-only give the partition, quality and
    merge of the arrays in memory, bit for bit (one thread); the stage maps them while its runs
    hold networkit's graph and leaves no files behind."""
    import mapping.cluster as mc

    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=60, dim=16, noise=0.4)
    run_knn(KnnConfig(k=10), layout)
    graph = load_graph(layout)
    cfg = ClusterConfig(engine="networkit", workers=1, min_cluster_size=3)
    in_memory = cluster_graph(graph, 0.03, cfg, ParallelCPM(graph, 1))
    mapped = mc.file_backed(graph, tmp_path / "work")
    assert all(isinstance(getattr(mapped, k), np.memmap) and not getattr(mapped, k).flags.writeable
               for k in ("lo", "hi", "a", "w"))
    assert all(np.array_equal(getattr(mapped, k), getattr(graph, k)) for k in ("lo", "hi", "a", "w"))
    on_files = cluster_graph(mapped, 0.03, cfg, ParallelCPM(mapped, 1))
    (tmp_path / "a_file").write_text("")     # a folder that cannot be made: the arrays stay in memory, with a warning
    with caplog.at_level(logging.WARNING, logger="mapping.cluster"):
        assert mc.file_backed(graph, tmp_path / "a_file" / "work") is graph
    assert "the graph's arrays stay in memory" in caplog.text
    assert np.array_equal(in_memory[0], on_files[0]) and in_memory[1]["quality"] == on_files[1]["quality"]
    assert in_memory[1]["stranded_small"] == on_files[1]["stranded_small"]
    # the stage: its graph is the mapped one while the runs go on, and the folder is gone after
    seen = []
    real = mc.cluster_graph

    def spy(graph, *a, **k):
        seen.append(isinstance(graph.w, np.memmap) and layout.cluster_work_dir.is_dir())
        return real(graph, *a, **k)

    monkeypatch.setattr(mc, "cluster_graph", spy)
    run_cluster(ClusterConfig(resolutions=[0.01, 0.03], engine="networkit", workers=1), layout)
    assert seen == [True, True] and not layout.cluster_work_dir.exists()


def test_networkit_runs_share_the_threads_and_fit_the_memory(tmp_path, make_run, monkeypatch):
    """networkit_runs: as many runs as cores and resolutions allow, fewer where their work does not
    fit beside the graph, the cores shared among them; the sweep gives each run the free threads
    over the runs that can still start, never more than there are. OpenMP ran on two threads in this
    process before the fork (faiss: the same libgomp as networkit's), and the runs still start theirs."""
    import faiss

    import mapping.cluster as mc

    x = np.random.default_rng(0).random((4000, 16), dtype=np.float32)
    index = faiss.IndexFlatL2(16)
    index.add(x)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(2)
    index.search(x, 3)
    faiss.omp_set_num_threads(before)

    monkeypatch.setattr(mc, "available_memory", lambda: None)
    assert mc.networkit_runs(ClusterConfig(workers=16), 5, 10**6)[:2] == (5, 3)
    assert mc.networkit_runs(ClusterConfig(workers=16, runs_at_once=1), 5, 10**6)[:2] == (1, 16)
    # two cores: four runs two at a time, but five one at a time (the fifth would run alone on one)
    assert mc.networkit_runs(ClusterConfig(workers=2), 4, 10**6)[:2] == (2, 1)
    assert mc.networkit_runs(ClusterConfig(workers=2), 5, 10**6)[:2] == (1, 2)
    assert mc.sweep_time(5, 1, 2) < mc.sweep_time(5, 2, 2) and mc.sweep_time(4, 2, 2) < mc.sweep_time(4, 1, 2)
    assert mc.networkit_runs(ClusterConfig(workers=2, runs_at_once=2), 5, 10**6)[:2] == (2, 1)
    assert mc.networkit_runs(ClusterConfig(workers=16), 1, 10**6)[:2] == (1, 16)
    # 33M nodes: 525M edges, the graph 33 GiB, 100 GiB in all: 2 runs of 8 threads fit, 3 of 5 do not
    m, held = 525_000_000, 33 * 2**30
    n, each, why = mc.networkit_runs(ClusterConfig(workers=16, memory_gb=100), 5, m, held=held)
    assert (n, each) == (2, 8) and "memory for 2" in why
    assert 2 * m * (mc.NK_RUN_BYTES_PER_EDGE + 7 * mc.NK_THREAD_BYTES_PER_EDGE) <= 67 * 2**30 \
        < 3 * m * (mc.NK_RUN_BYTES_PER_EDGE + 4 * mc.NK_THREAD_BYTES_PER_EDGE)
    assert mc.networkit_runs(ClusterConfig(workers=16, memory_gb=40), 5, m, held=held)[:2] == (1, 16)

    layout, _ = make_run(tmp_path / "r", n_clusters=4, per=30, dim=16, noise=0.4)
    run_knn(KnnConfig(k=8), layout)
    graph = load_graph(layout)
    cfg = ClusterConfig(engine="networkit", min_cluster_size=3)
    resolutions = [0.003, 0.01, 0.03, 0.1, 0.3]
    with LeidenRuns(graph, ParallelCPM(graph, 16), cfg, workers=3, threads=16) as runs:
        got = {r: int(mem.max()) + 1 for r, mem, _ in runs.sweep(resolutions)}
    used = runs.threads_used
    assert sorted(got) == resolutions and sorted(used) == resolutions
    first = sorted(resolutions, reverse=True)[:3]           # the finest start first, the threads shared
    assert [used[r] for r in first] == [5, 5, 6] and all(1 <= used[r] <= 16 for r in resolutions)


def test_worker_count_follows_cores_resolutions_and_memory(monkeypatch):
    import mapping.cluster as mc

    monkeypatch.setattr(mc, "available_memory", lambda: 64 * 2**30)
    assert mc.worker_count(ClusterConfig(workers=8), 5, 1_000_000)[0] == 5        # no more than resolutions
    assert mc.worker_count(ClusterConfig(workers=3), 5, 1_000_000)[0] == 3
    # 100M edges at LEIDEN_BYTES_PER_EDGE each: 64 GiB holds 7 such workers
    assert mc.worker_count(ClusterConfig(workers=16), 16, 100_000_000)[0] == 64 * 2**30 // (100_000_000 * 96)
    monkeypatch.setattr(mc, "available_memory", lambda: 1 * 2**30)
    n, why = mc.worker_count(ClusterConfig(workers=4), 5, 100_000_000)
    assert n == 1 and "memory" in why


def test_memory_gb_bounds_the_workers_beside_what_the_graph_holds(monkeypatch):
    """With memory_gb, the Leiden runs at once are those whose work fits beside the bytes the
    graph already holds, whatever the machine has free."""
    import mapping.cluster as mc

    monkeypatch.setattr(mc, "available_memory", lambda: 512 * 2**30)
    m, held = 64_000_000, int(4.5 * 2**30)   # the 2M scale run's graph: 64M edges, 4.5 GiB held
    per = m * mc.LEIDEN_BYTES_PER_EDGE
    n, why = mc.worker_count(ClusterConfig(workers=4, memory_gb=12), 5, m, held=held)
    assert n == int((12 * 2**30 - held) // per) == 1 and "memory_gb 12 less 4.5 GiB held" in why
    assert mc.worker_count(ClusterConfig(workers=4, memory_gb=24), 5, m, held=held)[0] == int((24 * 2**30 - held) // per) == 3
    assert mc.worker_count(ClusterConfig(workers=4), 5, m, held=held)[0] == 4  # unset: the free memory holds them
