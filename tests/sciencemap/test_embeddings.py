"""The one embeddings reader (sciencemap.embeddings.load_embeddings)."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from sciencemap.contracts import EMBEDDINGS_MANIFEST
from sciencemap.embeddings import load_embedding_ids, load_embeddings, shard_name
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError




@pytest.fixture
def run(tmp_path, write_shard):
    """Two shards of 3 and 2 papers (dim 4) and a complete manifest listing both."""
    layout = RunLayout(tmp_path / "run")
    d = layout.embeddings_dir
    d.mkdir(parents=True)
    X = np.arange(20, dtype=np.float32).reshape(5, 4) / 7
    ids = ["p:a", "p:b", "p:c", "p:d", "p:e"]
    write_shard(d / shard_name(0), ids[:3], X[:3])
    write_shard(d / shard_name(1), ids[3:], X[3:])
    (d / EMBEDDINGS_MANIFEST).write_text(json.dumps({"complete": True, "n_shards": 2, "dim": 4,
                                                      "finished_shards": [0, 1]}))
    return layout, ids, X


def test_a_complete_manifest_reads_its_shards_in_order(run, write_shard):
    layout, ids, X = run
    for where in (layout, layout.root, layout.embeddings_dir):     # a layout, a run or the folder itself
        got_ids, got = load_embeddings(where)
        assert got_ids.tolist() == ids and got.dtype == np.float32
        np.testing.assert_array_equal(got, X)
    write_shard(layout.embeddings_dir / shard_name(2), ["p:stale"], X[:1])   # not in the manifest
    assert len(load_embeddings(layout)[0]) == 5


def test_an_incomplete_or_broken_manifest_is_a_user_error(run):
    layout, _, _ = run
    m = layout.embeddings_dir / EMBEDDINGS_MANIFEST
    m.write_text(json.dumps({"complete": False, "n_shards": 2, "dim": 4, "finished_shards": [0]}))
    with pytest.raises(UserError, match=r"incomplete \(1/2 shards\)"):
        load_embeddings(layout)
    m.write_text(json.dumps({"complete": True, "n_shards": 3, "dim": 4}))
    with pytest.raises(UserError, match="part-00002.parquet.*missing"):
        load_embeddings(layout)
    m.write_text(json.dumps({"complete": True, "n_shards": 2, "dim": 8}))
    with pytest.raises(UserError, match="fixed-size list of 8"):
        load_embeddings(layout)


def test_ids_alone_read_the_same_shards_and_refuse_the_same_runs(run, write_shard):
    layout, ids, _ = run
    write_shard(layout.embeddings_dir / shard_name(2), ["p:stale"], np.zeros((1, 4), np.float32))
    assert load_embedding_ids(layout).tolist() == ids                  # the manifest's shards only
    m = json.loads((layout.embeddings_dir / EMBEDDINGS_MANIFEST).read_text())
    (layout.embeddings_dir / EMBEDDINGS_MANIFEST).write_text(json.dumps({**m, "complete": False}))
    with pytest.raises(UserError, match="incomplete"):
        load_embedding_ids(layout)


def test_float16_shards_are_widened(tmp_path, write_shard):
    d = tmp_path / "emb"
    d.mkdir()
    X = np.array([[0.1, -2.5, 3.0], [1e-3, 0.0, 65000.0]], np.float32)
    write_shard(d / shard_name(0), ["x", "y"], X.astype(np.float16), pa.float16())
    (d / EMBEDDINGS_MANIFEST).write_text(json.dumps({"complete": True, "n_shards": 1, "dim": 3}))
    ids, got = load_embeddings(d)
    assert got.dtype == np.float32 and ids.tolist() == ["x", "y"]
    np.testing.assert_array_equal(got, X.astype(np.float16).astype(np.float32))


def test_without_a_manifest_every_part_file_is_read(tmp_path, write_shard):
    d = tmp_path / "vectors"
    d.mkdir()
    with pytest.raises(UserError, match="no embeddings"):
        load_embeddings(d)
    X = np.eye(3, dtype=np.float32)
    write_shard(d / "part-00001.parquet", ["b"], X[1:2])
    write_shard(d / "part-00000.parquet", ["a"], X[:1])
    write_shard(d / "part-00002.parquet", ["c"], X[2:])
    ids, got = load_embeddings(d)
    assert ids.tolist() == ["a", "b", "c"]                 # name order
    np.testing.assert_array_equal(got, X)
    write_shard(d / "part-00003.parquet", ["a"], X[:1])
    with pytest.raises(UserError, match="duplicate paper_id"):
        load_embeddings(d)


def test_mapping_reads_vectors_only_through_the_store():
    """The mapping stages read no embedding shard themselves: the knn stage converts them into the
    vector store (sciencemap.vectors, whose rows equal load_embeddings' in test_vectors.py)."""
    import mapping.knn
    import mapping.render
    import sciencemap.vectors

    assert mapping.knn.ensure_vectors is sciencemap.vectors.ensure_vectors
    assert not hasattr(mapping.knn, "load_embeddings") and not hasattr(mapping.render, "load_embeddings")
