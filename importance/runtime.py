"""Small shared plumbing: user-facing errors, typed stage configs from TOML, atomic Parquet I/O."""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

T = TypeVar("T")


class UserError(Exception):
    """An error the user can fix (bad path, missing Java, wrong schema): printed as one sentence."""


def run_cli(main, argv=None) -> int:
    """Run a job's main(); a UserError becomes one line on stderr and exit code 2, not a traceback."""
    try:
        main(argv)
        return 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def config_from(cls: type[T], values: dict[str, Any] | None = None, **overrides: Any) -> T:
    """Build a stage config dataclass from a TOML section plus overrides (None = keep)."""
    merged = dict(values or {})
    merged.update({k: v for k, v in overrides.items() if v is not None})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(merged) - names)
    if unknown:
        raise UserError(f"unknown setting(s) {unknown} for {cls.__name__}; known: {sorted(names)}")
    return cls(**merged)


def load_toml(path: str | os.PathLike | None) -> dict[str, Any]:
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file {p} does not exist")
    with p.open("rb") as f:
        return tomllib.load(f)


def require_dir(path: str | os.PathLike, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise UserError(f"{what} {p} does not exist; check the path")
    return p


def write_table_atomic(table: pa.Table, dest: str | os.PathLike, schema: pa.Schema | None = None) -> Path:
    """Write one Parquet table as directory `dest/part-0.parquet`, replacing `dest` atomically."""
    dest = Path(dest)
    if schema is not None:
        table = table.select(schema.names).cast(schema)
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    pq.write_table(table, tmp / "part-0.parquet")
    replace_dir(tmp, dest)
    return dest


def replace_dir(tmp: Path, dest: Path) -> None:
    """Move a finished temporary directory into place (rename; the old one is removed first)."""
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex[:8]}")
        dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(dest)


def read_table(path: str | os.PathLike, columns: list[str] | None = None) -> pa.Table:
    """Read a Parquet table directory written by Spark or by write_table_atomic."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"table {p} does not exist; run the stage that writes it first")
    return pq.read_table(p, columns=columns)
