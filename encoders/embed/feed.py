"""What the embed stage feeds the model: the papers table, streamed chunk by chunk, read, tokenized,
bucketed by length and padded into batches ahead of the forward.

The table is never held in memory. Shard k is the contiguous input rows
[k * shard_size, (k + 1) * shard_size) in input order (files sorted by name, rows in file order),
so the assignment is global and deterministic without a sort: a resumed run or another rank
computes the same shards. A paper appears in exactly one shard; duplicates of an earlier paper_id
are dropped (first row wins), found by one streamed pass over the paper_id column, and so are rows
with `mapped` false (a "train" input's paper; contracts: null or no column = mapped).

A shard is prepared in chunks of `chunk_rows` rows (the unit of work of a feed worker). Inside a
chunk the documents are sorted by token length and cut into batches of at most `batch_size`
documents and `max_tokens` padded tokens, so that padding stays small; each batch carries the
positions of its documents in the chunk, so the vectors go back into input order on the device.
The feed runs ahead of the forward, in a thread (workers=0: the tokenizer's own threads do the
tokenizing) or in `workers` processes (a torch DataLoader: chunks come back in order, pinned for
non-blocking copies to the GPU).
"""
from __future__ import annotations

import hashlib
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from encoders.model import pad_rows, token_ids
from sciencemap.runtime import UserError
from sciencemap.storage import require_table, table_files
from sciencemap.text import paper_text

PAPER_COLUMNS = ["paper_id", "title", "abstract"]
MAPPED_COLUMN = "mapped"
NOT_MAPPED_REASON = "not mapped (a train-only paper, or a cited-only paper under cited_only_min_citations)"


@dataclass
class InputPlan:
    """The papers table as an ordered list of files; rows are addressed by a global index."""

    root: Path
    files: list[Path]
    row_groups: list[list[int]]          # rows per row group, per file
    dup_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # sorted
    fingerprint: dict = field(default_factory=dict)
    columns: list[str] = field(default_factory=lambda: list(PAPER_COLUMNS))  # read per chunk

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

    def dups_in(self, lo: int, hi: int) -> set[int]:
        d = self.dup_rows
        return set(d[np.searchsorted(d, lo):np.searchsorted(d, hi)].tolist())


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
    with_mapped = True
    for f in files:  # one open per file: footer, schema check, then its paper_id column
        reader = pq.ParquetFile(f)
        md = reader.metadata
        with_mapped = with_mapped and MAPPED_COLUMN in reader.schema_arrow.names
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
    plan = InputPlan(root=path, files=files, row_groups=groups, dup_rows=np.sort(dup).astype(np.int64),
                     columns=PAPER_COLUMNS + [MAPPED_COLUMN] if with_mapped else list(PAPER_COLUMNS))
    plan.fingerprint = {"files": described, "n_rows": plan.n_rows, "ids_sha256": ids_hash}
    return plan


# ---------------------------------------------------------------- batches

def token_budget_batches(lengths, batch_size: int, max_tokens: int, pad_limit: float = 0.0,
                         min_tokens: int = 0) -> list[list[int]]:
    """Indexes ordered longest first (ties by index), cut so that each batch has at most
    batch_size documents and at most max_tokens padded tokens (count x its longest); a single
    document longer than the budget still gets its own batch. max_tokens 0 = no token budget.

    pad_limit > 0 also cuts a batch that already holds min_tokens padded tokens when the next
    document is shorter than its width / pad_limit: on a GPU a batch of mixed lengths then pads
    little, while short documents still share a batch large enough to keep the device busy."""
    lengths = np.asarray(lengths, np.int64)
    order = np.lexsort((np.arange(len(lengths)), -lengths)).tolist()
    batches, cur, width = [], [], 0
    for i in order:
        if cur and (len(cur) >= batch_size or (max_tokens and (len(cur) + 1) * width > max_tokens)
                    or (pad_limit and len(cur) * width >= min_tokens and width > pad_limit * lengths[i])):
            batches.append(cur)
            cur = []
        if not cur:
            width = int(lengths[i])   # the first of a batch is its longest
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


@dataclass
class Batch:
    """Padded token ids of some of a chunk's documents, and where they go in the chunk."""

    positions: torch.Tensor       # int64 (n,): the documents' places among the chunk's kept papers
    input_ids: torch.Tensor       # int64 (n, width)
    attention_mask: torch.Tensor  # int64 (n, width)
    tokens: int                   # real (unpadded) tokens

    def pin_memory(self) -> "Batch":
        return Batch(self.positions.pin_memory(), self.input_ids.pin_memory(),
                     self.attention_mask.pin_memory(), self.tokens)

    def to(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The model's inputs and the positions on `device`; non-blocking from pinned memory."""
        nb = self.input_ids.is_pinned()
        return {"positions": self.positions.to(device, non_blocking=nb),
                "input_ids": self.input_ids.to(device, non_blocking=nb),
                "attention_mask": self.attention_mask.to(device, non_blocking=nb)}


def pad_batch(token_ids: list[list[int]], idx: list[int], pad_id: int, multiple: int = 1) -> Batch:
    """Documents `idx` padded to the batch's longest (rounded up to `multiple`), in one fill."""
    rows = [token_ids[i] for i in idx]
    ids, mask = pad_rows(rows, pad_id, multiple)
    return Batch(torch.as_tensor(np.asarray(idx, np.int64)), ids, mask, sum(len(x) for x in rows))


# ---------------------------------------------------------------- chunks

@dataclass
class FeedShape:
    """How the feed cuts a shard into work and batches (the embed job fills EmbedConfig's by-device
    defaults: encoders.embed.job.feed_shape)."""

    batch_size: int               # most documents per batch
    max_tokens: int               # most padded tokens per batch (0 = no budget)
    chunk_rows: int               # input rows per unit of work, sorted by length inside
    workers: int = 0              # feed processes (0: a thread)
    pad_multiple: int = 1         # batch widths rounded up to this
    pad_limit: float = 0.0        # see token_budget_batches
    min_batch_tokens: int = 0
    ramp: bool = False            # the first chunks smaller (1/8, 1/4, 1/2): the model starts sooner


@dataclass
class FeedSpec:
    """What a feed worker needs (picklable): the input, the tokenizer and the shape."""

    plan: InputPlan
    tokenizer: object
    max_length: int
    sep: str
    shard_size: int
    shape: FeedShape
    text_of: Callable = paper_text   # (title, abstract, sep) -> the text embedded: the objective's input view

    def chunks(self, shards: list[int]) -> list[tuple[int, int, int, bool]]:
        """(shard, lo, hi, last chunk of its shard) for every chunk of `shards`, in order."""
        out = []
        rows = self.shape.chunk_rows
        sizes = [max(1, rows // d) for d in (8, 4, 2)] if self.shape.ramp else []
        for k in shards:
            lo, hi = self.plan.shard_rows(k, self.shard_size)
            bounds, s = [], lo
            while s < hi or not bounds:
                e = min(hi, s + (sizes.pop(0) if sizes else rows))
                bounds.append((s, e))
                s = e
            for j, (s, e) in enumerate(bounds):
                out.append((k, s, e, j == len(bounds) - 1))
        return out


@dataclass
class Chunk:
    """Rows [lo, hi) of shard k: the kept papers, the skipped rows, the batches."""

    k: int
    lo: int
    hi: int
    last: bool                     # the shard's last chunk
    ids: list[str]                 # kept papers, input order
    skipped: list[dict]            # {"row", "paper_id", "reason"} per dropped row
    row_hashes: np.ndarray         # uint64 (kept papers, 4): hashes of paper_id, title, abstract, nulls
    batches: list[Batch]
    tokens: int                    # real tokens
    padded_tokens: int

    def pin_memory(self) -> "Chunk":   # called by the DataLoader's pinning thread
        self.batches = [b.pin_memory() for b in self.batches]
        return self


def _column_hashes(values: list, key: str) -> np.ndarray:
    obj = np.empty(len(values), object)
    obj[:] = ["" if v is None else str(v) for v in values]
    return pd.util.hash_array(obj, categorize=False, hash_key=key).astype(np.uint64)


def read_chunk(spec: FeedSpec, lo: int, hi: int) -> tuple[list[str], list[str], list[dict], np.ndarray]:
    """Rows [lo, hi): kept ids, their texts, the skipped rows with a reason, and per-row hashes of
    the kept rows' content as read (the shard's content hash; vectorised, no per-paper digest)."""
    t = spec.plan.read_rows(lo, hi, spec.plan.columns)
    pids, titles, abstracts = (t[c].to_pylist() for c in PAPER_COLUMNS)
    mapped = t[MAPPED_COLUMN].to_pylist() if MAPPED_COLUMN in t.column_names else [None] * t.num_rows
    dups = spec.plan.dups_in(lo, hi)
    ids, texts, skipped, kept = [], [], [], []
    for i, (pid, ti, ab, on_map) in enumerate(zip(pids, titles, abstracts, mapped)):
        text = spec.text_of(ti, ab, spec.sep)
        if pid is None:
            skipped.append({"row": lo + i, "paper_id": None, "reason": "null paper_id"})
        elif lo + i in dups:
            skipped.append({"row": lo + i, "paper_id": pid, "reason": "duplicate paper_id"})
        elif on_map is False:
            skipped.append({"row": lo + i, "paper_id": pid, "reason": NOT_MAPPED_REASON})
        elif not text:
            skipped.append({"row": lo + i, "paper_id": pid, "reason": "no title and no abstract"})
        else:
            ids.append(pid)
            texts.append(text)
            kept.append(i)
    pick = lambda col: [col[i] for i in kept]  # noqa: E731
    nulls = np.array([(titles[i] is None) + 2 * (abstracts[i] is None) for i in kept], np.uint64)
    hashes = np.stack([_column_hashes(ids, "sciencemap-row-p"), _column_hashes(pick(titles), "sciencemap-row-t"),
                       _column_hashes(pick(abstracts), "sciencemap-row-a"), nulls], axis=1) if kept \
        else np.zeros((0, 4), np.uint64)
    return ids, texts, skipped, hashes


def prepare_chunk(spec: FeedSpec, k: int, lo: int, hi: int, last: bool) -> Chunk:
    """Read, filter, tokenize, bucket by length and pad rows [lo, hi) of shard k."""
    ids, texts, skipped, hashes = read_chunk(spec, lo, hi)
    tokens = token_ids(spec.tokenizer, texts, spec.max_length)
    lengths = [len(x) for x in tokens]
    pad_id = spec.tokenizer.pad_token_id or 0
    sh = spec.shape
    batches = [pad_batch(tokens, idx, pad_id, sh.pad_multiple)
               for idx in token_budget_batches(lengths, sh.batch_size, sh.max_tokens, sh.pad_limit, sh.min_batch_tokens)]
    return Chunk(k, lo, hi, last, ids, skipped, hashes, batches, sum(lengths),
                 sum(int(b.input_ids.numel()) for b in batches))


class _ChunkDataset(torch.utils.data.Dataset):
    def __init__(self, spec: FeedSpec, chunks: list[tuple[int, int, int, bool]]):
        self.spec, self.items = spec, chunks

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Chunk:
        return prepare_chunk(self.spec, *self.items[i])


def _worker_init(_: int) -> None:
    # One process per core: the tokenizer's own thread pool in every worker would oversubscribe.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    torch.set_num_threads(1)


def feed_chunks(spec: FeedSpec, shards: list[int], pin: bool, prefetch: int = 4) -> Iterator[Chunk]:
    """Every chunk of `shards`, in order, prepared ahead of the consumer: by spec.shape.workers
    processes (DataLoader; pinned when `pin`), or with workers=0 by one thread (the tokenizer's own
    threads parallelise the tokenizing), `prefetch` chunks ahead (per worker). Closing the
    generator (an error or a crash hook in the consumer) stops the workers or the thread."""
    items = spec.chunks(shards)
    if not items:
        return
    if spec.shape.workers > 0:
        loader = torch.utils.data.DataLoader(
            _ChunkDataset(spec, items), batch_size=None, shuffle=False, num_workers=spec.shape.workers,
            prefetch_factor=prefetch, pin_memory=pin, worker_init_fn=_worker_init,
            multiprocessing_context="fork" if os.name == "posix" else None)
        source = iter(loader)
        try:
            yield from source
        finally:
            del source   # the loader's iterator shuts its workers down when it goes
        return

    def prepare(item) -> Chunk:
        chunk = prepare_chunk(spec, *item)
        return chunk.pin_memory() if pin else chunk

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-feed")
    try:
        ahead = deque(pool.submit(prepare, item) for item in items[:prefetch])
        rest = iter(items[prefetch:])
        while ahead:
            chunk = ahead.popleft().result()
            nxt = next(rest, None)
            if nxt is not None:
                ahead.append(pool.submit(prepare, nxt))
            yield chunk
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
