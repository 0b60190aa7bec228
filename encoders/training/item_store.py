"""The tokenized item store an objective trains on: the texts it reads (a paper's title and
abstract, a facet text, a section chunk), tokenized once, keyed by item id, beside the objective's
own rows (columns of int32 item rows: a triplet's anchor, positive and negative; a chunk pair).

    <run>/train_tokens/<kind>-<fingerprint>/
        items.arrow   item_id, input_ids (list<int32>, cut at max_length), one row an item
        rows.arrow    the objective's rows (its own columns)
        meta.json     what the fingerprint covers, the counts, anything the objective adds

The fingerprint covers what the folder was built from (the input tables' files, the tokenizer,
max_length and the objective's settings): a run with the same inputs reuses the folder, anything
else builds a new one, and the older folders of the same kind are removed (those of other kinds,
another objective's, stay). Rank 0 builds, every rank memory-maps: a rank touches only the rows it
trains on, and no rank tokenizes during training. encoders.training.triplet_table is the triplet
objectives' case of it.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from encoders.model import token_ids
from sciencemap.storage import atomic_dir, sweep_temporaries, table_files

ITEMS, ROWS, META = "items.arrow", "rows.arrow", "meta.json"
ITEMS_SCHEMA = pa.schema([("item_id", pa.string()), ("input_ids", pa.list_(pa.int32()))])
TOKENIZE_BATCH = 4096
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "merges.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")


def files_state(path: Path) -> list:
    """Names, sizes and modification times of a table's files: a table rewritten is another input."""
    stats = [(f, f.stat()) for f in table_files(path)]
    return [[str(f.relative_to(path)) if f != path else f.name, st.st_size, st.st_mtime_ns] for f, st in stats]


def tokenizer_digest(model_dir: Path) -> str:
    h = hashlib.sha256()
    for name in TOKENIZER_FILES:
        f = Path(model_dir) / name
        if f.is_file():
            h.update(name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def write_items(dest: Path, texts: Iterable[tuple[str, str | None]], tokenizer, max_length: int) -> dict[str, int]:
    """Tokenize (item_id, text) pairs in batches into an Arrow file: the first pair of an id with a
    text is kept, ids without text are left out. Returns item_id -> row."""
    row_of: dict[str, int] = {}
    pending_ids: list[str] = []
    pending_texts: list[str] = []
    with ipc.new_file(str(dest), ITEMS_SCHEMA) as out:
        def flush():
            if pending_ids:
                tokens = token_ids(tokenizer, pending_texts, max_length)
                out.write_table(pa.table({"item_id": pa.array(pending_ids, pa.string()),
                                          "input_ids": pa.array(tokens, pa.list_(pa.int32()))}, schema=ITEMS_SCHEMA))
                pending_ids.clear()
                pending_texts.clear()

        for item_id, text in texts:
            if text and item_id not in row_of:
                row_of[item_id] = len(row_of)
                pending_ids.append(item_id)
                pending_texts.append(text)
                if len(pending_ids) >= TOKENIZE_BATCH:
                    flush()
        flush()
    return row_of


def write_rows(dest: Path, table: pa.Table) -> None:
    with ipc.new_file(str(dest), table.schema) as out:
        out.write_table(table)


@dataclass
class ItemStore:
    """A built folder, memory-mapped: the items and the objective's rows."""

    folder: Path
    items: pa.Table
    rows: pa.Table
    meta: dict

    def tokens(self, rows: np.ndarray) -> list[list[int]]:
        """Token ids of item rows `rows` (reads only those rows of the mapped file)."""
        return self.items.column("input_ids").take(pa.array(rows, pa.int64())).to_pylist()

    def lengths(self) -> np.ndarray:
        """Tokens of every item (from the list offsets: no token is read)."""
        return pc.list_value_length(self.items.column("input_ids")).to_numpy().astype(np.int64)

    def ids(self, rows: np.ndarray) -> list[str]:
        return self.items.column("item_id").take(pa.array(rows, pa.int64())).to_pylist()


def open_store(folder: Path) -> ItemStore:
    folder = Path(folder)
    read = lambda name: ipc.open_file(pa.memory_map(str(folder / name))).read_all()  # noqa: E731
    return ItemStore(folder, read(ITEMS), read(ROWS), json.loads((folder / META).read_text()))


def fingerprint(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def prepare(root: Path, kind: str, inputs: dict, build: Callable[[Path], dict]) -> tuple[Path, bool]:
    """The folder of `kind` for these inputs, built if missing by `build(tmp)` (which writes ITEMS
    and ROWS into tmp and returns what meta.json adds to the inputs). Returns (folder, built now)."""
    root = Path(root)
    folder = root / f"{kind}-{fingerprint(inputs)}"
    if (folder / META).is_file():
        return folder, False
    if root.is_dir():
        sweep_temporaries(root)
        for old in root.glob(f"{kind}-*"):     # this kind's older inputs: only the newest is kept
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    return build_at(folder, inputs, build), True


def build_at(folder: Path, inputs: dict, build: Callable[[Path], dict]) -> Path:
    """Build a store into `folder` whole or not at all: `build(tmp)` writes ITEMS and ROWS and
    returns what meta.json records besides the inputs."""
    with atomic_dir(folder) as tmp:
        extra = build(tmp)
        (tmp / META).write_text(json.dumps({"inputs": inputs, **extra}, indent=2))
    return Path(folder)
