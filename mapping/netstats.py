"""Network statistics of the kNN graph (seed paper Table 6; METHODS.md §5).

Built for 33M nodes: the graph comes as arrays (`mapping.cluster.Graph`: n rows, every row a node,
isolated ones included; edges lo < hi once each). Degrees come from NumPy; components, the
clustering coefficient and the path lengths from igraph built from the arrays (`Graph.igraph()`,
no edge lists). The average shortest path is estimated from `path_sample` seeded sources ×
`path_targets` seeded targets, so no n-long distance list is kept; with samples covering every
node it is the exact average over reachable ordered pairs. The clustering coefficient can be
sampled too (`clustering_sample`). Citation overlap compares int64 link keys (lo · n + hi) by
sorted search, in chunks of edges.
"""
from __future__ import annotations

import igraph as ig
import numpy as np

from sciencemap.progress import Progress


def link_keys(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct undirected links (lo · n + hi, int64) of row pairs; self-links dropped."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    ok = lo != hi
    return np.unique(lo[ok] * n + hi[ok])


def links_in_graph(keys: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int, chunk: int = 1 << 22) -> int:
    """How many of the sorted distinct link keys are edges (lo, hi) of the graph (edges distinct)."""
    if len(keys) == 0:
        return 0
    hit = 0
    for s in range(0, len(lo), chunk):
        k = np.asarray(lo[s:s + chunk], np.int64) * n + np.asarray(hi[s:s + chunk], np.int64)
        pos = np.minimum(np.searchsorted(keys, k), len(keys) - 1)
        hit += int((keys[pos] == k).sum())
    return hit


def sampled_path_length(g: ig.Graph, sources: np.ndarray, targets: np.ndarray, per_call: int = 16) -> float:
    """Mean unweighted distance over the reachable (source, target) pairs with source ≠ target."""
    total, count = 0.0, 0
    tgt = targets.tolist()
    with Progress("evaluate: shortest paths", len(sources), "sources") as p:
        for s in range(0, len(sources), per_call):
            src = sources[s:s + per_call]
            d = np.asarray(g.distances(source=src.tolist(), target=tgt), float)
            ok = np.isfinite(d) & (d > 0)
            total += float(d[ok].sum())
            count += int(ok.sum())
            p.advance(len(src))
    return total / count if count else float("nan")


def network_stats(graph, path_sample: int = 200, seed: int = 0,
                  citation_pairs: tuple[np.ndarray, np.ndarray] | None = None,
                  citation_keys: np.ndarray | None = None, path_targets: int = 1000,
                  clustering_sample: int = 0) -> dict:
    """Nodes, edges, average degree, density, components, isolated nodes, average local
    clustering coefficient (nodes of degree < 2 count 0; from `clustering_sample` seeded nodes
    when > 0, else all), average shortest path length (unweighted, `path_sample` sources ×
    `path_targets` targets, seeded, over reachable pairs), and, given citation links (row pairs,
    or their `link_keys`), the share of citation links that are kNN edges versus the share
    expected in a random graph of equal density.

    `graph`: a mapping.cluster.Graph (n nodes = rows 0..n-1, isolated ones included; lo, hi: each
    edge once, lo < hi; `igraph()`)."""
    n, m = int(graph.n), int(len(graph.lo))
    lo, hi = np.asarray(graph.lo), np.asarray(graph.hi)
    deg = np.bincount(lo, minlength=n) + np.bincount(hi, minlength=n)
    g = graph.igraph() if n else None       # unweighted, from the arrays (mapping.cluster.Graph)
    # igraph's components: n list entries (mostly the shared small int of the giant component),
    # where SciPy's would copy the edges twice with float64 weights.
    sizes = np.asarray(g.connected_components().sizes()) if n else np.zeros(0, np.int64)
    out = {
        "nodes": n, "edges": m, "average_degree": 2 * m / n if n else 0.0,
        "density": 2 * m / (n * (n - 1)) if n > 1 else 0.0,
        "connected_components": int(len(sizes)),
        "largest_component": int(sizes.max()) if n else 0,
        "isolated_nodes": int((deg == 0).sum()),
    }
    del deg
    if n and 0 < clustering_sample < n:
        nodes = np.sort(np.random.default_rng([seed, 1]).choice(n, clustering_sample, replace=False))
        cc = g.transitivity_local_undirected(vertices=nodes.tolist(), mode="zero")
        out["average_clustering"] = float(np.mean(cc))
        out["clustering_sample"] = int(clustering_sample)
    else:
        out["average_clustering"] = float(g.transitivity_avglocal_undirected(mode="zero")) if n else 0.0
    if n > 1 and path_sample > 0:
        rng = np.random.default_rng(seed)
        src = np.sort(rng.choice(n, min(path_sample, n), replace=False))
        tgt = np.sort(rng.choice(n, min(path_targets, n), replace=False)) if path_targets > 0 else np.arange(n)
        out["average_shortest_path"] = sampled_path_length(g, src, tgt)
        out["shortest_path_sources"] = int(len(src))
        out["shortest_path_targets"] = int(len(tgt))
    del g
    if citation_pairs is not None and citation_keys is None:
        citation_keys = link_keys(citation_pairs[0], citation_pairs[1], n)
    if citation_keys is not None:
        hit = links_in_graph(citation_keys, lo, hi, n)
        out["citation_links"] = int(len(citation_keys))
        out["citation_links_in_knn"] = int(hit)
        out["citation_overlap"] = float(hit / len(citation_keys)) if len(citation_keys) else float("nan")
        out["citation_overlap_random_expected"] = out["density"]
    return out
