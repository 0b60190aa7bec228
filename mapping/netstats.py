"""Network statistics of the kNN graph (seed paper Table 6; METHODS.md §5)."""
from __future__ import annotations

import igraph as ig
import numpy as np

from mapping.cluster import Graph


def network_stats(graph: Graph, extra_isolated: int = 0, path_sample: int = 200, seed: int = 0,
                  citation_pairs: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """Nodes, edges, average degree, density, components, isolated nodes, average local
    clustering coefficient, average shortest path length (unweighted, from `path_sample` seeded
    sources, over reachable pairs), and, given citation pairs (node indices), the share of
    citation links that are kNN edges versus the share expected in a random graph of equal density.
    `extra_isolated` counts embedded papers with no edge at all (not in the graph's node list)."""
    n = graph.n + extra_isolated
    m = int(len(graph.lo))
    g = ig.Graph(n=graph.n, edges=np.column_stack([graph.lo, graph.hi]).tolist(), directed=False)
    deg = np.asarray(g.degree())
    comps = g.connected_components()
    out = {
        "nodes": n, "edges": m, "average_degree": 2 * m / n if n else 0.0,
        "density": 2 * m / (n * (n - 1)) if n > 1 else 0.0,
        "connected_components": len(comps) + extra_isolated,
        "largest_component": max(comps.sizes()) if len(comps) else 0,
        "isolated_nodes": int((deg == 0).sum()) + extra_isolated,
        "average_clustering": float(g.transitivity_avglocal_undirected(mode="zero")) if graph.n else 0.0,
    }
    if graph.n > 1 and path_sample > 0:
        rng = np.random.default_rng(seed)
        src = np.sort(rng.choice(graph.n, min(path_sample, graph.n), replace=False))
        d = np.asarray(g.distances(source=src.tolist()), float)
        ok = np.isfinite(d) & (d > 0)
        out["average_shortest_path"] = float(d[ok].mean()) if ok.any() else float("nan")
        out["shortest_path_sources"] = int(len(src))
    if citation_pairs is not None:
        a, b = citation_pairs
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        key = np.unique(lo[lo != hi].astype(np.int64) * graph.n + hi[lo != hi])
        knn_key = graph.lo.astype(np.int64) * graph.n + graph.hi
        hit = np.isin(key, knn_key).sum()
        out["citation_links"] = int(len(key))
        out["citation_links_in_knn"] = int(hit)
        out["citation_overlap"] = float(hit / len(key)) if len(key) else float("nan")
        out["citation_overlap_random_expected"] = out["density"]
    return out
