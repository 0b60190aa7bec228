"""How stages write and read files: every output appears whole or not at all.

A writer fills a temporary sibling (`.<name>.tmp-<random>`) and renames it into place, so a job
killed half-way leaves the old output (or none), never a torn one; a resumed job can sweep the
leftovers with `sweep_temporaries`. Tables are Parquet directories (one or more part files) that
Spark and pyarrow both read.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sciencemap.runtime import UserError


def temporary_sibling(dest: str | os.PathLike) -> Path:
    """A unique hidden path beside `dest`, on the same file system (so a rename is atomic)."""
    dest = Path(dest)
    return dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")


def sweep_temporaries(folder: str | os.PathLike) -> int:
    """Remove what killed writers left in `folder` (`.<name>.tmp-*`); returns how many."""
    n = 0
    for p in Path(folder).glob(".*.tmp-*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        n += 1
    return n


@contextlib.contextmanager
def atomic_file(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces `dest` in one rename."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(dest)
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory to fill; on success it replaces the directory `dest`."""
    dest = Path(dest)
    tmp = temporary_sibling(dest)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        replace_dir(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_bytes_atomic(dest: str | os.PathLike, data: bytes) -> Path:
    with atomic_file(dest) as tmp:
        tmp.write_bytes(data)
    return Path(dest)


def write_text_atomic(dest: str | os.PathLike, text: str) -> Path:
    """`text` as UTF-8, whatever the locale (reports and maps carry titles in any script)."""
    return write_bytes_atomic(dest, text.encode("utf-8"))


def write_json_atomic(dest: str | os.PathLike, obj, indent: int | None = 2, default=None) -> Path:
    return write_text_atomic(dest, json.dumps(obj, indent=indent, default=default))


def replace_dir(tmp: Path, dest: Path) -> None:
    """Move a finished temporary directory into place (rename; the old one is removed after)."""
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex[:8]}")
        dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(dest)


def write_table_atomic(table: pa.Table, dest: str | os.PathLike, schema: pa.Schema | None = None) -> Path:
    """Write one Parquet table as directory `dest/part-0.parquet`, replacing `dest` atomically.
    With `schema`, columns are selected and cast to the contract first."""
    if schema is not None:
        table = table.select(schema.names).cast(schema)
    with atomic_dir(dest) as tmp:
        pq.write_table(table, tmp / "part-0.parquet")
    return Path(dest)


def require_table(path: str | os.PathLike, hint: str = "run the stage that writes it first") -> Path:
    p = Path(path)
    if not p.exists():
        raise UserError(f"table {p} does not exist; {hint}")
    return p


def read_table(path: str | os.PathLike, columns: list[str] | None = None) -> pa.Table:
    """Read a Parquet table directory written by Spark or by write_table_atomic."""
    return pq.read_table(require_table(path), columns=columns)


def dataset(path: str | os.PathLike, hint: str = "run the stage that writes it first") -> ds.Dataset:
    """A table directory as a pyarrow dataset, for reading it batch by batch."""
    return ds.dataset(str(require_table(path, hint)), format="parquet")


def table_files(path: str | os.PathLike) -> list[Path]:
    """The Parquet part files of a table directory (or the file itself), in name order."""
    p = Path(path)
    if p.is_file():
        return [p]
    return sorted(f for f in p.rglob("*.parquet") if not any(part.startswith((".", "_")) for part in f.relative_to(p).parts))


def read_json_metadata(path: str | os.PathLike, key: bytes) -> dict:
    """The JSON object stored under `key` in the schema metadata of a table's first part file
    ({} when there is none or it does not parse)."""
    parts = table_files(path) if Path(path).exists() else []
    if not parts:
        return {}
    md = pq.read_schema(parts[0]).metadata or {}
    try:
        return json.loads(md.get(key, b"{}"))
    except json.JSONDecodeError:
        return {}


def require_dir(path: str | os.PathLike, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise UserError(f"{what} {p} does not exist; check the path")
    return p
