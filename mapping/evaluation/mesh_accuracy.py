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

Built from Arrow at 33M papers: `TermCollector` flattens list<MESH> chunks with pyarrow.compute
(list_flatten / list_parent_indices / struct fields), drops check tags by mask and keeps per
assignment only its paper position, a code of its (key, tree numbers) combination and the major
flag (9 bytes); `descriptor_weights` counts f with one bincount and sums descendants over the
distinct tree numbers (few); `mesh_vectors` builds the CSR in chunks of whole papers. No Python
object per paper. `information_content` / `publication_vectors` also take lists of dicts (converted
to Arrow; the same numbers, bit for bit).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from sciencemap.contracts import MESH
from sciencemap.mesh import CHECK_TAG_UIS, CHECK_TAGS


# Joins a descriptor key and its tree numbers into one string per (key, tree numbers) combination,
# so that a chunk's assignments factorise into few distinct combinations (control characters
# appear in neither MeSH UIs, names nor tree numbers).
_KEY_SEP, _TREE_SEP = "\x1f", "\x1e"


@dataclass
class MeshTerms:
    """The kept MeSH assignments of a stream of papers, one entry per assignment, as arrays.

    Check tags and assignments without a key are dropped. `paper` is the position of the
    assignment's paper in the stream (non-decreasing); `combo` indexes the distinct
    (descriptor key, tree numbers) combinations, which are few (~ the descriptors in use)."""
    paper: np.ndarray          # int32 (int64 past 2**31 papers)
    combo: np.ndarray          # int32 index into combo_key / combo_trees
    major: np.ndarray          # bool
    combo_key: np.ndarray      # object: descriptor key (UI, else name) of each combination
    combo_trees: pa.ListArray  # list<string>: its tree numbers
    papers: int                # papers in the stream (with or without assignments)


class TermCollector:
    """Collects MeSH assignments chunk by chunk (`add(mesh)` with a list<MESH> array of the
    stream's next papers), keeping 9 bytes per assignment instead of the Arrow lists."""

    def __init__(self, drop_names: frozenset = CHECK_TAGS, drop_uis: frozenset = CHECK_TAG_UIS):
        self.drop_names = pa.array(sorted(drop_names), pa.string())
        self.drop_uis = pa.array(sorted(drop_uis), pa.string())
        self.papers = 0
        self._paper, self._code, self._major, self._combos = [], [], [], []

    def add(self, mesh: pa.Array | pa.ChunkedArray) -> None:
        chunks = mesh.chunks if isinstance(mesh, pa.ChunkedArray) else [mesh]
        for arr in chunks:
            self._add(arr)

    def _add(self, mesh: pa.Array) -> None:
        flat = pc.list_flatten(mesh)
        pos_t = np.int32 if self.papers + len(mesh) < 2**31 else np.int64
        parent = pc.list_parent_indices(mesh).to_numpy().astype(pos_t) + pos_t(self.papers)
        self.papers += len(mesh)
        if len(flat) == 0:
            return
        ui, name = pc.struct_field(flat, "ui"), pc.struct_field(flat, "name")
        key = pc.if_else(pc.fill_null(pc.not_equal(ui, ""), False), ui, name)   # `ui or name`
        keep = pc.fill_null(pc.not_equal(key, ""), False)                       # null key -> dropped
        if len(self.drop_names):
            keep = pc.and_(keep, pc.invert(pc.is_in(name, value_set=self.drop_names)))
        if len(self.drop_uis):
            keep = pc.and_(keep, pc.invert(pc.is_in(ui, value_set=self.drop_uis)))
        keep_np = keep.to_numpy(zero_copy_only=False)
        if not keep_np.any():
            return
        trees = pc.fill_null(pc.binary_join(pc.struct_field(flat, "tree_numbers"), _TREE_SEP), "")
        combo = pc.binary_join_element_wise(key.filter(keep), trees.filter(keep), _KEY_SEP)
        enc = combo.dictionary_encode()
        major = pc.fill_null(pc.struct_field(flat, "major"), False).filter(keep)
        self._paper.append(parent[keep_np])
        self._code.append(enc.indices.to_numpy().astype(np.int32))       # local to this chunk's dictionary
        self._major.append(major.to_numpy(zero_copy_only=False).astype(bool))
        self._combos.append(enc.dictionary)

    def finish(self) -> MeshTerms:
        if not self._combos:
            return MeshTerms(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, bool),
                             np.zeros(0, object), pa.array([], pa.list_(pa.string())), self.papers)
        sizes = [len(d) for d in self._combos]
        enc = pa.concat_arrays(self._combos).dictionary_encode()   # the chunks' combinations, once each
        self._combos.clear()
        remap = enc.indices.to_numpy().astype(np.int32)
        total = sum(len(c) for c in self._code)
        code = np.empty(total, np.int32)
        paper = np.empty(total, np.result_type(*self._paper))
        major = np.empty(total, bool)
        at, off = 0, 0
        for size in sizes:                                         # fill in place, freeing each chunk
            c, p, m = self._code.pop(0), self._paper.pop(0), self._major.pop(0)
            code[at:at + len(c)] = remap[c.astype(np.int64) + off]
            paper[at:at + len(c)] = p
            major[at:at + len(c)] = m
            at, off = at + len(c), off + size
        parts = pc.split_pattern(enc.dictionary, _KEY_SEP, max_splits=1)
        keys = pc.list_element(parts, 0).to_numpy(zero_copy_only=False)
        trees = pc.split_pattern(pc.list_element(parts, 1), _TREE_SEP)
        return MeshTerms(paper, code, major, np.asarray(keys, object), trees, self.papers)


def mesh_terms(mesh: pa.Array | pa.ChunkedArray, drop_names: frozenset = CHECK_TAGS,
               drop_uis: frozenset = CHECK_TAG_UIS) -> MeshTerms:
    """The assignments of one list<MESH> array (papers = its elements)."""
    c = TermCollector(drop_names, drop_uis)
    c.add(mesh)
    return c.finish()


@dataclass
class DescriptorWeights:
    keys: np.ndarray           # object, sorted descriptor keys (the vector columns)
    ic: np.ndarray             # float64 IC per key
    combo_col: np.ndarray      # int64 column of each combination (-1: not in use)


def _used(terms: MeshTerms, papers: np.ndarray | None) -> np.ndarray:
    """Mask over the assignments: those of the selected papers (all when papers is None)."""
    return np.ones(len(terms.paper), bool) if papers is None else np.asarray(papers, bool)[terms.paper]


def descriptor_weights(terms: MeshTerms, papers: np.ndarray | None = None,
                       major_weight: float = 2.0) -> DescriptorWeights:
    """IC(m) of every descriptor assigned to the selected papers (a boolean mask over the stream).

    Per-assignment work is vectorised (bincount over combination codes); the descendant sums run
    over the distinct tree numbers in use, which are few."""
    tm = _used(terms, papers)
    code, major = terms.combo[tm], terms.major[tm]
    in_use = np.zeros(len(terms.combo_key), bool)
    in_use[code] = True
    used = np.flatnonzero(in_use)
    keys, inv = np.unique(terms.combo_key[used], return_inverse=True)   # Python string order
    D = len(keys)
    combo_col = np.full(len(terms.combo_key), -1, np.int64)
    combo_col[used] = inv
    f = np.bincount(combo_col[code], weights=np.where(major, major_weight, 1.0), minlength=D)
    F = f + _descendant_sums(terms.combo_trees.take(pa.array(used)), inv, f)
    total = float(F.sum())
    ic = np.array([-math.log(v / total) for v in F.tolist()], dtype=np.float64)
    return DescriptorWeights(keys=keys, ic=ic, combo_col=combo_col)


def _descendant_sums(trees: pa.ListArray, desc: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Σ f(d) over the descendants d of each descriptor (each counted once, itself excluded).

    d descends from m when one of d's tree numbers starts with one of m's plus "."; in sorted
    order those are the contiguous run [t + ".", t + "/") ("/" follows "." in code points)."""
    D = len(f)
    tn = pc.list_flatten(trees)
    owner = desc[pc.list_parent_indices(trees).to_numpy()]
    tn = np.asarray(tn.to_numpy(zero_copy_only=False), dtype=str)
    ok = tn != ""
    if not ok.any():
        return np.zeros(D)
    tn_u, tn_i = np.unique(tn[ok], return_inverse=True)
    pair = np.unique(tn_i.astype(np.int64) * D + owner[ok])     # (tree number, descriptor), by tree number
    p_tn, p_desc = pair // D, pair % D
    first = np.searchsorted(p_tn, np.arange(len(tn_u) + 1))     # pairs of tree number t: first[t]:first[t+1]
    lo = first[np.searchsorted(tn_u, np.char.add(tn_u, "."))]
    hi = first[np.searchsorted(tn_u, np.char.add(tn_u, "/"))]
    cnt = (hi - lo)[p_tn]
    if cnt.sum() == 0:
        return np.zeros(D)
    anc = np.repeat(p_desc, cnt)
    at = np.repeat(lo[p_tn] - (np.cumsum(cnt) - cnt), cnt) + np.arange(cnt.sum())
    link = np.unique(anc * D + p_desc[at])
    a, d = link // D, link % D
    a, d = a[a != d], d[a != d]
    return np.bincount(a, weights=f[d], minlength=D)


@dataclass
class MeshVectors:
    """Unit publication vectors (CSR, rows = evaluated papers) and the descriptor weights."""
    rows: np.ndarray          # positions (into the input stream) of papers that have a vector
    V: sp.csr_matrix          # L2-normalised, non-negative
    descriptors: list[str]
    ic: np.ndarray


def mesh_vectors(terms: MeshTerms, papers: np.ndarray | None = None, major_weight: float = 2.0,
                 major_in_vector: bool = True, ic: dict[str, float] | None = None,
                 chunk: int = 1 << 22) -> MeshVectors:
    """Unit IC-weighted descriptor vectors of the selected papers (IC from those papers unless
    `ic` is given); a paper's repeated descriptor keeps its largest component; papers left without
    descriptors get no row. Built in chunks of whole papers (memory ~ `chunk` assignments)."""
    if ic is None:
        w = descriptor_weights(terms, papers, major_weight)
    else:
        keys = np.asarray(sorted(ic), object)
        col = {k: i for i, k in enumerate(keys.tolist())}
        w = DescriptorWeights(keys, np.asarray([ic[k] for k in keys.tolist()], np.float64),
                              np.asarray([col.get(k, -1) for k in terms.combo_key.tolist()], np.int64))
    D = len(w.keys)
    idx_t = np.int32 if D < 2**31 else np.int64
    sel = None if papers is None else np.asarray(papers, bool)
    P = terms.paper
    prow, pcount, cols, vals = [], [], [], []
    starts = np.unique(np.searchsorted(P, P[::chunk])) if len(P) else np.zeros(0, np.int64)
    for a, b in zip(starts, np.r_[starts[1:], len(P)]):
        paper, col = P[a:b], w.combo_col[terms.combo[a:b]]
        ok = col >= 0
        if sel is not None:
            ok &= sel[paper]
        ok[ok] = w.ic[col[ok]] > 0
        if not ok.any():
            continue
        paper, col = paper[ok], col[ok]
        val = w.ic[col] * np.where(terms.major[a:b][ok] & major_in_vector, major_weight, 1.0)
        p0 = paper[0]
        key = (paper - p0).astype(np.int64) * D + col
        order = np.argsort(key, kind="stable")
        key = key[order]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        r, c = np.unique(key[first] // D + p0, return_counts=True)
        prow.append(r)
        pcount.append(c)
        cols.append((key[first] % D).astype(idx_t))
        vals.append(np.maximum.reduceat(val[order], first))
    papers_with = np.concatenate(prow) if prow else np.zeros(0, np.int64)
    indptr = np.r_[0, np.cumsum(np.concatenate(pcount) if pcount else np.zeros(0, np.int64))].astype(np.int64)
    indices = np.concatenate(cols) if cols else np.zeros(0, idx_t)
    data = np.concatenate(vals) if vals else np.zeros(0)
    del cols, vals
    V = sp.csr_matrix((data, indices, indptr), shape=(len(papers_with), D))
    norms = np.sqrt(np.asarray(V.multiply(V).sum(axis=1)).ravel())
    V = sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ V
    return MeshVectors(rows=papers_with.astype(np.int64), V=V.tocsr(), descriptors=w.keys.tolist(), ic=w.ic)


# ---------------------------------------------------------------- records (lists of dicts)

def mesh_array(records: list[list[dict]]) -> pa.Array:
    """Python MeSH lists (dicts as in the papers table; NumPy arrays from pandas accepted) as Arrow."""
    def norm(terms):
        if terms is None:
            return None
        return [None if t is None else {**t, "tree_numbers": None if t.get("tree_numbers") is None
                                        else list(t.get("tree_numbers"))} for t in terms]
    return pa.array([norm(r) for r in records], pa.list_(MESH))


def information_content(records: list[list[dict]], major_weight: float = 2.0,
                        drop_names: frozenset = CHECK_TAGS, drop_uis: frozenset = CHECK_TAG_UIS) -> dict[str, float]:
    """IC(m) per descriptor key from the corpus' assignments and the descriptors' tree numbers."""
    w = descriptor_weights(mesh_terms(mesh_array(records), drop_names, drop_uis), major_weight=major_weight)
    return dict(zip(w.keys.tolist(), w.ic.tolist()))


def publication_vectors(records: list[list[dict]], ic: dict[str, float] | None = None, major_weight: float = 2.0,
                        major_in_vector: bool = True, drop_names: frozenset = CHECK_TAGS,
                        drop_uis: frozenset = CHECK_TAG_UIS) -> MeshVectors:
    """Unit IC-weighted descriptor vectors; papers left without descriptors get no row."""
    return mesh_vectors(mesh_terms(mesh_array(records), drop_names, drop_uis), major_weight=major_weight,
                        major_in_vector=major_in_vector, ic=ic)


def accuracy(V: sp.csr_matrix, labels: np.ndarray) -> tuple[float, int]:
    """A = (1/N) Σ_i (v̂_i·S_{c_i} − 1)/(v̂_i·T − 1) in O(nnz(V)). Returns (A, unrelated count)."""
    labels = np.asarray(labels)
    N = V.shape[0]
    if N == 0:
        return float("nan"), 0
    _, lab = np.unique(labels, return_inverse=True)
    M = sp.csr_matrix((np.ones(N), (lab, np.arange(N))), shape=(lab.max() + 1, N))
    S = (M @ V).tocsr()                              # cluster sums, C × d
    S.sort_indices()                                 # sorted rows: the lookups below binary-search
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


def relative_accuracy(curves: dict[str, tuple[np.ndarray, np.ndarray]], n_grid: int = 50,
                      reference: list[str] | None = None) -> dict[str, float]:
    """Seed paper Fig. 6: interpolate each method's A on a common log-spaced G grid inside the
    overlap of the reference methods' G ranges, divide by the mean over the reference methods
    (default: all) per grid point, average. `curves`: name -> (G values, A values). 1 = average method."""
    if len(curves) < 1:
        return {}
    prepared = {}
    for name, (G, A) in curves.items():
        G, A = np.asarray(G, float), np.asarray(A, float)
        ok = np.isfinite(G) & np.isfinite(A) & (G > 0)
        order = np.argsort(G[ok])
        prepared[name] = (np.log(G[ok][order]), A[ok][order])
    ref = [r for r in (reference or prepared) if r in prepared]
    lo = max(prepared[r][0][0] for r in ref)
    hi = min(prepared[r][0][-1] for r in ref)
    if not lo <= hi:
        raise ValueError("the methods' granularity ranges do not overlap; compute curves over a wider γ grid")
    grid = np.linspace(lo, hi, n_grid) if hi > lo else np.array([lo])
    vals = {name: np.interp(grid, g, a) for name, (g, a) in prepared.items()}
    mean = np.mean([vals[r] for r in ref], axis=0)
    return {name: float(np.mean(v / mean)) for name, v in vals.items()}
