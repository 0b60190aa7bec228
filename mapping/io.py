"""Reading the inputs the mapping stages share: embedding shards and the papers table.

`load_embeddings` reads the embedding shards directly with pyarrow (paper_id + fixed-size list
vector, float32 or float16), so this package does not import the encoder package (and torch). When
the embed stage's `manifest.json` is present it must say `complete` and its shards are read;
without a manifest every `part-*.parquet` is read (hand-made inputs, tests).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from importance.contracts import RunLayout
from importance.runtime import UserError, read_table


def load_embeddings(layout: RunLayout) -> tuple[np.ndarray, np.ndarray]:
    """Return (paper_ids as object array, vectors as float32 [n, d]) in shard order."""
    d = layout.embeddings_dir
    manifest = Path(d) / "manifest.json"
    if manifest.is_file():
        # Written by the embed stage: only a complete run is used, and only its listed shards.
        m = json.loads(manifest.read_text())
        if not m.get("complete"):
            raise UserError(f"embeddings in {d} are incomplete; re-run the embed stage to finish them")
        shards = [Path(d) / f"part-{k:05d}.parquet" for k in range(int(m.get("n_shards", 0)))]
        missing = [s.name for s in shards if not s.is_file()]
        if missing:
            raise UserError(f"embedding shards {missing[:3]} listed in {manifest} are missing; re-run the embed stage")
    else:
        shards = sorted(Path(d).glob("part-*.parquet"))
    if not shards:
        raise UserError(f"no embedding shards (part-*.parquet) in {d}; run the embed stage first")
    ids, blocks, dim = [], [], None
    for s in shards:
        t = pq.read_table(s, columns=["paper_id", "vector"])
        col = t.column("vector").combine_chunks()
        if isinstance(col, pa.ChunkedArray):  # empty shard
            continue
        if not pa.types.is_fixed_size_list(col.type):
            raise UserError(f"{s}: column 'vector' must be a fixed-size list; re-run the embed stage")
        if dim is None:
            dim = col.type.list_size
        elif col.type.list_size != dim:
            raise UserError(f"{s}: vector size {col.type.list_size} differs from {dim}; shards come from different models")
        flat = col.flatten().to_numpy(zero_copy_only=False)
        blocks.append(flat.reshape(len(t), dim).astype(np.float32, copy=False))
        ids.append(t.column("paper_id").to_numpy(zero_copy_only=False))
    if not blocks:
        raise UserError(f"the embedding shards in {d} hold no rows; run the embed stage first")
    pid = np.concatenate(ids).astype(object)
    X = np.ascontiguousarray(np.concatenate(blocks))
    if len(np.unique(pid)) != len(pid):
        raise UserError(f"duplicate paper_id values in {d}; remove stale shards and re-run the embed stage")
    return pid, X


def load_papers(layout: RunLayout, columns: list[str]) -> "pd.DataFrame":  # noqa: F821
    """The papers table (only the asked columns) as pandas."""
    return read_table(layout.table("papers"), columns=columns).to_pandas()


def l2_normalise(X: np.ndarray) -> np.ndarray:
    """Unit rows (float32); zero rows stay zero."""
    X = np.asarray(X, dtype=np.float32)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(n > 0, n, 1.0)
