"""Reader records handed to Spark as Parquet, not as pickled Python rows.

The readers run in Spark's Python workers and give `(kind, dict)` records. Handing them to the JVM
row by row (createDataFrame over an RDD) pickles every record in Python, unpickles it in the JVM
and then filters the whole record stream once per kind; at 250k papers with 8M references that was
most of the ingest's time. Here each task writes its records with pyarrow, one Parquet file per
record kind (paper, ref, mention, ...) under `<dir>/<kind>/`, and returns only its counts; Spark
then reads each kind as a Parquet table (columnar, no Python).

A task writes `part-<partition>.parquet` through a hidden temporary name (Spark's readers skip
names starting with '.') and renames it when done, so a retried task replaces its own files and a
failed one leaves nothing Spark reads. On a cluster `<dir>` must be on storage every executor sees,
as the run's tables are.
"""
from __future__ import annotations

import gc
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

FLUSH_ROWS = 20_000  # rows of one kind buffered before a row group is written (bounds a task's memory)
GC_EVERY_RECORDS = 1_000_000  # a full collection this often while the cyclic GC is paused


def arrow_schemas(spark_schemas: dict) -> dict:
    """{kind: pyarrow schema} from the ingest's Spark schemas of the record kinds."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return {kind: to_arrow_schema(s) for kind, s in spark_schemas.items()}


def count_key(kind: str, rec: dict) -> tuple:
    """What the ingest's per-source checks count: (source, kind), rejects by level."""
    if kind == "reject":
        return rec.get("source"), "reject:" + rec.get("level", "record")
    return rec.get("source"), kind


class KindWriters:
    """One Parquet writer per record kind for one task (or the driver's listed records)."""

    def __init__(self, root: str, name: str, schemas: dict):
        self.root, self.name, self.schemas = root, name, schemas
        self.rows: dict[str, list] = {k: [] for k in schemas}
        self.writers: dict = {}
        self.counts: dict = {}

    def _tmp(self, kind: str) -> str:
        return os.path.join(self.root, kind, f".{self.name}.parquet.tmp")

    def add(self, kind: str, rec: dict) -> None:
        if kind not in self.rows:
            raise ValueError(f"reader record of unknown kind {kind!r}")
        key = count_key(kind, rec)
        self.counts[key] = self.counts.get(key, 0) + 1
        rows = self.rows[kind]
        rows.append(rec)
        if len(rows) >= FLUSH_ROWS:
            self._flush(kind)

    def _flush(self, kind: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = self.rows[kind]
        if not rows:
            return
        schema = self.schemas[kind]
        # one struct array converted in C++: Table.from_pylist first gathers every column in a Python
        # loop (2.4x the CPU on reference rows)
        table = pa.Table.from_arrays(pa.array(rows, type=pa.struct(schema)).flatten(), schema=schema)
        if kind not in self.writers:
            self.writers[kind] = pq.ParquetWriter(self._tmp(kind), schema, compression="zstd")
        self.writers[kind].write_table(table)
        rows.clear()

    def close(self) -> dict:
        """Write what is buffered, publish each kind's file; the counts by (source, kind)."""
        for kind in self.rows:
            self._flush(kind)
        for kind, w in self.writers.items():
            w.close()
            os.replace(self._tmp(kind), os.path.join(self.root, kind, f"{self.name}.parquet"))
        return self.counts


@contextmanager
def cyclic_gc_paused():
    """Python's cyclic garbage collector off for a block, on again (if it was) after it.

    The readers' records hold no reference cycles (JSON and XML values, dicts and lists: reference
    counting frees them), but every buffered row is a container the collector walks again and
    again until its batch is written: on a generated S2ORC file (18k papers, 590k references)
    the full collections alone were 4.3 of 26 CPU s, the young ones 1.5 s more. Any cycle made
    while paused is freed by the collections write_records runs itself."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def write_records(root: str, schemas: dict, name: str, records) -> dict:
    """Write (kind, dict) records under root/<kind>/<name>.parquet; their counts by (source, kind).
    The pass runs with the cyclic GC paused (cyclic_gc_paused), collecting every
    GC_EVERY_RECORDS records and at the end instead."""
    w = KindWriters(root, name, schemas)
    with cyclic_gc_paused():
        for n, (kind, rec) in enumerate(records, 1):
            w.add(kind, rec)
            if n % GC_EVERY_RECORDS == 0:
                gc.collect()
        counts = w.close()
    gc.collect()
    return counts


def prepare(root: Path, kinds) -> None:
    """An empty folder per kind (a kind no reader gave is then an empty table, not a missing path)."""
    shutil.rmtree(root, ignore_errors=True)
    for kind in kinds:
        (root / kind).mkdir(parents=True, exist_ok=True)


def merge_counts(parts) -> dict:
    """{source: {kind: n}} from the tasks' {(source, kind): n}."""
    out: dict = {}
    for counts in parts:
        for (src, kind), n in counts.items():
            d = out.setdefault(src, {})
            d[kind] = d.get(kind, 0) + n
    return out
