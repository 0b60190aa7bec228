"""Reader records written as Parquet per kind by a task (importance.ingest.staged_records)."""
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from importance.ingest import staged_records

SCHEMAS = {"paper": pa.schema([("paper_id", pa.string()), ("source", pa.string()), ("year", pa.int32()),
                               ("authors", pa.list_(pa.struct([("family", pa.string()), ("given", pa.string())])))]),
           "reject": pa.schema([("record_id", pa.string()), ("source", pa.string()), ("level", pa.string())]),
           "mention": pa.schema([("citing_id", pa.string()), ("source", pa.string())])}


def test_records_land_per_kind_in_row_groups_with_their_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(staged_records, "FLUSH_ROWS", 2)  # several row groups in one task's file
    staged_records.prepare(tmp_path, SCHEMAS)
    papers = [{"paper_id": f"p{i}", "source": "a" if i < 3 else "b", "year": 2000 + i,
               "authors": [{"family": "X", "given": None}], "not_a_column": 1} for i in range(5)]
    records = [("paper", p) for p in papers] + [("reject", {"record_id": "r", "source": "a", "level": "item"})]
    counts = staged_records.write_records(str(tmp_path), SCHEMAS, "part-00000", records)
    assert counts == {("a", "paper"): 3, ("b", "paper"): 2, ("a", "reject:item"): 1}
    got = pq.read_table(tmp_path / "paper" / "part-00000.parquet")
    assert pq.ParquetFile(tmp_path / "paper" / "part-00000.parquet").metadata.num_row_groups == 3
    assert got.column("paper_id").to_pylist() == [p["paper_id"] for p in papers]
    assert got.column("authors").to_pylist()[0] == [{"family": "X", "given": None}]
    # a kind no record had: its folder stays empty; no hidden temporary file is left anywhere
    assert os.listdir(tmp_path / "mention") == []
    assert not [n for d in SCHEMAS for n in os.listdir(tmp_path / d) if n.startswith(".")]
    assert staged_records.merge_counts([counts, {("a", "paper"): 4}]) == {
        "a": {"paper": 7, "reject:item": 1}, "b": {"paper": 2}}


def test_a_record_of_the_wrong_type_or_kind_fails_loudly(tmp_path):
    staged_records.prepare(tmp_path, SCHEMAS)
    with pytest.raises(ValueError, match="unknown kind 'sentence'"):
        staged_records.write_records(str(tmp_path), SCHEMAS, "p", [("sentence", {})])
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        staged_records.write_records(str(tmp_path), SCHEMAS, "p", [("paper", {"paper_id": "x", "year": "1999"})])
    assert not list((tmp_path / "paper").glob("*.parquet"))  # nothing published that Spark would read


def test_the_pass_runs_without_the_cyclic_gc_and_frees_cycles_after(tmp_path, monkeypatch):
    import gc
    import weakref

    monkeypatch.setattr(staged_records, "GC_EVERY_RECORDS", 3)
    staged_records.prepare(tmp_path, SCHEMAS)
    seen, cycles, alive_before_4th = [], [], []

    class Cyclic:  # garbage that only the cyclic collector frees
        pass

    def records(n):
        for i in range(n):
            seen.append(gc.isenabled())
            if i == 3:
                alive_before_4th.extend(ref() is not None for ref in cycles)
            c = Cyclic()
            c.me = c
            cycles.append(weakref.ref(c))
            del c
            yield "paper", {"paper_id": f"p{i}", "source": "a"}

    assert gc.isenabled()
    staged_records.write_records(str(tmp_path), SCHEMAS, "part-00000", records(4))
    assert seen == [False] * 4 and gc.isenabled()
    assert alive_before_4th == [False] * 3  # collected while paused, every GC_EVERY_RECORDS records
    assert all(ref() is None for ref in cycles)  # and at the end

    def failing():
        yield from records(1)
        raise RuntimeError("reader broke")

    with pytest.raises(RuntimeError, match="reader broke"):
        staged_records.write_records(str(tmp_path), SCHEMAS, "part-00001", failing())
    assert gc.isenabled()  # a failed task leaves the worker's collector on for its next task
    gc.disable()
    try:  # a caller that paused it itself finds it still paused
        staged_records.write_records(str(tmp_path), SCHEMAS, "part-00002", records(1))
        assert not gc.isenabled()
    finally:
        gc.enable()
