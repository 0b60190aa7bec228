"""Geometry of an embedding space (issue 31's diagnostics; METHODS.md §7.2): how close related papers
sit, how evenly the vectors spread, and how many directions they use. All on unit vectors.

- alignment (Wang & Isola 2020): the mean squared distance of related pairs, E ||x − y||², in [0, 4];
  lower = related papers closer.
- uniformity (Wang & Isola 2020): log E_{x≠y} exp(−t ||x − y||²), t = 2, over (a seeded sample of)
  distinct pairs; from 0 (all one point) down to about −4 (spread evenly on a high-dimensional sphere).
- spectrum deviation: KL(p ‖ uniform) = log d − H(p) of the normalised squared singular values
  p_i = σ_i² / Σ σ² of the centred vectors (n × d); 0 when every direction carries the same
  variance, log d when one direction carries all of it (collapse to a line). Reported with
  exp(H(p)), the effective rank.
"""
from __future__ import annotations

import numpy as np

T = 2.0


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def alignment(a: np.ndarray, b: np.ndarray) -> float:
    """E ||x − y||² over the rows of a and b (related pairs, row by row), on unit vectors."""
    d = _unit(a) - _unit(b)
    return float((d * d).sum(axis=1).mean())


def uniformity(x: np.ndarray, t: float = T, max_pairs: int = 200_000, seed: int = 0) -> float:
    """log E exp(−t ||x_i − x_j||²) over distinct pairs i < j (a seeded sample of max_pairs when more)."""
    u = _unit(x)
    n = len(u)
    if n < 2:
        raise ValueError("uniformity needs at least two vectors")
    if n * (n - 1) // 2 <= max_pairs:
        i, j = np.triu_indices(n, k=1)
    else:
        rng = np.random.default_rng(seed)
        i, j = rng.integers(n, size=max_pairs), rng.integers(n - 1, size=max_pairs)
        j = j + (j >= i)                                  # j != i
    sq = np.maximum(2.0 - 2.0 * (u[i] * u[j]).sum(axis=1), 0.0)
    m = -t * sq
    top = m.max()
    return float(top + np.log(np.exp(m - top).mean()))   # log-mean-exp, stable


def spectrum(x: np.ndarray) -> dict:
    """{"deviation": log d − H(p), "effective_rank": exp(H(p)), "dim": d} of the centred unit vectors."""
    u = _unit(x)
    u = u - u.mean(axis=0)
    s2 = np.linalg.svd(u, compute_uv=False) ** 2
    d = u.shape[1]
    if s2.sum() <= 0:
        return {"deviation": float(np.log(d)), "effective_rank": 1.0, "dim": d}
    p = s2 / s2.sum()
    p = p[p > 0]
    h = float(-(p * np.log(p)).sum())
    return {"deviation": float(np.log(d) - h), "effective_rank": float(np.exp(h)), "dim": d}


def geometry(x: np.ndarray, pairs_a: np.ndarray | None = None, pairs_b: np.ndarray | None = None) -> dict:
    """The three diagnostics of vectors x (alignment only when related pairs are given)."""
    out = {"uniformity": uniformity(x), **{f"spectrum_{k}": v for k, v in spectrum(x).items()}}
    if pairs_a is not None and len(pairs_a):
        out["alignment"] = alignment(pairs_a, pairs_b)
    return out
