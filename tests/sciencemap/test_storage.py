"""Outputs appear whole or not at all (sciencemap.storage)."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sciencemap.contracts import SCHEMAS, TRIPLETS_META_KEY
from sciencemap.runtime import UserError
from sciencemap.storage import (atomic_dir, atomic_file, read_json_metadata, read_table, sweep_temporaries,
                                table_files, write_json_atomic, write_table_atomic, write_text_atomic)


class WriterDied(Exception):
    pass


def test_atomic_file_keeps_the_old_file_when_the_writer_raises(tmp_path):
    dest = tmp_path / "out.json"
    write_json_atomic(dest, {"v": 1})
    with pytest.raises(WriterDied):
        with atomic_file(dest) as tmp:
            tmp.write_text('{"v": 2, "tor')           # half written, then the writer dies
            raise WriterDied
    assert json.loads(dest.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]   # no temporary left behind
    write_text_atomic(dest, "new")
    assert dest.read_text() == "new"


def test_atomic_dir_keeps_the_old_table_when_the_writer_raises(tmp_path):
    dest = tmp_path / "edges"
    old = pa.table({"src": ["a"], "dst": ["b"]})
    write_table_atomic(old, dest)
    with pytest.raises(WriterDied):
        with atomic_dir(dest) as tmp:
            pq.write_table(pa.table({"src": ["x"] * 3, "dst": ["y"] * 3}), tmp / "part-0.parquet")
            raise WriterDied
    assert read_table(dest).equals(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edges"]
    with atomic_dir(dest) as tmp:                      # a finished writer replaces the whole directory
        pq.write_table(pa.table({"src": ["x"]}), tmp / "part-7.parquet")
    assert [p.name for p in table_files(dest)] == ["part-7.parquet"]


def test_sweep_temporaries_removes_only_what_killed_writers_left(tmp_path):
    (tmp_path / ".papers.tmp-1234abcd").mkdir()
    (tmp_path / ".papers.tmp-1234abcd" / "part-0.parquet").write_bytes(b"torn")
    (tmp_path / ".map.png.tmp-deadbeef").write_bytes(b"torn")
    (tmp_path / "papers").mkdir()
    (tmp_path / "map.png").write_bytes(b"fine")
    (tmp_path / ".hidden").write_text("not ours")
    assert sweep_temporaries(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "map.png", "papers"]
    assert sweep_temporaries(tmp_path) == 0


def test_write_table_atomic_casts_to_the_contract(tmp_path):
    loose = pa.table({"rank": pa.array([1, 2], pa.int64()), "extra": ["drop", "me"],
                      "similarity": pa.array([0.5, 0.25], pa.float64()),
                      "dst": pa.array([1, 2], pa.int64()), "src": [0, 0]})
    write_table_atomic(loose, tmp_path / "edges", SCHEMAS["edges"])
    t = read_table(tmp_path / "edges")
    assert t.schema.equals(SCHEMAS["edges"])           # columns selected, ordered and cast
    assert t.column("rank").to_pylist() == [1, 2] and t.column("similarity").to_pylist() == [0.5, 0.25]
    assert t.column("src").type == pa.int32() and t.column("dst").to_pylist() == [1, 2]
    with pytest.raises((pa.ArrowInvalid, KeyError)):   # a missing contract column is not papered over
        write_table_atomic(loose.drop(["rank"]), tmp_path / "edges2", SCHEMAS["edges"])
    assert not (tmp_path / "edges2").exists()


def test_reading_a_missing_table_is_a_user_error_and_metadata_round_trips(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_table(tmp_path / "nope")
    meta = {"K": 5, "H": 2}
    t = pa.table({"anchor_id": ["a"]}).replace_schema_metadata({TRIPLETS_META_KEY: json.dumps(meta)})
    write_table_atomic(t, tmp_path / "triplets")
    assert read_json_metadata(tmp_path / "triplets", TRIPLETS_META_KEY) == meta
    assert read_json_metadata(tmp_path / "triplets", b"other") == {}
    assert read_json_metadata(tmp_path / "nope", TRIPLETS_META_KEY) == {}
