"""Does the order of the nodes change what igraph's Leiden costs? (issue 27: the cost of an edge
doubled from 500k to 2M nodes in bench/scale_run.py, which looked like a cache effect.)

    nice -n 5 .venv/bin/python bench/leiden_order.py --nodes 1000000 --edges 20000000

On bench/leiden_scale.py's generated graph (rows in no order of community), one CPM Leiden run
(resolution 0.003, 3 iterations, seeded) with the nodes numbered three ways: as generated; sorted by
the clusters of the first run (what a coarser resolution would give the next); reverse
Cuthill-McKee (scipy). Prints the CPU seconds, clusters and CPM quality of each.
"""
from __future__ import annotations

import argparse
import random
import time

import igraph as ig
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from leiden_scale import generate  # bench/leiden_scale.py (a script's own folder is on its import path)
from mapping.cluster import build_graph


def leiden_cpu(graph, new_id: np.ndarray, resolution: float, iterations: int) -> tuple[float, np.ndarray, float]:
    """One seeded Leiden run with node i renumbered new_id[i]: (CPU s, membership in the old ids, quality)."""
    G = ig.Graph(n=graph.n, edges=np.column_stack([new_id[graph.lo], new_id[graph.hi]]).tolist(), directed=False)
    random.seed(0)
    t = time.process_time()
    p = G.community_leiden(objective_function="CPM", weights=graph.w, resolution=resolution, beta=0.01,
                           n_iterations=iterations)
    cpu = time.process_time() - t
    return cpu, np.asarray(p.membership)[new_id], p.quality


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--edges", type=int, default=20_000_000)
    ap.add_argument("--resolution", type=float, default=0.003)
    ap.add_argument("--iterations", type=int, default=3)
    a = ap.parse_args()
    src, dst, sim, _ = generate(a.nodes, a.edges, 200.0, 0.8, 0.02, 0)
    graph = build_graph(src, dst, sim, a.nodes)
    n = graph.n
    ident = np.arange(n)
    cpu, memb, q = leiden_cpu(graph, ident, a.resolution, a.iterations)
    print(f"as generated: {cpu:.1f} CPU s, {len(np.unique(memb)):,} clusters, CPM quality {q:.6g}", flush=True)
    by_cluster = np.empty(n, np.int64)
    by_cluster[np.argsort(memb, kind="stable")] = ident
    cpu2, memb2, q2 = leiden_cpu(graph, by_cluster, a.resolution, a.iterations)
    print(f"sorted by the first run's clusters: {cpu2:.1f} CPU s ({cpu2 / cpu:.2f} x), "
          f"{len(np.unique(memb2)):,} clusters, CPM quality {q2:.6g}", flush=True)
    A = sp.coo_matrix((np.ones(len(graph.lo)), (graph.lo, graph.hi)), shape=(n, n)).tocsr()
    rcm = np.empty(n, np.int64)
    rcm[reverse_cuthill_mckee((A + A.T).tocsr(), symmetric_mode=True)] = ident
    cpu3, memb3, q3 = leiden_cpu(graph, rcm, a.resolution, a.iterations)
    print(f"reverse Cuthill-McKee: {cpu3:.1f} CPU s ({cpu3 / cpu:.2f} x), {len(np.unique(memb3)):,} clusters, "
          f"CPM quality {q3:.6g}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
