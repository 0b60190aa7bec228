"""Shard bookkeeping of the embed stage: the shard files, their footer records and the manifest.

Shard k is written to `part-NNNNN.parquet` (sciencemap.embeddings.shard_name) under a temporary
name and renamed, so a shard file on disk is a finished shard; a resume skips those. Each file's
footer (under contracts.EMBEDDING_SHARD_META_KEY) holds the shard's record: its input rows,
papers, model hash, content hash, tokens and skipped rows. The manifest (contracts.EMBEDDINGS_MANIFEST:
model, model hash, dim, pooling, dtype, precision, input fingerprint, finished shards, complete)
is written only by rank 0; a resume refuses when the model, the input or a setting that shapes
the vectors changed.
"""
from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.contracts import EMBEDDING_SHARD_META_KEY, EMBEDDINGS_MANIFEST, embeddings_schema
from sciencemap.embeddings import read_manifest, shard_name
from sciencemap.runtime import UserError
from sciencemap.storage import atomic_file, sweep_temporaries, write_json_atomic

log = logging.getLogger(__name__)

MAX_LISTED_SKIPS = 100  # skipped rows listed by name per shard (all are counted)
# Settings that change the vectors or the shard assignment: a resume must match them.
RESUME_KEYS = ("model_hash", "dim", "pooling", "dtype", "precision", "max_length", "shard_size", "input")


def shard_index(p: Path) -> int | None:
    stem = p.name[len("part-"):-len(".parquet")]
    return int(stem) if stem.isdigit() else None


def shards_on_disk(out: Path) -> set[int]:
    return {k for k in map(shard_index, out.glob("part-*.parquet")) if k is not None}


def make_record(k: int, lo: int, hi: int, ids: list[str], skipped: list[dict], content_sha256: str,
                tokens: int, model_hash: str) -> dict:
    """The record a shard file carries in its footer."""
    return {"shard": k, "rows": [lo, hi], "papers": len(ids),
            "model_hash": model_hash, "content_sha256": content_sha256, "tokens": tokens,
            "skipped_by_reason": dict(Counter(s["reason"] for s in skipped)),
            "skipped": skipped[:MAX_LISTED_SKIPS]}


def write_shard(out: Path, k: int, ids: list[str], vectors: np.ndarray, record: dict) -> None:
    """Shard k's (paper_id, vector) rows, vectors stored in their numpy dtype (float32 or float16)."""
    pa_dtype = pa.from_numpy_dtype(vectors.dtype)
    dim = vectors.shape[1]
    table = pa.table({
        "paper_id": pa.array(ids, pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa_dtype), dim),
    }, schema=embeddings_schema(dim, pa_dtype))
    table = table.replace_schema_metadata({EMBEDDING_SHARD_META_KEY: json.dumps(record).encode()})
    with atomic_file(out / shard_name(k)) as tmp:
        pq.write_table(table, tmp)


def read_record(path: Path) -> dict | None:
    """The record stored in a shard file's footer (None if unreadable or foreign)."""
    try:
        meta = pq.read_schema(path).metadata or {}
        return json.loads(meta[EMBEDDING_SHARD_META_KEY]) if EMBEDDING_SHARD_META_KEY in meta else None
    except (OSError, pa.ArrowInvalid, ValueError):
        return None


def finished_shards(out: Path, model_hash: str, shard_size: int) -> dict[int, dict]:
    """Shard files of this job on disk (k -> record): same model, same shard boundaries."""
    done = {}
    for k in shards_on_disk(out):
        rec = read_record(out / shard_name(k))
        if rec and rec.get("shard") == k and rec.get("model_hash") == model_hash \
                and rec.get("rows", [None])[0] == k * shard_size:
            done[k] = rec
    return done


def open_output(out: Path, expected: dict, settings: dict, restart: bool,
                replace_stale: bool = False) -> tuple[dict, set[int]]:
    """Rank 0, before any shard is embedded: sweep what a killed run left, check an existing job
    against `expected` (refuse when a RESUME_KEYS value differs, or with `replace_stale` clear it:
    the pipeline, which re-runs this stage because an earlier one changed) or clear it (restart, or
    no manifest), and write the manifest with the shards already finished."""
    out.mkdir(parents=True, exist_ok=True)
    sweep_temporaries(out)
    stale = None
    if (out / EMBEDDINGS_MANIFEST).is_file() and not restart:
        old = read_manifest(out)
        for key in RESUME_KEYS:
            if old.get(key) != expected[key]:
                stale = "input papers" if key == "input" else key
                if not replace_stale:
                    raise UserError(f"{out} was started with different {stale} than this run; "
                                    "rerun with --restart to discard it, or restore the original inputs")
                log.warning("embed: %s holds shards made with different %s than this run: discarded", out, stale)
                break
    if restart or stale or not (out / EMBEDDINGS_MANIFEST).is_file():
        for old_part in out.glob("part-*.parquet"):
            old_part.unlink()
        shutil.rmtree(out / "views", ignore_errors=True)   # views are shards of the same job
    done = set(finished_shards(out, expected["model_hash"], expected["shard_size"]))
    manifest = {**expected, "finished_shards": sorted(done),
                "complete": len(done) == expected["n_shards"], "settings": settings}
    write_json_atomic(out / EMBEDDINGS_MANIFEST, manifest)
    return manifest, done


def note_written(out: Path, manifest: dict) -> None:
    """Rank 0 after each of its shards. Names suffice mid-run (files on disk were checked at the
    start or written since); footers are read once, at the end."""
    manifest.update(finished_shards=sorted(k for k in shards_on_disk(out) if k < manifest["n_shards"]))
    write_json_atomic(out / EMBEDDINGS_MANIFEST, manifest)


def close_output(out: Path, manifest: dict) -> dict[int, dict]:
    """Rank 0 after every rank is done: read each shard's footer once, mark the manifest complete
    when all shards are there, and return the records."""
    records = finished_shards(out, manifest["model_hash"], manifest["shard_size"])
    manifest.update(finished_shards=sorted(records), complete=len(records) == manifest["n_shards"],
                    papers=sum(r["papers"] for r in records.values()),
                    skipped=sum(sum(r["skipped_by_reason"].values()) for r in records.values()))
    write_json_atomic(out / EMBEDDINGS_MANIFEST, manifest)
    return records


def skips(records: dict[int, dict]) -> tuple[Counter, list[dict]]:
    """Skipped rows over the shards' records: counts by reason, and up to MAX_LISTED_SKIPS by name."""
    reasons: Counter = Counter()
    listed: list[dict] = []
    for k in sorted(records):
        reasons.update(records[k]["skipped_by_reason"])
        listed.extend(records[k]["skipped"][:MAX_LISTED_SKIPS - len(listed)])
    return reasons, listed
