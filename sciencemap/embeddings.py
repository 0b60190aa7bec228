"""The embeddings table, read the same way by every stage that needs vectors.

Written by the embed stage (encoders.embed) as Parquet shards `part-NNNNN.parquet`, each
(paper_id, vector: fixed-size list of float32 or float16), plus `manifest.json`
(contracts.EMBEDDINGS_MANIFEST): model hash, dim, pooling, dtype, shards, and `complete` once
every shard is written. Only a complete run is read, and only the shards its manifest lists.
A directory without a manifest (vectors made by another tool, test inputs) is read whole: every
`part-*.parquet` in name order.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.contracts import EMBEDDINGS_MANIFEST
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError


def shard_name(k: int) -> str:
    return f"part-{k:05d}.parquet"


def embeddings_dir(where: RunLayout | str | os.PathLike) -> Path:
    """A RunLayout, a run directory or an embeddings directory -> the embeddings directory."""
    if isinstance(where, RunLayout):
        return where.embeddings_dir
    d = Path(where)
    if not (d / EMBEDDINGS_MANIFEST).is_file() and (d / "embeddings" / EMBEDDINGS_MANIFEST).is_file():
        d = d / "embeddings"
    return d


def read_manifest(d: Path) -> dict:
    path = d / EMBEDDINGS_MANIFEST
    if not path.is_file():
        raise UserError(f"no embeddings manifest at {path}; run the embed stage first")
    return json.loads(path.read_text())


def embedding_shards(d: Path) -> tuple[list[Path], int | None]:
    """The shard files to read, in order, and the manifest's dim (None without a manifest)."""
    if (d / EMBEDDINGS_MANIFEST).is_file():
        m = read_manifest(d)
        if not m.get("complete"):
            raise UserError(f"embeddings in {d} are incomplete ({len(m.get('finished_shards', []))}"
                            f"/{m.get('n_shards')} shards); re-run the embed stage to resume")
        shards = [d / shard_name(k) for k in range(int(m.get("n_shards", 0)))]
        missing = [s.name for s in shards if not s.is_file()]
        if missing:
            raise UserError(f"embedding shards {missing[:3]} listed in {d / EMBEDDINGS_MANIFEST} are missing; "
                            "re-run the embed stage")
        return shards, int(m["dim"])
    shards = sorted(d.glob("part-*.parquet"))
    if not shards:
        raise UserError(f"no embeddings in {d} (neither {EMBEDDINGS_MANIFEST} nor part-*.parquet); "
                        "run the embed stage first")
    return shards, None


def _unique(pid: np.ndarray, d: Path) -> np.ndarray:
    if len(np.unique(pid)) != len(pid):
        raise UserError(f"duplicate paper_id values in {d}; remove stale shards and re-run the embed stage")
    return pid


def load_embedding_ids(where: RunLayout | str | os.PathLike) -> np.ndarray:
    """The paper ids of a finished embed run (object array, shard order), without the vectors."""
    d = embeddings_dir(where)
    shards, _ = embedding_shards(d)
    ids = [pq.read_table(s, columns=["paper_id"]).column("paper_id").to_numpy(zero_copy_only=False) for s in shards]
    return _unique(np.concatenate(ids).astype(object) if ids else np.zeros(0, object), d)


def load_embeddings(where: RunLayout | str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """(paper ids as an object array, float32 matrix n x dim) of a finished embed run, in shard
    (= input) order. float16 shards are widened to float32."""
    d = embeddings_dir(where)
    shards, dim = embedding_shards(d)
    ids, blocks = [], []
    for s in shards:
        t = pq.read_table(s, columns=["paper_id", "vector"])
        col = t.column("vector").combine_chunks()
        if dim is None and pa.types.is_fixed_size_list(col.type):
            dim = col.type.list_size
        if not pa.types.is_fixed_size_list(col.type) or col.type.list_size != dim:
            raise UserError(f"{s}: column 'vector' must be a fixed-size list of {dim} (the manifest's dim); "
                            "shards come from different runs: re-run the embed stage with --restart")
        flat = col.flatten().to_numpy(zero_copy_only=False)
        blocks.append(np.asarray(flat, dtype=np.float32).reshape(len(t), dim))
        ids.append(t.column("paper_id").to_numpy(zero_copy_only=False))
    pid = _unique(np.concatenate(ids).astype(object) if ids else np.zeros(0, object), d)
    X = np.ascontiguousarray(np.concatenate(blocks)) if blocks else np.zeros((0, dim or 0), np.float32)
    return pid, X
