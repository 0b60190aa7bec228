"""Relatedness graphs on one set of evaluated ("focal") papers, for comparing methods.

Every method — an encoder's 20-NN, TF-IDF / BM25 20-NN, the citation relations, a random floor,
the criterion's own relatedness, a hybrid — becomes a `RelGraph` on the same nodes: 0..n_focal-1
are the focal papers in the caller's order; nodes from n_focal on are external papers that only
extended direct citation adds (they carry node weight 0 in CPM, so they never count towards a
cluster's size, and they are not evaluated). Raw relatedness `a` is what the method gives; the
clustering normalises it the CWTS way (w_ij = a_ij/s_i + a_ij/s_j, mapping.cluster), so the
scale of `a` never matters.

A hybrid is the weighted sum of its parts' CWTS-normalised weights (each part then counts by
its weight whatever its raw scale), used as the hybrid's normalised weights as they are (`w`), so
a hybrid with weight 1 on one graph is that graph.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mapping.cluster import cwts_normalise, undirected


@dataclass
class RelGraph:
    """Undirected relatedness graph; each edge once (lo < hi), sorted by (lo, hi), a > 0."""
    name: str
    n_focal: int
    n: int                 # n_focal + external nodes
    lo: np.ndarray         # int64
    hi: np.ndarray
    a: np.ndarray          # float64 raw relatedness
    info: dict = field(default_factory=dict)   # how it was built (shown in the report)
    w: np.ndarray | None = None                  # normalised weights when given (hybrids), else from `a`

    @property
    def m(self) -> int:
        return int(len(self.lo))

    def normalised(self) -> np.ndarray:
        """CWTS-normalised weights (over all nodes, external ones included)."""
        return self.w if self.w is not None else cwts_normalise(self.lo, self.hi, self.a, self.n)

    def node_weights(self) -> np.ndarray:
        """CPM node weights: 1 for focal papers, 0 for external ones."""
        w = np.zeros(self.n)
        w[:self.n_focal] = 1.0
        return w


def from_pairs(name: str, src: np.ndarray, dst: np.ndarray, a: np.ndarray, n_focal: int,
               n: int | None = None, combine: str = "max", **info) -> RelGraph:
    """RelGraph from directed or repeated pairs: both directions merged by max (kNN-style: a link
    is as strong as its stronger direction) or summed (`combine="sum"`: counts, 1/R_i weights)."""
    n = n_focal if n is None else n
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    a = np.asarray(a, np.float64)
    if combine == "max":
        lo, hi, w = undirected(src, dst, a, n)
        return RelGraph(name, n_focal, n, lo.astype(np.int64), hi.astype(np.int64), np.asarray(w, np.float64), info)
    if combine != "sum":
        raise ValueError(f"combine must be 'max' or 'sum', not {combine!r}")
    ok = (src != dst) & (a > 0)
    lo, hi, a = np.minimum(src[ok], dst[ok]), np.maximum(src[ok], dst[ok]), a[ok]
    key = lo * n + hi
    uniq, inv = np.unique(key, return_inverse=True)
    return RelGraph(name, n_focal, n, uniq // n, uniq % n, np.bincount(inv.ravel(), weights=a), info)


def hybrid(name: str, parts: list[tuple[RelGraph, float]]) -> RelGraph:
    """Weighted sum of the parts' CWTS-normalised weights (weights rescaled to sum to 1) on the
    union of their edges. Parts must share their nodes (same n_focal and n)."""
    if not parts:
        raise ValueError("a hybrid needs at least one part")
    n_focal, n = parts[0][0].n_focal, parts[0][0].n
    if any(g.n_focal != n_focal or g.n != n for g, _ in parts):
        raise ValueError("hybrid parts must be graphs on the same nodes (extended direct citation's external "
                         "nodes differ from graph to graph)")
    total = float(sum(wt for _, wt in parts))
    if not total > 0:
        raise ValueError("hybrid weights must sum to more than 0")
    keys, vals = [], []
    for g, wt in parts:
        if wt > 0:
            keys.append(g.lo * n + g.hi)
            vals.append(g.normalised() * (wt / total))
    uniq, inv = np.unique(np.concatenate(keys), return_inverse=True)
    w = np.bincount(inv.ravel(), weights=np.concatenate(vals))
    info = {"parts": {g.name: wt / total for g, wt in parts}}
    return RelGraph(name, n_focal, n, uniq // n, uniq % n, w.copy(), info, w=w)
