"""The mapping stages' vectors: one memory-mapped matrix of unit rows, paper ids kept once beside it.

The embed stage writes Parquet shards (sciencemap.embeddings); the mapping stages need random
access to n × d unit vectors without holding them in memory (33M × 768 float32 is 101 GB). So the
first mapping stage converts the shards into a run's `vectors/` directory, a shard a thread on
every core, each written at its own rows' offset:

- `vectors.npy`: an n × d NumPy array (float32 or float16, chosen by the caller and recorded),
  rows L2-normalised at write time (a zero row stays zero), opened with `np.load(mmap_mode="r")`;
- `ids.parquet`: one column `paper_id`, row i = the paper of matrix row i (= shard order);
- `meta.json` (contracts.VECTORS_META): rows, dim, dtype, normalised, and the source fingerprint
  (the shards' names, sizes and modification times), so a changed embed run is converted again.

Row numbers are the integer ids every later table uses (edges, clusters).
Memory: one shard's vectors a thread, plus the id hash set of the duplicate check.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sciencemap.contracts import VECTORS_DTYPES, VECTORS_IDS, VECTORS_MATRIX, VECTORS_META
from sciencemap.embeddings import embedding_shards, embeddings_dir
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import atomic_dir, write_json_atomic

FORMAT = 1


BLOCK_BYTES = 64 * 2**20          # float32 bytes of one block of vector rows


def rows_per_block(dim: int, itemsize: int = 4, budget: int = BLOCK_BYTES) -> int:
    """Rows per block so that one block of `dim` values of `itemsize` bytes stays under `budget`."""
    return max(1, int(budget // max(1, dim * itemsize)))


def iter_blocks(n: int, size: int):
    """(lo, hi) of consecutive blocks of `size` rows over n rows."""
    for lo in range(0, n, size):
        yield lo, min(n, lo + size)


def unit_rows(X: np.ndarray) -> np.ndarray:
    """Unit rows (float32); zero rows stay zero."""
    X = np.asarray(X, dtype=np.float32)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(n > 0, n, 1.0)


def _store_file(X: np.ndarray) -> str | None:
    """The file behind X when X is a whole memory-mapped .npy matrix (a slice of a memmap keeps
    its parent's offset, so only the whole matrix may be read by file position)."""
    fn = getattr(X, "filename", None)
    if isinstance(X, np.memmap) and fn and X.ndim == 2 and X.flags.c_contiguous \
            and os.path.getsize(fn) == X.offset + X.nbytes:
        return fn
    return None


def _pread_exact(fd: int, view: memoryview, pos: int, fn: str) -> None:
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], pos + got)
        if n <= 0:
            raise UserError(f"{fn} ends early; re-run the knn stage (it rebuilds the vector store)")
        got += n


def read_rows(X: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Rows lo..hi of X as a new float32 array. From the vector store's memory map they are read
    from the file (pread), so the pages are not mapped into this process (its RSS counts them)."""
    lo, hi = int(lo), int(max(lo, hi))
    fn = _store_file(X)
    if fn is None:
        return np.array(X[lo:hi], dtype=np.float32)
    out = np.empty((hi - lo, X.shape[1]), X.dtype)
    if out.size:
        fd = os.open(fn, os.O_RDONLY)
        try:
            _pread_exact(fd, memoryview(out).cast("B"), X.offset + lo * X.shape[1] * X.dtype.itemsize, fn)
        finally:
            os.close(fd)
    return out.astype(np.float32, copy=False)


def take_rows(X: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Rows idx (any order, repeats allowed) of X as float32, read like read_rows: a few thousand
    scattered rows through the map would map most of the file (the kernel maps 64 KB around each
    faulting page)."""
    idx = np.asarray(idx, dtype=np.int64)
    fn = _store_file(X)
    if fn is None or len(idx) == 0:
        return np.asarray(X[idx], dtype=np.float32).reshape(len(idx), X.shape[1])
    uniq, inverse = np.unique(idx, return_inverse=True)   # sorted: file order, each row read once
    buf = np.empty((len(uniq), X.shape[1]), X.dtype)
    mv = memoryview(buf).cast("B")
    rb = buf.shape[1] * buf.itemsize
    fd = os.open(fn, os.O_RDONLY)
    try:
        for j, r in enumerate(uniq.tolist()):
            _pread_exact(fd, mv[j * rb:(j + 1) * rb], X.offset + r * rb, fn)
    finally:
        os.close(fd)
    return buf[inverse.ravel()].astype(np.float32, copy=False)


def _map_of(X: np.ndarray):
    """The mmap.mmap behind a NumPy memory map (np.load(mmap_mode=...)), or None."""
    m = getattr(X, "_mmap", None)
    return m if m is not None and hasattr(m, "madvise") else None


def gather_rows(X: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Rows idx (any order, repeats allowed) of X as float32, gathered in one vectorised read.

    Through the memory map (NumPy fancy indexing: no Python per row, and no GIL held, so worker
    threads gather in parallel), with MADV_RANDOM so that each row faults in its own pages only,
    not the 64 KB read-ahead around them. The pages stay mapped into this process (its RSS counts
    them, as shared file pages) until release_rows(X); take_rows reads without mapping, row by row."""
    idx = np.asarray(idx, dtype=np.int64)
    m = _map_of(X)
    if m is not None and not getattr(X, "_sciencemap_random", False):
        import mmap

        m.madvise(mmap.MADV_RANDOM)
        X._sciencemap_random = True
    return np.asarray(X[idx], dtype=np.float32).reshape(len(idx), X.shape[1])


def release_rows(X: np.ndarray) -> None:
    """Drop this process's mapping of the pages gather_rows touched (MADV_DONTNEED on the map):
    RSS goes back down; the pages stay in the page cache for the next read."""
    m = _map_of(X)
    if m is not None:
        import mmap

        m.madvise(mmap.MADV_DONTNEED)


@dataclass
class Vectors:
    """An opened vector store: `X` is the read-only memory map (n × dim, unit rows)."""
    path: Path
    X: np.ndarray
    meta: dict

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def dim(self) -> int:
        return int(self.X.shape[1])

    def ids(self) -> np.ndarray:
        """Paper ids in row order (object array); read on demand, it is the big part at scale."""
        return pq.read_table(self.path / VECTORS_IDS).column("paper_id").to_numpy(zero_copy_only=False)

    def ids_arrow(self) -> pa.Array:
        return pq.read_table(self.path / VECTORS_IDS).column("paper_id").combine_chunks()

    def block(self, lo: int, hi: int) -> np.ndarray:
        """Rows lo..hi as a new float32 array (widened from float16), the form FAISS and BLAS take;
        read from the file, so the map's pages do not pile up in this process's RSS."""
        return read_rows(self.X, lo, hi)


def source_fingerprint(shards: list[Path]) -> str:
    h = hashlib.sha256()
    for s in shards:
        st = s.stat()
        h.update(f"{s.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _read_meta(d: Path) -> dict | None:
    try:
        return json.loads((d / VECTORS_META).read_text())
    except (OSError, ValueError):
        return None


def open_vectors(where: RunLayout | str | os.PathLike) -> Vectors:
    """Open a finished vector store (a RunLayout, or the `vectors/` directory itself)."""
    d = where.vectors_dir if isinstance(where, RunLayout) else Path(where)
    meta = _read_meta(d)
    if meta is None or not (d / VECTORS_MATRIX).is_file():
        raise UserError(f"no vectors in {d}; run the knn stage (it converts the embeddings) first")
    X = np.load(d / VECTORS_MATRIX, mmap_mode="r")
    if X.shape != (meta["rows"], meta["dim"]):
        raise UserError(f"{d / VECTORS_MATRIX} has shape {X.shape}, its {VECTORS_META} says "
                        f"({meta['rows']}, {meta['dim']}); re-run the knn stage")
    return Vectors(d, X, meta)


def ensure_vectors(layout: RunLayout, dtype: str = "float32", log=None) -> Vectors:
    """The run's vector store, converted from its embeddings when missing or out of date."""
    if dtype not in VECTORS_DTYPES:
        raise UserError(f"vector dtype {dtype!r} is unknown; use one of {', '.join(VECTORS_DTYPES)}")
    src = embeddings_dir(layout)
    shards, _ = embedding_shards(src)
    fingerprint = source_fingerprint(shards)
    d = layout.vectors_dir
    meta = _read_meta(d)
    if meta and meta.get("source") == fingerprint and meta.get("dtype") == dtype \
            and meta.get("format") == FORMAT and (d / VECTORS_MATRIX).is_file():
        return open_vectors(d)
    write_vectors(shards, d, dtype, fingerprint, log)
    return open_vectors(d)


def _pwrite_all(fd: int, data: memoryview, pos: int) -> None:
    """All of `data` at byte `pos` of fd (pwrite may write less than it was given)."""
    while len(data):
        done = os.pwrite(fd, data, pos)
        data, pos = data[done:], pos + done


def convert_workers(workers: int = 0) -> int:
    """Threads that convert shards (0 = one per core)."""
    return workers if workers > 0 else (os.cpu_count() or 1)


def _in_shard_order(fn, count: int, workers: int):
    """fn(0), fn(1), ... in that order, computed in up to `workers` threads with at most
    2 · workers calls started ahead of the one being returned (each holds one shard)."""
    if workers <= 1 or count <= 1:
        yield from (fn(i) for i in range(count))
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        ahead, nxt = deque(), 0
        try:
            while ahead or nxt < count:
                while nxt < count and len(ahead) < 2 * workers:
                    ahead.append(pool.submit(fn, nxt))
                    nxt += 1
                yield ahead.popleft().result()
        finally:
            for fut in ahead:
                fut.cancel()


def write_vectors(shards: list[Path], dest: Path, dtype: str, fingerprint: str, log=None,
                  workers: int = 0) -> dict:
    """Two passes: the shards' row counts from their footers, then each shard read, normalised and
    written at its own rows' offset by `workers` threads (0 = one per core: Arrow's reads and
    NumPy's arithmetic run without the GIL), the ids written in shard order as they come back."""
    rows, dim, counts = 0, None, []
    for s in shards:
        schema = pq.read_schema(s)
        vt = schema.field("vector").type
        if not pa.types.is_fixed_size_list(vt) or (dim is not None and vt.list_size != dim):
            raise UserError(f"{s}: column 'vector' must be a fixed-size list of one dim for every shard; "
                            "shards come from different runs: re-run the embed stage")
        dim = vt.list_size
        counts.append(pq.ParquetFile(s).metadata.num_rows)
        rows += counts[-1]
    if dim is None:
        raise UserError(f"no embedding shards in {shards}")
    starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).tolist()
    row_bytes = dim * np.dtype(dtype).itemsize
    with atomic_dir(dest) as tmp:
        ids_writer = pq.ParquetWriter(tmp / VECTORS_IDS, pa.schema([("paper_id", pa.string())]))
        # Written with plain writes (a header, then each shard's rows at their offset), not through
        # a memory map: the pages a map writes count in this process's RSS until they are flushed
        # (50 GB at 33M).
        with open(tmp / VECTORS_MATRIX, "wb") as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                    "shape": (rows, dim)})
            f.flush()
            base, fd = f.tell(), f.fileno()

            def convert(i: int) -> pa.Array:
                try:
                    t = pq.read_table(shards[i], columns=["paper_id", "vector"])
                except (OSError, pa.ArrowException) as e:
                    raise UserError(f"{shards[i]}: unreadable embedding shard ({e}); re-run the embed stage") from None
                if len(t) != counts[i]:
                    raise UserError(f"{shards[i]} changed while the vector store was written; run again")
                flat = t.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
                block = np.ascontiguousarray(unit_rows(flat.reshape(len(t), dim)).astype(dtype, copy=False))
                _pwrite_all(fd, memoryview(block).cast("B"), base + starts[i] * row_bytes)
                return t.column("paper_id").combine_chunks()

            for i, ids in enumerate(_in_shard_order(convert, len(shards), convert_workers(workers))):
                ids_writer.write_table(pa.table({"paper_id": ids}))
                if log:
                    log(f"vectors: {starts[i + 1]:,}/{rows:,} rows converted")
            os.ftruncate(fd, base + rows * row_bytes)   # the size a matrix without rows (or shards) has
        ids_writer.close()
        all_ids = pq.read_table(tmp / VECTORS_IDS).column("paper_id")
        if pc.count_distinct(all_ids).as_py() != len(all_ids):
            raise UserError(f"duplicate paper_id values in {shards[0].parent}; remove stale shards and "
                            "re-run the embed stage")
        meta = {"format": FORMAT, "rows": rows, "dim": dim, "dtype": dtype, "normalised": True,
                "source": fingerprint, "source_dir": str(shards[0].parent)}
        write_json_atomic(tmp / VECTORS_META, meta)
    return meta
