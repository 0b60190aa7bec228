"""Reading the inputs the mapping stages share: the papers table and unit-length vectors.

Embeddings are read by the one reader, sciencemap.embeddings.load_embeddings (pyarrow only, so
this package does not import torch).
"""
from __future__ import annotations

import numpy as np

from sciencemap.layout import RunLayout
from sciencemap.storage import read_table


def load_papers(layout: RunLayout, columns: list[str]) -> "pd.DataFrame":  # noqa: F821
    """The papers table (only the asked columns) as pandas."""
    return read_table(layout.table("papers"), columns=columns).to_pandas()


def l2_normalise(X: np.ndarray) -> np.ndarray:
    """Unit rows (float32); zero rows stay zero."""
    X = np.asarray(X, dtype=np.float32)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(n > 0, n, 1.0)
