"""The embed job: every paper of a run through a model directory into resumable Parquet shards.

Rank 0 plans the input (feed.plan_input) and opens the output (shards.open_output: resume, refuse
or start afresh) before the other ranks start; the plan and the manifest are broadcast. Each rank
then embeds its shards — shard k goes to rank k mod WORLD_SIZE under torchrun — as a pipeline of
three parts that overlap:

    feed     chunks of rows read, tokenized, bucketed and padded ahead (a thread, or worker
             processes on CUDA), pinned for non-blocking copies
    forward  batch after batch queued on the device, vectors placed on the device; nothing waits
             for the device inside the loop
    writer   a thread that waits for a finished shard's copy back to the host and writes its file

After a barrier rank 0 finalises the manifest (gloo on CPU, nccl on CUDA).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, replace
from typing import Callable

import numpy as np
import torch

from encoders.config import EmbedConfig, TrainConfig
from encoders.embed.feed import Chunk, FeedShape, FeedSpec, InputPlan, feed_chunks, plan_input
from encoders.embed.forward import check_compile_mode, compile_outcome, embed_batches, inference_forward
from encoders.embed.shards import close_output, make_record, note_written, open_output, skips, write_shard
from encoders.embed.views import (ViewsForward, main_dim, objective_views, own_main_vector, split, view_dir, width,
                                  write_view_manifests, write_view_shard)
from encoders.model import Encoder, load_encoder, model_hash, resolve_model, resolve_precision
from sciencemap.contracts import EMBEDDING_DTYPES, EMBEDDINGS_FORMAT, MODEL_CARD
from sciencemap.layout import RunLayout
from sciencemap.runtime import Dist, UserError, init_dist, rss_mb, say

CRASH_ENV = "SCIENCEMAP_EMBED_CRASH_AFTER"  # test hook for the CLI: stop after N shards
PROGRESS_SECONDS = 10.0
# Ranks wait at the final barrier for the slowest rank's last shards (on a resume, a rank whose
# shards were all done waits for the others' whole share): far longer than torch's default.
BARRIER_TIMEOUT_S = 48 * 3600

# Defaults by device (EmbedConfig's 0 / -1 values).
CPU_BATCH, CPU_MAX_TOKENS = 128, 8192          # measured on 2 cores (bench/embed_throughput.py)
CUDA_BATCH, CUDA_CHUNK_ROWS = 4096, 8192        # long sorted runs: little padding (bench/feed_throughput.py)
CUDA_MAX_TOKENS_CAP = 65536                    # larger batches gain nothing once the GPU is full
CUDA_PAD_LIMIT, CUDA_MIN_BATCH_TOKENS = 1.1, 8192
CUDA_MEMORY_SHARE = 0.4                        # of the free memory, for one batch's activations
CUDA_PAD_MULTIPLE = 1                          # widths rounded up to 8 padded titles 1.2x (bench/feed_throughput.py)
MAX_WORKERS = 12


class Progress:
    """docs/s, tokens/s (real, unpadded tokens) and ETA over the input rows of this rank's shards."""

    def __init__(self, rows_todo: int, dist: Dist):
        self.rows_todo, self.dist = rows_todo, dist
        self.rows = self.docs = self.tokens = self.padded = 0
        self.t0 = self.last = time.perf_counter()
        self.first = None   # (seconds, tokens) when the first batch was done: the feed's start-up and the
        #                     first forward (a compile or a new shape) end there; the rest is the steady state

    def batch(self, docs: int, tokens: int) -> None:
        self.docs += docs
        self.tokens += tokens
        if self.first is None:
            self.first = (self.seconds, self.tokens)
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
        # Queued docs count within the shard in progress too (rows only move when a shard is
        # written); skipped rows are few, so docs stand in for rows.
        done = max(self.rows, self.docs)
        eta = (self.rows_todo - done) * s / done if done else float("nan")
        pad = f", padding {self.padded / self.tokens:.3f}x" if self.tokens else ""
        say("embed: " + ("done, " if final else "") + f"{self.docs} docs ({self.rows}/{self.rows_todo} "
            f"input rows) in {s:.1f}s: {self.docs / s:.1f} docs/s, {self.tokens / s:.0f} tokens/s{pad}"
            + ("" if final else f", ETA {eta:.0f}s") + f", peak RSS {rss_mb():.0f} MB",
            self.dist.rank, self.dist.world)


def training_length(spec: str) -> int:
    """max_length 0: the length the model was trained with (our model card), else the training default."""
    card = resolve_model(spec) / MODEL_CARD
    if card.is_file():
        try:
            n = json.loads(card.read_text()).get("max_length")
            if isinstance(n, int) and n > 1:
                return n
        except (OSError, ValueError):
            pass
    return TrainConfig.max_length


def cuda_token_budget(enc: Encoder) -> int:
    """Padded tokens per batch that fit a share of the free GPU memory: an inference forward keeps
    about two layers' activations alive (hidden, q/k/v, attention output, the feed-forward's
    intermediate twice) in bf16, plus the float32 last hidden state for pooling."""
    conf = enc.model.config
    h = int(conf.hidden_size)
    inter = int(getattr(conf, "intermediate_size", 4 * h) or 4 * h)
    per_token = 2 * (6 * h + 2 * inter) * 2 + 4 * h
    free, _ = torch.cuda.mem_get_info(enc.device)
    budget = int(free * CUDA_MEMORY_SHARE / per_token)
    budget = max(enc.max_length * 16, min(budget, CUDA_MAX_TOKENS_CAP))
    return budget // CUDA_PAD_MULTIPLE * CUDA_PAD_MULTIPLE


def device_shape(cuda: bool, shard_size: int, cuda_max_tokens: int = CUDA_MAX_TOKENS_CAP,
                 cuda_workers: int = 1) -> FeedShape:
    """The feed's defaults by device. A CPU keeps the earlier job's batches (its vectors bit for
    bit): the whole shard sorted, 128 docs / 8,192 tokens, a thread. CUDA: large sorted chunks (the
    first ones smaller), a token budget, batches of mixed lengths cut at 10% padding once large
    enough, worker processes."""
    if not cuda:
        return FeedShape(CPU_BATCH, CPU_MAX_TOKENS, shard_size)
    return FeedShape(CUDA_BATCH, cuda_max_tokens, CUDA_CHUNK_ROWS, cuda_workers, CUDA_PAD_MULTIPLE,
                     CUDA_PAD_LIMIT, CUDA_MIN_BATCH_TOKENS, ramp=True)


def feed_shape(cfg: EmbedConfig, enc: Encoder, dist: Dist) -> FeedShape:
    """EmbedConfig's settings, with 0 / -1 filled by device_shape."""
    if enc.device.type == "cuda":
        local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.world))
        cores = max(1, (os.cpu_count() or 1) // max(local, 1))
        d = device_shape(True, cfg.shard_size, cfg.max_tokens or cuda_token_budget(enc),
                         min(MAX_WORKERS, max(1, cores - 2)))
    else:
        d = device_shape(False, cfg.shard_size)
    return replace(d, batch_size=cfg.batch_size or d.batch_size, max_tokens=cfg.max_tokens or d.max_tokens,
                   chunk_rows=cfg.chunk_rows or d.chunk_rows, workers=cfg.workers if cfg.workers >= 0 else d.workers)


def feed_spec(plan: InputPlan, enc: Encoder, shard_size: int, shape: FeedShape, objective=None) -> FeedSpec:
    """The feed's work description; the text of a paper is the model's objective's input view."""
    extra = {"text_of": objective.input_text} if objective is not None else {}
    return FeedSpec(plan=plan, tokenizer=enc.tokenizer, max_length=enc.max_length, sep=enc.sep,
                    shard_size=shard_size, shape=shape, **extra)


def _resolve_spec(cfg: EmbedConfig, layout: RunLayout) -> str:
    if cfg.model:
        return cfg.model
    if not layout.model_dir.is_dir():
        raise UserError(f"no trained model at {layout.model_dir}; to place these papers on a finished map, "
                        "embed them with that map's model (--model <map run>/model); else run jobs/train.py "
                        "first, or pass --model minilm (the untuned encoder) or --model PATH")
    return str(layout.model_dir)


def _check(cfg: EmbedConfig) -> None:
    if cfg.dtype not in EMBEDDING_DTYPES:
        raise UserError(f"embed dtype {cfg.dtype!r} is unknown; use float32 or float16")
    if cfg.batch_size < 0 or cfg.shard_size < 1 or cfg.max_tokens < 0 or cfg.chunk_rows < 0 or cfg.max_length < 0:
        raise UserError("embed shard_size must be at least 1, and batch_size, max_tokens, chunk_rows and "
                        "max_length at least 0 (0 = by device / by model)")
    if cfg.workers < -1:
        raise UserError("embed workers must be -1 (by device), 0 (a thread) or a number of processes")
    check_compile_mode(cfg.compile)


def _set_threads(cfg: EmbedConfig, dist: Dist) -> None:
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    elif dist.world > 1 and not dist.device.startswith("cuda"):
        # CPU ranks on one machine share its cores.
        local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.world))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))


def run_embed(cfg: EmbedConfig, layout: RunLayout,
              after_shard: Callable[[int, int], None] | None = None, encoder: Encoder | None = None,
              replace_stale: bool = False) -> dict:
    """Embed the run's papers into layout.embeddings_dir (this rank's share under torchrun).
    `after_shard(k, n_done_by_this_process)` runs after each written shard (a test hook: raise
    there to simulate a crash). `encoder`: an already loaded one (its model, pooling, max_length
    and device replace cfg's), so tests and notebooks skip reloading. `replace_stale`: shards of a
    job with other inputs or settings are discarded, not refused (the pipeline's call)."""
    _check(cfg)
    t_start = time.perf_counter()
    crash_after = int(os.environ.get(CRASH_ENV, "0") or 0)
    dist = init_dist(cfg.device, timeout_s=BARRIER_TIMEOUT_S)
    try:
        _set_threads(cfg, dist)
        if encoder is None:
            spec = _resolve_spec(cfg, layout)
            encoder = load_encoder(spec, cfg.pooling or None, cfg.max_length or training_length(spec), dist.device)
        summary = _run(cfg, layout, encoder, dist, after_shard, crash_after, replace_stale)
        return {**summary, "seconds": round(time.perf_counter() - t_start, 2)}
    finally:
        dist.close()


def _vector_note(enc: Encoder, objective, specs: dict) -> dict:
    """How the main vector is made, and the views beside it (the manifest's "vector" and "views")."""
    made = objective.main_vector_note() if own_main_vector(objective) else {"from": "the encoder's last hidden states"}
    return {"vector": {**made, "pooling": enc.pooling, "objective": objective.name if objective is not None else None},
            "views": {name: {"keys": list(v.keys), "dim": v.dim} for name, v in specs.items()}}


def _plan_and_open(cfg: EmbedConfig, layout: RunLayout, enc: Encoder, precision: str, shape: FeedShape,
                   dist: Dist, views: dict, dim: int, replace_stale: bool) -> tuple[InputPlan, dict, set[int]]:
    """Rank 0 plans the input and opens the output; the others wait for its answer (or its error)."""
    answer = None
    if dist.main:
        try:
            plan = plan_input(layout.table("papers"))
            expected = {
                "format": EMBEDDINGS_FORMAT, "model_path": str(enc.path), "model_hash": model_hash(enc.path),
                "dim": dim, "pooling": enc.pooling, "dtype": cfg.dtype, "precision": precision,
                "max_length": enc.max_length, "shard_size": cfg.shard_size,
                "n_shards": plan.n_shards(cfg.shard_size), "input": plan.fingerprint, "world_size": dist.world,
                **views,
            }
            manifest, done = open_output(layout.embeddings_dir, expected, {**asdict(cfg), "resolved": asdict(shape)},
                                         cfg.restart, replace_stale)
            answer = {"plan": plan, "manifest": manifest, "done": done}
        except UserError as e:
            answer = {"error": str(e)}
    answer = dist.broadcast(answer)
    if "error" in answer:
        raise UserError(answer["error"])
    return answer["plan"], answer["manifest"], answer["done"]


class ShardOutput:
    """One shard's chunks as they come off the device: ids, skipped rows, content hashes, vectors
    (device tensors until the shard is complete)."""

    def __init__(self, k: int, lo: int):
        self.k, self.lo, self.hi = k, lo, lo
        self.ids: list[str] = []
        self.skipped: list[dict] = []
        self.hashes: list[np.ndarray] = []
        self.vectors: list[torch.Tensor] = []
        self.tokens = 0

    def add(self, chunk: Chunk, vectors: torch.Tensor) -> None:
        self.hi = chunk.hi
        self.ids += chunk.ids
        self.skipped += chunk.skipped
        self.hashes.append(chunk.row_hashes)
        self.vectors.append(vectors)
        self.tokens += chunk.tokens

    def content_sha256(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(np.concatenate(self.hashes)).tobytes()).hexdigest()

    def to_host(self, dtype: str) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """The shard's vectors in the stored dtype, copied to (pinned) host memory without waiting;
        the event, when there is one, is recorded after the copy (the writer waits on it)."""
        dev = torch.cat(self.vectors) if len(self.vectors) != 1 else self.vectors[0]
        dev = dev.to(getattr(torch, dtype))
        self.vectors = []
        if dev.device.type != "cuda":
            return dev, None
        host = torch.empty(dev.shape, dtype=dev.dtype, pin_memory=True)
        host.copy_(dev, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return host, event


def _write(out, k: int, ids: list[str], host: torch.Tensor, event, record: dict, dim: int, specs: dict) -> None:
    """Shard k's views first, then its main vectors: a main shard on disk is a finished shard."""
    if event is not None:
        event.synchronize()
    main, views = split(host.numpy(), dim, specs)
    for name, vectors in views.items():
        write_view_shard(view_dir(out, name), k, ids, specs[name].keys, vectors, record)
    write_shard(out, k, ids, main, record)


def _run(cfg: EmbedConfig, layout: RunLayout, enc: Encoder, dist: Dist,
         after_shard: Callable[[int, int], None] | None, crash_after: int, replace_stale: bool) -> dict:
    rank, world = dist.rank, dist.world
    enc.model.eval()
    precision = resolve_precision(cfg.precision, enc.device)
    shape = feed_shape(cfg, enc, dist)
    out = layout.embeddings_dir
    objective, specs = objective_views(enc)
    branches = objective.branches if objective is not None else ("online",)
    if cfg.branch not in branches:
        raise UserError(f"[embed] branch = {cfg.branch!r}: a model of the "
                        f"{objective.name if objective is not None else 'base'} objective embeds with "
                        f"{' / '.join(branches)} only (predictor and target are SciJEPa's)")
    if objective is not None:
        objective.embed_settings = cfg
        objective.check_embed(cfg)
    dim = main_dim(enc, objective)
    plan, manifest, done = _plan_and_open(cfg, layout, enc, precision, shape, dist,
                                          _vector_note(enc, objective, specs), dim, replace_stale)
    n_shards, mhash = manifest["n_shards"], manifest["model_hash"]

    todo = [k for k in range(n_shards) if k % world == rank and k not in done]
    rows_todo = sum(hi - lo for lo, hi in (plan.shard_rows(k, cfg.shard_size) for k in todo))
    if dist.main:
        say(f"embed: {plan.n_rows} input rows ({len(plan.dup_rows)} duplicate ids), {n_shards} shards, "
            f"{len(done)} already done; {world} rank(s)", rank, world)
    say(f"embed: {len(todo)} shards ({rows_todo} rows) to embed on {enc.device} (dim {enc.dim}, "
        f"{enc.pooling}, max_length {enc.max_length}, {precision} compute, {cfg.dtype} out, batches <= "
        f"{shape.batch_size} docs / {shape.max_tokens} tokens, chunks of {shape.chunk_rows} rows, "
        f"{shape.workers or 'no'} feed workers, {torch.get_num_threads()} threads)", rank, world)

    spec = feed_spec(plan, enc, cfg.shard_size, shape, objective)
    progress = Progress(rows_todo, dist)
    forward: Callable | None = None
    n_written = 0
    own: dict[int, dict] = {}
    current: ShardOutput | None = None
    pending: tuple[Future, ShardOutput, dict] | None = None

    def finish(p: tuple[Future, ShardOutput, dict]) -> None:
        """After a shard's file is written: its bookkeeping, the hooks."""
        nonlocal n_written
        future, shard, record = p
        future.result()
        own[shard.k] = record
        progress.shard_done(shard.hi - shard.lo)
        n_written += 1
        if dist.main:  # only rank 0 writes the manifest: no races between ranks
            note_written(out, manifest)
        if after_shard is not None:
            after_shard(shard.k, n_written)
        if crash_after and n_written >= crash_after and n_written < len(todo):
            raise SystemExit(f"embed: stopping after {n_written} shards ({CRASH_ENV} test hook)")

    chunks = feed_chunks(spec, todo, pin=enc.device.type == "cuda")
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-writer") as writer, \
                torch.inference_mode(), enc.inference_autocast(precision):
            for chunk in chunks:
                if forward is None:   # the first chunk tells how many tokens this rank has to embed
                    est = round(chunk.tokens / max(chunk.hi - chunk.lo, 1) * rows_todo)
                    # with views, one eager forward gives the main vector and the views
                    forward = ViewsForward(enc, objective, specs) if specs or own_main_vector(objective) else \
                        inference_forward(enc, cfg.compile, est)
                    say(f"embed: ~{est:,} tokens to embed: "
                        f"{'torch.compile' if compile_outcome(forward)['compiled'] else 'eager'} forward "
                        f"(compile {cfg.compile})", rank, world)
                if current is None:
                    current = ShardOutput(chunk.k, chunk.lo)
                progress.padded += chunk.padded_tokens
                current.add(chunk, embed_batches(forward, chunk.batches, len(chunk.ids), width(dim, specs),
                                                 enc.device, progress.batch))
                if not chunk.last:
                    continue
                host, event = current.to_host(cfg.dtype)
                record = make_record(current.k, current.lo, current.hi, current.ids, current.skipped,
                                     current.content_sha256(), current.tokens, mhash)
                if pending is not None:   # the previous shard's write overlapped this shard's forward
                    finish(pending)
                pending = (writer.submit(_write, out, current.k, current.ids, host, event, record, dim, specs),
                           current, record)
                current = None
            if pending is not None:
                p, pending = pending, None
                finish(p)
    finally:
        chunks.close()   # stops the feed's workers or thread when the loop ends early
    progress.report(final=True)

    dist.barrier()
    # Rank 0 reads every shard's footer once and finalises; the others report their own share.
    records = close_output(out, manifest) if dist.main else own
    if dist.main and specs:
        write_view_manifests(out, manifest, specs, objective.name, manifest["complete"])
    chunk_view = {}
    if objective is not None and objective.writes_chunks and layout.table("sections").exists():
        from encoders.embed.chunks import embed_chunks, write_chunks_manifest

        chunk_view = embed_chunks(layout, enc, mhash, enc.inference_autocast(precision), shape.batch_size, rank,
                                  world, cfg.restart)
        dist.barrier()
        if dist.main:
            chunk_view["chunks"] = write_chunks_manifest(layout, enc, mhash, chunk_view["chunk_shards"],
                                                         chunk_view["chunk_papers"])["chunks"]
    reasons, listed = skips(records)
    s = progress.seconds
    return {"embeddings_dir": str(out), "papers": sum(r["papers"] for r in records.values()),  # rank 0: all
            "input_rows": plan.n_rows, "dim": dim, "shards": n_shards,
            "shards_resumed": len(done), "shards_this_rank": len(todo), "rank": rank, "world_size": world,
            "embedded_now": progress.docs, "tokens_embedded": progress.tokens, "docs_per_second": round(progress.docs / s, 1) if progress.docs else None,
            "tokens_per_second": round(progress.tokens / s) if progress.docs else None,
            "padding": round(progress.padded / progress.tokens, 4) if progress.tokens else None,
            "embed_seconds": round(s, 2), "device": str(enc.device), "precision": precision, "max_length": enc.max_length,
            "first_batch_seconds": round(progress.first[0], 2) if progress.first else None,
            "tokens_per_second_after_first_batch": round((progress.tokens - progress.first[1]) / (s - progress.first[0]))
            if progress.first and s > progress.first[0] and progress.tokens > progress.first[1] else None,
            **compile_outcome(forward), "feed": asdict(shape),
            "skipped": sum(reasons.values()), "skipped_by_reason": dict(reasons),
            "skipped_papers": [{"paper_id": x["paper_id"], "reason": x["reason"]} for x in listed],
            "model_hash": mhash, "views": sorted(specs) + (["chunks"] if chunk_view else []), **chunk_view,
            "config": asdict(cfg)}
