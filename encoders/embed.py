"""Embed every paper with a model directory: resumable Parquet shards plus a manifest.

Papers are ordered by text length (longest first, ties by paper_id) so that batches pad little,
then cut into fixed shards of that order: shard k always holds the same papers, so a resumed run
writes each paper exactly once and gives the same vectors as an uninterrupted one. Each shard is
written to a temporary name and renamed; the manifest lists finished shards and is replaced
atomically after each. A resume refuses when the model weights, the input papers or the
settings that shape the output differ from the manifest.
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from importance.contracts import RunLayout, embeddings_schema
from importance.runtime import UserError, read_table
from encoders.model import load_encoder, model_hash, paper_text

MANIFEST = "manifest.json"
DTYPES = {"float32": (np.float32, pa.float32()), "float16": (np.float16, pa.float16())}
CRASH_ENV = "SCIENCEMAP_EMBED_CRASH_AFTER"  # test hook for the CLI: stop after N shards
MAX_LISTED_SKIPS = 100


@dataclass
class EmbedConfig:
    model: str = ""            # "" = the run's trained model (<run>/model); or "minilm" / a path
    pooling: str = ""          # "" = the pooling recorded with the model (else mean)
    batch_size: int = 64
    max_length: int = 128
    dtype: str = "float32"     # float32 | float16 (stored vectors)
    shard_size: int = 10000
    device: str = "auto"
    restart: bool = False      # discard existing shards instead of resuming


def shard_name(k: int) -> str:
    return f"part-{k:05d}.parquet"


def _write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read_papers(layout: RunLayout) -> tuple[list[str], list[str], list[dict]]:
    """(ids, (title, abstract) pairs, skipped) for papers with some text; first row wins on duplicates."""
    tbl = read_table(layout.table("papers"), columns=["paper_id", "title", "abstract"])
    ids = tbl["paper_id"].to_pylist()
    titles = tbl["title"].to_pylist()
    abstracts = tbl["abstract"].to_pylist()
    keep, skipped, seen = [], [], set()
    for i, pid in enumerate(ids):
        if pid is None:
            skipped.append({"paper_id": None, "reason": "null paper_id"})
        elif pid in seen:
            skipped.append({"paper_id": pid, "reason": "duplicate paper_id"})
        elif not paper_text(titles[i], abstracts[i]):
            skipped.append({"paper_id": pid, "reason": "no title and no abstract"})
        else:
            seen.add(pid)
            keep.append(i)
    return [ids[i] for i in keep], [(titles[i], abstracts[i]) for i in keep], skipped


def input_fingerprint(ids: list[str], pairs: list[tuple]) -> str:
    """sha256 over ids and texts in processing order: any changed, added or removed paper shows."""
    h = hashlib.sha256()
    for pid, (t, a) in zip(ids, pairs):
        h.update(json.dumps([pid, t, a]).encode())
    return h.hexdigest()


def _resolve_spec(cfg: EmbedConfig, layout: RunLayout) -> str:
    if cfg.model:
        return cfg.model
    if not layout.model_dir.is_dir():
        raise UserError(f"no trained model at {layout.model_dir}; run jobs/train.py first or pass "
                        "--model minilm (the untuned encoder) or --model PATH")
    return str(layout.model_dir)


def run_embed(cfg: EmbedConfig, layout: RunLayout,
              after_shard: Callable[[int, int], None] | None = None) -> dict:
    """Embed the run's papers into layout.embeddings_dir. `after_shard(k, n_done)` is called after
    each finished shard (a test hook: raise there to simulate a crash)."""
    if cfg.dtype not in DTYPES:
        raise UserError(f"embed dtype {cfg.dtype!r} is unknown; use float32 or float16")
    if cfg.batch_size < 1 or cfg.shard_size < 1:
        raise UserError("embed batch_size and shard_size must be at least 1")
    t_start = time.perf_counter()
    crash_after = int(os.environ.get(CRASH_ENV, "0") or 0)
    enc = load_encoder(_resolve_spec(cfg, layout), cfg.pooling or None, cfg.max_length, cfg.device)
    np_dtype, pa_dtype = DTYPES[cfg.dtype]
    schema = embeddings_schema(enc.dim, pa_dtype)

    ids, pairs, skipped = read_papers(layout)
    order = sorted(range(len(ids)),
                   key=lambda i: (-(len(pairs[i][0] or "") + len(pairs[i][1] or "")), ids[i]))
    ids = [ids[i] for i in order]
    pairs = [pairs[i] for i in order]
    n = len(ids)
    n_shards = (n + cfg.shard_size - 1) // cfg.shard_size
    expected = {
        "model_path": str(enc.path), "model_hash": model_hash(enc.path), "dim": enc.dim,
        "pooling": enc.pooling, "dtype": cfg.dtype, "max_length": enc.max_length,
        "shard_size": cfg.shard_size,
        "input": {"n_papers": n, "fingerprint": input_fingerprint(ids, pairs)},
    }

    out = layout.embeddings_dir
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob(".part-*"), *out.glob(f".{MANIFEST}.tmp-*")]:  # leftovers of a crash
        stale.unlink()
    manifest_path = out / MANIFEST
    done: set[int] = set()
    if manifest_path.is_file() and not cfg.restart:
        old = json.loads(manifest_path.read_text())
        for key in ("model_hash", "pooling", "dtype", "max_length", "shard_size", "input", "dim"):
            if old.get(key) != expected[key]:
                what = "input papers" if key == "input" else key
                raise UserError(f"{out} was started with different {what} than this run; "
                                "rerun with --restart to discard it, or restore the original inputs")
        done = {k for k in old.get("finished_shards", []) if (out / shard_name(k)).is_file()}
    else:
        for old_part in out.glob("part-*.parquet"):
            old_part.unlink()
    manifest = {**expected, "finished_shards": sorted(done), "n_shards": n_shards,
                "complete": len(done) == n_shards, "skipped": len(skipped), "settings": asdict(cfg)}
    _write_json_atomic(manifest_path, manifest)

    todo = [k for k in range(n_shards) if k not in done]
    n_todo = sum(min(cfg.shard_size, n - k * cfg.shard_size) for k in todo)
    print(f"embed: {n} papers ({len(skipped)} skipped), {n_shards} shards, {len(done)} already done, "
          f"{n_todo} to embed on {enc.device} (dim {enc.dim}, {enc.pooling}, {cfg.dtype})",
          file=sys.stderr, flush=True)
    t0, embedded, last_print = time.perf_counter(), 0, 0.0
    enc.model.eval()
    for k in todo:
        lo, hi = k * cfg.shard_size, min(n, (k + 1) * cfg.shard_size)
        vecs = []
        with torch.inference_mode():
            for b in range(lo, hi, cfg.batch_size):
                texts = [paper_text(t, a, enc.sep) for t, a in pairs[b:min(hi, b + cfg.batch_size)]]
                vecs.append(enc.embed_texts(texts).cpu().numpy())
                embedded += len(texts)
                now = time.perf_counter()
                if now - last_print > 10:
                    rate = embedded / (now - t0)
                    print(f"embed: {embedded}/{n_todo} docs, {rate:.0f} docs/s, "
                          f"ETA {(n_todo - embedded) / rate:.0f}s, peak RSS {_rss_mb():.0f} MB",
                          file=sys.stderr, flush=True)
                    last_print = now
        mat = np.concatenate(vecs).astype(np_dtype)
        table = pa.table({
            "paper_id": pa.array(ids[lo:hi], pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(mat.reshape(-1), pa_dtype), enc.dim),
        }, schema=schema)
        tmp = out / f".{shard_name(k)}.tmp-{uuid.uuid4().hex[:8]}"
        pq.write_table(table, tmp)
        os.replace(tmp, out / shard_name(k))
        done.add(k)
        manifest.update(finished_shards=sorted(done), complete=len(done) == n_shards)
        _write_json_atomic(manifest_path, manifest)
        if after_shard is not None:
            after_shard(k, len(done))
        if crash_after and len(done) >= crash_after and len(done) < n_shards:
            raise SystemExit(f"embed: stopping after {len(done)} shards ({CRASH_ENV} test hook)")

    seconds = time.perf_counter() - t0
    rate = embedded / seconds if embedded else None
    print(f"embed: done, {embedded} docs in {seconds:.1f}s"
          + (f" ({rate:.0f} docs/s)" if rate else "") + f", peak RSS {_rss_mb():.0f} MB",
          file=sys.stderr, flush=True)
    reasons: dict[str, int] = {}
    for s in skipped:
        reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
    return {"embeddings_dir": str(out), "papers": n, "dim": enc.dim, "shards": n_shards,
            "shards_resumed": n_shards - len(todo), "embedded_now": embedded,
            "docs_per_second": round(rate, 1) if rate else None, "embed_seconds": round(seconds, 2),
            "skipped": len(skipped), "skipped_by_reason": reasons,
            "skipped_papers": skipped[:MAX_LISTED_SKIPS],
            "model_hash": expected["model_hash"], "config": asdict(cfg),
            "seconds": round(time.perf_counter() - t_start, 2)}


def load_embeddings(layout_or_dir: RunLayout | str | os.PathLike) -> tuple[list[str], np.ndarray]:
    """(paper ids, float32 matrix n x dim) of a finished embed run, in shard order.
    Accepts a RunLayout, a run directory or an embeddings directory."""
    if isinstance(layout_or_dir, RunLayout):
        d = layout_or_dir.embeddings_dir
    else:
        d = Path(layout_or_dir)
        if not (d / MANIFEST).is_file() and (d / "embeddings" / MANIFEST).is_file():
            d = d / "embeddings"
    manifest_path = d / MANIFEST
    if not manifest_path.is_file():
        raise UserError(f"no embeddings manifest at {manifest_path}; run jobs/embed.py first")
    manifest = json.loads(manifest_path.read_text())
    if not manifest.get("complete"):
        raise UserError(f"embeddings in {d} are incomplete ({len(manifest.get('finished_shards', []))}"
                        f"/{manifest.get('n_shards')} shards); rerun jobs/embed.py to resume")
    dim = int(manifest["dim"])
    ids: list[str] = []
    mats = []
    for k in range(int(manifest["n_shards"])):
        t = pq.read_table(d / shard_name(k))
        ids.extend(t["paper_id"].to_pylist())
        flat = t["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
        mats.append(np.asarray(flat, dtype=np.float32).reshape(-1, dim))
    matrix = np.concatenate(mats) if mats else np.zeros((0, dim), np.float32)
    return ids, matrix
