"""Reading the inputs of the render stage at scale: vector blocks, cluster labels, paper metadata by row.

Everything here is keyed by the vector store's row number (sciencemap.vectors): row i of
`vectors.npy` is paper i. Nothing builds a whole-table pandas frame or per-paper Python objects
beyond one batch:

- vector blocks come from sciencemap.vectors.read_rows (a plain file read, so scanning a 100 GB
  store does not leave its pages mapped into this process);
- `cluster_resolutions` / `cluster_labels` read the clusters table's (row, resolution, cluster)
  columns, one resolution at a time, into an int32 label per row (-1 = not clustered);
- `load_row_meta` streams the papers table once, batch by batch, joins it to the rows through
  paper_id (Arrow's hash join, `pc.index_in`, once) and keeps per row only what the topics and the
  map need: year (float32), a source code, whether the paper is a cited title only, whether it has
  a title, the paper × field matrix (from the Arrow list offsets) and the paper × title-word matrix
  (mapping.topics.TitleWords: one vocabulary for every resolution);
- `read_titles` fetches the few titles the HTML map shows, by papers-table index.

Memory at 33M papers: ~17 bytes per row of arrays, the id hash join (~2 × the ids' bytes, freed
before the metadata pass), the word matrix (8 bytes per distinct title word of a paper) and the
field matrix (8 bytes per field of a paper).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import scipy.sparse as sp

from sciencemap.layout import RunLayout
from sciencemap.progress import Progress
from sciencemap.runtime import UserError
from sciencemap.storage import require_table, table_files
from sciencemap.text import clean_text, clean_texts

# ---------------------------------------------------------------- clusters

def _clusters_dataset(layout: RunLayout) -> ds.Dataset:
    path = require_table(layout.table("clusters"), "run the cluster stage first")
    d = ds.dataset([str(p) for p in table_files(path)], format="parquet")
    if "row" not in d.schema.names:
        raise UserError(f"{path} has no `row` column (written by an older cluster stage); re-run the cluster stage")
    return d


def cluster_resolutions(layout: RunLayout) -> list[float]:
    """The resolutions in the clusters table (scanned batch by batch)."""
    seen: set[float] = set()
    for b in _clusters_dataset(layout).to_batches(columns=["resolution"]):
        seen.update(pc.unique(b.column(0)).to_pylist())
    return sorted(r for r in seen if r is not None)


def cluster_labels(layout: RunLayout, resolution: float, n: int) -> np.ndarray:
    """int32 cluster per vector row at one resolution; -1 where the row is not clustered."""
    out = np.full(n, -1, np.int32)
    d = _clusters_dataset(layout)
    for b in d.to_batches(columns=["row", "cluster"], filter=ds.field("resolution") == resolution):
        rows = b.column(0).to_numpy(zero_copy_only=False)
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            raise UserError(f"the clusters table has rows outside the vector store's 0..{n - 1}; "
                            "re-run the cluster stage on this run's vectors")
        out[rows] = b.column(1).to_numpy(zero_copy_only=False)
    return out


# ---------------------------------------------------------------- papers, by vector row

@dataclass
class RowMeta:
    """Paper metadata aligned to the vector rows (row i = vector-store row i)."""
    n: int
    paper_of_row: np.ndarray     # int64: the row's papers-table index (first occurrence), -1 = no metadata
    year: np.ndarray             # float32, NaN = no year
    source: np.ndarray           # int32 code into `sources`, -1 = no source
    sources: list[str]
    cited_only: np.ndarray       # bool: no record file of its own (source_file null) or no metadata
    has_title: np.ndarray        # bool: a non-blank title
    fields: sp.csr_matrix        # rows × categories, 0/1 (int32)
    categories: list[str]
    words: sp.csr_matrix         # papers-table rows × title words, 0/1 (int32), one vocabulary
    vocab: np.ndarray            # the words (object array), sorted = the columns of `words`
    word_row: np.ndarray         # int64 per papers-table row: its vector row, -1 = none (duplicate / no vector)
    papers_files: list
    columns: dict                # name -> float64 per row (NaN = none): papers-table columns the overlays read

    @property
    def without_metadata(self) -> np.ndarray:
        return self.paper_of_row < 0


def _papers_files(layout: RunLayout) -> list:
    files = table_files(require_table(layout.table("papers"), "run the ingest stage first"))
    if not files:
        raise UserError(f"{layout.table('papers')} has no Parquet files; re-run the ingest stage")
    return files


def _iter_papers(files, columns: list[str], batch_size: int):
    """(offset, RecordBatch) over the papers table in file order (the order pq.read_table gives)."""
    off = 0
    for f in files:
        pf = pq.ParquetFile(f)
        for b in pf.iter_batches(batch_size=batch_size, columns=columns):
            yield off, b
            off += b.num_rows


def join_rows(paper_ids: pa.ChunkedArray | pa.Array, row_ids: pa.Array, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row_of_paper, paper_of_row): each papers-table row's vector row (-1 none, and -1 for a
    repeated paper_id after its first occurrence) and each vector row's papers-table index."""
    idx = pc.index_in(paper_ids, value_set=row_ids)
    if isinstance(idx, pa.ChunkedArray):
        idx = idx.combine_chunks()
    valid = idx.is_valid().to_numpy(zero_copy_only=False)
    vrow = idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    p_idx = np.flatnonzero(valid)
    rows, first = np.unique(vrow[p_idx], return_index=True)     # first occurrence of each row
    row_of_paper = np.full(len(vrow), -1, np.int64)
    row_of_paper[p_idx[first]] = rows
    paper_of_row = np.full(n, -1, np.int64)
    paper_of_row[rows] = p_idx[first]
    return row_of_paper, paper_of_row


class _Codes:
    """Global integer codes for the distinct strings of a column, batch by batch (few distinct values)."""

    def __init__(self):
        self.index: dict[str, int] = {}

    def encode(self, arr: pa.Array) -> np.ndarray:
        enc = pc.dictionary_encode(arr)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks()
        local = np.array([self.index.setdefault(v, len(self.index)) for v in enc.dictionary.to_pylist()] or [0],
                         np.int32)
        codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        return np.where(codes >= 0, local[np.maximum(codes, 0)], -1).astype(np.int32)


def load_row_meta(layout: RunLayout, row_ids: pa.Array, batch_size: int = 100_000) -> RowMeta:
    """The papers table, joined to the vector rows through paper_id, streamed once (see the module doc)."""
    from mapping.overlays import paper_columns
    from mapping.topics import FieldCollector, TitleWords

    n = len(row_ids)
    files = _papers_files(layout)
    schema = pq.read_schema(files[0])
    extra = [c for c in paper_columns() if c not in ("year", "fields")]
    need = ["paper_id", "title", "year", "fields", "source", "source_file", *extra]
    missing = [c for c in need if c not in schema.names]
    if missing:
        raise UserError(f"{layout.table('papers')} lacks columns {missing}; re-run the ingest stage")
    pids = pq.read_table(files[0], columns=["paper_id"]).column(0) if len(files) == 1 else \
        pa.chunked_array([pq.read_table(f, columns=["paper_id"]).column(0) for f in files])
    row_of_paper, paper_of_row = join_rows(pids, row_ids, n)
    del pids
    year = np.full(n, np.nan, np.float32)
    source = np.full(n, -1, np.int32)
    cited_only = np.ones(n, bool)
    has_title = np.zeros(n, bool)
    columns = {c: np.full(n, np.nan) for c in extra}
    src_codes = _Codes()
    fc = FieldCollector()
    tw = TitleWords()
    with Progress("render: papers table", len(row_of_paper), "papers") as prog:
        for off, b in _iter_papers(files, need[1:], batch_size):
            rows = row_of_paper[off:off + b.num_rows]
            sel = rows >= 0
            r = rows[sel]
            y = b.column("year").cast(pa.float32()).to_numpy(zero_copy_only=False)
            year[r] = y[sel]
            source[r] = src_codes.encode(b.column("source"))[sel]
            cited_only[r] = b.column("source_file").is_null().to_numpy(zero_copy_only=False)[sel]
            docs = clean_texts(b.column("title").to_pylist())     # titles become Python strings one batch at a time
            has_title[r] = np.fromiter(map(bool, docs), bool, len(docs))[sel]
            tw.add(docs)
            fc.add(b.column("fields"), rows)
            for c in extra:
                columns[c][r] = b.column(c).cast(pa.float64()).to_numpy(zero_copy_only=False)[sel]
            prog.advance(b.num_rows)
    fields, categories = fc.finish(n)
    words, vocab = tw.finish()
    sources = [None] * len(src_codes.index)
    for s, i in src_codes.index.items():
        sources[i] = s
    return RowMeta(n=n, paper_of_row=paper_of_row, year=year, source=source, sources=sources,
                   cited_only=cited_only, has_title=has_title, fields=fields, categories=categories,
                   words=words, vocab=vocab, word_row=row_of_paper, papers_files=files, columns=columns)


def read_titles(files, paper_index: np.ndarray, batch_size: int = 200_000) -> dict[int, str]:
    """Clean titles of the given papers-table indices (a pass over the title column only)."""
    want = np.unique(np.asarray(paper_index, np.int64))
    want = want[want >= 0]
    out: dict[int, str] = {}
    if not len(want):
        return out
    for off, b in _iter_papers(files, ["title"], batch_size):
        lo, hi = np.searchsorted(want, [off, off + b.num_rows])
        if hi > lo:
            local = want[lo:hi] - off
            for i, t in zip(want[lo:hi].tolist(), b.column(0).take(pa.array(local)).to_pylist()):
                out[i] = clean_text(t)
        if hi >= len(want):
            break
    return out
