"""The embeddings table, read the same way by every stage that needs vectors.

Written by the embed stage (encoders.embed) as Parquet shards `part-NNNNN.parquet`, each
(paper_id, vector: fixed-size list of float32 or float16), plus `manifest.json`
(contracts.EMBEDDINGS_MANIFEST): model hash, dim, pooling, dtype, shards, and `complete` once
every shard is written. Only a complete run is read, and only the shards its manifest lists.
A directory without a manifest (vectors made by another tool, test inputs) is read whole: every
`part-*.parquet` in name order.

Named views (`views/<name>/`, written beside the main vectors by an objective that declares them,
encoders.embed.views): the same shards and manifest with a `key` column, K rows a paper (a facet,
a head); read with `load_embeddings(..., view=name)` or `load_view`.
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


def view_names(where: RunLayout | str | os.PathLike) -> list[str]:
    """The named views an embed run wrote beside its main vectors."""
    d = embeddings_dir(where) / "views"
    return sorted(p.name for p in d.iterdir() if (p / EMBEDDINGS_MANIFEST).is_file()) if d.is_dir() else []


def _view_dir(where, view: str) -> Path:
    d = embeddings_dir(where)
    if view not in view_names(d):
        raise UserError(f"no view {view!r} in {d} (views: {', '.join(view_names(d)) or 'none'}); the model's "
                        "objective writes its views when the embed stage runs")
    return d / "views" / view


def _read_vectors(d: Path, columns: list[str]) -> tuple[dict, np.ndarray]:
    shards, dim = embedding_shards(d)
    cols: dict[str, list] = {c: [] for c in columns}
    blocks = []
    for s in shards:
        t = pq.read_table(s, columns=[*columns, "vector"])
        col = t.column("vector").combine_chunks()
        if dim is None and pa.types.is_fixed_size_list(col.type):
            dim = col.type.list_size
        if not pa.types.is_fixed_size_list(col.type) or col.type.list_size != dim:
            raise UserError(f"{s}: column 'vector' must be a fixed-size list of {dim} (the manifest's dim); "
                            "shards come from different runs: re-run the embed stage with --restart")
        flat = col.flatten().to_numpy(zero_copy_only=False)
        blocks.append(np.asarray(flat, dtype=np.float32).reshape(len(t), dim))
        for c in columns:
            cols[c].append(t.column(c).to_numpy(zero_copy_only=False))
    out = {c: np.concatenate(v).astype(object) if v else np.zeros(0, object) for c, v in cols.items()}
    X = np.ascontiguousarray(np.concatenate(blocks)) if blocks else np.zeros((0, dim or 0), np.float32)
    return out, X


def load_embeddings(where: RunLayout | str | os.PathLike, view: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(paper ids as an object array, float32 matrix n x dim) of a finished embed run, in shard
    (= input) order. float16 shards are widened to float32. `view`: a named view's rows instead
    (a paper once per key, in key order; the keys: load_view)."""
    if view is not None:
        ids, _, X = load_view(where, view)
        return ids, X
    d = embeddings_dir(where)
    cols, X = _read_vectors(d, ["paper_id"])
    return _unique(cols["paper_id"], d), X


def load_view(where: RunLayout | str | os.PathLike, view: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(paper ids, keys, float32 vectors) of a named view, K rows a paper."""
    cols, X = _read_vectors(_view_dir(where, view), ["paper_id", "key"])
    return cols["paper_id"], cols["key"], X
