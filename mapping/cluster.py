"""Leiden (CPM) clustering of the kNN graph with CWTS-style normalisation and small-cluster merging.

METHODS.md §5. Steps:
1. Undirected graph = union of the directed kNN lists; a pair linked both ways keeps the larger
   similarity. Weights a_ij = max(similarity, 0).
2. CWTS normalisation: r_ij = a_ij / Σ_k a_ik (per-node strength), w_ij = r_ij + r_ji. Every node
   then carries a total weight near 2, so one CPM resolution γ means the same on any corpus size:
   a cluster of n papers holds together roughly while its internal weight ~n exceeds γ·n²/2,
   i.e. clusters of up to ~2/γ papers.
3. igraph `community_leiden(objective_function="CPM")`, seeded through Python's `random` (igraph's
   default RNG), per resolution.
4. Clusters below `min_cluster_size` are merged, smallest first, into the neighbouring cluster with
   the largest (link weight / size of that neighbour), repeating until none is below the minimum
   (CWTS's rule). A small cluster with no neighbour at all (a small connected component) cannot
   be merged and is kept; the count is reported.
Cluster ids are renumbered by decreasing size (0 = largest; ties by smallest member index).
"""
from __future__ import annotations

import heapq
import logging
import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass

import igraph as ig
import numpy as np
import pandas as pd
import pyarrow as pa

from sciencemap.config import comma_floats, setting
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import read_table, write_table_atomic

log = logging.getLogger(__name__)

# Measured on the sample demo (17,236 papers: 1,750 full records + eLife title-only references;
# MiniLM vectors, k = 20, min size 5): γ = 3e-4 → 58 clusters, 1e-3 → 142, 3e-3 → 328, 1e-2 → 797,
# 3e-2 → 1,500 (Leiden 2,111 before merging); 1e-1 gives 13k Leiden clusters that merging folds
# into 2.2k, i.e. mostly merging, so it is left out. The map uses the middle one (3e-3).
DEFAULT_RESOLUTIONS = [0.0003, 0.001, 0.003, 0.01, 0.03]


@dataclass
class ClusterConfig:
    resolutions: list[float] = setting(help="CPM resolutions, comma-separated on the command line",
                                       factory=lambda: list(DEFAULT_RESOLUTIONS), parse=comma_floats)
    min_cluster_size: int = setting(5, "smaller clusters are merged into their best-linked neighbour")
    seed: int = setting(42, "seed of Leiden (Python's random, igraph's default RNG)")
    n_iterations: int = setting(-1, "-1 = iterate until the partition is stable")
    beta: float = setting(0.01, "Leiden refinement randomness")
    target_topics: int = setting(0, ">0: add the resolution giving about this many clusters (bisection)")


@dataclass
class Graph:
    """Undirected weighted graph on node indices 0..n-1 (each edge once, lo < hi)."""
    ids: np.ndarray        # node index -> paper_id
    lo: np.ndarray
    hi: np.ndarray
    a: np.ndarray          # raw weight (max similarity)
    w: np.ndarray          # CWTS-normalised weight

    @property
    def n(self) -> int:
        return len(self.ids)

    def igraph(self) -> ig.Graph:
        g = ig.Graph(n=self.n, edges=np.column_stack([self.lo, self.hi]).tolist(), directed=False)
        g.es["weight"] = self.w.tolist()
        return g


def undirected(src: np.ndarray, dst: np.ndarray, sim: np.ndarray, n: int):
    """Union of both directions with max similarity. Inputs are node indices; returns (lo, hi, a)."""
    lo = np.minimum(src, dst).astype(np.int64)
    hi = np.maximum(src, dst).astype(np.int64)
    ok = lo != hi
    lo, hi, sim = lo[ok], hi[ok], np.asarray(sim, np.float64)[ok]
    key = lo * n + hi
    order = np.argsort(key, kind="stable")
    key, sim = key[order], sim[order]
    if len(key) == 0:
        return lo[:0], hi[:0], sim[:0]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    a = np.maximum.reduceat(sim, starts)
    k = key[starts]
    return k // n, k % n, a


def cwts_normalise(lo: np.ndarray, hi: np.ndarray, a: np.ndarray, n: int) -> np.ndarray:
    """w_ij = a_ij/s_i + a_ij/s_j with s_i the strength (total raw weight) of node i."""
    s = np.bincount(lo, weights=a, minlength=n) + np.bincount(hi, weights=a, minlength=n)
    s = np.where(s > 0, s, 1.0)
    return a / s[lo] + a / s[hi]


def build_graph(src_ids: np.ndarray, dst_ids: np.ndarray, sim: np.ndarray,
                extra_ids: np.ndarray | None = None) -> Graph:
    """Graph from an edge list of paper ids (+ optional ids of nodes that may have no edges)."""
    parts = [np.asarray(src_ids, object), np.asarray(dst_ids, object)]
    if extra_ids is not None:
        parts.append(np.asarray(extra_ids, object))
    # Node order = first appearance (pandas' hash factorisation), so results do not depend on sorting.
    idx, ids = pd.factorize(np.concatenate(parts))
    ids = np.asarray(ids, dtype=object)
    m = len(src_ids)
    lo, hi, a = undirected(idx[:m], idx[m:2 * m], np.clip(np.asarray(sim, np.float64), 0, None), len(ids))
    keep = a > 0
    lo, hi, a = lo[keep], hi[keep], a[keep]
    return Graph(ids=ids, lo=lo, hi=hi, a=a, w=cwts_normalise(lo, hi, a, len(ids)))


def leiden(g: ig.Graph, resolution: float, seed: int, n_iterations: int = -1, beta: float = 0.01) -> np.ndarray:
    """Seeded igraph Leiden with the CPM objective; returns the membership array."""
    random.seed(seed)
    ig.set_random_number_generator(random)
    part = g.community_leiden(objective_function="CPM", weights="weight", resolution=resolution,
                              beta=beta, n_iterations=n_iterations)
    return np.asarray(part.membership, np.int64)


def merge_small_clusters(membership: np.ndarray, lo: np.ndarray, hi: np.ndarray, w: np.ndarray,
                         min_size: int) -> tuple[np.ndarray, int]:
    """CWTS's rule: smallest cluster first, merge it into the neighbour c maximising
    (link weight to c) / size(c); repeat until no cluster below `min_size` has a neighbour.

    Returns (new membership, number of small clusters left because they have no neighbour)."""
    membership = np.asarray(membership, np.int64)
    if min_size <= 1 or len(membership) == 0:
        return membership, 0
    nc = int(membership.max()) + 1
    size = np.bincount(membership, minlength=nc).astype(np.int64)
    cu, cv = membership[lo], membership[hi]
    between = cu != cv
    adj: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for x, y, ww in zip(cu[between].tolist(), cv[between].tolist(), w[between].tolist()):
        adj[x][y] += ww
        adj[y][x] += ww
    parent = np.arange(nc)
    heap = [(int(size[c]), c) for c in range(nc) if 0 < size[c] < min_size]
    heapq.heapify(heap)
    stranded = 0
    while heap:
        s, c = heapq.heappop(heap)
        if parent[c] != c or s != size[c]:
            continue  # already merged away, or a stale entry
        nb = adj.get(c)
        if not nb:
            stranded += 1
            continue
        # Largest link weight per neighbour size; ties -> lowest cluster id (deterministic).
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
    # Resolve merge chains (a -> b -> c).
    root = parent.copy()
    while True:
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        root = nxt
    return root[membership], stranded


def relabel_by_size(membership: np.ndarray) -> np.ndarray:
    """Renumber clusters 0..C-1 by decreasing size, ties by first member index."""
    uniq, first, inv, counts = np.unique(membership, return_index=True, return_inverse=True, return_counts=True)
    order = np.lexsort((first, -counts))
    new = np.empty(len(uniq), np.int64)
    new[order] = np.arange(len(uniq))
    return new[inv].astype(np.int32)


def cluster_graph(graph: Graph, resolution: float, cfg: ClusterConfig, g: ig.Graph | None = None) -> tuple[np.ndarray, dict]:
    g = g if g is not None else graph.igraph()
    t0 = time.perf_counter()
    mem = leiden(g, resolution, cfg.seed, cfg.n_iterations, cfg.beta)
    t1 = time.perf_counter()
    raw = int(mem.max()) + 1 if len(mem) else 0
    mem, stranded = merge_small_clusters(mem, graph.lo, graph.hi, graph.w, cfg.min_cluster_size)
    mem = relabel_by_size(mem)
    sizes = np.bincount(mem)
    info = {"resolution": resolution, "clusters_leiden": raw, "clusters": int(len(sizes)),
            "largest": int(sizes.max()) if len(sizes) else 0,
            "smallest": int(sizes.min()) if len(sizes) else 0,
            "stranded_small": stranded, "leiden_s": round(t1 - t0, 3),
            "merge_s": round(time.perf_counter() - t1, 3)}
    return mem, info


def resolution_for_target(graph: Graph, target: int, cfg: ClusterConfig, lo: float = 1e-6, hi: float = 10.0,
                          max_steps: int = 25, rel_tol: float = 0.05) -> tuple[float, int]:
    """Bisection on log γ for about `target` clusters (after merging). Returns (γ, clusters).

    The number of clusters grows with γ (not strictly, Leiden is heuristic); stop when within
    `rel_tol` of the target or after `max_steps`."""
    if target < 1:
        raise UserError(f"target number of topics must be >= 1, got {target}")
    g = graph.igraph()
    best = (hi, math.inf)
    a, b = math.log(lo), math.log(hi)
    for _ in range(max_steps):
        mid = math.exp((a + b) / 2)
        mem, _ = cluster_graph(graph, mid, cfg, g)
        c = int(mem.max()) + 1
        if abs(c - target) < abs(best[1] - target):
            best = (mid, c)
        if abs(c - target) <= rel_tol * target:
            break
        if c < target:
            a = math.log(mid)
        else:
            b = math.log(mid)
    return best[0], int(best[1])


def load_graph(layout: RunLayout) -> Graph:
    t = read_table(layout.table("edges"), columns=["src", "dst", "similarity"])
    if t.num_rows == 0:
        raise UserError(f"the edges table in {layout.table('edges')} is empty; re-run the knn stage")
    return build_graph(t.column("src").to_numpy(zero_copy_only=False),
                       t.column("dst").to_numpy(zero_copy_only=False),
                       t.column("similarity").to_numpy(zero_copy_only=False))


def run_cluster(cfg: ClusterConfig, layout: RunLayout) -> dict:
    if not cfg.resolutions and cfg.target_topics <= 0:
        raise UserError("no clustering resolutions configured; set [cluster] resolutions or target_topics")
    if any(r <= 0 for r in cfg.resolutions):
        raise UserError(f"CPM resolutions must be > 0, got {cfg.resolutions}")
    t0 = time.perf_counter()
    graph = load_graph(layout)
    g = graph.igraph()
    t_graph = time.perf_counter() - t0
    resolutions = sorted(set(float(r) for r in cfg.resolutions))
    summary: dict = {"papers": graph.n, "edges_undirected": int(len(graph.lo)), "graph_s": round(t_graph, 3)}
    if cfg.target_topics > 0:
        gamma, c = resolution_for_target(graph, cfg.target_topics, cfg)
        summary["target_topics"] = {"target": cfg.target_topics, "resolution": gamma, "clusters": c}
        resolutions = sorted(set(resolutions) | {gamma})
    tables, per = [], []
    for r in resolutions:
        mem, info = cluster_graph(graph, r, cfg, g)
        per.append(info)
        log.info("cluster: %s", info)
        tables.append(pa.table({"paper_id": pa.array(graph.ids, pa.string()),
                                "resolution": pa.array(np.full(graph.n, r), pa.float64()),
                                "cluster": pa.array(mem, pa.int32())}))
    write_table_atomic(pa.concat_tables(tables), layout.table("clusters"), SCHEMAS["clusters"])
    summary["resolutions"] = per
    summary["total_s"] = round(time.perf_counter() - t0, 3)
    return summary
