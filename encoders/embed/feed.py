"""What the embed stage feeds the model: the papers table, streamed one shard at a time.

The table is never held in memory. Shard k is the contiguous input rows
[k * shard_size, (k + 1) * shard_size) in input order (files sorted by name, rows in file order),
so the assignment is global and deterministic without a sort: a resumed run or another rank
computes the same shards. A paper appears in exactly one shard; duplicates of an earlier paper_id
are dropped (first row wins), found by one streamed pass over the paper_id column.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.runtime import UserError
from sciencemap.storage import require_table, table_files
from sciencemap.text import paper_text

PAPER_COLUMNS = ["paper_id", "title", "abstract"]


@dataclass
class InputPlan:
    """The papers table as an ordered list of files; rows are addressed by a global index."""

    root: Path
    files: list[Path]
    row_groups: list[list[int]]          # rows per row group, per file
    dup_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # sorted
    fingerprint: dict = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        return int(sum(sum(g) for g in self.row_groups))

    def n_shards(self, shard_size: int) -> int:
        return (self.n_rows + shard_size - 1) // shard_size

    def shard_rows(self, k: int, shard_size: int) -> tuple[int, int]:
        """Shard k's input rows [lo, hi)."""
        return k * shard_size, min(self.n_rows, (k + 1) * shard_size)

    def read_rows(self, lo: int, hi: int, columns: list[str]) -> pa.Table:
        """Rows [lo, hi) in input order, reading only the row groups that overlap."""
        parts, start = [], 0
        for f, groups in zip(self.files, self.row_groups):
            g_start, reader = start, None
            for g, n in enumerate(groups):
                g_end = g_start + n
                if g_end > lo and g_start < hi:
                    reader = reader or pq.ParquetFile(f)  # one footer read per file, not per row group
                    t = reader.read_row_group(g, columns=columns)
                    a, b = max(lo, g_start) - g_start, min(hi, g_end) - g_start
                    parts.append(t.slice(a, b - a))
                g_start = g_end
            start = g_start
            if start >= hi:
                break
        if not parts:
            return pa.table({c: pa.array([], pa.string()) for c in columns})
        return pa.concat_tables(parts, promote_options="permissive")


def _id_hashes(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two independent 64-bit hashes per id (nulls hash to 0 and are flagged)."""
    valid = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    obj = values.fill_null("").to_numpy(zero_copy_only=False).astype(object)
    h1 = pd.util.hash_array(obj, categorize=False, hash_key="sciencemap-emb-1")
    h2 = pd.util.hash_array(obj, categorize=False, hash_key="sciencemap-emb-2")
    return np.where(valid, h1, 0).astype(np.uint64), np.where(valid, h2, 0).astype(np.uint64), valid


def plan_input(path: Path) -> InputPlan:
    """List the files, count rows from the footers, and stream the paper_id column once: the
    duplicate rows (a paper_id seen on an earlier row) and a hash of all ids for the fingerprint.
    Memory: 17 bytes per row (two 64-bit hashes + a flag), not the texts."""
    files = table_files(require_table(path, "run the ingest stage first"))
    groups, described, h1s, h2s, valids = [], [], [], [], []
    for f in files:  # one open per file: footer, schema check, then its paper_id column
        reader = pq.ParquetFile(f)
        md = reader.metadata
        missing = set(PAPER_COLUMNS) - set(reader.schema_arrow.names)
        if missing:
            raise UserError(f"{f} lacks column(s) {sorted(missing)}; the papers table must have "
                            "paper_id, title and abstract (re-run the ingest stage)")
        groups.append([md.row_group(g).num_rows for g in range(md.num_row_groups)])
        described.append([str(f.relative_to(path)) if f != path else f.name, f.stat().st_size, md.num_rows])
        for batch in reader.iter_batches(batch_size=1 << 16, columns=["paper_id"]):
            a, b, v = _id_hashes(batch.column(0))
            h1s.append(a), h2s.append(b), valids.append(v)
    h1 = np.concatenate(h1s) if h1s else np.zeros(0, np.uint64)
    h2 = np.concatenate(h2s) if h2s else np.zeros(0, np.uint64)
    valid = np.concatenate(valids) if valids else np.zeros(0, bool)
    rows = np.flatnonzero(valid)
    _, first = np.unique(h1[rows], return_index=True)
    later = np.ones(len(rows), bool)
    later[first] = False
    dup = rows[later]
    if len(dup):  # confirm with the second hash: a 64-bit collision must not drop a distinct paper
        first_row = dict(zip(h1[rows[first]].tolist(), rows[first].tolist()))
        dup = np.array([r for r in dup.tolist() if h2[first_row[int(h1[r])]] == h2[r]], np.int64)
    ids_hash = hashlib.sha256(h1.tobytes() + h2.tobytes() + valid.tobytes()).hexdigest()
    plan = InputPlan(root=path, files=files, row_groups=groups, dup_rows=np.sort(dup).astype(np.int64))
    plan.fingerprint = {"files": described, "n_rows": plan.n_rows, "ids_sha256": ids_hash}
    return plan


@dataclass
class ShardWork:
    """One shard's papers, ready for the model."""

    k: int
    lo: int
    hi: int
    ids: list[str]                 # kept papers, input order
    token_ids: list[list[int]]
    skipped: list[dict]            # {"row", "paper_id", "reason"} per dropped row
    content_sha256: str            # over the kept rows' (paper_id, title, abstract) as read

    @property
    def tokens(self) -> int:
        return sum(len(x) for x in self.token_ids)


def prepare_shard(plan: InputPlan, enc, k: int, shard_size: int) -> ShardWork:
    """Read shard k's rows, drop those that cannot be embedded (null or repeated paper_id, no
    text: None, NaN and blank titles/abstracts count as missing) and tokenize the rest with `enc`."""
    lo, hi = plan.shard_rows(k, shard_size)
    t = plan.read_rows(lo, hi, PAPER_COLUMNS)
    pids, titles, abstracts = (t[c].to_pylist() for c in PAPER_COLUMNS)
    dups = set(plan.dup_rows[np.searchsorted(plan.dup_rows, lo):np.searchsorted(plan.dup_rows, hi)].tolist())
    ids, texts, skipped = [], [], []
    h = hashlib.sha256()
    for i, (pid, ti, ab) in enumerate(zip(pids, titles, abstracts)):
        text = paper_text(ti, ab, enc.sep)
        if pid is None:
            skipped.append({"row": lo + i, "paper_id": None, "reason": "null paper_id"})
        elif lo + i in dups:
            skipped.append({"row": lo + i, "paper_id": pid, "reason": "duplicate paper_id"})
        elif not text:
            skipped.append({"row": lo + i, "paper_id": pid, "reason": "no title and no abstract"})
        else:
            ids.append(pid)
            texts.append(text)
            h.update(json.dumps([pid, ti, ab]).encode())
    return ShardWork(k, lo, hi, ids, enc.token_ids(texts), skipped, h.hexdigest())
