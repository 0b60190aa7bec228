"""The mapping stages' vector store (sciencemap.vectors) and progress lines (sciencemap.progress)."""
from __future__ import annotations

import json
import logging
import os

import numpy as np
import pyarrow as pa
import pytest

from sciencemap.contracts import VECTORS_META
from sciencemap.embeddings import load_embeddings, shard_name
from sciencemap.layout import RunLayout
from sciencemap.progress import Progress
from sciencemap.runtime import UserError
from sciencemap.embeddings import embedding_shards
from sciencemap.vectors import ensure_vectors, open_vectors, read_rows, write_vectors




@pytest.fixture
def run(tmp_path, write_shard):
    """Three shards (dim 6), one row all zeros, one float16 shard."""
    layout = RunLayout(tmp_path / "run")
    d = layout.embeddings_dir
    d.mkdir(parents=True)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(11, 6)).astype(np.float32) * 5
    X[4] = 0
    ids = [f"p:{i}" for i in range(11)]
    write_shard(d / shard_name(0), ids[:5], X[:5])
    write_shard(d / shard_name(1), ids[5:9], X[5:9])
    write_shard(d / shard_name(2), ids[9:], X[9:].astype(np.float16), pa.float16())
    return layout, ids, X


def test_the_store_holds_unit_rows_in_shard_order_with_ids_beside(run):
    layout, ids, _ = run
    v = ensure_vectors(layout)
    want_ids, want = load_embeddings(layout)
    norms = np.linalg.norm(want, axis=1, keepdims=True)
    want = want / np.where(norms > 0, norms, 1.0)
    assert isinstance(v.X, np.memmap) and v.X.dtype == np.float32 and v.X.shape == (11, 6)
    np.testing.assert_array_equal(np.asarray(v.X), want)          # the same numbers as normalising in memory
    assert v.ids().tolist() == ids == want_ids.tolist()
    assert not np.asarray(v.X[4]).any()                           # a zero row stays zero
    np.testing.assert_allclose(np.linalg.norm(v.block(5, 11), axis=1), 1.0, rtol=1e-6)
    assert v.meta["rows"] == 11 and v.meta["dtype"] == "float32" and v.meta["normalised"]


def test_the_store_is_reused_until_the_embeddings_or_the_dtype_change(run, write_shard):
    layout, ids, X = run
    first = ensure_vectors(layout)
    unit = first.block(0, 11)
    stamp = (layout.vectors_dir / VECTORS_META).stat().st_mtime_ns
    assert ensure_vectors(layout).meta == first.meta
    assert (layout.vectors_dir / VECTORS_META).stat().st_mtime_ns == stamp     # not rewritten
    half = ensure_vectors(layout, "float16")
    assert half.X.dtype == np.float16 and half.meta["dtype"] == "float16"
    np.testing.assert_allclose(half.block(0, 11), unit, atol=1e-3)
    # A re-embedded shard (new content) is converted again.
    write_shard(layout.embeddings_dir / shard_name(1), ids[5:9], -X[5:9])
    os.utime(layout.embeddings_dir / shard_name(1), ns=(1, 1))
    again = ensure_vectors(layout, "float16")
    assert again.meta["source"] != half.meta["source"]
    np.testing.assert_allclose(again.block(5, 9), -unit[5:9], atol=1e-3)


def test_bad_stores_and_duplicate_ids_are_user_errors(run, tmp_path, write_shard):
    layout, ids, X = run
    with pytest.raises(UserError, match="no vectors"):
        open_vectors(layout)
    with pytest.raises(UserError, match="dtype 'float64' is unknown"):
        ensure_vectors(layout, "float64")
    write_shard(layout.embeddings_dir / shard_name(3), ids[:1], X[:1])
    with pytest.raises(UserError, match="duplicate paper_id"):
        ensure_vectors(layout)
    assert not layout.vectors_dir.exists()                        # nothing half-written is left
    (layout.embeddings_dir / shard_name(3)).unlink()
    v = ensure_vectors(layout)
    meta = json.loads((layout.vectors_dir / VECTORS_META).read_text())
    meta["rows"] = 12
    (layout.vectors_dir / VECTORS_META).write_text(json.dumps(meta))
    with pytest.raises(UserError, match="shape"):
        open_vectors(layout)
    del v


def test_shards_converted_in_threads_give_the_bytes_of_one_after_another(tmp_path, write_shard):
    """Each shard is written at its rows' offset by whichever thread converts it; the ids follow
    shard order. Shards of uneven sizes, more shards than threads, both dtypes."""
    d = tmp_path / "emb"
    d.mkdir()
    rng = np.random.default_rng(5)
    sizes = [7, 1, 12, 3, 9, 2, 5]
    X = rng.normal(size=(sum(sizes), 5)).astype(np.float32)
    ids = [f"p:{i}" for i in range(len(X))]
    at = 0
    for i, k in enumerate(sizes):
        write_shard(d / shard_name(i), ids[at:at + k], X[at:at + k])
        at += k
    shards, _ = embedding_shards(d)
    for dtype in ("float32", "float16"):
        one = write_vectors(shards, tmp_path / f"one_{dtype}", dtype, "f", workers=1)
        many = write_vectors(shards, tmp_path / f"many_{dtype}", dtype, "f", workers=3)
        assert one == many
        a, b = (open_vectors(tmp_path / f"{w}_{dtype}") for w in ("one", "many"))
        assert (tmp_path / f"one_{dtype}" / "vectors.npy").read_bytes() == \
               (tmp_path / f"many_{dtype}" / "vectors.npy").read_bytes()
        assert b.ids().tolist() == ids == a.ids().tolist()
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        np.testing.assert_allclose(np.asarray(b.X, np.float32), X / norms, atol=1e-3 if dtype == "float16" else 1e-6)


def test_an_unreadable_shard_is_one_user_error_and_leaves_no_store(tmp_path, write_shard):
    d = tmp_path / "emb"
    d.mkdir()
    X = np.random.default_rng(6).normal(size=(400, 8)).astype(np.float32)
    for i in range(4):
        write_shard(d / shard_name(i), [f"p:{i}:{j}" for j in range(100)], X[100 * i:100 * (i + 1)])
    bad = d / shard_name(2)
    raw = bytearray(bad.read_bytes())
    raw[4:len(raw) // 2] = b"\xff" * (len(raw) // 2 - 4)      # the data pages, not the footer the first pass reads
    bad.write_bytes(bytes(raw))
    shards, _ = embedding_shards(d)
    with pytest.raises(UserError, match=f"{shard_name(2)}: unreadable embedding shard"):
        write_vectors(shards, tmp_path / "vectors", "float32", "f", workers=2)
    assert not (tmp_path / "vectors").exists()


def test_read_rows_from_a_memory_map_float32_and_float16(tmp_path):
    X = np.random.default_rng(0).normal(size=(50, 7)).astype(np.float32)
    for dt in (np.float32, np.float16):
        p = tmp_path / f"{np.dtype(dt).name}.npy"
        np.save(p, X.astype(dt))
        mm = np.load(p, mmap_mode="r")
        for lo, hi in ((0, 50), (3, 4), (10, 49), (20, 20)):
            got = read_rows(mm, lo, hi)
            assert got.dtype == np.float32 and got.shape == (hi - lo, 7)
            np.testing.assert_array_equal(got, X.astype(dt)[lo:hi].astype(np.float32))
    np.testing.assert_array_equal(read_rows(X, 5, 9), X[5:9])          # a plain array works too


def test_progress_reports_rate_eta_and_memory(caplog):
    with caplog.at_level(logging.INFO, logger="sciencemap.progress"):
        with Progress("search", 400, "queries", every_s=0.0) as p:
            p.advance(100)
            p.advance(300)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("search: 100/400 queries (25.0%)") and "ETA" in lines[0] and "RSS" in lines[0]
    assert lines[-1].startswith("search: 400/400 queries (100.0%)") and "took" in lines[-1]
