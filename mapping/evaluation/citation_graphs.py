"""Citation-based relatedness graphs on the evaluated ("focal") papers, for comparing methods.

`read_citations(references, ids)` reads the references table once (citing_id and cited_id only, in
Arrow batches) into integer codes (`Citations`); `citation_graphs(citations, focal_ids)` builds up
to four `RelGraph`s (mapping.evaluation.relatedness) on the focal papers from them, nodes 0..n_focal-1 in the
order of `focal_ids` (METHODS.md §6.5), as often as there are focal sets (the evaluate stage's
criteria) without reading the table again; handed a table instead, it reads it first:

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

Scale: ids become integer codes by Arrow hash look-ups (`pc.index_in` against the given ids, e.g.
the vector store's; the other ids against a growing array of those met so far, looked up in chunks
at least as big as that array, so the hash-table builds cost no more than the look-ups). Each
distinct pair is one int64 key citing << 31 | cited (8 bytes; 16 during the final sort and
dedupe), the other ids stay Arrow strings. A focal set's pairs are picked by a scan of the keys
with a code -> node table (4 bytes a code) and renumbered: its memory is that of its own pairs.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from sciencemap.ids import positions_in
from sciencemap.progress import Progress

from mapping.evaluation.netstats import CHUNK, link_keys, sorted_unique
from mapping.evaluation.relatedness import RelGraph, from_pairs

log = logging.getLogger(__name__)

KINDS = ("dc", "edc", "bc", "cc")
BATCH_ROWS = 1 << 16
CODE_BITS = 31                # a pair's key is citing << 31 | cited: fixed before the ids are counted
CODE_MASK = (1 << CODE_BITS) - 1


# ---------------------------------------------------------------- reading

def _batches(references, batch_size: int):
    cols = ["citing_id", "cited_id"]
    if isinstance(references, pa.Table):
        return references.num_rows, references.select(cols).to_batches(max_chunksize=batch_size)
    return references.count_rows(), references.to_batches(columns=cols, batch_size=batch_size)


class _Coder:
    """Integer codes of paper ids: the given ids 0..len(ids)-1 (their position), every other id
    len(ids) + its position in `self.other` (ids appended as first met)."""

    def __init__(self, ids: pa.Array):
        self.ids, self.n_ids = ids, len(ids)
        self.other = pa.array([], ids.type)

    def encode_other(self, ids: pa.Array) -> np.ndarray:
        if len(ids) == 0:
            return np.zeros(0, np.int64)
        new = pc.unique(ids)
        if len(self.other):
            new = new.filter(pc.invert(pc.is_in(new, value_set=self.other)))
        if len(new):
            self.other = pa.concat_arrays([self.other, new])
        return self.n_ids + np.asarray(pc.index_in(ids, value_set=self.other).to_numpy(), np.int64)


@dataclass
class Citations:
    """The references table as integer codes, read once (`read_citations`) and shared by every
    graph built from it: the evaluate stage's direct-citation graph on the vector store and each
    criterion's citation relatedness graphs (`citation_graphs`, `focal_pairs`).

    Code c < len(ids) is ids[c] (the vector-store ids in row order, or any distinct ids); code
    len(ids) + k is other[k], an id of the table not in `ids`. `keys` holds each distinct (citing,
    cited) pair once as citing << CODE_BITS | cited (int64, sorted: by citing, then cited), self-
    citations dropped: 8 bytes a distinct pair, the other ids as Arrow strings."""
    ids: pa.Array
    other: pa.Array
    keys: np.ndarray
    counts: dict          # references_read, unresolved, self_citations, duplicates, distinct_pairs

    def pairs(self, chunk: int = CHUNK):
        """(citing, cited) int64 code arrays, `chunk` pairs at a time."""
        for s in range(0, len(self.keys), chunk):
            k = self.keys[s:s + chunk]
            yield k >> CODE_BITS, k & CODE_MASK

    def links_among_ids(self) -> np.ndarray:
        """Distinct undirected links between two papers of `ids` as sorted link keys lo · n + hi,
        n = len(ids) (mapping.evaluation.netstats.link_keys): the direct-citation graph on the vector store."""
        n = len(self.ids)
        links = np.empty(len(self.keys), np.int64)   # at most one link a pair; untouched pages cost nothing
        filled = 0
        for a, b in self.pairs():
            inside = (a < n) & (b < n)
            k = link_keys(a[inside], b[inside], n)
            links[filled:filled + len(k)] = k
            filled += len(k)
        return sorted_unique(links[:filled])

    def codes_of(self, ids: pa.Array) -> np.ndarray:
        """The code of each id (int64; -1: neither in `ids` nor in the table)."""
        code = positions_in(ids, self.ids)
        miss = np.flatnonzero(code < 0)
        if len(miss) and len(self.other):
            o = positions_in(ids.take(pa.array(miss)), self.other)
            code[miss] = np.where(o >= 0, len(self.ids) + o, -1)
        return code

    def focal_pairs(self, focal: pa.Array, chunk: int = CHUNK):
        """The distinct pairs with at least one end in `focal` (distinct ids), renumbered: focal
        papers 0..n_focal-1 in the order of `focal`, the other ends n_focal + k in the order of
        their codes. Returns (citing, cited, other_ids, counts): int64 arrays sorted by (citing,
        cited); the ids of the other ends (node n_focal + k is other_ids[k]); distinct_pairs (with
        a focal end) and without_focal_end (distinct pairs, for the graphs' info)."""
        n_ids = len(self.ids)
        n_focal = len(focal)
        code = self.codes_of(focal)
        node = np.full(n_ids + len(self.other), -1, np.int32 if n_focal < 2 ** 31 else np.int64)
        known = np.flatnonzero(code >= 0)
        node[code[known]] = known
        cit_parts, ref_parts, without = [], [], 0
        for a, b in self.pairs(chunk):
            fa, fb = node[a], node[b]
            keep = np.flatnonzero((fa >= 0) | (fb >= 0))
            without += len(a) - len(keep)
            fa, fb, a, b = fa[keep], fb[keep], a[keep], b[keep]
            cit_parts.append(np.where(fa >= 0, fa, -1 - a))        # other ends as -1 - code for now
            ref_parts.append(np.where(fb >= 0, fb, -1 - b))
        cit = np.concatenate(cit_parts) if cit_parts else np.zeros(0, np.int64)
        ref = np.concatenate(ref_parts) if ref_parts else np.zeros(0, np.int64)
        del cit_parts, ref_parts
        other_codes = sorted_unique(np.concatenate([-1 - cit[cit < 0], -1 - ref[ref < 0]]))
        for x in (cit, ref):
            o = x < 0
            x[o] = n_focal + np.searchsorted(other_codes, -1 - x[o])
        N = n_focal + len(other_codes)
        key = cit * N + ref                                      # distinct: the codes' pairs were
        del cit, ref
        key.sort()
        inside = other_codes < n_ids
        other_ids = pa.concat_arrays([self.ids.take(pa.array(other_codes[inside])),
                                      self.other.take(pa.array(other_codes[~inside] - n_ids))])
        return key // N, key % N, other_ids, {"distinct_pairs": int(len(key)), "without_focal_end": int(without)}


def read_citations(references, ids: pa.Array | pa.ChunkedArray, batch_size: int = BATCH_ROWS,
                   chunk_rows: int | None = None, with_an_end_in_ids: bool = False) -> Citations:
    """One pass over a references Dataset or Table (citing_id and cited_id only, in Arrow batches):
    every resolved (citing, cited) pair as codes (`Citations`), ids looked up `chunk_rows` rows at
    a time (default: at least as many as there are ids, known or met, so building the hash tables
    costs no more than the look-ups). Rows with a null id are counted as unresolved and skipped.
    `with_an_end_in_ids`: keep only the pairs with an end in `ids` (one focal set read alone: the
    other pairs serve it nothing, and the rows dropped are counted as `without_an_end_in_ids`)."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    coder = _Coder(ids)
    counts = {"references_read": 0, "unresolved": 0, "self_citations": 0}
    if with_an_end_in_ids:
        counts["without_an_end_in_ids"] = 0
    total, batches = _batches(references, batch_size)
    keys = np.empty(total, np.int64)           # untouched pages cost nothing: only the filled part is resident
    filled = 0
    pending: list[pa.RecordBatch] = []

    def flush():
        nonlocal filled
        if not pending:
            return
        t = pa.Table.from_batches(pending).combine_chunks()
        pending.clear()
        cit_ids, ref_ids = t.column("citing_id"), t.column("cited_id")
        if cit_ids.type != ids.type:
            cit_ids, ref_ids = cit_ids.cast(ids.type), ref_ids.cast(ids.type)
        ok = pc.and_(pc.is_valid(cit_ids), pc.is_valid(ref_ids))
        n_ok = pc.sum(ok).as_py() or 0
        counts["unresolved"] += t.num_rows - n_ok
        if n_ok < t.num_rows:
            cit_ids, ref_ids = cit_ids.filter(ok), ref_ids.filter(ok)
        cit_ids, ref_ids = cit_ids.combine_chunks(), ref_ids.combine_chunks()
        pos = positions_in(pa.chunked_array([cit_ids, ref_ids], ids.type), ids)
        a, b = pos[:len(cit_ids)], pos[len(cit_ids):]
        if with_an_end_in_ids:
            keep = np.flatnonzero((a >= 0) | (b >= 0))
            counts["without_an_end_in_ids"] += len(a) - len(keep)
            a, b = a[keep], b[keep]
            cit_ids, ref_ids = cit_ids.take(pa.array(keep)), ref_ids.take(pa.array(keep))
        ma, mb = np.flatnonzero(a < 0), np.flatnonzero(b < 0)
        codes = coder.encode_other(pa.concat_arrays([cit_ids.take(pa.array(ma)), ref_ids.take(pa.array(mb))]))
        a[ma], b[mb] = codes[:len(ma)], codes[len(ma):]
        if coder.n_ids + len(coder.other) > CODE_MASK:
            raise ValueError(f"more than {CODE_MASK:,} distinct paper ids: too many for the citation codes")
        own = a == b
        counts["self_citations"] += int(own.sum())
        k = (a[~own] << CODE_BITS) | b[~own]
        keys[filled:filled + len(k)] = k
        filled += len(k)

    with Progress("citations: references", total, "references") as p:
        held = 0
        for batch in batches:
            pending.append(batch)
            held += batch.num_rows
            counts["references_read"] += batch.num_rows
            p.advance(batch.num_rows)
            if held >= (chunk_rows or max(coder.n_ids, len(coder.other), 1 << 20)):
                flush()
                held = 0
        flush()
    # Arrow's allocator keeps the pages of the freed batches and hash tables (~160 MB at 30M references)
    pa.default_memory_pool().release_unused()
    distinct = sorted_unique(keys[:filled])   # np.unique's hash path is ~10x slower here (mapping.evaluation.netstats)
    del keys
    counts["duplicates"] = int(filled - len(distinct))
    counts["distinct_pairs"] = int(len(distinct))
    return Citations(ids, coder.other, distinct, counts)


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


def citation_graphs(references, focal_ids: pa.Array | pa.ChunkedArray, kinds=KINDS, *, edc_min_links: int = 2,
                    max_neighbours: int = 50, max_cited_by: int | None = None,
                    max_references: int | None = None, block_products: int = 5_000_000,
                    batch_size: int = BATCH_ROWS, chunk_rows: int | None = None,
                    **opts) -> dict[str, RelGraph]:
    """The citation relatedness graphs `kinds` (of "dc", "edc", "bc", "cc") on the papers
    `focal_ids` (node i = focal_ids[i]), from `Citations` read once for several focal sets, or
    from a references Dataset or Table, read here (module docstring).

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
    focal = focal_ids.combine_chunks() if isinstance(focal_ids, pa.ChunkedArray) else focal_ids
    if focal.null_count:
        raise ValueError("focal_ids holds nulls")
    if len(focal) and pc.count_distinct(focal).as_py() != len(focal):
        raise ValueError("focal_ids holds duplicates")
    citations = references if isinstance(references, Citations) else \
        read_citations(references, focal, batch_size=batch_size, chunk_rows=chunk_rows, with_an_end_in_ids=True)
    cit, ref, other, focal_counts = citations.focal_pairs(focal)
    counts = {**citations.counts, **focal_counts}
    counts["without_focal_end"] += counts.pop("without_an_end_in_ids", 0)   # rows dropped as read
    n_focal = len(focal)
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
