"""The input every current objective trains on: the `triplets` table written by the importance
stage, joined to the `papers` table's text, split into train and a seeded sample of val (METHODS.md §4),
tokenized once into Arrow files beside the run.

    <run>/train_tokens/<fingerprint>/
        papers.arrow     paper_id, input_ids (list<int32>, cut at max_length): every paper a kept
                         triplet names, once
        triplets.arrow   a, p, n (int32 rows of papers.arrow), split, kind: train rows in training
                         order, then the val sample
        meta.json        what the fingerprint covers, the counts, the train data digest

The fingerprint covers the triplets and papers tables' files (names, sizes, modification times),
the tokenizer's files, max_length, the separator, val_max, the seed and the sample size; a run with
the same inputs and settings reuses the files, anything else rebuilds them (only the newest is kept).

A training budget (encoders.training.budget) may ask for a sample: the train triplets of whole anchors
taken in a seeded random order until they hold the number asked for (sample_anchors). Only the
sample's papers (and those of the val_max validation triplets) are then read and tokenized. Rank 0 builds,
every rank then memory-maps the Arrow files: a rank touches only the rows it trains on, never the
whole table, and no rank tokenizes during training.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from encoders.model import token_ids
from sciencemap.contracts import SPLIT_TRAIN, SPLIT_VAL
from sciencemap.layout import RunLayout
from sciencemap.storage import atomic_dir, dataset, sweep_temporaries, table_files
from sciencemap.text import paper_text

TRIPLET_COLUMNS = ["anchor_id", "positive_id", "negative_id", "negative_kind", "split"]
HINT = "run the importance stage first"
FORMAT = "sciencemap.train_tokens/1"
PAPERS, TRIPLETS, META = "papers.arrow", "triplets.arrow", "meta.json"
TOKENIZE_BATCH = 4096
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "merges.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
TOKENS_SCHEMA = pa.schema([("paper_id", pa.string()), ("input_ids", pa.list_(pa.int32()))])


def data_digest(rows: dict) -> str:
    """Identifies the train triplets and their order (part of the checkpoint fingerprint)."""
    h = hashlib.sha256()
    for row in zip(rows["ai"], rows["pi"], rows["ni"]):
        h.update("\t".join(row).encode() + b"\n")
    return h.hexdigest()[:16]


def _files_state(path: Path) -> list:
    stats = [(f, f.stat()) for f in table_files(path)]
    return [[str(f.relative_to(path)) if f != path else f.name, st.st_size, st.st_mtime_ns] for f, st in stats]


def _tokenizer_digest(model_dir: Path) -> str:
    h = hashlib.sha256()
    for name in TOKENIZER_FILES:
        f = Path(model_dir) / name
        if f.is_file():
            h.update(name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def fingerprint(layout: RunLayout, model_dir: Path, max_length: int, sep: str, val_max: int, seed: int,
                sample_triplets: int = 0) -> tuple[str, dict]:
    inputs = {"format": FORMAT, "triplets": _files_state(layout.table("triplets")),
              "papers": _files_state(layout.table("papers")), "tokenizer": _tokenizer_digest(model_dir),
              "max_length": max_length, "sep": sep, "val_max": val_max, "seed": seed}
    if sample_triplets:   # absent without a sample: the caches of runs without a budget stay valid
        inputs["sample_triplets"] = sample_triplets
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16], inputs


@dataclass
class TripletTokens:
    """The tokenized triplets of one run, memory-mapped: `papers` (paper_id, input_ids) and the
    train and val rows as int arrays of paper rows."""

    folder: Path
    papers: pa.Table
    train: dict[str, np.ndarray]   # "a", "p", "n" (int32 paper rows), "kind" (object)
    val: dict[str, np.ndarray]
    meta: dict

    @property
    def counts(self) -> dict:
        return self.meta["counts"]

    @property
    def digest(self) -> str:
        return self.meta["train_digest"]

    def tokens(self, rows: np.ndarray) -> list[list[int]]:
        """Token ids of paper rows `rows` (reads only those rows of the mapped file)."""
        return self.papers.column("input_ids").take(pa.array(rows, pa.int64())).to_pylist()

    def paper_lengths(self) -> np.ndarray:
        """Tokens of every paper row (from the list offsets: no token is read)."""
        return pc.list_value_length(self.papers.column("input_ids")).to_numpy().astype(np.int64)

    def mean_paper_tokens(self) -> float:
        """Mean tokens per paper over the train triplets' papers, each counted as often as it is used."""
        lengths = self.paper_lengths()
        return float(sum(lengths[self.train[c]].sum() for c in ("a", "p", "n")) / (3 * len(self.train["a"])))

    def paper_ids(self, rows: np.ndarray) -> list[str]:
        return self.papers.column("paper_id").take(pa.array(rows, pa.int64())).to_pylist()

    def split_rows(self, split: str) -> dict:
        """A split as validation reads it: ids (ai, pi, ni), kind, and each paper's token ids."""
        d = self.train if split == SPLIT_TRAIN else self.val
        rows = np.unique(np.concatenate([d["a"], d["p"], d["n"]])) if len(d["a"]) else np.zeros(0, np.int64)
        ids = dict(zip(rows.tolist(), self.paper_ids(rows)))
        tokens = dict(zip(ids.values(), self.tokens(rows)))
        return {"ai": [ids[r] for r in d["a"].tolist()], "pi": [ids[r] for r in d["p"].tolist()],
                "ni": [ids[r] for r in d["n"].tolist()], "kind": list(d["kind"]), "tokens": tokens}


def _read_triplets(layout: RunLayout):
    df = dataset(layout.table("triplets"), HINT).to_table(columns=TRIPLET_COLUMNS).to_pandas()
    # Spark's row order is not stable between runs: sort, then shuffle with our own seed.
    return df.sort_values(["split", "anchor_id", "positive_id", "negative_id"], kind="stable")


# The anchor sample's own random stream, apart from the epochs' orders (seed, epoch) and the val sample (seed).
SAMPLE_STREAM = 7919


def sample_anchors(train, seed: int, triplets: int):
    """The train triplets of the fewest anchors, taken in a seeded random order, that hold at least
    `triplets` triplets: whole anchors, spread over the table rather than a corner of it. A larger
    sample with the same seed contains a smaller one."""
    anchors = np.sort(train["anchor_id"].unique())
    order = anchors[np.random.default_rng([seed, SAMPLE_STREAM]).permutation(len(anchors))]
    sizes = train.groupby("anchor_id").size().reindex(order).to_numpy()
    take = int(np.searchsorted(np.cumsum(sizes), triplets)) + 1
    return train[train["anchor_id"].isin(order[:take])]


def _write_papers(layout: RunLayout, ids: set[str], tokenizer, max_length: int, sep: str, dest: Path) -> dict[str, int]:
    """Scan `papers` batch by batch (never the whole corpus at once), keep the first row of every
    id in `ids` that has text, tokenize those texts in batches, append them to an Arrow file.
    Returns paper_id -> row."""
    wanted = pa.array(sorted(ids), pa.string())
    row_of: dict[str, int] = {}
    pending_ids: list[str] = []
    pending_texts: list[str] = []
    with ipc.new_file(str(dest), TOKENS_SCHEMA) as out:
        def flush():
            if not pending_ids:
                return
            tokens = token_ids(tokenizer, pending_texts, max_length)
            out.write_table(pa.table({"paper_id": pa.array(pending_ids, pa.string()),
                                      "input_ids": pa.array(tokens, pa.list_(pa.int32()))}, schema=TOKENS_SCHEMA))
            pending_ids.clear()
            pending_texts.clear()

        for batch in dataset(layout.table("papers"), HINT).to_batches(columns=["paper_id", "title", "abstract"]):
            tbl = pa.Table.from_batches([batch])
            tbl = tbl.filter(pc.is_in(tbl["paper_id"], value_set=wanted))
            for pid, title, abstract in zip(*(tbl[c].to_pylist() for c in ("paper_id", "title", "abstract"))):
                text = paper_text(title, abstract, sep)
                if text and pid not in row_of:  # first row wins on duplicate ids
                    row_of[pid] = len(row_of)
                    pending_ids.append(pid)
                    pending_texts.append(text)
            if len(pending_ids) >= TOKENIZE_BATCH:
                flush()
        flush()
    return row_of


def _val_sample(part, val_max: int, seed: int):
    if len(part) <= val_max:
        return part
    return part.iloc[np.sort(np.random.default_rng(seed).permutation(len(part))[:val_max])]


def build(layout: RunLayout, folder: Path, inputs: dict, tokenizer, max_length: int, sep: str,
          val_max: int, seed: int, sample_triplets: int = 0) -> None:
    """Write the tokenized triplets into `folder` (atomically); sample_triplets > 0: only a seeded
    sample of whole anchors' train triplets (sample_anchors) and val_max validation triplets."""
    df = _read_triplets(layout)
    counts = {"triplets_total": int(len(df))}
    if sample_triplets:
        train = df[df["split"] == SPLIT_TRAIN]
        counts["train_triplets_available"] = int(len(train))
        # the val sample is drawn before the text check here, so that only its papers are read
        df = pd.concat([sample_anchors(train, seed, sample_triplets),
                        _val_sample(df[df["split"] == SPLIT_VAL], val_max, seed)])
    ids = set(df["anchor_id"]) | set(df["positive_id"]) | set(df["negative_id"])
    with atomic_dir(folder) as tmp:
        row_of = _write_papers(layout, ids, tokenizer, max_length, sep, tmp / PAPERS)
        has_text = df[["anchor_id", "positive_id", "negative_id"]].isin(row_of.keys()).all(axis=1)
        counts["dropped_no_text"] = int((~has_text).sum())
        df = df[has_text]
        parts = []
        for split in (SPLIT_TRAIN, SPLIT_VAL):
            part = df[df["split"] == split]
            if split == SPLIT_VAL:
                part = _val_sample(part, val_max, seed)
            counts[f"{split}_triplets"] = int(len(part))
            parts.append(part)
        train = parts[0]
        digest = data_digest({"ai": train["anchor_id"].tolist(), "pi": train["positive_id"].tolist(),
                              "ni": train["negative_id"].tolist()})
        rows = lambda col: pa.array(  # noqa: E731
            np.concatenate([p[col].map(row_of).to_numpy(np.int32) for p in parts]), pa.int32())
        table = pa.table({"a": rows("anchor_id"), "p": rows("positive_id"), "n": rows("negative_id"),
                          "split": pa.array(np.concatenate([p["split"].to_numpy(object) for p in parts]), pa.string()),
                          "kind": pa.array(np.concatenate([p["negative_kind"].fillna("").to_numpy(object)
                                                           for p in parts]), pa.string())})
        with ipc.new_file(str(tmp / TRIPLETS), table.schema) as out:
            out.write_table(table)
        (tmp / META).write_text(json.dumps({"inputs": inputs, "counts": counts, "train_digest": digest,
                                            "papers": len(row_of)}, indent=2))


def open_tokens(folder: Path) -> TripletTokens:
    """Memory-map a built folder."""
    papers = ipc.open_file(pa.memory_map(str(folder / PAPERS))).read_all()
    trip = ipc.open_file(pa.memory_map(str(folder / TRIPLETS))).read_all()
    split = trip.column("split").to_numpy(zero_copy_only=False)
    out = {}
    for name in (SPLIT_TRAIN, SPLIT_VAL):
        sel = np.flatnonzero(split == name)
        out[name] = {c: trip.column(c).to_numpy()[sel] for c in ("a", "p", "n")}
        out[name]["kind"] = trip.column("kind").to_numpy(zero_copy_only=False)[sel]
    return TripletTokens(folder, papers, out[SPLIT_TRAIN], out[SPLIT_VAL], json.loads((folder / META).read_text()))


def prepare_tokens(layout: RunLayout, model_dir: Path, tokenizer, max_length: int, sep: str, val_max: int,
                   seed: int, sample_triplets: int = 0) -> tuple[Path, bool]:
    """The folder of this run's tokenized triplets for these settings, built if missing (rank 0
    calls this; the other ranks open what it names). Returns (folder, whether it was built now)."""
    fp, inputs = fingerprint(layout, model_dir, max_length, sep, val_max, seed, sample_triplets)
    root = layout.train_tokens_dir
    folder = root / fp
    if (folder / META).is_file():
        return folder, False
    if root.is_dir():
        sweep_temporaries(root)
        for old in root.iterdir():   # other settings or inputs: only the newest is kept
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    build(layout, folder, inputs, tokenizer, max_length, sep, val_max, seed, sample_triplets)
    return folder, True
