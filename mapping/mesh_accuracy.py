"""MeSH-based clustering accuracy (METHODS.md §6; Ahlgren et al. 2020, Waltman et al. 2020).

Conventions (options where the sources leave room):
- Descriptor key = UI when present, else the name. Check tags (CHECK_TAGS: Humans, Animals, Male,
  Female, Pregnancy and the age groups) are dropped before anything is counted.
- f(m) = assignments of m in the evaluated corpus, an assignment flagged major counting
  `major_weight` (2) times. F(m) = f(m) + Σ_{d ∈ descendants(m)} f(d), descendants from the tree
  numbers (d is a descendant if one of its tree numbers starts with one of m's plus "."; each
  descendant counted once). IC(m) = −ln(F(m) / Σ_m' F(m')). A parent thus never has a higher IC
  than its child.
- Publication vector: component m = IC(m), times `major_weight` when major (`major_in_vector`).
  Relatedness r_ij = cosine of publication vectors; r̃_ij = r_ij / Σ_{k≠i} r_ik.
- A = (1/N) Σ_i Σ_{j≠i, c_j=c_i} r̃_ij, computed in O(nnz) without an N×N matrix:
  A = (1/N) Σ_i (v̂_i·S_{c_i} − 1)/(v̂_i·T − 1), S_c = Σ_{i∈c} v̂_i, T = Σ_i v̂_i.
  A publication related to no other (denominator 0) contributes 0 and is counted in `unrelated`.
- Granularity G = N² / Σ_c n_c² over the evaluated publications.
"""
from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

CHECK_TAGS = frozenset({
    "Humans", "Animals", "Male", "Female", "Pregnancy",
    "Infant, Newborn", "Infant", "Child, Preschool", "Child", "Adolescent", "Young Adult",
    "Adult", "Middle Aged", "Aged", "Aged, 80 and over",
})
CHECK_TAG_UIS = frozenset({
    "D006801", "D000818", "D008297", "D005260", "D011247", "D007231", "D007223", "D002675",
    "D002648", "D000293", "D055815", "D000328", "D008875", "D000368", "D000369",
})


def _seq(x):
    """None -> (); lists and the NumPy arrays pandas makes of Arrow lists pass through."""
    return () if x is None else x


def _key(term: dict) -> str | None:
    return term.get("ui") or term.get("name")


def _drop(term: dict, drop_names: frozenset, drop_uis: frozenset) -> bool:
    return (term.get("name") in drop_names) or (term.get("ui") in drop_uis)


@dataclass
class MeshVectors:
    """Unit publication vectors (CSR, rows = evaluated papers) and the descriptor weights."""
    rows: np.ndarray          # positions (into the input list) of papers that have a vector
    V: sp.csr_matrix          # L2-normalised, non-negative
    descriptors: list[str]
    ic: np.ndarray


def information_content(records: list[list[dict]], major_weight: float = 2.0,
                        drop_names: frozenset = CHECK_TAGS, drop_uis: frozenset = CHECK_TAG_UIS) -> dict[str, float]:
    """IC(m) per descriptor key from the corpus' assignments and the descriptors' tree numbers."""
    f: Counter = Counter()
    trees: dict[str, set[str]] = {}
    for terms in records:
        for t in _seq(terms):
            if _drop(t, drop_names, drop_uis):
                continue
            k = _key(t)
            if not k:
                continue
            f[k] += major_weight if t.get("major") else 1.0
            trees.setdefault(k, set()).update(_seq(t.get("tree_numbers")))
    # Sorted tree numbers: all descendants of "X.Y" are the contiguous run starting with "X.Y.".
    tn_list = sorted((tn, k) for k, tns in trees.items() for tn in tns)
    tns_sorted = [tn for tn, _ in tn_list]
    F: dict[str, float] = {}
    for k in f:
        desc: set[str] = set()
        for tn in trees.get(k, ()):
            prefix = tn + "."
            i = bisect.bisect_left(tns_sorted, prefix)
            while i < len(tns_sorted) and tns_sorted[i].startswith(prefix):
                desc.add(tn_list[i][1])
                i += 1
        desc.discard(k)
        F[k] = f[k] + sum(f[d] for d in desc)
    total = sum(F.values())
    return {k: -math.log(v / total) for k, v in F.items()}


def publication_vectors(records: list[list[dict]], ic: dict[str, float] | None = None, major_weight: float = 2.0,
                        major_in_vector: bool = True, drop_names: frozenset = CHECK_TAGS,
                        drop_uis: frozenset = CHECK_TAG_UIS) -> MeshVectors:
    """Unit IC-weighted descriptor vectors; papers left without descriptors get no row."""
    ic = ic if ic is not None else information_content(records, major_weight, drop_names, drop_uis)
    keys = sorted(ic)
    col = {k: i for i, k in enumerate(keys)}
    rows, indptr, indices, data = [], [0], [], []
    for r, terms in enumerate(records):
        comp: dict[int, float] = {}
        for t in _seq(terms):
            if _drop(t, drop_names, drop_uis):
                continue
            k = _key(t)
            if k not in col or ic[k] <= 0:
                continue
            val = ic[k] * (major_weight if (major_in_vector and t.get("major")) else 1.0)
            comp[col[k]] = max(comp.get(col[k], 0.0), val)
        if not comp:
            continue
        rows.append(r)
        for c in sorted(comp):
            indices.append(c)
            data.append(comp[c])
        indptr.append(len(indices))
    V = sp.csr_matrix((np.asarray(data, float), np.asarray(indices, np.int64), np.asarray(indptr, np.int64)),
                      shape=(len(rows), len(keys)))
    norms = np.sqrt(np.asarray(V.multiply(V).sum(axis=1)).ravel())
    V = sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ V
    return MeshVectors(rows=np.asarray(rows, np.int64), V=V.tocsr(), descriptors=keys,
                       ic=np.asarray([ic[k] for k in keys]))


def accuracy(V: sp.csr_matrix, labels: np.ndarray) -> tuple[float, int]:
    """A = (1/N) Σ_i (v̂_i·S_{c_i} − 1)/(v̂_i·T − 1) in O(nnz(V)). Returns (A, unrelated count)."""
    labels = np.asarray(labels)
    N = V.shape[0]
    if N == 0:
        return float("nan"), 0
    _, lab = np.unique(labels, return_inverse=True)
    M = sp.csr_matrix((np.ones(N), (lab, np.arange(N))), shape=(lab.max() + 1, N))
    S = (M @ V).tocsr()                              # cluster sums, C × d
    T = np.asarray(V.sum(axis=0)).ravel()            # corpus sum
    Vc = V.tocoo()
    s_vals = np.asarray(S[lab[Vc.row], Vc.col]).ravel()
    num = np.bincount(Vc.row, weights=Vc.data * s_vals, minlength=N) - 1.0
    den = np.bincount(Vc.row, weights=Vc.data * T[Vc.col], minlength=N) - 1.0
    ok = den > 1e-12
    per = np.zeros(N)
    per[ok] = np.clip(num[ok], 0, None) / den[ok]
    return float(per.sum() / N), int((~ok).sum())


def accuracy_bruteforce(V: sp.csr_matrix, labels: np.ndarray) -> float:
    """The N×N definition, for tests on small N."""
    D = V.toarray()
    R = D @ D.T
    np.fill_diagonal(R, 0.0)
    den = R.sum(axis=1, keepdims=True)
    Rn = np.divide(R, den, out=np.zeros_like(R), where=den > 0)
    labels = np.asarray(labels)
    same = labels[:, None] == labels[None, :]
    return float((Rn * same).sum() / len(labels))


def granularity(labels: np.ndarray) -> float:
    """G = N² / Σ_c n_c² (= number of clusters when all have equal size)."""
    labels = np.asarray(labels)
    if len(labels) == 0:
        return float("nan")
    n_c = np.unique(labels, return_counts=True)[1].astype(float)
    return float(len(labels) ** 2 / (n_c ** 2).sum())


def relative_accuracy(curves: dict[str, tuple[np.ndarray, np.ndarray]], n_grid: int = 50) -> dict[str, float]:
    """Seed paper Fig. 6: interpolate each method's A on a common log-spaced G grid inside the
    overlap of all methods' G ranges, divide by the mean over methods per grid point, average.
    `curves`: name -> (G values, A values). 1 = average method."""
    if len(curves) < 1:
        return {}
    prepared = {}
    for name, (G, A) in curves.items():
        G, A = np.asarray(G, float), np.asarray(A, float)
        ok = np.isfinite(G) & np.isfinite(A) & (G > 0)
        order = np.argsort(G[ok])
        prepared[name] = (np.log(G[ok][order]), A[ok][order])
    lo = max(g[0] for g, _ in prepared.values())
    hi = min(g[-1] for g, _ in prepared.values())
    if not lo <= hi:
        raise ValueError("the methods' granularity ranges do not overlap; compute curves over a wider γ grid")
    grid = np.linspace(lo, hi, n_grid) if hi > lo else np.array([lo])
    vals = {name: np.interp(grid, g, a) for name, (g, a) in prepared.items()}
    mean = np.mean(list(vals.values()), axis=0)
    return {name: float(np.mean(v / mean)) for name, v in vals.items()}
