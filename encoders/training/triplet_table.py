"""The input the triplet objectives train on, a case of the item store (encoders.training.item_store):
the `triplets` table written by the importance stage, joined to the `papers` table's text, split
into train and a seeded sample of val (METHODS.md §4), tokenized once into Arrow files beside the run.

    <run>/train_tokens/triplets-<fingerprint>/
        items.arrow      item_id (a paper_id), input_ids (list<int32>, cut at max_length): every
                         paper a kept triplet names, once
        rows.arrow       a, p, n (int32 item rows), split, kind: train rows in training order, then
                         the val sample
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from encoders.training.item_store import (ITEMS, ROWS, ItemStore, files_state, open_store, prepare, tokenizer_digest,
                                          write_items, write_rows)
from sciencemap.contracts import SPLIT_TRAIN, SPLIT_VAL
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import dataset
from sciencemap.text import paper_text

TRIPLET_COLUMNS = ["anchor_id", "positive_id", "negative_id", "negative_kind", "split"]
HINT = "run the importance stage first"
FORMAT = "sciencemap.train_tokens/2"
KIND = "triplets"


def data_digest(rows: dict) -> str:
    """Identifies the train triplets and their order (part of the checkpoint fingerprint)."""
    h = hashlib.sha256()
    for row in zip(rows["ai"], rows["pi"], rows["ni"]):
        h.update("\t".join(row).encode() + b"\n")
    return h.hexdigest()[:16]


def cache_inputs(layout: RunLayout, model_dir: Path, max_length: int, sep: str, val_max: int, seed: int,
                 sample_triplets: int = 0) -> dict:
    """What the tokenized triplets are made from (the item store's fingerprint covers it)."""
    inputs = {"format": FORMAT, "triplets": files_state(layout.table("triplets")),
              "papers": files_state(layout.table("papers")), "tokenizer": tokenizer_digest(model_dir),
              "max_length": max_length, "sep": sep, "val_max": val_max, "seed": seed}
    if sample_triplets:   # absent without a sample: the caches of runs without a budget stay valid
        inputs["sample_triplets"] = sample_triplets
    return inputs


@dataclass
class TripletTokens:
    """The tokenized triplets of one run, memory-mapped: the papers (the store's items) and the
    train and val rows as int arrays of paper rows."""

    store: ItemStore
    train: dict[str, np.ndarray]   # "a", "p", "n" (int32 paper rows), "kind" (object)
    val: dict[str, np.ndarray]

    @property
    def folder(self) -> Path:
        return self.store.folder

    @property
    def papers(self) -> pa.Table:
        return self.store.items

    @property
    def meta(self) -> dict:
        return self.store.meta

    @property
    def counts(self) -> dict:
        return self.meta["counts"]

    @property
    def digest(self) -> str:
        return self.meta["train_digest"]

    def tokens(self, rows: np.ndarray) -> list[list[int]]:
        """Token ids of paper rows `rows` (reads only those rows of the mapped file)."""
        return self.store.tokens(rows)

    def paper_lengths(self) -> np.ndarray:
        """Tokens of every paper row (from the list offsets: no token is read)."""
        return self.store.lengths()

    def mean_paper_tokens(self) -> float:
        """Mean tokens per paper over the train triplets' papers, each counted as often as it is used."""
        lengths = self.paper_lengths()
        return float(sum(lengths[self.train[c]].sum() for c in ("a", "p", "n")) / (3 * len(self.train["a"])))

    def paper_ids(self, rows: np.ndarray) -> list[str]:
        return self.store.ids(rows)

    def split_rows(self, split: str) -> dict:
        """A split as validation reads it: ids (ai, pi, ni), kind, and each paper's token ids."""
        d = self.train if split == SPLIT_TRAIN else self.val
        rows = np.unique(np.concatenate([d["a"], d["p"], d["n"]])) if len(d["a"]) else np.zeros(0, np.int64)
        ids = dict(zip(rows.tolist(), self.paper_ids(rows)))
        tokens = dict(zip(ids.values(), self.tokens(rows)))
        return {"ai": [ids[r] for r in d["a"].tolist()], "pi": [ids[r] for r in d["p"].tolist()],
                "ni": [ids[r] for r in d["n"].tolist()], "kind": list(d["kind"]), "tokens": tokens}


def _read_triplets(layout: RunLayout, facet: str | None = None):
    """The seed triplets (facet null), those of one facet, or with facet "*" every facet's triplets
    with their `facet` column (METHODS.md §8.2)."""
    import pyarrow.dataset as pds

    d = dataset(layout.table("triplets"), HINT)
    if "facet" in d.schema.names:
        keep = (pds.field("facet").is_null() if facet is None else pds.field("facet").is_valid() if facet == "*"
                else (pds.field("facet") == facet))
        df = d.to_table(columns=TRIPLET_COLUMNS + (["facet"] if facet == "*" else []), filter=keep).to_pandas()
    elif facet is None:   # a table written before facets: seed triplets only
        df = d.to_table(columns=TRIPLET_COLUMNS).to_pandas()
    if facet is not None and ("facet" not in d.schema.names or df.empty):
        raise UserError(f"{layout.table('triplets')} has no facet triplets: run the importance stage with "
                        "[importance] facet_signal = section or intent")
    # Spark's row order is not stable between runs: sort, then shuffle with our own seed.
    keys = ["split", "anchor_id", "positive_id", "negative_id"] + (["facet"] if "facet" in df.columns else [])
    return df.sort_values(keys, kind="stable")


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


def _paper_texts(layout: RunLayout, ids: set[str], sep: str, text_of=paper_text):
    """(paper_id, text) of every papers row whose id is in `ids`, scanning the table batch by
    batch (never the whole corpus at once)."""
    wanted = pa.array(sorted(ids), pa.string())
    for batch in dataset(layout.table("papers"), HINT).to_batches(columns=["paper_id", "title", "abstract"]):
        tbl = pa.Table.from_batches([batch])
        tbl = tbl.filter(pc.is_in(tbl["paper_id"], value_set=wanted))
        for pid, title, abstract in zip(*(tbl[c].to_pylist() for c in ("paper_id", "title", "abstract"))):
            yield pid, text_of(title, abstract, sep)


def _val_sample(part, val_max: int, seed: int):
    if len(part) <= val_max:
        return part
    return part.iloc[np.sort(np.random.default_rng(seed).permutation(len(part))[:val_max])]


def build(layout: RunLayout, folder: Path, tokenizer, max_length: int, sep: str, val_max: int, seed: int,
          sample_triplets: int = 0, text_of=paper_text) -> dict:
    """Write the tokenized triplets into `folder`; sample_triplets > 0: only a seeded sample of
    whole anchors' train triplets (sample_anchors) and val_max validation triplets. Returns what
    meta.json records besides the inputs."""
    df = _read_triplets(layout)
    counts = {"triplets_total": int(len(df))}
    if sample_triplets:
        train = df[df["split"] == SPLIT_TRAIN]
        counts["train_triplets_available"] = int(len(train))
        # the val sample is drawn before the text check here, so that only its papers are read
        df = pd.concat([sample_anchors(train, seed, sample_triplets),
                        _val_sample(df[df["split"] == SPLIT_VAL], val_max, seed)])
    ids = set(df["anchor_id"]) | set(df["positive_id"]) | set(df["negative_id"])
    row_of = write_items(folder / ITEMS, _paper_texts(layout, ids, sep, text_of), tokenizer, max_length)
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
    write_rows(folder / ROWS, pa.table({
        "a": rows("anchor_id"), "p": rows("positive_id"), "n": rows("negative_id"),
        "split": pa.array(np.concatenate([p["split"].to_numpy(object) for p in parts]), pa.string()),
        "kind": pa.array(np.concatenate([p["negative_kind"].fillna("").to_numpy(object) for p in parts]),
                         pa.string())}))
    return {"counts": counts, "train_digest": digest, "papers": len(row_of)}


def open_tokens(folder: Path) -> TripletTokens:
    """Memory-map a built folder."""
    store = open_store(folder)
    trip = store.rows
    split = trip.column("split").to_numpy(zero_copy_only=False)
    out = {}
    for name in (SPLIT_TRAIN, SPLIT_VAL):
        sel = np.flatnonzero(split == name)
        out[name] = {c: trip.column(c).to_numpy()[sel] for c in ("a", "p", "n")}
        out[name]["kind"] = trip.column("kind").to_numpy(zero_copy_only=False)[sel]
    return TripletTokens(store, out[SPLIT_TRAIN], out[SPLIT_VAL])


def prepare_tokens(layout: RunLayout, model_dir: Path, tokenizer, max_length: int, sep: str, val_max: int,
                   seed: int, sample_triplets: int = 0, text_of=paper_text) -> tuple[Path, bool]:
    """The folder of this run's tokenized triplets for these settings, built if missing (rank 0
    calls this; the other ranks open what it names). Returns (folder, whether it was built now).
    `text_of(title, abstract, sep)`: the objective's input view."""
    inputs = cache_inputs(layout, model_dir, max_length, sep, val_max, seed, sample_triplets)
    if text_of is not paper_text:   # another view, other tokens (absent for the default: caches stay valid)
        inputs["text_of"] = f"{text_of.__module__}.{text_of.__qualname__}"
    return prepare(layout.train_tokens_dir, KIND, inputs, lambda tmp: build(
        layout, tmp, tokenizer, max_length, sep, val_max, seed, sample_triplets, text_of))
