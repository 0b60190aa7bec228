"""Accuracy–granularity curves (seed paper Fig. 5) and relative accuracy (Fig. 6) for relatedness
graphs on the same evaluated papers (METHODS.md §6.3).

Each graph is clustered by Leiden (CPM, igraph) on its CWTS-normalised weights at a sweep of
resolutions, with several seeds; no small-cluster merging (the curves compare the relatedness
measures, not the map's cosmetics). Node weights: 1 for focal papers, 0 for the external nodes of
extended direct citation. At each (resolution, seed) the evaluated papers' labels give the
criterion accuracy A (mapping.evaluation.mesh_accuracy.accuracy, closed form) and the granularity
G = N² / Σ n_c² over the evaluated papers.

Resolution sweep: the same CPM resolution gives very different G on different graphs, so each
graph gets its own sweep — a bracket found by doubling / halving γ from n-based start until G
covers [g_min, g_max], then `points` resolutions spaced evenly in log γ across it.
Accuracy at a granularity: per seed, A interpolated linearly in log G between the seed's curve
points (NaN outside its range); reported as the mean and sample std over seeds.
Relative accuracy: per seed, every graph's curve interpolated on a common log-spaced G grid inside
the overlap of all graphs' ranges, divided by the mean over graphs at each grid point, averaged
(mapping.evaluation.mesh_accuracy.relative_accuracy); mean and std over seeds. 1 = the average graph.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

import igraph as ig
import numpy as np
import scipy.sparse as sp

from mapping.cluster import igraph_from_arrays
from mapping.evaluation.mesh_accuracy import accuracy, granularity, relative_accuracy
from mapping.evaluation.relatedness import RelGraph


@dataclass
class Criterion:
    """A classification criterion: unit relatedness vectors (cosine = relatedness) of the focal
    papers that have it; rows[i] = the focal position of V's row i."""
    name: str
    V: sp.csr_matrix
    rows: np.ndarray
    info: dict = field(default_factory=dict)


class Clusterer:
    """One graph's igraph copy, weights and node weights, clustered at any (resolution, seed)."""

    def __init__(self, graph: RelGraph, max_iterations: int = -1, beta: float = 0.01):
        self.graph = graph
        self.g = igraph_from_arrays(graph.n, graph.lo, graph.hi)
        self.w = graph.normalised().tolist()
        self.node_w = graph.node_weights().tolist()
        self.max_iterations, self.beta = max_iterations, beta

    def membership(self, resolution: float, seed: int) -> np.ndarray:
        random.seed(seed)
        ig.set_random_number_generator(random)
        part = self.g.community_leiden(objective_function="CPM", weights=self.w, resolution=resolution,
                                       beta=self.beta, n_iterations=self.max_iterations, node_weights=self.node_w)
        return np.asarray(part.membership, np.int64)


def point(clusterer: Clusterer, crit: Criterion, resolution: float, seed: int) -> dict:
    mem = clusterer.membership(resolution, seed)
    lab = mem[crit.rows]
    a, unrelated = accuracy(crit.V, lab)
    return {"resolution": float(resolution), "seed": int(seed), "granularity": granularity(lab),
            "accuracy": a, "clusters": int(len(np.unique(mem[:clusterer.graph.n_focal])))}


def resolution_bracket(clusterer: Clusterer, crit: Criterion, g_min: float, g_max: float, seed: int,
                       max_steps: int = 24, slack: float = 1.25) -> tuple[float, float]:
    """Resolutions whose G lies just below g_min (within a factor `slack`) and just above g_max:
    doubling / halving from an n-based start until each end is passed (as far as the graph allows
    in max_steps), then bisection in log γ to pull each end in, so the sweep's points are spent
    inside the granularities asked for."""
    n = max(len(crit.rows), 1)
    g_of = lambda r: point(clusterer, crit, r, seed)["granularity"]

    def end(target: float, below: bool) -> float:
        r = 2.0 * math.sqrt(g_min * g_max) / n
        g = g_of(r)
        outside = (lambda g: g <= target) if below else (lambda g: g >= target)
        inside_r = None
        for _ in range(max_steps):
            if outside(g):
                break
            inside_r = r
            r = r / 2.0 if below else r * 2.0
            g = g_of(r)
        if inside_r is None:          # the start was already outside: step inwards until inside
            for _ in range(max_steps):
                nxt = r * 2.0 if below else r / 2.0
                gn = g_of(nxt)
                if not outside(gn):
                    inside_r = nxt
                    break
                r, g = nxt, gn
        if inside_r is None or not outside(g):
            return r
        for _ in range(max_steps):    # bisect between r (outside) and inside_r
            if (g >= target / slack) if below else (g <= target * slack):
                break
            mid = math.sqrt(r * inside_r)
            gm = g_of(mid)
            if outside(gm):
                r, g = mid, gm
            else:
                inside_r = mid
        return r

    return end(g_min, True), end(g_max, False)


def sweep(graph: RelGraph, crit: Criterion, g_range: tuple[float, float], points: int = 16,
          seeds: tuple[int, ...] = (0, 1, 2), resolutions: list[float] | None = None,
          max_iterations: int = -1) -> dict:
    """The graph's curve: {"points": [{resolution, seed, granularity, accuracy, clusters}], "resolutions", "seconds"}."""
    t0 = time.perf_counter()
    c = Clusterer(graph, max_iterations)
    if not resolutions:
        lo, hi = resolution_bracket(c, crit, g_range[0], g_range[1], seeds[0])
        resolutions = np.exp(np.linspace(math.log(lo), math.log(hi), points)).tolist()
    pts = [point(c, crit, r, s) for r in resolutions for s in seeds]
    return {"points": pts, "resolutions": [float(r) for r in resolutions], "seeds": list(seeds),
            "seconds": round(time.perf_counter() - t0, 3)}


def _seed_curve(pts: list[dict], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One seed's (G, A), sorted by G, repeated G values averaged (log G is the interpolation axis)."""
    G = np.array([p["granularity"] for p in pts if p["seed"] == seed], float)
    A = np.array([p["accuracy"] for p in pts if p["seed"] == seed], float)
    ok = np.isfinite(G) & np.isfinite(A) & (G > 0)
    G, A = G[ok], A[ok]
    u, inv = np.unique(G, return_inverse=True)
    return u, np.bincount(inv, weights=A) / np.bincount(inv)


def accuracy_at(curve: dict, targets: list[float]) -> dict[float, dict]:
    """{G: {mean, std, seeds}}: A interpolated at each target G per seed (linear in log G)."""
    out = {}
    per_seed = [_seed_curve(curve["points"], s) for s in curve["seeds"]]
    for t in targets:
        vals = [float(np.interp(math.log(t), np.log(G), A)) for G, A in per_seed
                if len(G) and G[0] <= t <= G[-1]]
        out[float(t)] = {"mean": float(np.mean(vals)) if vals else float("nan"),
                         "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan"),
                         "seeds": len(vals)}
    return out


def relative_accuracies(curves: dict[str, dict], n_grid: int = 50, reference: list[str] | None = None) -> dict[str, dict]:
    """{graph: {mean, std, per_seed, g_range}}: relative accuracy of every graph against the mean of
    the `reference` graphs (default: all), computed seed by seed (seed s of every graph together)
    over the reference graphs' common granularity range."""
    seeds = sorted(set.intersection(*[set(c["seeds"]) for c in curves.values()])) if curves else []
    per: dict[str, list[float]] = {name: [] for name in curves}
    ranges = []
    for s in seeds:
        sc = {name: _seed_curve(c["points"], s) for name, c in curves.items()}
        ref = [r for r in (reference or sc) if r in sc]
        ranges.append((max(sc[r][0][0] for r in ref), min(sc[r][0][-1] for r in ref)))
        for name, v in relative_accuracy(sc, n_grid, ref).items():
            per[name].append(v)
    return {name: {"mean": float(np.mean(v)) if v else float("nan"),
                   "std": float(np.std(v, ddof=1)) if len(v) > 1 else float("nan"), "per_seed": v,
                   "g_range": [float(max(r[0] for r in ranges)), float(min(r[1] for r in ranges))] if ranges else None}
            for name, v in per.items()}
