"""The embed job: every paper of a run through a model directory into resumable Parquet shards.

Rank 0 plans the input (feed.plan_input) and opens the output (shards.open_output: resume, refuse
or start afresh) before the other ranks start; the plan and the manifest are broadcast. Each rank
then embeds its shards — shard k goes to rank k mod WORLD_SIZE under torchrun — reading and
tokenizing the next shard in a thread while the current one runs through the model, and writes
its own shard files. After a barrier rank 0 finalises the manifest (gloo on CPU, nccl on CUDA).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Callable

import numpy as np
import torch

from encoders.config import EmbedConfig
from encoders.embed.feed import InputPlan, plan_input, prepare_shard
from encoders.embed.forward import (check_compile_mode, compile_outcome, embed_token_ids,
                                    inference_forward)
from encoders.embed.shards import close_output, make_record, note_written, open_output, skips, write_shard
from encoders.model import Encoder, load_encoder, model_hash, resolve_precision
from sciencemap.contracts import EMBEDDING_DTYPES, EMBEDDINGS_FORMAT
from sciencemap.layout import RunLayout
from sciencemap.runtime import Dist, UserError, init_dist, rss_mb, say

CRASH_ENV = "SCIENCEMAP_EMBED_CRASH_AFTER"  # test hook for the CLI: stop after N shards
PROGRESS_SECONDS = 10.0
# Ranks wait at the final barrier for the slowest rank's last shards (on a resume, a rank whose
# shards were all done waits for the others' whole share): far longer than torch's default.
BARRIER_TIMEOUT_S = 48 * 3600


class Progress:
    """docs/s, tokens/s (real, unpadded tokens) and ETA over the input rows of this rank's shards."""

    def __init__(self, rows_todo: int, dist: Dist):
        self.rows_todo, self.dist = rows_todo, dist
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
        say("embed: " + ("done, " if final else "") + f"{self.docs} docs ({self.rows}/{self.rows_todo} "
            f"input rows) in {s:.1f}s: {self.docs / s:.1f} docs/s, {self.tokens / s:.0f} tokens/s"
            + ("" if final else f", ETA {eta:.0f}s") + f", peak RSS {rss_mb():.0f} MB",
            self.dist.rank, self.dist.world)


def _resolve_spec(cfg: EmbedConfig, layout: RunLayout) -> str:
    if cfg.model:
        return cfg.model
    if not layout.model_dir.is_dir():
        raise UserError(f"no trained model at {layout.model_dir}; run jobs/train.py first or pass "
                        "--model minilm (the untuned encoder) or --model PATH")
    return str(layout.model_dir)


def _check(cfg: EmbedConfig) -> None:
    if cfg.dtype not in EMBEDDING_DTYPES:
        raise UserError(f"embed dtype {cfg.dtype!r} is unknown; use float32 or float16")
    if cfg.batch_size < 1 or cfg.shard_size < 1 or cfg.max_tokens < 0:
        raise UserError("embed batch_size and shard_size must be at least 1 and max_tokens at least 0")
    check_compile_mode(cfg.compile)


def _set_threads(cfg: EmbedConfig, dist: Dist) -> None:
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    elif dist.world > 1 and not dist.device.startswith("cuda"):
        # CPU ranks on one machine share its cores.
        local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.world))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))


def run_embed(cfg: EmbedConfig, layout: RunLayout,
              after_shard: Callable[[int, int], None] | None = None, encoder: Encoder | None = None) -> dict:
    """Embed the run's papers into layout.embeddings_dir (this rank's share under torchrun).
    `after_shard(k, n_done_by_this_process)` runs after each written shard (a test hook: raise
    there to simulate a crash). `encoder`: an already loaded one (its model, pooling, max_length
    and device replace cfg's), so tests and notebooks skip reloading."""
    _check(cfg)
    t_start = time.perf_counter()
    crash_after = int(os.environ.get(CRASH_ENV, "0") or 0)
    dist = init_dist(cfg.device, timeout_s=BARRIER_TIMEOUT_S)
    try:
        _set_threads(cfg, dist)
        enc = encoder or load_encoder(_resolve_spec(cfg, layout), cfg.pooling or None, cfg.max_length, dist.device)
        summary = _run(cfg, layout, enc, dist, after_shard, crash_after)
        return {**summary, "seconds": round(time.perf_counter() - t_start, 2)}
    finally:
        dist.close()


def _plan_and_open(cfg: EmbedConfig, layout: RunLayout, enc: Encoder, precision: str,
                   dist: Dist) -> tuple[InputPlan, dict, set[int]]:
    """Rank 0 plans the input and opens the output; the others wait for its answer (or its error)."""
    answer = None
    if dist.main:
        try:
            plan = plan_input(layout.table("papers"))
            expected = {
                "format": EMBEDDINGS_FORMAT, "model_path": str(enc.path), "model_hash": model_hash(enc.path),
                "dim": enc.dim, "pooling": enc.pooling, "dtype": cfg.dtype, "precision": precision,
                "max_length": enc.max_length, "shard_size": cfg.shard_size,
                "n_shards": plan.n_shards(cfg.shard_size), "input": plan.fingerprint, "world_size": dist.world,
            }
            manifest, done = open_output(layout.embeddings_dir, expected, asdict(cfg), cfg.restart)
            answer = {"plan": plan, "manifest": manifest, "done": done}
        except UserError as e:
            answer = {"error": str(e)}
    answer = dist.broadcast(answer)
    if "error" in answer:
        raise UserError(answer["error"])
    return answer["plan"], answer["manifest"], answer["done"]


def _run(cfg: EmbedConfig, layout: RunLayout, enc: Encoder, dist: Dist,
         after_shard: Callable[[int, int], None] | None, crash_after: int) -> dict:
    rank, world = dist.rank, dist.world
    enc.model.eval()
    precision = resolve_precision(cfg.precision, enc.device)
    out = layout.embeddings_dir
    plan, manifest, done = _plan_and_open(cfg, layout, enc, precision, dist)
    n_shards, mhash = manifest["n_shards"], manifest["model_hash"]

    todo = [k for k in range(n_shards) if k % world == rank and k not in done]
    rows_todo = sum(hi - lo for lo, hi in (plan.shard_rows(k, cfg.shard_size) for k in todo))
    if dist.main:
        say(f"embed: {plan.n_rows} input rows ({len(plan.dup_rows)} duplicate ids), {n_shards} shards, "
            f"{len(done)} already done; {world} rank(s)", rank, world)
    say(f"embed: {len(todo)} shards ({rows_todo} rows) to embed on {enc.device} (dim {enc.dim}, "
        f"{enc.pooling}, {precision} compute, {cfg.dtype} out, batches <= {cfg.batch_size} docs / "
        f"{cfg.max_tokens or 'any'} tokens, {torch.get_num_threads()} threads)", rank, world)

    progress = Progress(rows_todo, dist)
    forward: Callable = enc.model
    n_written = 0
    own: dict[int, dict] = {}
    # Read + tokenize the next shard in a thread while this one runs through the model.
    with ThreadPoolExecutor(max_workers=1) as reader:
        future = reader.submit(prepare_shard, plan, enc, todo[0], cfg.shard_size) if todo else None
        for j, k in enumerate(todo):
            work = future.result()
            if j == 0:   # the first shard tells how many tokens this rank has to embed
                est = round(work.tokens / max(work.hi - work.lo, 1) * rows_todo)
                forward = inference_forward(enc, cfg.compile, est)
                say(f"embed: ~{est:,} tokens to embed: "
                    f"{'torch.compile' if forward is not enc.model else 'eager'} forward "
                    f"(compile {cfg.compile})", rank, world)
            future = (reader.submit(prepare_shard, plan, enc, todo[j + 1], cfg.shard_size)
                      if j + 1 < len(todo) else None)
            vecs = embed_token_ids(enc, work.token_ids, cfg.batch_size, cfg.max_tokens, precision,
                                   progress.batch, forward)
            own[k] = make_record(work, mhash)
            write_shard(out, k, work.ids, vecs.cpu().numpy().astype(np.dtype(cfg.dtype)), own[k])
            progress.shard_done(work.hi - work.lo)
            n_written += 1
            if dist.main:  # only rank 0 writes the manifest: no races between ranks
                note_written(out, manifest)
            if after_shard is not None:
                after_shard(k, n_written)
            if crash_after and n_written >= crash_after and j + 1 < len(todo):
                raise SystemExit(f"embed: stopping after {n_written} shards ({CRASH_ENV} test hook)")
    progress.report(final=True)

    dist.barrier()
    # Rank 0 reads every shard's footer once and finalises; the others report their own share.
    records = close_output(out, manifest) if dist.main else own
    reasons, listed = skips(records)
    s = progress.seconds
    return {"embeddings_dir": str(out), "papers": sum(r["papers"] for r in records.values()),  # rank 0: all
            "input_rows": plan.n_rows, "dim": enc.dim, "shards": n_shards,
            "shards_resumed": len(done), "shards_this_rank": len(todo), "rank": rank, "world_size": world,
            "embedded_now": progress.docs, "docs_per_second": round(progress.docs / s, 1) if progress.docs else None,
            "tokens_per_second": round(progress.tokens / s) if progress.docs else None,
            "embed_seconds": round(s, 2), "precision": precision, **compile_outcome(forward),
            "skipped": sum(reasons.values()), "skipped_by_reason": dict(reasons),
            "skipped_papers": [{"paper_id": x["paper_id"], "reason": x["reason"]} for x in listed],
            "model_hash": mhash, "config": asdict(cfg)}
