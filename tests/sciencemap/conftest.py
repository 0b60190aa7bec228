"""Fixtures of the core's tests: embedding shards written the way the embed stage writes them."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sciencemap.contracts import embeddings_schema


@pytest.fixture
def write_shard():
    """write_shard(path, ids, X, dtype=pa.float32()): one (paper_id, vector) Parquet shard."""
    def write(path, ids, X: np.ndarray, dtype=pa.float32()):
        vec = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel(), dtype), X.shape[1])
        pq.write_table(pa.table({"paper_id": pa.array(ids, pa.string()), "vector": vec},
                                schema=embeddings_schema(X.shape[1], dtype)), path)
    return write
