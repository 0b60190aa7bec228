"""Embed every paper with a model directory: Parquet in (streamed), resumable Parquet shards out.

Scale: the papers table is never held in memory. Shard k is the contiguous input rows
[k * shard_size, (k + 1) * shard_size) in input order (files sorted by name, rows in file order),
so the assignment is global and deterministic without a sort: a resumed run or another rank
computes the same shards. Inside a shard, papers are tokenized once, ordered by token length and
cut into batches of at most `batch_size` documents and `max_tokens` padded tokens; the vectors are
written back in input order. A paper appears in exactly one shard; duplicates of an earlier
paper_id are dropped (first row wins), found by one streamed pass over the paper_id column.

Shard files are written under a temporary name and renamed, so a shard file on disk is a finished
shard; a resume skips those. The manifest (model, model hash, dim, pooling, dtype, precision,
input fingerprint, finished shards, complete) is written only by rank 0; a resume refuses when
the model, the input or a setting that shapes the vectors changed.

Data-parallel: under torchrun (WORLD_SIZE > 1) shard k goes to rank k mod WORLD_SIZE; each rank
writes its own shard files; rank 0 plans and validates before the others start and finalises the
manifest after a barrier (gloo on CPU, nccl on CUDA).
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from encoders.config import COMPILE_MODES, EmbedConfig  # noqa: F401  (EmbedConfig re-exported)
from sciencemap.contracts import (EMBEDDING_SHARD_META_KEY, EMBEDDINGS_FORMAT, EMBEDDINGS_MANIFEST,
                                  embeddings_schema)
from sciencemap.embeddings import load_embeddings, shard_name  # noqa: F401  (load_embeddings re-exported)

from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from encoders.model import Encoder, load_encoder, model_hash, paper_text, pool, resolve_precision

MANIFEST = EMBEDDINGS_MANIFEST
FORMAT = EMBEDDINGS_FORMAT
DTYPES = {"float32": (np.float32, pa.float32()), "float16": (np.float16, pa.float16())}
CRASH_ENV = "SCIENCEMAP_EMBED_CRASH_AFTER"  # test hook for the CLI: stop after N shards
META_KEY = EMBEDDING_SHARD_META_KEY
MAX_LISTED_SKIPS = 100
PROGRESS_SECONDS = 10.0
# Settings that change the vectors or the shard assignment: a resume must match them.
RESUME_KEYS = ("model_hash", "dim", "pooling", "dtype", "precision", "max_length", "shard_size", "input")
# compile "auto": on a CPU, compile when this process has at least this many tokens to embed
# (estimated from its first shard). On 2 cores the first compile takes 10-20 s and then saves
# enough to pay for itself after ~0.3M (float32) to ~1.6M (bf16, title-only) tokens
# (bench/embed_throughput.py; jobs/embed.py on eLife); a margin of 3x keeps auto on the safe side.
COMPILE_MIN_TOKENS = 5_000_000


def _shard_index(p: Path) -> int | None:
    stem = p.name[len("part-"):-len(".parquet")]
    return int(stem) if stem.isdigit() else None


def _write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _log(msg: str, rank: int = 0, world: int = 1) -> None:
    print(f"embed{f' [rank {rank}/{world}]' if world > 1 else ''}: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Input: a plan of files and row groups, read by global row range

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

    def read_rows(self, lo: int, hi: int, columns: list[str]) -> pa.Table:
        """Rows [lo, hi) in input order, reading only the row groups that overlap."""
        parts, start = [], 0
        for f, groups in zip(self.files, self.row_groups):
            g_start = start
            for g, n in enumerate(groups):
                g_end = g_start + n
                if g_end > lo and g_start < hi:
                    t = pq.ParquetFile(f).read_row_group(g, columns=columns)
                    a, b = max(lo, g_start) - g_start, min(hi, g_end) - g_start
                    parts.append(t.slice(a, b - a))
                g_start = g_end
            start = g_start
            if start >= hi:
                break
        if not parts:
            return pa.table({c: pa.array([], pa.string()) for c in columns})
        return pa.concat_tables(parts, promote_options="permissive")


def _table_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UserError(f"table {path} does not exist; run the ingest stage first")
    # Spark and write_table_atomic both write part files; skip _SUCCESS, .crc and hidden temporaries.
    return sorted(p for p in path.rglob("*.parquet")
                  if not any(part.startswith((".", "_")) for part in p.relative_to(path).parts))


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
    files = _table_files(path)
    groups, described = [], []
    for f in files:
        md = pq.ParquetFile(f).metadata
        names = set(pq.ParquetFile(f).schema_arrow.names)
        missing = {"paper_id", "title", "abstract"} - names
        if missing:
            raise UserError(f"{f} lacks column(s) {sorted(missing)}; the papers table must have "
                            "paper_id, title and abstract (re-run the ingest stage)")
        groups.append([md.row_group(g).num_rows for g in range(md.num_row_groups)])
        described.append([str(f.relative_to(path)) if f != path else f.name, f.stat().st_size, md.num_rows])
    h1s, h2s, valids = [], [], []
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=1 << 16, columns=["paper_id"]):
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


# ---------------------------------------------------------------------------------------------
# One shard: read, filter, tokenize (prefetched in a thread), embed in token-budget batches

@dataclass
class ShardWork:
    k: int
    lo: int
    hi: int
    ids: list[str]                 # kept papers, input order
    token_ids: list[list[int]]
    skipped: list[dict]
    content_sha256: str


def prepare_shard(plan: InputPlan, enc, k: int, shard_size: int) -> ShardWork:
    lo, hi = k * shard_size, min(plan.n_rows, (k + 1) * shard_size)
    t = plan.read_rows(lo, hi, ["paper_id", "title", "abstract"])
    pids, titles, abstracts = (t[c].to_pylist() for c in ("paper_id", "title", "abstract"))
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


def token_budget_batches(lengths: list[int], batch_size: int, max_tokens: int) -> list[list[int]]:
    """Indexes ordered longest first (ties by index), cut so that each batch has at most
    batch_size documents and at most max_tokens padded tokens (count x its longest); a single
    document longer than the budget still gets its own batch."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches, cur = [], []
    for i in order:
        width = lengths[cur[0]] if cur else lengths[i]   # the first is the longest
        if cur and (len(cur) >= batch_size or (max_tokens and (len(cur) + 1) * width > max_tokens)):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


class CompiledForward:
    """The encoder's inference forward through torch.compile (inductor, dynamic shapes, weights
    frozen as constants: freezing is what pays on a CPU — oneDNN pre-packed weights and fused
    element-wise ops; without it the gain is small). Same vectors as eager up to float rounding.

    Batches of one document run eager: dynamic shapes specialise a size-1 dimension, so the first
    single-document batch would cost a second compile. If compiling fails (e.g. no C++ compiler
    for inductor's CPU kernels), the job logs why once and goes on eager."""

    def __init__(self, model: torch.nn.Module):
        import torch._inductor.config as inductor_config

        inductor_config.freezing = True   # process-wide; embedding processes never train
        self.eager = model
        self.compiled = torch.compile(model, dynamic=True)
        self.failed: str | None = None

    def __call__(self, **batch):
        if self.failed is None and batch["input_ids"].shape[0] > 1:
            try:
                return self.compiled(**batch)
            except Exception as e:  # noqa: BLE001 - any compile failure: fall back, said once
                self.failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                _log(f"torch.compile failed ({self.failed}); embedding without it")
        return self.eager(**batch)


def check_compile_mode(compile_mode: str) -> None:
    if compile_mode not in COMPILE_MODES:
        raise UserError(f"embed compile {compile_mode!r} is unknown; use one of {', '.join(COMPILE_MODES)}")


def inference_forward(enc, compile_mode: str, n_tokens: int) -> Callable:
    """The forward an embedding pass of about n_tokens (unpadded) should use: enc.model, or a
    CompiledForward of it."""
    check_compile_mode(compile_mode)
    # auto stays eager on CUDA until the GPU gain is measured (bench/embed_throughput.py GPU section).
    use = compile_mode == "on" or (compile_mode == "auto" and enc.device.type == "cpu"
                                   and n_tokens >= COMPILE_MIN_TOKENS)
    return CompiledForward(enc.model) if use else enc.model


def embed_token_ids(enc, token_ids: list[list[int]], batch_size: int, max_tokens: int,
                    precision: str, on_batch: Callable[[int, int], None] | None = None,
                    forward: Callable | None = None) -> torch.Tensor:
    """Pooled float32 vectors (on the encoder's device) for pre-tokenized texts, in input order.
    `forward`: the model call to use (default enc.model; see inference_forward)."""
    out = torch.empty((len(token_ids), enc.dim), dtype=torch.float32, device=enc.device)
    lengths = [len(x) for x in token_ids]
    forward = forward or enc.model
    with torch.inference_mode(), enc.inference_autocast(precision):
        for idx in token_budget_batches(lengths, batch_size, max_tokens):
            batch = enc.pad([token_ids[i] for i in idx])
            hidden = forward(**batch).last_hidden_state
            out[torch.tensor(idx, device=enc.device)] = pool(hidden, batch["attention_mask"], enc.pooling)
            if on_batch is not None:
                on_batch(len(idx), sum(lengths[i] for i in idx))
    return out


def embed_texts(enc, texts: list[str], batch_size: int = 128, max_tokens: int = 8192,
                precision: str = "auto", forward: Callable | None = None) -> np.ndarray:
    """This system's in-memory embedding path (the benchmark uses it): float32 vectors, input order."""
    enc.model.eval()
    prec = resolve_precision(precision, enc.device)
    return embed_token_ids(enc, enc.token_ids(texts), batch_size, max_tokens, prec,
                           forward=forward).cpu().numpy()


def _write_shard(out: Path, work: ShardWork, vecs: np.ndarray, dim: int, pa_dtype, record: dict) -> None:
    table = pa.table({
        "paper_id": pa.array(work.ids, pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa_dtype), dim),
    }, schema=embeddings_schema(dim, pa_dtype))
    table = table.replace_schema_metadata({META_KEY: json.dumps(record).encode()})
    tmp = out / f".{shard_name(work.k)}.tmp-{uuid.uuid4().hex[:8]}"
    pq.write_table(table, tmp)
    os.replace(tmp, out / shard_name(work.k))


def shard_record(path: Path) -> dict | None:
    """The per-shard record stored in a shard file's footer (None if unreadable or foreign)."""
    try:
        meta = pq.read_schema(path).metadata or {}
        return json.loads(meta[META_KEY]) if META_KEY in meta else None
    except (OSError, pa.ArrowInvalid, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# Progress

class Progress:
    """docs/s, tokens/s (real, unpadded tokens) and ETA over the input rows of this rank's shards."""

    def __init__(self, rows_todo: int, rank: int, world: int):
        self.rows_todo, self.rank, self.world = rows_todo, rank, world
        self.rows = self.docs = self.tokens = 0
        self.t0 = self.last = time.perf_counter()

    def batch(self, docs: int, tokens: int) -> None:
        self.docs += docs
        self.tokens += tokens
        if time.perf_counter() - self.last > PROGRESS_SECONDS:
            self.report()

    def shard_done(self, rows: int) -> None:
        self.rows += rows

    @property
    def seconds(self) -> float:
        return max(time.perf_counter() - self.t0, 1e-9)

    def report(self, final: bool = False) -> None:
        self.last = time.perf_counter()
        s = self.seconds
        # Embedded docs count within the shard in progress too (rows only move when a shard ends);
        # skipped rows are few, so docs stand in for rows.
        done = max(self.rows, self.docs)
        eta = (self.rows_todo - done) * s / done if done else float("nan")
        _log(("done, " if final else "") + f"{self.docs} docs ({self.rows}/{self.rows_todo} input rows) "
             f"in {s:.1f}s: {self.docs / s:.1f} docs/s, {self.tokens / s:.0f} tokens/s"
             + ("" if final else f", ETA {eta:.0f}s") + f", peak RSS {_rss_mb():.0f} MB",
             self.rank, self.world)


# ---------------------------------------------------------------------------------------------
# Distributed plumbing (torchrun sets WORLD_SIZE, RANK, LOCAL_RANK)

def _dist_env() -> tuple[int, int, int]:
    return (int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0")),
            int(os.environ.get("LOCAL_RANK", "0")))


def _init_dist(world: int, local_rank: int, device: str) -> tuple[str, bool]:
    """(device to use, whether we created the process group)."""
    use_cuda = device in ("auto", "cuda") and torch.cuda.is_available()
    dev = f"cuda:{local_rank}" if use_cuda else ("cpu" if device == "auto" else device)
    if world <= 1 or not torch.distributed.is_available():
        return (device if world <= 1 else dev), False
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if torch.distributed.is_initialized():
        return dev, False
    # A long timeout: ranks wait at the final barrier for the slowest rank's last shards.
    torch.distributed.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(hours=48))
    return dev, True


def _broadcast(obj, world: int):
    if world <= 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


# ---------------------------------------------------------------------------------------------
# The job

def _resolve_spec(cfg: EmbedConfig, layout: RunLayout) -> str:
    if cfg.model:
        return cfg.model
    if not layout.model_dir.is_dir():
        raise UserError(f"no trained model at {layout.model_dir}; run jobs/train.py first or pass "
                        "--model minilm (the untuned encoder) or --model PATH")
    return str(layout.model_dir)


def _finished(out: Path, mhash: str, shard_size: int) -> dict[int, dict]:
    """Shard files of this job on disk (k -> record); a file is a finished shard (atomic rename)."""
    done = {}
    for p in out.glob("part-*.parquet"):
        k = _shard_index(p)
        rec = shard_record(p) if k is not None else None
        if rec and rec.get("shard") == k and rec.get("model_hash") == mhash \
                and rec.get("rows", [None])[0] == k * shard_size:
            done[k] = rec
    return done


def _prepare_output(cfg: EmbedConfig, expected: dict, out: Path) -> tuple[dict, set[int]]:
    """Rank 0: validate an existing job against this one (or clear it) and write the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob(".part-*"), *out.glob(f".{MANIFEST}.tmp-*")]:  # leftovers of a kill
        stale.unlink()
    manifest_path = out / MANIFEST
    if manifest_path.is_file() and not cfg.restart:
        old = json.loads(manifest_path.read_text())
        for key in RESUME_KEYS:
            if old.get(key) != expected[key]:
                what = "input papers" if key == "input" else key
                raise UserError(f"{out} was started with different {what} than this run; "
                                "rerun with --restart to discard it, or restore the original inputs")
    else:
        for old_part in out.glob("part-*.parquet"):
            old_part.unlink()
    done = set(_finished(out, expected["model_hash"], cfg.shard_size))
    manifest = {**expected, "finished_shards": sorted(done),
                "complete": len(done) == expected["n_shards"], "settings": asdict(cfg)}
    _write_json_atomic(manifest_path, manifest)
    return manifest, done


def run_embed(cfg: EmbedConfig, layout: RunLayout,
              after_shard: Callable[[int, int], None] | None = None, encoder: Encoder | None = None) -> dict:
    """Embed the run's papers into layout.embeddings_dir (this rank's share under torchrun).
    `after_shard(k, n_done_by_this_process)` runs after each written shard (a test hook: raise
    there to simulate a crash). `encoder`: an already loaded one (its model, pooling, max_length
    and device replace cfg's), so tests and notebooks skip reloading."""
    if cfg.dtype not in DTYPES:
        raise UserError(f"embed dtype {cfg.dtype!r} is unknown; use float32 or float16")
    if cfg.batch_size < 1 or cfg.shard_size < 1 or cfg.max_tokens < 0:
        raise UserError("embed batch_size and shard_size must be at least 1 and max_tokens at least 0")
    check_compile_mode(cfg.compile)
    t_start = time.perf_counter()
    crash_after = int(os.environ.get(CRASH_ENV, "0") or 0)
    world, rank, local_rank = _dist_env()
    device, own_group = _init_dist(world, local_rank, cfg.device)
    try:
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        elif world > 1 and not device.startswith("cuda"):
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
        enc = encoder or load_encoder(_resolve_spec(cfg, layout), cfg.pooling or None, cfg.max_length, device)
        return _run(cfg, layout, enc, after_shard, crash_after, world, rank, t_start)
    finally:
        if own_group:
            torch.distributed.destroy_process_group()


def _run(cfg, layout, enc, after_shard, crash_after, world, rank, t_start) -> dict:
    enc.model.eval()
    precision = resolve_precision(cfg.precision, enc.device)
    np_dtype, pa_dtype = DTYPES[cfg.dtype]
    out = layout.embeddings_dir

    # Rank 0 plans and validates; the others wait for its answer (or its error).
    answer = None
    if rank == 0:
        try:
            plan = plan_input(layout.table("papers"))
            n_shards = (plan.n_rows + cfg.shard_size - 1) // cfg.shard_size
            expected = {
                "format": FORMAT, "model_path": str(enc.path), "model_hash": model_hash(enc.path),
                "dim": enc.dim, "pooling": enc.pooling, "dtype": cfg.dtype, "precision": precision,
                "max_length": enc.max_length, "shard_size": cfg.shard_size, "n_shards": n_shards,
                "input": plan.fingerprint, "world_size": world,
            }
            manifest, done = _prepare_output(cfg, expected, out)
            answer = {"plan": plan, "manifest": manifest, "done": done}
        except UserError as e:
            answer = {"error": str(e)}
    answer = _broadcast(answer, world)
    if "error" in answer:
        raise UserError(answer["error"])
    plan, manifest, done = answer["plan"], answer["manifest"], answer["done"]
    n_shards, mhash = manifest["n_shards"], manifest["model_hash"]

    todo = [k for k in range(n_shards) if k % world == rank and k not in done]
    rows_todo = sum(min(plan.n_rows, (k + 1) * cfg.shard_size) - k * cfg.shard_size for k in todo)
    if rank == 0:
        _log(f"{plan.n_rows} input rows ({len(plan.dup_rows)} duplicate ids), {n_shards} shards, "
             f"{len(done)} already done; {world} rank(s)", rank, world)
    _log(f"{len(todo)} shards ({rows_todo} rows) to embed on {enc.device} (dim {enc.dim}, {enc.pooling}, "
         f"{precision} compute, {cfg.dtype} out, batches <= {cfg.batch_size} docs / "
         f"{cfg.max_tokens or 'any'} tokens, {torch.get_num_threads()} threads)", rank, world)

    progress = Progress(rows_todo, rank, world)
    forward: Callable = enc.model
    n_written = 0
    own: dict[int, dict] = {}
    # Read + tokenize the next shard in a thread while this one runs through the model.
    with ThreadPoolExecutor(max_workers=1) as pool_:
        future = pool_.submit(prepare_shard, plan, enc, todo[0], cfg.shard_size) if todo else None
        for j, k in enumerate(todo):
            work = future.result()
            if j == 0:   # the first shard tells how many tokens this rank has to embed
                est = round(sum(len(x) for x in work.token_ids) / max(work.hi - work.lo, 1) * rows_todo)
                forward = inference_forward(enc, cfg.compile, est)
                _log(f"~{est:,} tokens to embed: "
                     f"{'torch.compile' if forward is not enc.model else 'eager'} forward "
                     f"(compile {cfg.compile})", rank, world)
            future = (pool_.submit(prepare_shard, plan, enc, todo[j + 1], cfg.shard_size)
                      if j + 1 < len(todo) else None)
            vecs = embed_token_ids(enc, work.token_ids, cfg.batch_size, cfg.max_tokens, precision,
                                   progress.batch, forward)
            record = {"shard": k, "rows": [work.lo, work.hi], "papers": len(work.ids),
                      "model_hash": mhash, "content_sha256": work.content_sha256,
                      "tokens": sum(len(x) for x in work.token_ids),
                      "skipped_by_reason": dict(Counter(s["reason"] for s in work.skipped)),
                      "skipped": work.skipped[:MAX_LISTED_SKIPS]}
            _write_shard(out, work, vecs.cpu().numpy().astype(np_dtype), enc.dim, pa_dtype, record)
            own[k] = record
            progress.shard_done(work.hi - work.lo)
            n_written += 1
            if rank == 0:  # only rank 0 writes the manifest: no races between ranks
                # Names suffice mid-run (files on disk were validated at the start or written
                # since); footers are read once, at the end.
                on_disk = {_shard_index(q) for q in out.glob("part-*.parquet")}
                manifest.update(finished_shards=sorted(i for i in on_disk if i is not None and i < n_shards))
                _write_json_atomic(out / MANIFEST, manifest)
            if after_shard is not None:
                after_shard(k, n_written)
            if crash_after and n_written >= crash_after and j + 1 < len(todo):
                raise SystemExit(f"embed: stopping after {n_written} shards ({CRASH_ENV} test hook)")
    progress.report(final=True)

    if world > 1:
        torch.distributed.barrier()
    # Rank 0 reads every shard's footer once and finalises; the others report their own share.
    records = _finished(out, mhash, cfg.shard_size) if rank == 0 else {k: own[k] for k in own}
    if rank == 0:
        manifest.update(finished_shards=sorted(records), complete=len(records) == n_shards,
                        papers=sum(r["papers"] for r in records.values()),
                        skipped=sum(sum(r["skipped_by_reason"].values()) for r in records.values()))
        _write_json_atomic(out / MANIFEST, manifest)
    reasons: Counter = Counter()
    listed: list[dict] = []
    for k in sorted(records):
        reasons.update(records[k]["skipped_by_reason"])
        listed.extend(records[k]["skipped"][:MAX_LISTED_SKIPS - len(listed)])
    s = progress.seconds
    return {"embeddings_dir": str(out), "papers": sum(r["papers"] for r in records.values()),  # rank 0: all
            "input_rows": plan.n_rows, "dim": enc.dim, "shards": n_shards,
            "shards_resumed": len(done), "shards_this_rank": len(todo), "rank": rank, "world_size": world,
            "embedded_now": progress.docs, "docs_per_second": round(progress.docs / s, 1) if progress.docs else None,
            "tokens_per_second": round(progress.tokens / s) if progress.docs else None,
            "embed_seconds": round(s, 2), "precision": precision,
            "compiled": isinstance(forward, CompiledForward) and forward.failed is None,
            "compile_failed": forward.failed if isinstance(forward, CompiledForward) else None,
            "skipped": sum(reasons.values()), "skipped_by_reason": dict(reasons),
            "skipped_papers": [{"paper_id": x["paper_id"], "reason": x["reason"]} for x in listed],
            "model_hash": mhash, "config": asdict(cfg),
            "seconds": round(time.perf_counter() - t_start, 2)}
