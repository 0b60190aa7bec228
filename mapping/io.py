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

from sciencemap.layout import RunLayout
from sciencemap.embeddings import load_embeddings  # noqa: F401  (the one reader, re-exported)
from sciencemap.storage import read_table


def load_papers(layout: RunLayout, columns: list[str]) -> "pd.DataFrame":  # noqa: F821
    """The papers table (only the asked columns) as pandas."""
    return read_table(layout.table("papers"), columns=columns).to_pandas()


def l2_normalise(X: np.ndarray) -> np.ndarray:
    """Unit rows (float32); zero rows stay zero."""
    X = np.asarray(X, dtype=np.float32)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(n > 0, n, 1.0)
