"""Network statistics of graphs on the papers (seed paper Table 6) and their edge overlap (Fig. 7);
METHODS.md §5.5.

Built for 33M nodes: a graph is arrays (`Links`: n nodes = rows 0..n-1, isolated ones included;
edges lo < hi once each, sorted by (lo, hi); `mapping.cluster.Graph` has the same fields). Degrees
come from NumPy. Up to CLUSTERING_NODES nodes, components and the clustering coefficient over
every node come from igraph built from the arrays (no edge lists); beyond, from one SciPy CSR graph
of both directions (components: SciPy's; the coefficient of a seeded sample of nodes:
local_clustering), so igraph's graph (≈ 138 B an edge) is never built there. The average shortest
path is estimated from `path_sample` seeded sources × `path_targets` seeded targets, so no n-long
distance list is kept; with samples covering every node it is the exact average over reachable
ordered pairs; the breadth-first searches are bit-parallel passes of 64 sources (a level reads each
edge at most once for all of them) in forked worker processes that share that CSR graph copy-on-write
(`path_workers`), and the integer distance sums add up to the sequential answer exactly. A worker
holds only its pass's O(n) words: igraph's distances(), used before 2026-11-29 and now only for a
graph beyond SciPy's int32 indices (≈ 1.07B edges), builds the whole adjacency list again in every
worker (≈ 12–22 GB a worker at 33M papers). Edges are compared as int64 link keys (lo · n + hi) by
sorted search, in chunks of edges. The random graph G(n, m) is drawn as arrays of keys.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
from dataclasses import dataclass

import numpy as np
from scipy.sparse.csgraph import connected_components

from mapping.cluster import available_memory, igraph_from_arrays
from sciencemap.progress import Progress

CHUNK = 1 << 22               # edges (or drawn pairs) per NumPy step
log = logging.getLogger(__name__)

# Sample sizes by n (METHODS.md §5.5). Path lengths: the sources are searched 64 to a pass over the
# whole graph (SOURCES_A_PASS) and targets are nearly free, so the passes set the cost; with 200 sources
# the standard error is about the spread of the per-source mean distances / sqrt(200) (0.07 hops at
# a spread of one hop), measured rather than assumed: `shortest_path_se` beside the mean. Below 200
# sources / 1,000 targets every node is one. The clustering coefficient: every node up to
# CLUSTERING_NODES (igraph's all-node pass), a seeded sample of that many beyond, taken from the CSR
# graph the searches read (local_clustering), so no igraph graph is built (≈ 138 B an edge, the
# stage's peak at 33M, against ≈ 24 B). Its standard error is at most 0.5 / sqrt(s) (a coefficient
# lies in [0, 1]): 0.0016 at 100,000 nodes. On the 500k scale run's kNN graph (909,752 nodes, 15.3M
# edges) the sample cost 12.9 CPU s and +591 MB, igraph's pass over every node ≈ 16 s and its graph.
PATH_SOURCES = 200
PATH_TARGETS = 1_000
CLUSTERING_NODES = 100_000
# Sources are searched in their seeded draw order, so every prefix is itself a random sample; the
# searches stop once the standard error is at most `rel_se` of the mean (and at least
# PATH_MIN_SOURCES were searched). A random graph's distances barely vary from source to source
# (500k nodes: se 0.0044 hops on a mean of 4.2 after 200 sources) and stop early; a kNN or citation
# graph (se 0.026-0.029 on 4.0-7.3) takes all of them. 32: two blocks of 16, and enough sources for
# the standard error itself to mean something.
PATH_MIN_SOURCES = 32
PATH_REL_SE = 0.005
# The searches on the CSR graph run SOURCES_A_PASS sources at once, one bit of a uint64 a node each
# (bit_parallel_sums): a level reads each edge at most once for all of them, where one search a
# source read it once a source (500k run's kNN graph, 128 sources: 3.6 CPU s against SciPy's 38.4).
# What one path worker allocates beyond the graph it shares: the pass's reached, frontier and next-level words,
# their temporaries and the frontier's rows (≈ 48 B a node), and a block of CHUNK entries gathered,
# with their words and ranges (≈ 32 B an entry). Measured: +94 MB (kNN) and +118 MB (a G(n, m) of
# its size) for a pass on 909,752 nodes, where these figures say 178 MB.
SOURCES_A_PASS = 64
PUSH_COST = 8      # a pushed entry (ufunc.at) costs about as much as this many pulled ones
PATH_BYTES_PER_NODE, PATH_BYTES_PER_CHUNK_ENTRY = 48, 32
# The CSR graph is int32 (SciPy's graph routines, its components, index with int32): a larger graph
# is searched with igraph's distances(), whose workers each build the adjacency list (measured 1M /
# 15M edges +314 MiB, 1M / 30M +535 MiB, 4M / 15M +501 MiB; these figures over-predict all three).
SEARCH_MAX_ENTRIES = np.iinfo(np.int32).max       # edges stored both ways
IGRAPH_PATH_BYTES_PER_EDGE, IGRAPH_PATH_BYTES_PER_NODE = 16, 100


def sample_sizes(n: int, clustering: int | None = None, sources: int | None = None,
                 targets: int | None = None) -> tuple[int, int, int]:
    """(clustering nodes, path sources, path targets) for a graph of n nodes: an explicit setting
    wins (clustering 0 = every node, sources 0 = no path lengths, targets 0 = every node); unset
    ones follow n: every node up to CLUSTERING_NODES / PATH_SOURCES / PATH_TARGETS, that many
    beyond (see the comment above for why)."""
    clustering = min(n, CLUSTERING_NODES) if clustering is None else clustering
    sources = min(n, PATH_SOURCES) if sources is None else sources
    targets = min(n, PATH_TARGETS) if targets is None else targets
    return clustering, sources, targets


@dataclass
class Links:
    """An undirected simple graph on nodes 0..n-1: edges (lo, hi), lo < hi, distinct, sorted by (lo, hi)."""
    n: int
    lo: np.ndarray
    hi: np.ndarray

    @property
    def m(self) -> int:
        return int(len(self.lo))

    @classmethod
    def from_keys(cls, keys: np.ndarray, n: int) -> "Links":
        """From sorted distinct link keys (`link_keys`), in blocks: no int64 copy of the keys beside them."""
        dt = np.int32 if n <= np.iinfo(np.int32).max else np.int64
        lo, hi = np.empty(len(keys), dt), np.empty(len(keys), dt)
        for s in range(0, len(keys), CHUNK):
            lo[s:s + CHUNK], hi[s:s + CHUNK] = np.divmod(keys[s:s + CHUNK], n)
        return cls(int(n), lo, hi)

    def keys(self) -> np.ndarray:
        """The edges' sorted link keys (int64)."""
        k = np.asarray(self.lo, np.int64) * self.n
        k += self.hi
        # sorted by construction; a graph handed in unsorted is sorted here rather than miscounted
        return k if len(k) < 2 or bool((k[1:] > k[:-1]).all()) else sorted_unique(k)


def sorted_unique(k: np.ndarray, chunk: int = CHUNK) -> np.ndarray:
    """The distinct values of an int64 array, sorted, in its own memory: it is sorted in place and
    its distinct values moved to its front a block of `chunk` at a time (no copy of the whole
    array); returned as a view of that front while it is at least half the array, else as a copy
    (a view would keep the whole buffer alive for a few values).

    NumPy 2.4's np.unique took 15-40 s on 30M int64 here (hash-based), a sort and a mask 0.4-1.5 s."""
    if len(k) < 2:
        return k
    k.sort()
    kept, last = 0, None
    for s in range(0, len(k), chunk):
        block = k[s:s + chunk]
        keep = np.empty(len(block), bool)
        keep[0] = last is None or block[0] != last
        np.not_equal(block[1:], block[:-1], out=keep[1:])
        last = block[-1].copy()            # before the write below, which may reach it
        values = block[keep]
        k[kept:kept + len(values)] = values    # kept <= s: never ahead of what is still to be read
        kept += len(values)
    return k[:kept] if 2 * kept >= len(k) else k[:kept].copy()


def link_keys(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct undirected links (lo · n + hi, int64) of row pairs; self-links dropped."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    ok = lo != hi
    return sorted_unique(lo[ok] * n + hi[ok])


def _in_threads(fn, items, workers: int) -> list:
    """[fn(x) for x in items], in up to `workers` threads when there is more than one item: for
    NumPy work that runs without the GIL."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(workers, len(items))) as pool:
        return list(pool.map(fn, items))


def links_in_graph(keys: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int, chunk: int = CHUNK,
                   workers: int = 1) -> int:
    """How many of the sorted distinct link keys are edges (lo, hi) of the graph (edges distinct).
    The chunks of edges are looked up in `workers` threads: NumPy's products, searches, gathers
    and sums run without the GIL, and each thread holds one chunk's temporaries (≈ 40 B an entry)."""
    if len(keys) == 0 or len(lo) == 0:
        return 0

    def hits(s: int) -> int:
        k = np.asarray(lo[s:s + chunk], np.int64) * n
        k += hi[s:s + chunk]
        pos = np.searchsorted(keys, k)
        np.minimum(pos, len(keys) - 1, out=pos)
        return int(np.count_nonzero(keys[pos] == k))

    return sum(_in_threads(hits, range(0, len(lo), chunk), workers))


def random_graph(n: int, m: int, seed, chunk: int = CHUNK) -> Links:
    """G(n, m): m distinct edges drawn uniformly among the n (n − 1) / 2 node pairs, seeded.

    Each round draws as many uniform pairs as edges are still missing (so it never overshoots),
    drops self-links, pairs already held and repeats within the round; the rounds' union is a
    uniform m-subset because every step treats all pairs alike. At density ≪ 1 the first round
    leaves only a few edges missing."""
    pairs = n * (n - 1) // 2
    if m > pairs:
        raise ValueError(f"G(n, m) with n = {n:,} has at most {pairs:,} edges, not {m:,}")
    rng = np.random.default_rng(seed)
    have = np.zeros(0, np.int64)
    rounds = 0
    while len(have) < m:
        need, rounds = m - len(have), rounds + 1
        new = []
        with Progress(f"evaluate: random graph G(n, m), round {rounds}", need, "pairs") as p:
            for s in range(0, need, chunk):
                c = min(chunk, need - s)
                a = rng.integers(0, n, c, dtype=np.int64)
                b = rng.integers(0, n, c, dtype=np.int64)
                ok = a != b
                a, b = a[ok], b[ok]
                k = np.minimum(a, b) * n
                k += np.maximum(a, b)
                new.append(k)
                p.advance(c)
        k = np.concatenate(new)
        del new                           # before the sort's mask copy: 8 B a pair less at the peak
        k = sorted_unique(k)
        if len(have):
            pos = np.minimum(np.searchsorted(have, k), len(have) - 1)
            k = k[have[pos] != k]
            have = np.concatenate([have, k])      # disjoint: a sort, no dedupe
            have.sort()
        else:
            have = k
    return Links.from_keys(have, n)


def search_graph(n: int, lo: np.ndarray, hi: np.ndarray):
    """The undirected graph as a SciPy CSR matrix holding each edge both ways, rows' indices sorted
    (int32 indices), ≈ 8 bytes an edge: its data is a read-only zero-stride view of float64 ones,
    since only the structure is read (SciPy's components take float64 data without a copy and read
    only indptr and indices). Edges once each, in any order and either orientation. SciPy's graph
    routines index with int32: at most 2^31 − 1 entries, ≈ 1.07B undirected edges."""
    from scipy.sparse import coo_matrix

    if 2 * len(lo) > SEARCH_MAX_ENTRIES:   # before any copy, and before int32 offsets could overflow
        raise ValueError(f"{len(lo):,} edges: the int32 CSR graph takes at most {SEARCH_MAX_ENTRIES // 2:,}")
    # SciPy's counting sorts (COO to CSR, the transpose), not an argsort of 2m entries: 5× less CPU
    # and 0.64× the transient memory on 15M edges; int8 data until the merge
    one_way = coo_matrix((np.ones(len(lo), np.int8), (np.asarray(lo), np.asarray(hi))), shape=(n, n)).tocsr()
    g = one_way + one_way.T.tocsr()      # disjoint (no self-loops, no edge twice): every entry 1
    del one_way
    g.sort_indices()     # here, not in a worker (where it would copy the shared arrays); a check when sorted
    # 16 B an undirected edge less than float64 ones held through the searches
    g.data = np.broadcast_to(np.float64(1), (g.nnz,))
    return g


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of arange(s, s + l) for each (s, l), as one int64 array."""
    lengths = np.asarray(lengths, np.int64)
    offsets = np.cumsum(lengths) - lengths            # where each range begins in the output
    return np.repeat(np.asarray(starts, np.int64) - offsets, lengths) + np.arange(int(lengths.sum()))


def _blocks(counts: np.ndarray, chunk: int):
    """(start, end) of consecutive items whose counts sum to at most `chunk` (one item at least)."""
    ends = np.cumsum(counts)
    a = 0
    while a < len(counts):
        b = max(a + 1, int(np.searchsorted(ends, (ends[a - 1] if a else 0) + chunk, side="right")))
        yield a, b
        a = b


def local_clustering(graph, nodes: np.ndarray, chunk: int = CHUNK, workers: int = 1) -> np.ndarray:
    """The local clustering coefficient of each of `nodes` in search_graph's CSR graph: the
    triangles through a node over d (d − 1) / 2, 0 below degree 2 (igraph's mode "zero"). Each
    neighbour's own list is looked up in the node's (sorted) list by binary search, a block of nodes
    at a time holding about `chunk` neighbour-of-neighbour entries: the work of a node is the sum of
    its neighbours' degrees, and nothing of the size of the graph is allocated. `workers` threads
    take a share of the nodes each (NumPy's searches and gathers run without the GIL; 100k nodes
    of the 2M scale run's kNN graph 1.6x faster on 2), each holding one block's temporaries."""
    indptr, indices = graph.indptr, graph.indices
    n = graph.shape[0]
    nodes = np.asarray(nodes, np.int64)
    out = np.zeros(len(nodes))

    def coefficients(part: tuple[int, int]) -> None:
        todo = [part]
        while todo:
            a, b = todo.pop()
            block = nodes[a:b]
            dv = (indptr[block + 1] - indptr[block]).astype(np.int64)
            nb = indices[_ranges(indptr[block], dv)]              # the block's neighbour lists, row after row
            du = (indptr[nb + 1] - indptr[nb]).astype(np.int64)
            if int(du.sum()) > chunk and b - a > 1:               # too much at once: halve the block
                todo += [(a, (a + b) // 2), ((a + b) // 2, b)]
                continue
            owner = np.repeat(np.arange(len(block), dtype=np.int64), dv)
            own = owner * n + nb                                   # sorted: owners ascend, each list is sorted
            asker = np.repeat(owner, du)
            ask = asker * n + indices[_ranges(indptr[nb], du)]
            at = np.minimum(np.searchsorted(own, ask), len(own) - 1)
            twice = np.bincount(asker[own[at] == ask], minlength=len(block))   # each triangle twice
            pairs = dv * (dv - 1) / 2
            out[a:b] = np.divide(twice / 2, pairs, out=np.zeros(len(block)), where=dv >= 2)

    cuts = np.linspace(0, len(nodes), max(1, min(workers, len(nodes))) + 1).astype(np.int64).tolist()
    _in_threads(coefficients, zip(cuts[:-1], cuts[1:]), workers)     # disjoint slices of `out`
    return out


_SEARCH: tuple | None = None    # (CSR or igraph graph, targets) the forked workers search


def _bits_set(words: np.ndarray, chunk: int = CHUNK // 64) -> np.ndarray:
    """How many of `words` (uint64) have each of the 64 bits set (bit j of word i: source j), a
    block of `chunk` words at a time (a word unpacks to 64 bytes: every node a target would
    otherwise unpack 64 B a node at once)."""
    total = np.zeros(64, np.int64)
    for a in range(0, len(words), chunk):
        bits = np.unpackbits(words[a:a + chunk].astype("<u8").view(np.uint8), bitorder="little")
        total += bits.reshape(-1, 64).sum(axis=0, dtype=np.int64)
    return total


def bit_parallel_sums(graph, sources, targets: np.ndarray, chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """Per source (at most SOURCES_A_PASS): the sum of the hop counts to the targets it reaches
    (≠ itself) and their number, from one breadth-first pass for all of them over search_graph's CSR
    graph: bit j of a node's word says that source j has reached it. A level ORs the frontier words
    into the neighbours: pulled over every row's list in blocks of `chunk` entries when the frontier
    is large, pushed from the frontier's lists when it is small. The pass ends when a level reaches
    nothing new or every source has reached every target."""
    indptr, indices = graph.indptr, graph.indices
    n, k = graph.shape[0], len(sources)
    if k > SOURCES_A_PASS:
        raise ValueError(f"{k} sources: a pass takes at most {SOURCES_A_PASS}")
    sums, counts = np.zeros(k, np.int64), np.zeros(k, np.int64)
    if not k:
        return sums, counts
    reached = np.zeros(n, np.uint64)
    np.bitwise_or.at(reached, np.asarray(sources, np.int64), np.uint64(1) << np.arange(k, dtype=np.uint64))
    everyone = np.uint64((1 << k) - 1)
    frontier = reached.copy()
    deg = np.diff(indptr)
    pull_blocks = list(_blocks(deg, chunk))
    targets = np.asarray(targets, np.int64)
    level = 0
    while True:
        level += 1
        active = np.flatnonzero(frontier)
        nxt = np.zeros(n, np.uint64)
        if PUSH_COST * int(deg[active].sum()) < len(indices):   # push: from the frontier's lists
            for a, b in _blocks(deg[active], chunk):
                rows = active[a:b]
                d = deg[rows]
                np.bitwise_or.at(nxt, indices[_ranges(indptr[rows], d)], np.repeat(frontier[rows], d))
        else:                                           # pull: each row ORs its neighbours' frontier words
            for a, b in pull_blocks:
                rows = a + np.flatnonzero(deg[a:b])
                if len(rows):
                    got = frontier[indices[indptr[a]:indptr[b]]]
                    nxt[rows] = np.bitwise_or.reduceat(got, indptr[rows] - indptr[a])
        np.bitwise_and(nxt, np.invert(reached), out=nxt)      # only what no earlier level reached
        if not nxt.any():
            break
        reached |= nxt
        frontier = nxt
        new = _bits_set(nxt[targets])[:k]
        sums += level * new
        counts += new
        if (reached[targets] == everyone).all():
            break
    return sums, counts


def _source_sums(sources: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per source: the sum of the distances to the reachable targets ≠ itself, and their number."""
    graph, targets = _SEARCH
    if hasattr(graph, "distances"):     # an igraph graph (too large for the int32 CSR graph)
        d = np.asarray(graph.distances(source=sources, target=targets.tolist()), float)
        ok = np.isfinite(d) & (d > 0)
        return np.where(ok, d, 0).sum(axis=1).astype(np.int64), ok.sum(axis=1)
    passes = [bit_parallel_sums(graph, sources[i:i + SOURCES_A_PASS], targets)
              for i in range(0, len(sources), SOURCES_A_PASS)]
    return np.concatenate([p[0] for p in passes]), np.concatenate([p[1] for p in passes])


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def path_workers_that_fit(want: int, each: int, free: int | None) -> int:
    """At most `want` path workers, as many as `free` bytes hold at `each` bytes a worker (at least
    one: the search in this process needs the same)."""
    if free is None or want <= 1:
        return max(1, want)
    return max(1, min(want, int(free // (each + 1))))


def _mean_se(per_sum: np.ndarray, per_count: np.ndarray) -> tuple[float, int, float]:
    total, count = int(per_sum.sum()), int(per_count.sum())
    if not count:
        return float("nan"), 0, float("nan")
    mean = total / count
    k = len(per_sum)
    if k < 2:
        return mean, count, float("nan")
    resid = (per_sum - mean * per_count) / (count / k)
    return mean, count, float(np.sqrt((resid ** 2).sum() / (k * (k - 1))))


def _in_order(pool, blocks: list, window: int):
    """The blocks' results in order, with `window` of them running while one is read (at most
    window + 1 queued), so an early stop leaves only those few to finish."""
    pending = []
    try:
        for block in blocks:
            pending.append(pool.apply_async(_source_sums, (block,)))
            if len(pending) > window:
                yield pending.pop(0).get()
        while pending:
            yield pending.pop(0).get()
    finally:
        for r in pending:
            r.wait()


def sampled_path_length(g, sources: np.ndarray, targets: np.ndarray, per_call: int = 16,
                        name: str = "", workers: int = 1, rel_se: float = 0.0,
                        min_sources: int = PATH_MIN_SOURCES) -> tuple[float, int, float, int]:
    """Mean unweighted distance over the reachable (source, target) pairs with source ≠ target,
    the number of those pairs, the mean's standard error (ratio estimator over the sources: the
    pairs of one source are not independent draws) and the sources searched. Tasks of sources go
    to `workers` forked processes (1 = here): on the CSR graph a task is one bit-parallel pass of up
    to SOURCES_A_PASS sources (a whole number of blocks of `per_call`), on an igraph graph one block.
    Distances are integers, so the sums are exact and the answer is the sequential one whatever the
    split. `rel_se` > 0: blocks of `per_call` are taken in order and the figures are those of the
    first block at which at least `min_sources` sources give a standard error of at most rel_se ×
    the mean (the same stop whatever the workers or the passes; a pass's later sources go unused).
    `g`: search_graph's CSR graph, or an igraph graph."""
    global _SEARCH
    per_task = per_call if hasattr(g, "distances") else per_call * max(1, SOURCES_A_PASS // per_call)
    tasks = [sources[s:s + per_task].tolist() for s in range(0, len(sources), per_task)]
    workers = max(1, min(workers, len(tasks)))
    sums, counts = [], []
    _SEARCH = (g, np.asarray(targets))
    try:
        with Progress(f"evaluate: shortest paths{name and f' ({name})'}", len(sources), "sources") as p:
            if workers == 1 or "fork" not in multiprocessing.get_all_start_methods():
                results = map(_source_sums, tasks)
                pool = None
            else:   # fork: the workers see the graph copy-on-write, nothing is pickled but source lists
                pool = multiprocessing.get_context("fork").Pool(workers)
                results = _in_order(pool, tasks, workers)
            try:
                done = 0
                # each task's sums in blocks of per_call: the stop is checked where it always was
                for s, c in ((ts[i:i + per_call], tc[i:i + per_call]) for ts, tc in results
                             for i in range(0, len(ts), per_call)):
                    sums.append(s)
                    counts.append(c)
                    p.advance(len(s))
                    done += len(s)
                    if rel_se > 0 and done >= min_sources and done < len(sources):
                        mean, _, se = _mean_se(np.concatenate(sums), np.concatenate(counts))
                        if se == se and se <= rel_se * mean:  # (se is NaN below 2 sources)
                            break
            finally:
                if pool is not None:
                    if hasattr(results, "close"):
                        results.close()     # waits for the blocks in flight (at most `workers`)
                    pool.close()            # not terminate(): killing busy forked workers can hang the pool
                    pool.join()
    finally:
        _SEARCH = None
    per_sum = np.concatenate(sums) if sums else np.zeros(0, np.int64)
    per_count = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    return (*_mean_se(per_sum, per_count), len(per_sum))


def network_stats(graph, path_sample: int | None = None, seed: int = 0, path_targets: int | None = None,
                  clustering_sample: int | None = None, name: str = "", path_workers: int = 1,
                  path_rel_se: float = 0.0) -> dict:
    """Nodes, edges, average degree, density, components, the largest one (and its share of the
    nodes), isolated nodes, average local clustering coefficient (nodes of degree < 2 count 0; from
    `clustering_sample` seeded nodes when 0 < it < n, else all), average shortest path length
    (unweighted, `path_sample` sources × `path_targets` targets, seeded, over reachable pairs; the
    pairs counted and the standard error; `path_workers` processes; with `path_rel_se` > 0 the
    sources stop once the standard error is at most that share of the mean: sampled_path_length).
    Unset samples follow n (`sample_sizes`).

    `graph`: anything with n (nodes = rows 0..n-1, isolated ones included) and lo, hi (each edge
    once, lo < hi): `Links` or mapping.cluster.Graph. The same seed samples the same nodes in
    every graph of n nodes, so graphs on one node set are measured on one sample."""
    n, m = int(graph.n), int(len(graph.lo))
    clustering_sample, path_sample, path_targets = sample_sizes(n, clustering_sample, path_sample, path_targets)
    lo, hi = np.asarray(graph.lo), np.asarray(graph.hi)
    deg = np.bincount(lo, minlength=n) + np.bincount(hi, minlength=n)
    sampled = bool(n) and 0 < clustering_sample < n
    on_csr = sampled and 2 * m <= SEARCH_MAX_ENTRIES
    if on_csr:
        # a sample of nodes needs no igraph graph (≈ 138 B an edge): the components and the sampled
        # nodes' coefficients come from the CSR graph the searches read (≈ 8 B an edge)
        g = search_graph(n, lo, hi)
        sizes = np.bincount(connected_components(g, directed=True, connection="strong")[1], minlength=1)
    else:
        g = igraph_from_arrays(n, lo, hi) if n else None     # unweighted
        # igraph's components: n list entries (mostly the shared small int of the giant component),
        # where SciPy's would copy the edges twice with float64 weights.
        sizes = np.asarray(g.connected_components().sizes()) if n else np.zeros(0, np.int64)
    out = {
        "nodes": n, "edges": m, "average_degree": 2 * m / n if n else 0.0,
        "density": 2 * m / (n * (n - 1)) if n > 1 else 0.0,
        "connected_components": int(len(sizes)),
        "largest_component": int(sizes.max()) if n else 0,
        "largest_component_share": float(sizes.max() / n) if n else 0.0,
        "isolated_nodes": int((deg == 0).sum()),
    }
    del deg
    if sampled:
        nodes = np.sort(np.random.default_rng([seed, 1]).choice(n, clustering_sample, replace=False))
        cc = (local_clustering(g, nodes, workers=path_workers) if on_csr
              else g.transitivity_local_undirected(vertices=nodes.tolist(), mode="zero"))
        out["average_clustering"] = float(np.mean(cc))
        out["clustering_sample"] = int(clustering_sample)
    else:
        out["average_clustering"] = float(g.transitivity_avglocal_undirected(mode="zero")) if n else 0.0
    if n > 1 and path_sample > 0:
        rng = np.random.default_rng(seed)
        src = rng.choice(n, min(path_sample, n), replace=False)  # draw order: each prefix a random sample
        tgt = np.sort(rng.choice(n, min(path_targets, n), replace=False)) if path_targets > 0 else np.arange(n)
        each = n * PATH_BYTES_PER_NODE + CHUNK * PATH_BYTES_PER_CHUNK_ENTRY    # a bit-parallel pass
        if not on_csr and 2 * m <= SEARCH_MAX_ENTRIES:   # one CSR graph all workers read: igraph's freed first
            del g
            g = search_graph(n, lo, hi)
        elif not on_csr:
            each = m * IGRAPH_PATH_BYTES_PER_EDGE + n * IGRAPH_PATH_BYTES_PER_NODE
            log.info("evaluate: shortest paths%s with igraph: %s edges are more than the int32 CSR graph takes",
                     name and f" ({name})", f"{m:,}")
        workers = path_workers_that_fit(path_workers, each, available_memory())
        if workers < path_workers:
            log.info("evaluate: shortest paths%s in %d worker(s), not %d: the free memory holds %d searches of "
                     "%.1f GiB", name and f" ({name})", workers, path_workers, workers, each / 2**30)
        (out["average_shortest_path"], out["shortest_path_pairs"], out["shortest_path_se"],
         used) = sampled_path_length(g, src, tgt, name=name, workers=workers, rel_se=path_rel_se)
        out["shortest_path_sources"] = int(used)
        out["shortest_path_targets"] = int(len(tgt))
    return out


def edge_overlap(a, b, workers: int = 1) -> dict:
    """Edges common to two graphs on the same n nodes (`Links` or mapping.cluster.Graph, edges
    sorted by (lo, hi)): the count, its share of each graph's edges, Jaccard, and the count
    expected by chance, m_a · m_b / (n (n − 1) / 2): the mean overlap of a graph of m_a edges
    with a random graph of m_b edges (the expected shares are the other graph's density). The look-ups
    run in `workers` threads (links_in_graph)."""
    if a.n != b.n:
        raise ValueError(f"graphs on different node sets ({a.n:,} and {b.n:,} nodes)")
    n = int(a.n)
    small, big = (a, b) if len(a.lo) <= len(b.lo) else (b, a)
    keys = Links(n, small.lo, small.hi).keys()
    common = links_in_graph(keys, big.lo, big.hi, n, workers=workers)
    del keys
    ma, mb = len(a.lo), len(b.lo)
    pairs = n * (n - 1) / 2
    expected = ma * mb / pairs if pairs else 0.0
    nan = float("nan")
    return {"edges_a": int(ma), "edges_b": int(mb), "common": int(common),
            "share_of_a": common / ma if ma else nan, "share_of_b": common / mb if mb else nan,
            "jaccard": common / (ma + mb - common) if ma + mb - common else nan,
            "common_expected": expected, "common_over_expected": common / expected if expected else nan}
