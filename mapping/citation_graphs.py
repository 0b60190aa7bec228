"""Citation-based relatedness graphs on the evaluated ("focal") papers, for comparing methods (issue 16).

`citation_graphs(references, focal_ids)` reads the references table once (citing_id and cited_id
only, in Arrow batches) and builds up to four `RelGraph`s (mapping.relatedness) on the focal
papers, nodes 0..n_focal-1 in the order of `focal_ids` (METHODS.md §6.5):

- "dc"  direct citation: a_ij = c_ij / R_i + c_ji / R_j, c_ij = 1 when i cites j, R_i = the
        number of i's distinct references to focal papers (the nodes of this graph).
- "edc" extended direct citation: the same formula on the focal papers plus external nodes
        (numbered n_focal.., node weight 0): every non-focal paper that has a citation relation
        with at least `edc_min_links` (2) distinct focal papers, in either direction (cited by
        them, or citing them when the non-focal paper is a citing paper of the table). Relations
        between two non-focal papers are left out. R_i counts i's distinct references to nodes of
        this graph (focal + external). The external nodes' ids, in node order (sorted by id),
        are `info["external_ids"]` (a pyarrow array; drop it before serialising info).
- "bc"  bibliographic coupling: a_ij = the number of distinct resolved references (any paper,
        focal or not) that i and j share. Raw counts: the clustering normalises them (CWTS).
- "cc"  co-citation: a_ij = the number of distinct papers of the table (focal or not) that cite
        both i and j.

Common rules: rows with a null citing_id or cited_id (unresolved references) are skipped and
counted; a (citing, cited) pair counts once however often it is listed; self-citations
(citing == cited) are dropped.

bc and cc are sparse products of the citing × cited incidence (bc: C C^T over focal citing
rows; cc: D D^T with D = focal cited × citing). They are computed in row blocks sized by their
number of scalar products (`block_products`), and each focal paper keeps its `max_neighbours`
strongest partners (ties: the lower node number first; 0 = all); a pair is an edge when either
end kept it (the kNN rule), so memory is O(n_focal · max_neighbours) whatever the hubs. The work
is Σ_r d_r² over the columns (d_r = focal papers citing reference r, for bc; focal references of
citing paper c, for cc): `max_cited_by` / `max_references` drop the hub columns that make it
explode (default: none dropped, the measures as defined; the work is logged before the product).

Scale: ids become integer codes by Arrow hash look-ups (`pc.index_in` against the focal ids; the
other ids against a growing array of the non-focal ids met so far, looked up in chunks at least
as big as that array, so the hash-table builds cost no more than the look-ups), and only int64
code arrays of the (citing, cited) pairs with a focal end are kept: 16 bytes a reference, plus
the non-focal ids as Arrow strings.
"""
from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from sciencemap.progress import Progress

from mapping.netstats import sorted_unique
from mapping.relatedness import RelGraph, from_pairs

log = logging.getLogger(__name__)

KINDS = ("dc", "edc", "bc", "cc")
BATCH_ROWS = 1 << 16


# ---------------------------------------------------------------- reading

def _batches(references, batch_size: int):
    cols = ["citing_id", "cited_id"]
    if isinstance(references, pa.Table):
        return references.num_rows, references.select(cols).to_batches(max_chunksize=batch_size)
    return references.count_rows(), references.to_batches(columns=cols, batch_size=batch_size)


class _Coder:
    """Integer codes of paper ids: focal ids 0..n_focal-1 (their position in `focal`), every other
    id n_focal + its position in `self.other` (ids appended as first met)."""

    def __init__(self, focal: pa.Array):
        self.focal, self.n_focal = focal, len(focal)
        self.other = pa.array([], focal.type)

    def focal_pos(self, ids: pa.Array) -> np.ndarray:
        if len(ids) == 0:
            return np.zeros(0, np.int64)
        return np.asarray(pc.fill_null(pc.index_in(ids, value_set=self.focal), -1).to_numpy(), np.int64)

    def encode_other(self, ids: pa.Array) -> np.ndarray:
        if len(ids) == 0:
            return np.zeros(0, np.int64)
        new = pc.unique(ids)
        if len(self.other):
            new = new.filter(pc.invert(pc.is_in(new, value_set=self.other)))
        if len(new):
            self.other = pa.concat_arrays([self.other, new])
        return self.n_focal + np.asarray(pc.index_in(ids, value_set=self.other).to_numpy(), np.int64)


def read_pairs(references, focal_ids, batch_size: int = BATCH_ROWS, chunk_rows: int | None = None):
    """Distinct (citing, cited) code pairs with at least one focal end, self-citations dropped.

    Returns (citing, cited, other_ids, counts): int64 arrays sorted by (citing, cited); the
    non-focal ids (code n_focal + k is other_ids[k]); the row counts for the graphs' info."""
    focal = focal_ids.combine_chunks() if isinstance(focal_ids, pa.ChunkedArray) else focal_ids
    if focal.null_count:
        raise ValueError("focal_ids holds nulls")
    if len(focal) and pc.count_distinct(focal).as_py() != len(focal):
        raise ValueError("focal_ids holds duplicates")
    coder = _Coder(focal)
    n_focal = len(focal)
    counts = {"references_read": 0, "unresolved": 0, "without_focal_end": 0}
    cit_parts: list[np.ndarray] = []
    ref_parts: list[np.ndarray] = []
    pending: list[pa.RecordBatch] = []

    def flush():
        if not pending:
            return
        t = pa.Table.from_batches(pending).combine_chunks()
        pending.clear()
        cit_ids, ref_ids = t.column("citing_id"), t.column("cited_id")
        if cit_ids.type != focal.type:
            cit_ids, ref_ids = cit_ids.cast(focal.type), ref_ids.cast(focal.type)
        ok = pc.and_(pc.is_valid(cit_ids), pc.is_valid(ref_ids))
        n_ok = pc.sum(ok).as_py() or 0
        counts["unresolved"] += t.num_rows - n_ok
        if n_ok < t.num_rows:
            cit_ids, ref_ids = cit_ids.filter(ok), ref_ids.filter(ok)
        both = pa.chunked_array(cit_ids.chunks + ref_ids.chunks, focal.type)
        pos = coder.focal_pos(both)
        a, b = pos[:len(cit_ids)], pos[len(cit_ids):]
        keep = (a >= 0) | (b >= 0)            # pairs between two non-focal papers serve no kind
        counts["without_focal_end"] += int(len(a) - keep.sum())
        idx = np.flatnonzero(keep)
        a, b = a[idx], b[idx]
        cit_ids, ref_ids = cit_ids.combine_chunks().take(idx), ref_ids.combine_chunks().take(idx)
        ma, mb = np.flatnonzero(a < 0), np.flatnonzero(b < 0)
        codes = coder.encode_other(pa.concat_arrays([cit_ids.take(ma), ref_ids.take(mb)]))
        a[ma], b[mb] = codes[:len(ma)], codes[len(ma):]
        cit_parts.append(a)
        ref_parts.append(b)

    total, batches = _batches(references, batch_size)
    with Progress("citation graphs: references", total, "references") as p:
        held = 0
        for batch in batches:
            pending.append(batch)
            held += batch.num_rows
            counts["references_read"] += batch.num_rows
            p.advance(batch.num_rows)
            if held >= (chunk_rows or max(n_focal, len(coder.other), 1 << 20)):
                flush()
                held = 0
        flush()
    cit = np.concatenate(cit_parts) if cit_parts else np.zeros(0, np.int64)
    ref = np.concatenate(ref_parts) if ref_parts else np.zeros(0, np.int64)
    del cit_parts, ref_parts
    N = n_focal + len(coder.other)
    if N and N > np.iinfo(np.int64).max // N:
        raise ValueError(f"{N:,} papers are too many for int64 pair keys")
    self_cite = cit == ref
    counts["self_citations"] = int(self_cite.sum())
    key = cit[~self_cite] * N + ref[~self_cite]
    del cit, ref, self_cite
    n_keys = len(key)
    key = sorted_unique(key)          # np.unique's hash path is ~10x slower here (mapping.netstats)
    counts["duplicates"] = int(n_keys - len(key))
    counts["distinct_pairs"] = int(len(key))
    return key // N, key % N, coder.other, counts


# ---------------------------------------------------------------- graphs

def _direct(name: str, cit: np.ndarray, ref: np.ndarray, n_focal: int, n: int, info: dict) -> RelGraph:
    """a_ij = c_ij / R_i + c_ji / R_j over the given distinct directed pairs (R_i = out-degree)."""
    R = np.bincount(cit, minlength=n).astype(np.float64)
    g = from_pairs(name, cit, ref, 1.0 / R[cit] if len(cit) else np.zeros(0), n_focal, n=n, combine="sum", **info)
    g.info["edges"] = g.m
    return g


def _cap(rows: np.ndarray, cols: np.ndarray, data: np.ndarray, k: int, n: int):
    """The k entries of each row (0..) with the largest data, ties to the lower column; rows with
    at most k entries are kept whole, the others sorted by one int64 key where it fits."""
    cnt = np.bincount(rows)
    if cnt.max() <= k:
        return rows, cols, data
    big = cnt[rows] > k
    r, c, d = rows[big], cols[big], data[big].astype(np.int64)
    dmax = int(d.max())
    if len(cnt) * (dmax + 1) * n < 2 ** 62:
        order = np.argsort((r * (dmax + 1) + (dmax - d)) * n + c)
    else:
        order = np.lexsort((c, -d, r))
    r, c, d = r[order], c[order], d[order]
    first = np.r_[0, np.cumsum(np.bincount(r, minlength=len(cnt)))[:-1]]
    keep = np.arange(len(r)) - first[r] < k
    small = ~big
    return (np.concatenate([rows[small], r[keep]]), np.concatenate([cols[small], c[keep]]),
            np.concatenate([data[small], d[keep].astype(data.dtype)]))


def _top_partners(A: sp.csr_matrix, k: int, block_products: int, name: str):
    """Row i's partners j ≠ i in A A^T with their counts, at most k a row (0 = all): the largest
    counts, ties to the lower j. Returns (src, dst, count, entries before the cap)."""
    n = A.shape[0]
    At = A.T.tocsr()
    cost = A @ np.diff(At.indptr).astype(np.int64)          # scalar products of each row of A A^T
    bounds, s = [0], 0
    csum = np.cumsum(cost)
    while s < n:                                           # blocks of about block_products products
        e = int(np.searchsorted(csum, (csum[s - 1] if s else 0) + block_products, side="right"))
        s = max(e, s + 1)
        bounds.append(min(s, n))
    src, dst, val = [], [], []
    before = 0
    with Progress(f"citation graphs: {name} products", int(cost.sum()), "products") as p:
        for s, e in zip(bounds[:-1], bounds[1:]):
            P = (A[s:e] @ At).tocsr()
            P.sum_duplicates()
            rows = np.repeat(np.arange(s, e, dtype=np.int64), np.diff(P.indptr))
            cols = P.indices.astype(np.int64)
            data = P.data
            off = rows != cols
            rows, cols, data = rows[off], cols[off], data[off]
            before += len(rows)
            if k and len(rows):
                rows, cols, data = _cap(rows - s, cols, data, k, n)
                rows += s
            src.append(rows)
            dst.append(cols)
            val.append(data.astype(np.float64))
            p.advance(int(cost[s:e].sum()))
    cat = lambda xs, t: np.concatenate(xs) if xs else np.zeros(0, t)   # noqa: E731
    return cat(src, np.int64), cat(dst, np.int64), cat(val, np.float64), before


def _coupling(name: str, rows: np.ndarray, cols: np.ndarray, n_focal: int, max_col: int | None,
              k: int, block_products: int, info: dict) -> RelGraph:
    """Coupling graph of focal `rows` through shared `cols` (distinct (row, col) pairs): columns
    with fewer than 2 rows serve nobody; those with more than `max_col` rows are dropped."""
    deg = np.bincount(cols)                                # rows of each column (codes < n nodes)
    info["columns"] = int((deg > 0).sum())
    use = deg >= 2
    if max_col:
        info["hub_columns_dropped"] = int((deg > max_col).sum())
        use &= deg <= max_col
    keep = use[cols]
    rows, newcol = rows[keep], np.cumsum(use)[cols[keep]] - 1
    d = deg[use].astype(np.float64)
    info["columns_used"] = int(use.sum())
    info["max_column_degree"] = int(d.max()) if len(d) else 0
    info["products"] = int((d * d).sum())
    log.info("%s: %s focal papers, %s shared columns (largest %s), %s scalar products",
             name, f"{n_focal:,}", f"{info['columns_used']:,}", f"{info['max_column_degree']:,}",
             f"{info['products']:,}")
    A = sp.csr_matrix((np.ones(len(rows), np.int32), (rows, newcol)), shape=(n_focal, int(use.sum())))
    src, dst, val, before = _top_partners(A, k, block_products, name)
    info["partner_entries"] = int(before)
    info["partner_entries_dropped_by_cap"] = int(before - len(src))
    g = from_pairs(name, src, dst, val, n_focal, combine="max", **info)
    g.info["edges"] = g.m
    return g


def citation_graphs(references, focal_ids: pa.Array, kinds=KINDS, *, edc_min_links: int = 2,
                    max_neighbours: int = 50, max_cited_by: int | None = None,
                    max_references: int | None = None, block_products: int = 5_000_000,
                    batch_size: int = BATCH_ROWS, chunk_rows: int | None = None,
                    **opts) -> dict[str, RelGraph]:
    """The citation relatedness graphs `kinds` (of "dc", "edc", "bc", "cc") on the papers
    `focal_ids` (node i = focal_ids[i]), from a references Dataset or Table (module docstring).

    edc_min_links: distinct focal papers a non-focal paper must have citation relations with to
        become an EDC node (2; `edc_min_citing` is accepted as its old name).
    max_neighbours: partners kept per focal paper in bc and cc (50; 0 = all).
    max_cited_by: bc leaves out references cited by more focal papers (None = none left out).
    max_references: cc leaves out citing papers with more focal references (None = none).
    block_products: scalar products per row block of the bc/cc products (memory of one block).
    """
    if "edc_min_citing" in opts:
        edc_min_links = opts.pop("edc_min_citing")
    if opts:
        raise TypeError(f"unknown options: {sorted(opts)}")
    bad = set(kinds) - set(KINDS)
    if bad:
        raise ValueError(f"unknown kinds {sorted(bad)}; choose from {KINDS}")
    cit, ref, other, counts = read_pairs(references, focal_ids, batch_size=batch_size, chunk_rows=chunk_rows)
    n_focal = len(focal_ids)
    counts["resolved"] = counts["references_read"] - counts["unresolved"]
    fc, fr = cit < n_focal, ref < n_focal
    counts["focal_focal_links"] = int((fc & fr).sum())
    out: dict[str, RelGraph] = {}
    for kind in kinds:
        info = dict(counts)
        if kind == "dc":
            both = fc & fr
            out[kind] = _direct("dc", cit[both], ref[both], n_focal, n_focal, info)
        elif kind == "edc":
            # non-focal papers linked to ≥ edc_min_links distinct focal papers, either direction
            x = np.where(fc, ref, cit)                     # the non-focal end of a focal/non-focal pair
            f = np.where(fc, cit, ref)
            mixed = fc != fr
            xk = sorted_unique(x[mixed] * n_focal + f[mixed]) // n_focal if n_focal else np.zeros(0, np.int64)
            starts = np.flatnonzero(np.r_[True, xk[1:] != xk[:-1]]) if len(xk) else np.zeros(0, np.int64)
            ux, cnt = xk[starts], np.diff(np.r_[starts, len(xk)])
            ext_codes = ux[cnt >= edc_min_links]
            ext_ids = other.take(pa.array(ext_codes - n_focal)) if len(ext_codes) else other.slice(0, 0)
            order = np.asarray(pc.sort_indices(ext_ids).to_numpy(), np.int64)
            ext_codes, ext_ids = ext_codes[order], ext_ids.take(pa.array(order))
            node = np.full(n_focal + len(other), -1, np.int64)
            node[:n_focal] = np.arange(n_focal)
            node[ext_codes] = n_focal + np.arange(len(ext_codes))
            nc, nr = node[cit], node[ref]
            ok = (nc >= 0) & (nr >= 0)     # (read_pairs left out the pairs between two non-focal papers)
            info.update(external_nodes=int(len(ext_codes)), external_links=int((ok & ~(fc & fr)).sum()),
                        edc_min_links=int(edc_min_links))
            g = _direct("edc", nc[ok], nr[ok], n_focal, n_focal + len(ext_codes), info)
            g.info["external_ids"] = ext_ids
            out[kind] = g
        elif kind == "bc":
            info.update(max_neighbours=max_neighbours, max_cited_by=max_cited_by)
            out[kind] = _coupling("bc", cit[fc], ref[fc], n_focal, max_cited_by, max_neighbours,
                                  block_products, info)
        else:
            info.update(max_neighbours=max_neighbours, max_references=max_references)
            out[kind] = _coupling("cc", ref[fr], cit[fr], n_focal, max_references, max_neighbours,
                                  block_products, info)
    return out
