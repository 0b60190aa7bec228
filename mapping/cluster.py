"""Leiden (CPM) clustering of the kNN graph with CWTS-style normalisation and small-cluster merging.

METHODS.md §5. Node i of the graph is row i of the run's vector store (sciencemap.vectors); the
edges table holds those rows as int32, so the graph is built from NumPy arrays, never from ids.
Steps:
1. Undirected graph = union of the directed kNN lists; a pair linked both ways keeps the larger
   similarity. Weights a_ij = max(similarity, 0); pairs with a_ij = 0 are dropped. Every vector
   row is a node, rows without an edge stay isolated nodes.
2. CWTS normalisation: r_ij = a_ij / Σ_k a_ik (per-node strength), w_ij = r_ij + r_ji. Every node
   then carries a total weight near 2, so one CPM resolution γ means the same on any corpus size:
   a cluster of n papers holds together roughly while its internal weight ~n exceeds γ·n²/2,
   i.e. clusters of up to ~2/γ papers.
3. igraph `community_leiden(objective_function="CPM")`, seeded through Python's `random` (igraph's
   default RNG), per resolution, on one igraph graph built once for the whole sweep. Leiden is
   iterated one iteration at a time (`initial_membership` = the previous result) until an
   iteration changes nothing or `max_iterations` have run (see "Iterations" below).
4. Clusters below `min_cluster_size` are merged, smallest first, into the neighbouring cluster with
   the largest (link weight / size of that neighbour), repeating until none is below the minimum
   (CWTS's rule). A small cluster with no neighbour at all (a small connected component) cannot
   be merged and is kept; the count is reported. The between-cluster link weights are summed with
   NumPy over the edges that touch a small cluster; only the small clusters' rows of that
   cluster graph are walked in Python.
Cluster ids are renumbered by decreasing size (0 = largest; ties by smallest member row).

Iterations. igraph's `n_iterations=-1` (until an iteration changes nothing) has no bound: it did
not finish on a 4.9M-edge graph in 16 minutes. Measured on the demo (14,454 papers, 214,475
undirected edges, seed 42, beta 0.01), until-stable takes 21, 22, 22, 15 and 21 iterations at
γ = 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, and no fixed count of 1-10 iterations gives its partition at any
of them; CPM quality after N iterations, short of the until-stable quality:
    γ       N=1     N=2     N=3     N=5
    3e-4   1.65%   0.29%   0.25%   0.13%
    1e-3   1.50%   0.32%   0.20%   0.09%
    3e-3   1.25%   0.32%   0.22%   0.16%
    1e-2   1.20%   0.31%   0.12%   0.09%
    3e-2   0.94%   0.44%   0.33%   0.17%
Leiden therefore runs one iteration per call, passing the previous membership on: the same
random stream and the same stopping rule as igraph's own loop, so the partition is bit-identical
to `n_iterations=-1` whenever it converges within the cap (checked on the demo at all five
resolutions, bench/leiden_scale.py --demo, and in the tests); one call per iteration costs the
conversion of weights and membership (~7 ms an iteration on the demo). The cap:
- graphs of `stable_below` (1M) undirected edges or more: `max_iterations` = 3. On the generated
  1M-node / 19.3M-edge graph of bench/leiden_scale.py (γ = 3e-3) the quality after 1, 2, 3, 5, 10
  iterations is 1.47%, 0.54%, 0.37%, 0.25%, 0.13% short of 30 iterations, which are not yet
  stable (+0.003% an iteration at the end; 100k nodes: 1.18%, 0.43%, 0.29%, 0.18%, 0.09%); 3
  iterations took 98 CPU s, 30 took 651 s. 3 is the smallest count within 0.5% on both graphs.
  Stage / bare igraph call with 3 iterations: 1.06 (merge 0.2 s against Leiden 110 s);
- smaller graphs (the demo: 214k edges) iterate until stable, at most STABLE_CAP = 100, which
  keeps the demo's clusters and MeSH accuracy unchanged at a cost of seconds (just below the
  threshold it costs more: a generated 960k-edge graph took 58 iterations, 37 CPU s, a resolution).
`max_iterations = -1` gives igraph's unbounded until-stable everywhere.

Resolutions in parallel (LeidenRuns): `workers` Leiden runs at a time (0 = one per core), each in
a process forked after the graph and its igraph graph are built, so they share those pages
copy-on-write and each holds only Leiden's own work (LEIDEN_BYTES_PER_EDGE an edge; fewer workers
where the free memory, or `memory_gb` less what the graph holds, is short: at 2M generated papers,
3.6M nodes and 64M undirected edges, the graph held 4.5 GiB and each of two workers about 4.2 GiB more). Every run seeds its own Leiden, so the partitions are the ones a
sequential sweep gives. The `target_topics` bisection probes the next levels of its tree at once
and walks the path the results choose (the plain bisection's γ, in fewer rounds), and its best
probe is kept as that resolution's partition (tests/mapping/test_cluster.py;
bench/leiden_scale.py --parallel).

Warm start (`warm_start`, off by default; warm_sweep): the coarsest resolution as above, then each
finer one from the clusters of the one before, refined inside each of them on its own subgraph
(refine_within: forked workers, each cluster seeded by (seed, γ, cluster)), then `polish_iterations`
whole-graph iterations from there. On the 1M-node / 19.3M-edge graph of bench/leiden_scale.py
--warm: 2.06x less CPU than independent runs (no gain on the demo, where a run takes a second), CPM
quality within 0.5% of theirs there and on the eLife and demo graphs, but 1.7% short at γ = 1e-2
on the scale run's 500k graph; on the demo's real graph MeSH accuracy equal or higher at every
resolution (docs/scale.md).

Parallel engine (`engine = "networkit"`, off by default; ParallelCPM): networkit's ParallelLeiden,
made to optimise CPM by self-loops that give every node the same volume (METHODS §5.2). Its
threads leave part of a core idle (1.75x from a second thread on the 2M scale run's graph), so the
resolutions may run side by side in processes forked after networkit's graph is built, the
`workers` threads shared among them (networkit_runs: the count whose rounds take least by Amdahl,
at most as many as the memory holds beside the graph; each run takes the free threads over the
runs that can still start); `runs_at_once = 1` runs one resolution at a time on every thread. On
2 cores 5 resolutions run one at a time (side by side the fifth ran alone on one thread: 728
against 665 s at 2M); 2 resolutions side by side took 251.5 against 277.7 s there. No warm start
(it cannot start from a partition); partitions reproducible on one thread a run only (then the
same however many run at once). Measured against igraph in docs/scale.md (bench/leiden_scale.py
--engines).

Memory: edges in int32 rows (lo, hi), raw weights float32, CWTS weights float64 (Leiden's own
type; the values are those of the float64 computation, so partitions do not change): 20 bytes an
undirected edge. The int64 pair key exists only while `undirected` sorts (with the input arrays,
the sort permutation and the sorted copy, about 40 bytes a directed edge at its peak, before
igraph exists; key ranges sorted in the `workers` threads, the same at most). igraph then holds about 32 bytes an undirected edge, plus Leiden's incidence
lists and aggregate graphs while it runs; the merge touches only the edges of small clusters.
With engine networkit, whose graph holds its own copy of the edges, the arrays are then written
to the run's cluster_work folder and mapped read-only (file_backed): file pages, which the kernel
may drop while Leiden runs, not 20 bytes an edge of anonymous memory.
The stage's peak on 1M nodes / 19.3M edges: 2.7 GB (the former list-based igraph construction
alone reached 5.8 GB there, at 2.4x the CPU time).
"""
from __future__ import annotations

import contextlib
import heapq
import logging
import math
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import igraph as ig
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.config import comma_floats, setting
from sciencemap.contracts import EDGES_META_KEY, SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.progress import Progress, current_rss_mb
from sciencemap.runtime import UserError
from sciencemap.storage import atomic_dir, dataset, read_json_metadata, read_table

log = logging.getLogger(__name__)

# Measured on the sample demo (14,454 papers with vectors, MiniLM fine-tuned 20 steps, k = 20, min
# size 5): γ = 3e-4 → 43 clusters, 1e-3 → 118, 3e-3 → 266, 1e-2 → 693, 3e-2 → 1,313 (Leiden 1,910
# before merging); an earlier sample gave 13k Leiden clusters at 1e-1 that merging folded into 2.2k,
# i.e. mostly merging, so it is left out. The map uses the middle one (3e-3).
DEFAULT_RESOLUTIONS = [0.0003, 0.001, 0.003, 0.01, 0.03]
# Iterations (module docstring): 3 on large graphs; until stable (igraph's n_iterations=-1, at
# most STABLE_CAP) below STABLE_BELOW undirected edges, which keeps the demo's partitions (214k edges,
# stable after 15-22 iterations).
DEFAULT_MAX_ITERATIONS = 3
STABLE_BELOW = 1_000_000
STABLE_CAP = 100
ENGINES = ("igraph", "networkit")
PARALLEL_ITERATIONS = 8


@dataclass
class ClusterConfig:
    resolutions: list[float] = setting(help="CPM resolutions, comma-separated on the command line",
                                       factory=lambda: list(DEFAULT_RESOLUTIONS), parse=comma_floats)
    min_cluster_size: int = setting(5, "smaller clusters are merged into their best-linked neighbour")
    seed: int = setting(42, "seed of Leiden (Python's random, igraph's default RNG)")
    max_iterations: int = setting(DEFAULT_MAX_ITERATIONS,
                                  "Leiden iterations per resolution at most on graphs of stable_below undirected "
                                  "edges or more (CPM quality within 0.5% of until-stable, measured); fewer if an "
                                  "iteration changes nothing; -1 = until stable on every graph")
    stable_below: int = setting(STABLE_BELOW, "graphs with fewer undirected edges iterate until an iteration "
                                "changes nothing (igraph's n_iterations=-1), at most 100 iterations")
    beta: float = setting(0.01, "Leiden refinement randomness")
    target_topics: int = setting(0, ">0: add the resolution giving about this many clusters (bisection)")
    workers: int = setting(0, "resolutions clustered at once, each in a forked process sharing the graph "
                           "(copy-on-write); 0 = one per core, fewer where memory is short; 1 = one after another. "
                           "The partitions are the same either way (each resolution seeds its own Leiden). "
                           "With engine networkit: its threads (0 = one per core). Also the threads that sort the graph's pairs")
    warm_start: bool = setting(False, "each finer resolution starts from the next coarser one's clusters, refined "
                               "inside each of them (in worker processes, each cluster seeded by its own), then runs "
                               "polish_iterations Leiden iterations on the whole graph: much cheaper on large graphs, "
                               "the partitions differ from independent runs (CPM quality measured in docs/scale.md)")
    polish_iterations: int = setting(1, "with warm_start: whole-graph Leiden iterations after the start on graphs of "
                                     "stable_below undirected edges or more (below: until stable)")
    engine: str = setting("igraph", "Leiden implementation: igraph (seeded: the same partitions on any machine; one "
                          "core a resolution, resolutions in parallel) or networkit (ParallelLeiden, CPM through "
                          "degree-equalising self-loops, resolutions side by side on a share of the cores each "
                          "(runs_at_once); the partitions depend on the thread count, reproducible with one "
                          "thread a run)", choices=ENGINES)
    runs_at_once: int = setting(0, "engine networkit: resolutions clustered at once, each in a process forked after "
                                "the graph is built (sharing it copy-on-write) on its share of the `workers` threads; "
                                "0 = the count whose rounds are quickest by Amdahl, as many as the memory holds at "
                                "most; 1 = one after another, each on every thread. One thread a run gives "
                                "reproducible partitions")
    parallel_iterations: int = setting(PARALLEL_ITERATIONS, "engine networkit: Leiden iterations a resolution (each "
                                       "a whole pass; 3 left CPM quality 1.6-2.2% short of igraph's 3, docs/scale.md)")
    memory_gb: float = setting(0.0, "GiB this stage's processes may hold together: the Leiden runs at once are "
                               "as many as fit beside the graph at LEIDEN_BYTES_PER_EDGE an edge each; "
                               "0 = the memory available when they start")


@dataclass
class Graph:
    """Undirected weighted graph on nodes 0..n-1 = vector-store rows (each edge once, lo < hi,
    sorted by (lo, hi))."""
    n: int
    lo: np.ndarray         # int32 (int64 above 2**31 - 1 nodes)
    hi: np.ndarray
    a: np.ndarray          # raw weight (max similarity, > 0), float32
    w: np.ndarray          # CWTS-normalised weight, float64

    @property
    def m(self) -> int:
        return int(len(self.lo))

    def igraph(self) -> ig.Graph:
        """igraph graph from the arrays (no weights attached: pass `self.w` to Leiden)."""
        return igraph_from_arrays(self.n, self.lo, self.hi)


def igraph_from_arrays(n: int, lo: np.ndarray, hi: np.ndarray) -> ig.Graph:
    """Undirected igraph graph on nodes 0..n-1 with the edges (lo[i], hi[i]).

    `Graph.add_edges` with an (m, 2) int64 array is igraph's fast path (0.6 s and 48 bytes an
    edge for 2M edges, against 2 s and 160-190 bytes through the constructor's memoryview or a list)."""
    g = ig.Graph(n=int(n), directed=False)
    e = np.empty((len(lo), 2), np.int64)
    e[:, 0] = lo
    e[:, 1] = hi
    g.add_edges(e)
    return g


def _index_dtype(n: int):
    return np.int32 if n <= np.iinfo(np.int32).max else np.int64


def pair_keys(src: np.ndarray, dst: np.ndarray, sim: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo · n + hi of each edge kept, int64, in edge order; the mask of the edges kept): self links
    and similarities ≤ 0 are dropped, a pair may come twice (both directions)."""
    src, dst = np.asarray(src), np.asarray(dst)
    ok = (src != dst) & (np.asarray(sim, np.float32) > 0)
    if not ok.all():        # a kNN table rarely drops any: then no masked copies
        src, dst = src[ok], dst[ok]
    key = np.minimum(src, dst).astype(np.int64)
    key *= n
    key += np.maximum(src, dst)
    return key, ok


UNDIRECTED_SPLIT_MIN = 1_000_000    # directed edges below which one thread sorts them all


def _distinct_max(pair: list) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct keys of pair = [keys, similarities] and the largest similarity of each.
    `pair` is emptied: each array is freed as soon as its sorted copy exists (if nothing else holds it)."""
    key, sim = pair
    pair.clear()
    order = np.argsort(key)
    key = key[order]
    sim = sim[order]
    del order
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    return key[starts], np.maximum.reduceat(sim, starts)


def undirected(src: np.ndarray, dst: np.ndarray, sim: np.ndarray, n: int, workers: int = 1):
    """Union of both directions with max similarity, clipped at 0; pairs of weight 0 and self
    links dropped. Inputs are node numbers; returns (lo, hi, a) sorted by (lo, hi).

    With `workers` > 1 the pair keys are cut into that many key ranges (at quantiles of a sample,
    so the ranges hold about as many edges): threads pick out a range each, the whole arrays are
    freed, then each range is sorted and reduced in its own thread (NumPy's argsort and gathers run
    without the GIL). Both directions of a pair share its key, so they fall in one range, and the
    ranges joined in order are the one-thread result. Memory, a directed edge: the keys (8 B) and
    similarities, then the sort's order and sorted copies (≈ 28 B at once on one thread); the
    ranges' copies are counted before they are filled and freed as their sorted copies are made."""
    key, ok = pair_keys(src, dst, sim, n)
    sim = np.asarray(sim, np.float32)
    if len(key) < len(sim):     # pair_keys dropped some edges (its mask, not a second pass over it)
        sim = sim[ok]
    del ok
    idx = _index_dtype(n)
    if len(key) == 0:
        return np.zeros(0, idx), np.zeros(0, idx), np.zeros(0, np.float32)
    parts = max(1, min(int(workers), len(key) // UNDIRECTED_SPLIT_MIN))
    if parts == 1:
        pair = [key, sim]
        del key, sim
        key, a = _distinct_max(pair)
    else:
        from concurrent.futures import ThreadPoolExecutor

        sample = np.sort(key[:: max(1, len(key) // (1000 * parts))])
        cuts = np.unique(sample[(np.arange(1, parts) * len(sample)) // parts]).tolist()
        bounds = list(zip([None] + cuts, cuts + [None]))
        blocks = range(0, len(key), UNDIRECTED_SPLIT_MIN)

        def pick(bound: tuple) -> list:
            """[keys, similarities] of one key range: counted, then copied a block at a time."""
            first, stop = bound

            def inside(s: int) -> np.ndarray:
                k = key[s:s + UNDIRECTED_SPLIT_MIN]
                m = np.ones(len(k), bool) if first is None else k >= first
                if stop is not None:
                    m &= k < stop
                return m

            counts = [int(np.count_nonzero(inside(s))) for s in blocks]
            keys, sims, at = np.empty(sum(counts), np.int64), np.empty(sum(counts), np.float32), 0
            for s, c in zip(blocks, counts):
                m = inside(s)
                keys[at:at + c], sims[at:at + c] = key[s:s + UNDIRECTED_SPLIT_MIN][m], sim[s:s + UNDIRECTED_SPLIT_MIN][m]
                at += c
            return [keys, sims]

        with ThreadPoolExecutor(len(bounds)) as pool:
            ranges = list(pool.map(pick, bounds))
            del key, sim

            def reduce(i: int) -> tuple[np.ndarray, np.ndarray]:
                pair, ranges[i] = ranges[i], None
                return _distinct_max(pair)

            done = list(pool.map(reduce, range(len(bounds))))
        key = np.concatenate([k for k, _ in done])
        a = np.concatenate([m for _, m in done])
        del done
    lo = key // n
    key -= lo * n           # hi: a multiply for the second integer division
    return lo.astype(idx), key.astype(idx), a


def cwts_normalise(lo: np.ndarray, hi: np.ndarray, a: np.ndarray, n: int) -> np.ndarray:
    """w_ij = a_ij/s_i + a_ij/s_j with s_i the strength (total raw weight) of node i (float64)."""
    s = np.bincount(lo, weights=a, minlength=n) + np.bincount(hi, weights=a, minlength=n)
    s = np.where(s > 0, s, 1.0)
    a = np.asarray(a, np.float64)
    return a / s[lo] + a / s[hi]


def build_graph(src: np.ndarray, dst: np.ndarray, sim: np.ndarray, n: int | None = None, workers: int = 1) -> Graph:
    """Graph from a directed edge list of node numbers (vector rows); n nodes (default max + 1);
    the pairs sorted in `workers` threads (undirected)."""
    src, dst = np.asarray(src), np.asarray(dst)
    if n is None:
        n = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise UserError(f"edge rows must lie in 0..{n - 1}; the edges do not belong to these vectors: "
                        "re-run the knn stage")
    lo, hi, a = undirected(src, dst, sim, n, workers)
    return Graph(n=int(n), lo=lo, hi=hi, a=a, w=cwts_normalise(lo, hi, a, n))


def leiden(g: ig.Graph, weights: np.ndarray, resolution: float, seed: int | str,
           max_iterations: int = DEFAULT_MAX_ITERATIONS, beta: float = 0.01,
           progress: bool = True, initial: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """Seeded igraph Leiden (CPM), one iteration per call until an iteration changes nothing or
    `max_iterations` ran (-1: no cap). Equals `n_iterations=-1` when it converges within the cap.
    `initial`: the membership to start from (default: every node alone). `progress=False` logs
    nothing (refine_within's many small runs).

    Returns (membership, {iterations, converged, quality, qualities (CPM quality after each iteration)})."""
    random.seed(seed)
    ig.set_random_number_generator(random)
    prev = None if initial is None else np.asarray(initial).tolist()
    it, converged, qualities = 0, False, []
    cap = max_iterations if max_iterations >= 0 else math.inf
    meter = (Progress(f"leiden γ={resolution:g}", max(max_iterations, 0), "iterations") if progress
             else contextlib.nullcontext())
    with meter as p:
        while it < cap:
            part = g.community_leiden(objective_function="CPM", weights=weights, resolution=resolution,
                                      beta=beta, n_iterations=1, initial_membership=prev)
            it += 1
            qualities.append(float(part.quality))
            cur = part.membership
            if p is not None:
                p.advance(1)
            if cur == prev or (prev is None and np.array_equal(cur, np.arange(g.vcount()))):
                converged = True      # this iteration moved nothing: igraph's until-stable stops here too
                prev = cur
                break
            prev = cur
    mem = np.asarray(prev if prev is not None else np.arange(g.vcount()), np.int64)
    return mem, {"iterations": it, "converged": converged, "quality": qualities[-1] if qualities else float("nan"),
                 "qualities": qualities}


MERGE_CHUNK = 1 << 22    # edges a step while the merge picks the edges touching a small cluster


def _small_cluster_links(membership: np.ndarray, lo: np.ndarray, hi: np.ndarray, w: np.ndarray, small: np.ndarray,
                         nc: int) -> tuple[np.ndarray, np.ndarray]:
    """(pair keys min · nc + max, summed weights) of the cluster pairs linked by an edge with a small
    end, sorted by key; each sum adds its edges in edge order. Built in steps of edges and summed
    after a stable sort: the peak is ≈ 40 bytes an edge picked (64 with NumPy's unique and whole-length
    id arrays; tracemalloc, 2M nodes at γ = 3e-2)."""
    cluster_of = membership.astype(np.int32) if nc <= np.iinfo(np.int32).max else membership
    keys, weights = [], []
    for i in range(0, len(lo), MERGE_CHUNK):
        cu, cv = cluster_of[lo[i:i + MERGE_CHUNK]], cluster_of[hi[i:i + MERGE_CHUNK]]
        sel = (cu != cv) & (small[cu] | small[cv])
        cu, cv = cu[sel].astype(np.int64), cv[sel].astype(np.int64)
        keys.append(np.minimum(cu, cv) * nc + np.maximum(cu, cv))
        weights.append(np.asarray(w[i:i + MERGE_CHUNK], np.float64)[sel])
    key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    del keys
    order = np.argsort(key, kind="stable")        # stable: each pair's edges stay in edge order
    key = key[order]
    ws = np.concatenate(weights)[order] if weights else np.zeros(0)
    del weights, order
    start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    pairs = key[start]
    del key
    pair_of_edge = np.repeat(np.arange(len(start)), np.diff(np.r_[start, len(ws)]))
    return pairs, np.bincount(pair_of_edge, weights=ws, minlength=len(start))   # sequential, in edge order


def merge_small_clusters(membership: np.ndarray, lo: np.ndarray, hi: np.ndarray, w: np.ndarray,
                         min_size: int) -> tuple[np.ndarray, int]:
    """CWTS's rule: smallest cluster first (ties: lowest id), merge it into the neighbour c
    maximising (link weight to c) / size(c) (ties: lowest id); repeat until no cluster below
    `min_size` has a neighbour.

    The link weights between clusters are summed over the edges with NumPy (in edge order, so the
    sums are those of adding edge by edge); only edges touching a small cluster are needed, since
    only a cluster that is still small ever chooses. Those links stay in arrays, grouped by the
    small cluster (12 bytes a link each way; Python dictionaries of them held ≈ 5 GB at 1M nodes,
    where a fine resolution leaves 300k small clusters). A merge only records the cluster it
    joined (union-find) and which original rows the merged cluster holds; a cluster's links to the
    clusters as they are now are summed when it chooses. Returns (new membership, number of small
    clusters left because they have no neighbour)."""
    membership = np.asarray(membership, np.int64)
    if min_size <= 1 or len(membership) == 0:
        return membership, 0
    nc = int(membership.max()) + 1
    size = np.bincount(membership, minlength=nc)
    small = (size > 0) & (size < min_size)
    if not small.any():
        return membership, 0
    pairs, link = _small_cluster_links(membership, lo, hi, w, small, nc)
    id_type = np.int32 if nc <= np.iinfo(np.int32).max else np.int64
    x, y = (pairs // nc).astype(id_type), (pairs % nc).astype(id_type)
    del pairs
    # Directed rows (small cluster -> neighbour, weight), grouped by the small cluster: row c is
    # dst[first[c]:first[c + 1]].
    fx, fy = small[x], small[y]
    src = np.concatenate([x[fx], y[fy]])
    order = np.argsort(src, kind="stable")
    first = np.searchsorted(src[order], np.arange(nc + 1))
    del src
    dst = np.concatenate([y[fx], x[fy]])[order]
    del x, y
    lw = np.concatenate([link[fx], link[fy]])[order]
    del link, fx, fy, order

    sizes = size.astype(np.float64)      # the ratio's denominators, read as arrays
    parent = np.arange(nc)
    rows: dict[int, list[int]] = {c: [c] for c in np.flatnonzero(small).tolist()}   # the original rows a small cluster holds
    heap = [(int(size[c]), c) for c in rows]
    heapq.heapify(heap)
    stranded = 0
    while heap:
        s, c = heapq.heappop(heap)
        if parent[c] != c or s != sizes[c]:
            continue  # already merged away, or a stale entry
        held = rows[c]
        if len(held) == 1:
            nb, wt = dst[first[c]:first[c + 1]], lw[first[c]:first[c + 1]]
        else:
            nb = np.concatenate([dst[first[r]:first[r + 1]] for r in held])
            wt = np.concatenate([lw[first[r]:first[r + 1]] for r in held])
        # The neighbours as they are now: follow the merges (and shorten the paths followed).
        now = parent[nb]
        while True:
            up = parent[now]
            if np.array_equal(up, now):
                break
            now = up
        parent[nb] = now
        other = now != c
        if not other.any():
            stranded += 1
            continue
        neighbours, at = np.unique(now[other], return_inverse=True)
        total = np.bincount(at.ravel(), weights=wt[other], minlength=len(neighbours))
        # Largest link weight per neighbour size; ties -> lowest cluster id (sorted: argmax takes the first).
        best = int(neighbours[np.argmax(total / sizes[neighbours])])
        parent[c] = best
        sizes[best] += sizes[c]
        sizes[c] = 0
        if best in rows:               # a small cluster: it now holds c's rows too
            rows[best] += rows.pop(c)
            if sizes[best] < min_size:
                heapq.heappush(heap, (int(sizes[best]), best))
            else:
                del rows[best]         # no longer small: it will never choose again
        else:
            del rows[c]
    # Resolve merge chains (a -> b -> c).
    root = parent
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
    return new[inv.ravel()].astype(np.int32)


class ParallelCPM:
    """networkit's ParallelLeiden, which optimises modularity with a resolution, made to optimise CPM.

    A self-loop of weight (D - d_i)/2 on every node i (d_i its weighted degree, D the largest)
    gives every node the volume D (networkit counts a loop twice in its node's volume). A loop lies
    inside its node's cluster in every partition, so it adds a constant to the quality; with equal
    volumes, modularity's null-model term γ_mod·vol_c²/(4W) is γ_mod·D²·n_c²/(4W), which is CPM's
    γ·n_c²/2 at γ_mod = 2Wγ/D² (W the total weight, loops included). The moves and their gains are
    CPM's; the partitions' CPM quality is computed here (cpm_quality), not taken from networkit.

    The graph is built as a CSR matrix, one row a node: its edges to higher nodes (the edges are
    sorted by (lo, hi)), then its loop. networkit's fromCSR stores each edge at both ends, so every
    node's list is its lower neighbours, its higher ones and its loop, in the order adding the
    edges and then the loops one by one gave (a test), and each list has its exact length. On the
    2M scale run's graph (64M edges) the blocks of addEdges took 69.0 s on one core (≈ 1 µs an
    edge) and held 3,321 MB after; see docs/scale.md for this build's figures. Memory: networkit
    keeps each edge twice (node and weight, 16 bytes each way); while it builds, the CSR arrays
    (int64 columns, float64 weights: 16 bytes an edge) exist beside it."""

    BLOCK = 8_000_000      # edges placed into the CSR arrays a step

    def __init__(self, graph: Graph, threads: int):
        import networkit as nk
        from networkit.graph import GraphFromCsr

        self.graph, self.threads = graph, max(1, int(threads))
        deg = (np.bincount(graph.lo, weights=graph.w, minlength=graph.n)
               + np.bincount(graph.hi, weights=graph.w, minlength=graph.n))
        self.D = float(deg.max()) if graph.m else 0.0
        pad = 0.5 * (self.D - deg)
        del deg
        looped = pad > 0
        # row i: its edges (lo = i), then its loop; each node's list is then its lower neighbours,
        # its higher ones and its loop, as addEdge gave, and every list has its exact length
        # (loops added after the edges made each list grow into twice its memory)
        indptr = np.zeros(graph.n + 1, np.int64)
        np.cumsum(np.bincount(graph.lo, minlength=graph.n) + looped, out=indptr[1:])
        loops_before = np.cumsum(looped) - looped
        indices, data = np.empty(indptr[-1], np.int64), np.empty(indptr[-1], np.float64)
        for i in range(0, graph.m, self.BLOCK):
            j = min(graph.m, i + self.BLOCK)
            at = np.arange(i, j, dtype=np.int64) + loops_before[graph.lo[i:j]]
            indices[at], data[at] = graph.hi[i:j], graph.w[i:j]
        del loops_before
        rows = np.flatnonzero(looped)
        indices[indptr[rows + 1] - 1], data[indptr[rows + 1] - 1] = rows, pad[rows]
        del rows, looped, pad
        # GraphFromCsr (networkit 11.3, pinned) reads only these four attributes; no scipy matrix,
        # which would check and may re-type the indices (a copy of every edge)
        csr = SimpleNamespace(indptr=indptr, indices=indices, data=data, shape=(graph.n, graph.n))
        del indices, data
        # on one thread: with more, fromCSR stores the reverse entries in an order that varies run to run
        nk.setNumberOfThreads(1)
        g = GraphFromCsr(csr, directed=False, weighted=True)
        del csr
        self.W = float(g.totalEdgeWeight())
        self.g = g

    def leiden(self, resolution: float, seed: int, iterations: int) -> tuple[np.ndarray, dict]:
        """(membership 0..k-1, {iterations, converged (None: networkit runs all of them), quality})."""
        import networkit as nk

        graph = self.graph
        if graph.m == 0:
            return np.arange(graph.n, dtype=np.int64), {"iterations": 0, "converged": True, "quality": float("nan")}
        def partition() -> list:
            nk.setNumberOfThreads(self.threads)
            nk.engineering.setSeed(int(seed), False)
            run = nk.community.ParallelLeiden(self.g, iterations=max(1, iterations), randomize=True,
                                              gamma=2.0 * self.W * resolution / self.D ** 2)
            with Progress(f"parallel leiden γ={resolution:g}", 1, "runs") as p:
                run.run()
                p.advance(1)
            return run.getPartition().getVector()

        # OpenMP's threads in a thread of their own: safe in a forked worker, and after it (in_new_thread)
        mem = np.unique(np.asarray(in_new_thread(partition), np.int64), return_inverse=True)[1]
        return mem, {"iterations": max(1, iterations), "converged": None,
                     "quality": cpm_quality(mem, graph.lo, graph.hi, graph.w, resolution)}


def cores(cfg: ClusterConfig) -> int:
    """The `workers` setting, 0 = one per core: warm start's refinement processes, networkit's threads,
    the graph build's sorting threads."""
    return cfg.workers if cfg.workers > 0 else (os.cpu_count() or 1)


def iterations_for(m: int, cfg: ClusterConfig) -> int:
    """The iteration cap for a graph of m undirected edges (-1: none)."""
    if cfg.max_iterations < 0:
        return -1
    return max(STABLE_CAP, cfg.max_iterations) if m < cfg.stable_below else cfg.max_iterations


def cluster_graph(graph: Graph, resolution: float, cfg: ClusterConfig, g: ig.Graph | ParallelCPM | None = None,
                  initial: np.ndarray | None = None, cap: int | None = None) -> tuple[np.ndarray, dict]:
    """Leiden at one resolution, small clusters merged, ids by size. Pass `g` (graph.igraph(), or a
    ParallelCPM with engine networkit) to reuse one graph across calls; `initial` and `cap` start
    igraph's Leiden from a membership and bound its iterations (default: every node alone,
    iterations_for)."""
    t0, c0 = time.perf_counter(), time.process_time()
    if cfg.engine == "networkit":
        g = g if g is not None else ParallelCPM(graph, cores(cfg))
        cap = cfg.parallel_iterations
        mem, run = g.leiden(resolution, cfg.seed, cap)
    else:
        g = g if g is not None else graph.igraph()
        cap = iterations_for(graph.m, cfg) if cap is None else cap
        mem, run = leiden(g, graph.w, resolution, cfg.seed, cap, cfg.beta, initial=initial)
    t1, c1 = time.perf_counter(), time.process_time()
    raw = int(mem.max()) + 1 if len(mem) else 0
    mem, stranded = merge_small_clusters(mem, graph.lo, graph.hi, graph.w, cfg.min_cluster_size)
    t2, c2 = time.perf_counter(), time.process_time()
    mem = relabel_by_size(mem)
    sizes = np.bincount(mem)
    info = {"resolution": resolution, "clusters_leiden": raw, "clusters": int(len(sizes)),
            "largest": int(sizes.max()) if len(sizes) else 0,
            "smallest": int(sizes.min()) if len(sizes) else 0,
            "stranded_small": stranded, "max_iterations": cap, "iterations": run["iterations"], "converged": run["converged"],
            "quality": run["quality"], "leiden_s": round(t1 - t0, 3), "merge_s": round(t2 - t1, 3),
            "relabel_s": round(time.perf_counter() - t2, 3),
            # CPU seconds of this process: the work, whatever else the machine runs
            "leiden_cpu_s": round(c1 - c0, 3), "merge_cpu_s": round(c2 - c1, 3)}
    return mem, info


# Leiden's own working memory in a worker, per undirected edge (its incidence lists and aggregate
# graphs; the shared graph is not counted: the forked workers read the parent's pages). An estimate
# from the stage's peak on 1M nodes / 19.3M edges (2.7 GB with the graph) that leaves room.
LEIDEN_BYTES_PER_EDGE = 96


def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _memory_room(cfg: ClusterConfig, held: int) -> tuple[int | float | None, str | None]:
    """Bytes the Leiden runs may add beside the `held` bytes of this process, and whence: `memory_gb`
    less what is held when set, else the available memory (None where it is unknown)."""
    if cfg.memory_gb > 0:
        return cfg.memory_gb * 2**30 - held, f"memory_gb {cfg.memory_gb:g} less {held / 2**30:.1f} GiB held"
    free = available_memory()
    return free, None if free is None else f"{free / 2**30:.1f} GiB free"


def worker_count(cfg: ClusterConfig, jobs: int, m: int, held: int = 0) -> tuple[int, str]:
    """How many Leiden runs go at once, and why: the setting (0 = cores), at most `jobs`, and as
    many as the memory holds at LEIDEN_BYTES_PER_EDGE an edge each beside the `held` bytes of this
    process (the graph the workers share): `memory_gb` when set, else the available memory."""
    want = cores(cfg)
    n = max(1, min(want, jobs))
    why = f"{'setting' if cfg.workers > 0 else 'cores'} {want}, {jobs} Leiden runs to do"
    room, whose = _memory_room(cfg, held)
    if room is not None and n > 1:
        fits = max(1, int(room // max(1, m * LEIDEN_BYTES_PER_EDGE)))
        if fits < n:
            n, why = fits, why + f", memory for {fits} ({whose})"
    return n, why


# networkit's Leiden work in a run beside the shared graph, per undirected edge: 33.3 B on one
# thread and 35.6 B on two on the 2M scale run's graph at its finest γ (64.1M edges: +2,037 and
# +2,177 MB), and 43.9, 45.7, 47.8, 53.3, 68.3 B on 1, 2, 4, 8, 16 threads on bench/leiden_scale.py's
# 1M nodes / 19.3M edges at γ = 1e-2 (docs/scale.md): a base above the larger one-thread figure
# and a share a thread above the 1.0-1.9 B each thread added, each with some room; the
# small-cluster merge after it in the same process takes less (≈ 17-33 B an edge).
NK_RUN_BYTES_PER_EDGE = 46
NK_THREAD_BYTES_PER_EDGE = 3


# The share of a ParallelLeiden run that does not spread over its threads (Amdahl): 1.75x from a
# second thread on the 2M scale run's graph (γ = 3e-3, 8 passes) gives 2 / 1.75 - 1.
NK_SERIAL_SHARE = 0.14


def sweep_time(jobs: int, at_once: int, threads: int, serial: float = NK_SERIAL_SHARE) -> float:
    """A sweep's time in single-thread runs when `jobs` equal runs go `at_once` at a time, each on
    threads // at_once threads: rounds × one run's Amdahl time."""
    return math.ceil(jobs / at_once) * (serial + (1 - serial) / max(1, threads // at_once))


def networkit_runs(cfg: ClusterConfig, jobs: int, m: int, held: int = 0) -> tuple[int, int, str]:
    """(runs at once, threads a run, why) for engine networkit. ParallelLeiden leaves part of its
    threads idle, so resolutions may run side by side on a share of the cores each, as many as the
    memory holds (NK_*_BYTES_PER_EDGE): `runs_at_once`, or with 0 the count whose rounds take
    least by sweep_time (2 cores, 5 resolutions: one at a time, since the fifth would run alone on
    one thread: measured 728 against 665 s at 2M; 16 cores: 5 at once where they fit)."""
    threads = cores(cfg)
    fits = max(1, min(jobs, threads))
    why = f"{jobs} Leiden runs to do on {threads} thread(s)"
    room, whose = _memory_room(cfg, held)
    while room is not None and fits > 1 and \
            fits * m * (NK_RUN_BYTES_PER_EDGE + NK_THREAD_BYTES_PER_EDGE * (threads // fits - 1)) > room:
        fits -= 1
        why = f"{jobs} Leiden runs to do on {threads} thread(s), memory for {fits} ({whose})"
    if cfg.runs_at_once > 0:
        n = min(cfg.runs_at_once, fits)
        why += f", runs_at_once {cfg.runs_at_once}"
    else:
        n = min(range(1, fits + 1), key=lambda k: (sweep_time(jobs, k, threads), k))
        why += f", {n} at once the quickest by Amdahl (serial share {NK_SERIAL_SHARE})"
    return n, max(1, threads // n), why


# The graph the forked workers share: set in the parent just before the pool forks.
_SHARED: tuple | None = None


def _cluster_shared(resolution: float, threads: int = 1):
    graph, g, cfg = _SHARED
    if isinstance(g, ParallelCPM):
        g.threads = threads          # this process's copy: the parent's object is not touched
    return cluster_graph(graph, resolution, cfg, g)


def in_new_thread(fn, *args):
    """fn(*args) in a thread of its own, its result or its error here. OpenMP (one libgomp for
    networkit, faiss, igraph and scikit-learn) keeps its idle team per thread that started it; a
    forked child's thread inherits that record but not the team's threads, and waits for them for
    ever once it starts threads of its own. A new thread starts a team afresh, and its team ends
    with it (the pool's shutdown joins it), so a later fork of this process is safe too."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="openmp") as pool:
        return pool.submit(fn, *args).result()


class _WhenAsked:
    """A Future-like Leiden run in this process, done when its result is first asked for (one
    worker: a probe nobody asks for costs nothing)."""

    def __init__(self, fn, *args):
        self._call, self._done = (fn, args), None

    def result(self):
        if self._done is None:
            fn, args = self._call
            self._done = fn(*args)
        return self._done

    def cancel(self) -> bool:
        return True


class LeidenRuns:
    """Leiden runs on one graph: in `workers` processes forked after the graph and its igraph (or
    networkit) graph are built (they share those pages copy-on-write; each holds only Leiden's own
    work), or in this process when `workers` is 1. Each run seeds its own Leiden, so igraph's results
    do not depend on workers. With networkit, `threads` is the threads the runs share: each run takes
    the free ones over the runs that can still start (`threads_used` records them)."""

    def __init__(self, graph: Graph, g: ig.Graph | ParallelCPM, cfg: ClusterConfig, workers: int, threads: int = 1):
        self.graph, self.g, self.cfg, self.workers, self.threads = graph, g, cfg, workers, max(1, threads)
        self._pool = None
        self.threads_used: dict[float, int] = {}

    def __enter__(self):
        global _SHARED
        if self.workers > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            _SHARED = (self.graph, self.g, self.cfg)
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"))
        return self

    def __exit__(self, *exc):
        global _SHARED
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        _SHARED = None

    def submit(self, resolution: float):
        """A future of (membership, info) at this resolution (the bisection's probes: an even share
        of the threads each)."""
        if self._pool is None:
            self.threads_used[resolution] = self.threads
            return _WhenAsked(cluster_graph, self.graph, resolution, self.cfg, self.g)
        self.threads_used[resolution] = max(1, self.threads // self.workers)
        return self._pool.submit(_cluster_shared, resolution, self.threads_used[resolution])

    def sweep(self, resolutions: list[float], done: dict | None = None):
        """(resolution, membership, info) of each resolution as it finishes; `done` holds results
        already in hand (the bisection's best probe)."""
        from concurrent.futures import FIRST_COMPLETED, wait

        done = done or {}
        for r in resolutions:
            if r in done:
                yield (r, *done[r])
        todo = [r for r in resolutions if r not in done]
        if self._pool is None:
            for r in todo:
                self.threads_used[r] = self.threads
                yield (r, *cluster_graph(self.graph, r, self.cfg, self.g))
            return
        # the finest resolutions first: their runs take longest (1M nodes, 19M edges, 3 iterations:
        # 51, 72, 97 s at γ = 3e-4, 1e-3, 3e-3), so the shorter ones fill the gaps at the end
        todo.sort(reverse=True)
        running: dict = {}        # future -> (resolution, threads)
        while todo or running:
            while todo and len(running) < self.workers:
                free = self.threads - sum(t for _, t in running.values())
                threads = max(1, free // min(self.workers - len(running), len(todo)))
                r = todo.pop(0)
                self.threads_used[r] = threads
                running[self._pool.submit(_cluster_shared, r, threads)] = (r, threads)
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                r, _ = running.pop(f)
                yield (r, *f.result())


# Bisection levels probed at once with enough workers: 2^d - 1 probes give d steps of the
# sequential bisection in the time of one (the probes off the path taken are dropped).
MAX_SPECULATIVE_DEPTH = 4


def resolution_for_target(graph: Graph, target: int, cfg: ClusterConfig, lo: float = 1e-6, hi: float = 10.0,
                          max_steps: int = 25, rel_tol: float = 0.05, g: ig.Graph | None = None,
                          runs: LeidenRuns | None = None) -> tuple[float, int, np.ndarray, dict]:
    """Bisection on log γ for about `target` clusters (after merging). Returns (γ, clusters,
    membership, info) of the best probe.

    The number of clusters grows with γ (not strictly, Leiden is heuristic); stop when within
    `rel_tol` of the target or after `max_steps`. With w workers (`runs`), the next
    d = log2(w + 1) levels of the bisection tree (at most MAX_SPECULATIVE_DEPTH) are probed at once
    and the path the results choose is walked: the probes, the γ and the partition are those of the
    plain bisection, in about 1/d of its time."""
    if target < 1:
        raise UserError(f"target number of topics must be >= 1, got {target}")
    if runs is None:
        g = g if g is not None else graph.igraph()
        runs = LeidenRuns(graph, g, cfg, 1)
    depth = max(1, min(MAX_SPECULATIVE_DEPTH, int(math.log2(runs.workers + 1))))
    best = (hi, math.inf, None, None)
    a, b = math.log(lo), math.log(hi)
    steps = 0
    while steps < max_steps:
        levels = min(depth, max_steps - steps)
        probes, frontier = {}, [((), a, b)]
        for _ in range(levels):  # breadth first: the next step's probe is submitted first
            nxt = []
            for path, x, y in frontier:
                mid = (x + y) / 2
                probes[path] = (mid, runs.submit(math.exp(mid)))
                nxt += [(path + (True,), mid, y), (path + (False,), x, mid)]
            frontier = nxt
        path, hit = (), False
        for _ in range(levels):
            mid, future = probes.pop(path)
            mem, info = future.result()
            steps += 1
            c = int(mem.max()) + 1
            if abs(c - target) < abs(best[1] - target):
                best = (math.exp(mid), c, mem, info)
            if abs(c - target) <= rel_tol * target:
                hit = True
                break
            below = c < target
            a, b = (mid, b) if below else (a, mid)
            path += (below,)
        for _, future in probes.values():
            future.cancel()
        if hit:
            break
    return best[0], int(best[1]), best[2], best[3]


def cpm_quality(membership: np.ndarray, lo: np.ndarray, hi: np.ndarray, w: np.ndarray, resolution: float) -> float:
    """igraph's CPM quality of a partition of the whole graph: (2 Σ w inside clusters − γ Σ_c n_c²) / (2 Σ w)."""
    membership = np.asarray(membership)
    inside = membership[lo] == membership[hi]
    sizes = np.bincount(membership).astype(np.float64)
    total = 2.0 * float(np.sum(w))
    return (2.0 * float(np.sum(w[inside])) - resolution * float(sizes @ sizes)) / total if total else float("nan")


@dataclass
class Blocks:
    """The graph cut into the clusters of a coarser level: nodes and the edges inside each cluster,
    each cluster's rows contiguous, nodes numbered locally 0..size-1 within their cluster."""
    order: np.ndarray      # nodes by cluster (stable: ascending rows within one)
    starts: np.ndarray     # cluster k's nodes are order[starts[k]:starts[k + 1]]
    local: np.ndarray      # node -> its number inside its cluster
    lo: np.ndarray         # edges inside clusters, by cluster (global rows)
    hi: np.ndarray
    w: np.ndarray
    estarts: np.ndarray    # cluster k's edges are [estarts[k]:estarts[k + 1]]

    @classmethod
    def of(cls, graph: Graph, parent: np.ndarray) -> "Blocks":
        parent = np.asarray(parent).astype(_index_dtype(len(parent)), copy=False)   # int32 keys: half the sort's bytes
        k = int(parent.max()) + 1 if len(parent) else 0
        order = np.argsort(parent, kind="stable")
        counts = np.bincount(parent, minlength=k)
        starts = np.zeros(k + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        local = np.empty(len(parent), np.int64)
        local[order] = np.arange(len(parent)) - np.repeat(starts[:-1], counts)
        inside = np.flatnonzero(parent[graph.lo] == parent[graph.hi])
        key = parent[graph.lo[inside]]              # each inside edge's cluster, gathered once
        estarts = np.zeros(k + 1, np.int64)
        np.cumsum(np.bincount(key, minlength=k), out=estarts[1:])
        inside = inside[np.argsort(key, kind="stable")]
        del key
        return cls(order, starts, local.astype(_index_dtype(len(parent))), graph.lo[inside], graph.hi[inside],
                   graph.w[inside], estarts)

    @property
    def count(self) -> int:
        return len(self.starts) - 1


def _leiden_blocks(blocks: Blocks, first: int, stop: int, resolution: float, seed: int, cap: int,
                   beta: float) -> tuple[list[np.ndarray], dict]:
    """Leiden inside clusters first..stop-1 of `blocks`, cluster k seeded by (seed, γ, k), so a
    cluster's result does not depend on which worker ran it or beside what."""
    c0 = time.process_time()
    out, iterations, converged = [], 0, True
    for k in range(first, stop):
        size = int(blocks.starts[k + 1] - blocks.starts[k])
        e0, e1 = int(blocks.estarts[k]), int(blocks.estarts[k + 1])
        if e1 == e0:          # no edge inside: every node alone (CPM never joins unlinked nodes)
            out.append(np.arange(size, dtype=np.int64))
            continue
        g = igraph_from_arrays(size, blocks.local[blocks.lo[e0:e1]], blocks.local[blocks.hi[e0:e1]])
        mem, run = leiden(g, blocks.w[e0:e1], resolution, f"{seed}/{resolution!r}/{k}", cap, beta, progress=False)
        out.append(mem)
        iterations, converged = max(iterations, run["iterations"]), converged and run["converged"]
    return out, {"iterations": iterations, "converged": converged, "cpu_s": time.process_time() - c0}


# The blocks the forked workers of one refine_within call share: set in the parent before the pool forks.
_BLOCKS: Blocks | None = None


def _leiden_shared_blocks(first: int, stop: int, resolution: float, seed: int, cap: int, beta: float):
    return _leiden_blocks(_BLOCKS, first, stop, resolution, seed, cap, beta)


def block_ranges(estarts: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Contiguous cluster ranges of about equal edge counts (at most `parts`, none empty)."""
    k = len(estarts) - 1
    if k <= 0:
        return []
    cuts = np.searchsorted(estarts, np.linspace(0, estarts[-1], parts + 1)[1:-1], side="right")
    bounds = sorted(set([0, *np.clip(cuts, 1, k - 1).tolist(), k])) if k > 1 else [0, 1]
    return list(zip(bounds[:-1], bounds[1:]))


def refine_within(graph: Graph, parent: np.ndarray, resolution: float, cfg: ClusterConfig,
                  workers: int = 1) -> tuple[np.ndarray, dict]:
    """Leiden at `resolution` inside each cluster of `parent` (a coarser partition): a membership
    of the whole graph in which every cluster lies inside one parent (not yet merged or relabelled).

    CPM's quality is a sum over clusters, so each parent's best refinement is found on its own
    subgraph, which fits the caches where the whole graph does not. The parents run in `workers`
    forked processes (ranges of about equal edge counts); each parent seeds its own run, so the
    result is the same for any number of workers. The iteration cap is the whole graph's."""
    global _BLOCKS
    t0 = time.perf_counter()
    blocks = Blocks.of(graph, parent)
    cap = iterations_for(graph.m, cfg)
    ranges = block_ranges(blocks.estarts, max(1, workers) * 8)
    if workers > 1 and len(ranges) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        _BLOCKS = blocks
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                results = list(pool.map(_leiden_shared_blocks, *zip(*[(a, b, resolution, cfg.seed, cap, cfg.beta)
                                                                       for a, b in ranges])))
        finally:
            _BLOCKS = None
    else:
        results = [_leiden_blocks(blocks, a, b, resolution, cfg.seed, cap, cfg.beta) for a, b in ranges]
    mem = np.empty(graph.n, np.int64)
    offset, k = 0, 0
    for members, _ in results:
        for local in members:
            mem[blocks.order[blocks.starts[k]:blocks.starts[k + 1]]] = local + offset
            offset += int(local.max()) + 1 if len(local) else 0
            k += 1
    return mem, {"parents": blocks.count, "edges_inside": int(len(blocks.lo)), "clusters": offset,
                 "iterations": max((r["iterations"] for _, r in results), default=0),
                 "wall_s": round(time.perf_counter() - t0, 3),
                 "cpu_s": round(sum(r["cpu_s"] for _, r in results), 3)}   # in the workers, or here with one


def polish_cap(m: int, cfg: ClusterConfig) -> int:
    """Whole-graph iterations after a warm start: `polish_iterations` on graphs of stable_below
    undirected edges or more, until stable (at most STABLE_CAP) below, -1 with max_iterations -1."""
    if cfg.max_iterations < 0:
        return -1
    return STABLE_CAP if m < cfg.stable_below else max(1, cfg.polish_iterations)


def warm_sweep(graph: Graph, g: ig.Graph, resolutions: list[float], cfg: ClusterConfig, workers: int):
    """(resolution, membership, info), coarsest first. The coarsest is clustered as usual; each
    finer one starts from the clusters before it, refined inside each of them (refine_within, in
    `workers` processes), then runs polish_cap Leiden iterations on the whole graph from there,
    which may move papers across the coarser clusters' borders; small clusters are then merged."""
    rs = sorted(resolutions)
    if not rs:
        return
    mem, info = cluster_graph(graph, rs[0], cfg, g)
    info["warm_from"] = None
    yield rs[0], mem, info
    for coarser, r in zip(rs, rs[1:]):
        start, within = refine_within(graph, mem, r, cfg, workers)
        mem, info = cluster_graph(graph, r, cfg, g, initial=start, cap=polish_cap(graph.m, cfg))
        info.update(warm_from=coarser, refine_within=within)
        info["leiden_cpu_s"] = round(info["leiden_cpu_s"] + within["cpu_s"], 3)
        yield r, mem, info


def _stated_size(layout: RunLayout) -> int | None:
    """Nodes = vector-store rows: from the vector store, else the knn summary, else None."""
    from sciencemap.vectors import open_vectors

    try:
        return open_vectors(layout).n
    except UserError:
        pass
    papers = read_json_metadata(layout.table("edges"), EDGES_META_KEY).get("papers")
    return int(papers) if papers else None


def graph_size(layout: RunLayout, max_row: int) -> int:
    """Nodes = vector-store rows; from the vector store, else the knn summary, else max row + 1."""
    n = _stated_size(layout)
    return max_row + 1 if n is None else n


def _check_edge_rows(schema: pa.Schema, path) -> None:
    if not (pa.types.is_integer(schema.field("src").type) and pa.types.is_integer(schema.field("dst").type)):
        raise UserError(f"the edges table in {path} names papers by id (an older run); re-run the knn stage, "
                        "which writes vector-store rows")


def read_edges(layout: RunLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The run's kNN edges table as (src, dst, similarity, n): int32 vector rows (see contracts),
    every vector row a node."""
    path = layout.table("edges")
    t = read_table(path, columns=["src", "dst", "similarity"])
    if t.num_rows == 0:
        raise UserError(f"the edges table in {path} is empty; re-run the knn stage")
    _check_edge_rows(t.schema, path)
    src = t.column("src").to_numpy()
    dst = t.column("dst").to_numpy()
    sim = t.column("similarity").to_numpy()
    del t
    # Arrow's allocator keeps the read's pages (2.4 GB, ≈ 33 B an edge, on the 2M scale run's
    # graph) until Arrow next allocates: handed back before the graph is built beside the arrays
    pa.default_memory_pool().release_unused()
    return src, dst, sim, graph_size(layout, int(max(src.max(), dst.max())))


def read_pair_keys(layout: RunLayout, batch_rows: int = 1 << 22) -> tuple[np.ndarray, int]:
    """`pair_keys` of the run's kNN edges table (in edge order, a pair may come twice) and n, read
    a batch of `batch_rows` edges at a time: 8 B a directed edge and one batch, where read_edges
    holds the three columns (12 B an edge) and pair_keys' temporaries beside them (≈ 40 B an edge at
    once). For the links without weights (the evaluate stage's network statistics)."""
    path = layout.table("edges")
    edges = dataset(path, "run the knn stage first")
    _check_edge_rows(edges.schema, path)
    total = edges.count_rows()
    if total == 0:
        raise UserError(f"the edges table in {path} is empty; re-run the knn stage")
    columns = ["src", "dst", "similarity"]
    n = _stated_size(layout)
    if n is None:    # nothing states the rows: a first pass for the largest
        n = 1 + max(int(max(b.column(0).to_numpy().max(), b.column(1).to_numpy().max()))
                    for b in edges.to_batches(columns=columns[:2], batch_size=batch_rows) if b.num_rows)
    keys = np.empty(total, np.int64)
    filled = 0
    for b in edges.to_batches(columns=columns, batch_size=batch_rows):
        if not b.num_rows:
            continue
        src, dst, sim = (b.column(i).to_numpy() for i in range(3))
        top = int(max(src.max(), dst.max()))
        if top >= n or min(src.min(), dst.min()) < 0:
            raise UserError(f"the edges table in {path} names rows outside the vector store's 0..{n - 1:,}; "
                            "re-run the knn stage")
        k = pair_keys(src, dst, sim, n)[0]
        keys[filled:filled + len(k)] = k
        filled += len(k)
    return keys[:filled], n


def file_backed(graph: Graph, folder: Path) -> Graph:
    """The same graph with its arrays written to .npy files under `folder` and mapped read-only.
    Once networkit holds its own graph, Leiden reads none of these arrays; the quality and the
    merge after each run read them once. As file pages the kernel can drop them under memory
    pressure and read them again, where as anonymous memory they held 20 bytes an edge through
    every run (21 GB at 60M nodes, docs/scale.md)."""
    names = ("lo", "hi", "a", "w")
    shutil.rmtree(folder, ignore_errors=True)      # an interrupted stage's files
    try:
        folder.mkdir(parents=True)
        arrays = {}
        for name in names:
            np.save(folder / f"{name}.npy", getattr(graph, name))
            arrays[name] = np.load(folder / f"{name}.npy", mmap_mode="r")
    except OSError as e:   # no room or no write access there: the runs go on with the arrays in memory
        held = sum(getattr(graph, name).nbytes for name in names)   # int64 rows past 2^31 nodes: not always 20 B an edge
        log.warning("cluster: the graph's arrays stay in memory (%s MB more through the Leiden runs): cannot write "
                    "them under %s: %s", f"{held / 2**20:,.0f}", folder, e)
        shutil.rmtree(folder, ignore_errors=True)
        return graph
    return Graph(graph.n, **arrays)


def load_graph(layout: RunLayout, workers: int = 1) -> Graph:
    """The run's kNN graph from its edges table, every vector row a node (`workers`: build_graph)."""
    graph = build_graph(*read_edges(layout), workers=workers)
    # the edge arrays came from Arrow's allocator, which keeps their pages once they are freed
    pa.default_memory_pool().release_unused()
    return graph


def run_cluster(cfg: ClusterConfig, layout: RunLayout) -> dict:
    from sciencemap.vectors import open_vectors

    if not cfg.resolutions and cfg.target_topics <= 0:
        raise UserError("no clustering resolutions configured; set [cluster] resolutions or target_topics")
    if any(r <= 0 for r in cfg.resolutions):
        raise UserError(f"CPM resolutions must be > 0, got {cfg.resolutions}")
    import resource

    t0, c0 = time.perf_counter(), time.process_time()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_children0 = before.ru_utime + before.ru_stime
    graph = load_graph(layout, cores(cfg))
    ids = open_vectors(layout).ids_arrow()
    pa.default_memory_pool().release_unused()    # the ids' read pages: 3x the ids at 2M
    if len(ids) != graph.n:
        raise UserError(f"the vector store has {len(ids):,} papers but the graph {graph.n:,} nodes; "
                        "re-run the knn stage")
    if cfg.warm_start and cfg.target_topics > 0:
        raise UserError("[cluster] target_topics and warm_start cannot be combined: the bisection's probes start "
                        "from nothing; give warm_start its resolutions instead")
    parallel = cfg.engine == "networkit"
    if parallel and cfg.warm_start:
        raise UserError("[cluster] warm_start needs engine = \"igraph\": networkit's ParallelLeiden cannot start "
                        "from a partition; the networkit engine runs every resolution on all cores instead")
    threads = cores(cfg)
    t1, c1 = time.perf_counter(), time.process_time()
    g = ParallelCPM(graph, threads) if parallel else graph.igraph()
    if parallel:   # networkit keeps its own copy of the edges: ours need not stay anonymous memory
        graph = g.graph = file_backed(graph, layout.cluster_work_dir)
    t_graph, c_graph = time.perf_counter() - t1, time.process_time() - c1
    log.info("cluster: graph of %s nodes, %s undirected edges: arrays %.1f s, %s %.1f s, RSS %.0f MB",
             f"{graph.n:,}", f"{graph.m:,}", t1 - t0, cfg.engine, t_graph, current_rss_mb())
    resolutions = sorted(set(float(r) for r in cfg.resolutions))
    summary: dict = {"papers": graph.n, "edges_undirected": graph.m, "engine": cfg.engine, "warm_start": cfg.warm_start,
                     "load_s": round(t1 - t0, 3), "graph_s": round(t_graph, 3), "graph_cpu_s": round(c_graph, 3)}
    # with a target, up to 2^d - 1 bisection probes run at once (resolution_for_target)
    jobs = max(len(resolutions), 2 ** MAX_SPECULATIVE_DEPTH - 1 if cfg.target_topics > 0 else 0)
    if parallel:
        # runs side by side on a share of the threads each; reproducible only on one thread a run
        workers, each, why = networkit_runs(cfg, jobs, graph.m, held=int(current_rss_mb() * 2**20))
        why = f"networkit ParallelLeiden on {threads} thread(s), {each} a run at first; {why}"
        summary["threads"] = threads
    elif cfg.warm_start:
        # one whole-graph Leiden at a time; the refinements inside clusters run on small subgraphs
        workers = threads
        why = f"warm start: the refinement inside clusters in {workers} process(es)"
    else:
        workers, why = worker_count(cfg, jobs, graph.m, held=int(current_rss_mb() * 2**20))
    log.info("cluster: %d Leiden run(s) at once (%s)", workers, why)
    summary["workers"] = workers
    schema = SCHEMAS["clusters"]
    rows = pa.array(np.arange(graph.n, dtype=np.int32))
    per, done = {}, {}
    with LeidenRuns(graph, g, cfg, 1 if cfg.warm_start else workers, threads if parallel else 1) as runs:
        if cfg.target_topics > 0:
            tb = time.perf_counter()
            gamma, c, mem, info = resolution_for_target(graph, cfg.target_topics, cfg, runs=runs)
            summary["target_topics"] = {"target": cfg.target_topics, "resolution": gamma, "clusters": c,
                                        "seconds": round(time.perf_counter() - tb, 3)}
            resolutions = sorted(set(resolutions) | {gamma})
            done[gamma] = (mem, info)  # the best probe is that resolution's partition: not run again
        t_sweep = time.perf_counter()
        with atomic_dir(layout.table("clusters")) as tmp, \
                Progress("cluster", len(resolutions), "resolutions") as p:
            sweep = warm_sweep(graph, g, resolutions, cfg, workers) if cfg.warm_start else runs.sweep(resolutions, done)
            for r, mem, info in sweep:
                tw = time.perf_counter()
                part = pa.table([ids, rows, pa.array(np.full(graph.n, r), pa.float64()), pa.array(mem, pa.int32())],
                                schema=schema)
                pq.write_table(part, tmp / f"part-{resolutions.index(r):05d}.parquet")
                del part, mem
                info["write_s"] = round(time.perf_counter() - tw, 3)
                info["workers"] = workers
                if parallel:
                    info["threads"] = runs.threads_used[r]
                info["rss_mb"] = round(current_rss_mb())
                per[r] = info
                log.info("cluster: %s", info)
                p.advance(1)
    shutil.rmtree(layout.cluster_work_dir, ignore_errors=True)   # file_backed's arrays (mapped pages stay valid)
    summary["resolutions"] = [per[r] for r in resolutions]
    if parallel:
        summary["reproducible"] = all(i["threads"] == 1 for i in summary["resolutions"])
    summary["sweep_s"] = round(time.perf_counter() - t_sweep, 3)
    summary["total_s"] = round(time.perf_counter() - t0, 3)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the worker processes' CPU time counts too (zero when the resolutions ran in this process)
    summary["total_cpu_s"] = round(time.process_time() - c0 + children.ru_utime + children.ru_stime - cpu_children0, 3)
    return summary
