"""The input the facet objectives (FLeW, UniFAR; METHODS.md §8) train on, a case of the item store
(encoders.training.item_store): every facet triplet of the run (`triplets` rows with a facet), the
papers' titles and their abstracts split into facets (`abstract_facets`), tokenized once.

    <run>/train_tokens/<kind>-<fingerprint>/
        items.arrow      item_id, input_ids: the items an objective makes of each paper (FLeW: one per
                         facet it is used for, on facet text; UniFAR: one, title [SEP] sentences)
        rows.arrow       a, p, n (item rows), split, kind, facet (index into FACETS): train rows, then
                         the val sample
        labels.arrow     facets (list<int8>) per item: its sentences' facet indices (-1 none)
        meta.json        what the fingerprint covers, the counts, the train data digest

The objective says how items are made (`FacetItems`); the rest is the same for both.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sciencemap.contracts import FACETS, SPLIT_TRAIN, SPLIT_VAL
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import dataset

LABELS = "labels.arrow"


@dataclass(frozen=True)
class FacetItems:
    """How an objective makes items: item_id(facet, paper_id), and the (item_id, text, sentence
    labels) a paper gives for the facets it is used in: texts(pid, title, sentences, facets, used)."""

    kind: str
    format: str
    item_id: Callable[[str, str], str]
    texts: Callable[[str, str | None, list, list, set], Iterable[tuple[str, str, list[int]]]]


def prepare_facet_tokens(objective: str, items: FacetItems, layout: RunLayout, enc, val_max: int, seed: int,
                         sample_triplets: int = 0) -> tuple[Path, bool]:
    """Rank 0: the folder of this run's facet items for these settings, built if missing."""
    from encoders.training.item_store import files_state, prepare, tokenizer_digest

    if sample_triplets:
        raise UserError(f"the {objective} objective has no token or time budget yet: set max_tokens = 0 and max_hours = 0")
    facets_table = layout.table("abstract_facets")
    if not facets_table.exists():
        raise UserError(f"{facets_table} is missing: run `python jobs/facets.py splitter-label --run {layout.root}` "
                        f"(the {objective} objective reads abstracts split into facets)")
    inputs = {"format": items.format, "triplets": files_state(layout.table("triplets")),
              "papers": files_state(layout.table("papers")), "abstract_facets": files_state(facets_table),
              "tokenizer": tokenizer_digest(enc.path), "max_length": enc.max_length, "sep": enc.sep,
              "val_max": val_max, "seed": seed}
    return prepare(layout.train_tokens_dir, items.kind, inputs, lambda tmp: build(
        items, layout, tmp, enc.tokenizer, enc.max_length, val_max, seed))


def _abstract_facets(layout: RunLayout, wanted: pa.Array) -> dict[str, tuple[list, list]]:
    out = {}
    for batch in dataset(layout.table("abstract_facets"), "run jobs/facets.py splitter-label").to_batches(
            columns=["paper_id", "sentences", "facets"]):
        t = pa.Table.from_batches([batch])
        t = t.filter(pc.is_in(t["paper_id"], value_set=wanted))
        for pid, s, f in zip(*(t[c].to_pylist() for c in ("paper_id", "sentences", "facets"))):
            out[pid] = (s or [], f or [])
    return out


def build(items: FacetItems, layout: RunLayout, folder: Path, tokenizer, max_length: int, val_max: int,
          seed: int) -> dict:
    """Every facet triplet of the run on the objective's items; returns what meta.json records."""
    from encoders.training.item_store import ITEMS, ROWS, write_items, write_rows
    from encoders.training.triplet_table import _read_triplets, _val_sample, data_digest

    df = _read_triplets(layout, facet="*")
    used: dict[str, set] = {}
    for col in ("anchor_id", "positive_id", "negative_id"):
        for f, pid in zip(df["facet"], df[col]):
            used.setdefault(pid, set()).add(f)
    wanted = pa.array(sorted(used), pa.string())
    split_of = _abstract_facets(layout, wanted)
    labels_of: dict[str, list[int]] = {}

    def texts():
        for batch in dataset(layout.table("papers"), "run the ingest stage first").to_batches(columns=["paper_id", "title"]):
            t = pa.Table.from_batches([batch])
            t = t.filter(pc.is_in(t["paper_id"], value_set=wanted))
            for pid, title in zip(t["paper_id"].to_pylist(), t["title"].to_pylist()):
                s, f = split_of.get(pid, ([], []))
                for item, text, labels in items.texts(pid, title, s, f, used[pid]):
                    labels_of[item] = labels
                    yield item, text

    row_of = write_items(folder / ITEMS, texts(), tokenizer, max_length)
    with pa.ipc.new_file(str(folder / LABELS), pa.schema([("facets", pa.list_(pa.int8()))])) as out:
        out.write_table(pa.table({"facets": pa.array([labels_of.get(i, []) for i in sorted(row_of, key=row_of.get)],
                                                     pa.list_(pa.int8()))}))
    for col in ("anchor_id", "positive_id", "negative_id"):
        df[col] = [items.item_id(f, p) for f, p in zip(df["facet"], df[col])]
    has_text = df[["anchor_id", "positive_id", "negative_id"]].isin(row_of.keys()).all(axis=1)
    counts = {"triplets_total": int(len(df)), "dropped_no_text": int((~has_text).sum()),
              "papers_with_facet_split": len(split_of)}
    df = df[has_text]
    parts = [df[df["split"] == SPLIT_TRAIN], _val_sample(df[df["split"] == SPLIT_VAL], val_max, seed)]
    for name, part in zip((SPLIT_TRAIN, SPLIT_VAL), parts):
        counts[f"{name}_triplets"] = int(len(part))
        counts[f"{name}_by_facet"] = {f: int((part["facet"] == f).sum()) for f in FACETS}
    train = parts[0]
    digest = data_digest({"ai": [f"{f}:{a}" for f, a in zip(train["facet"], train["anchor_id"])],
                          "pi": train["positive_id"].tolist(), "ni": train["negative_id"].tolist()})
    rows = lambda col: pa.array(  # noqa: E731
        np.concatenate([p[col].map(row_of).to_numpy(np.int32) for p in parts]), pa.int32())
    write_rows(folder / ROWS, pa.table({
        "a": rows("anchor_id"), "p": rows("positive_id"), "n": rows("negative_id"),
        "split": pa.array(np.concatenate([p["split"].to_numpy(object) for p in parts]), pa.string()),
        "kind": pa.array(np.concatenate([p["negative_kind"].fillna("").to_numpy(object) for p in parts]), pa.string()),
        "facet": pa.array(np.concatenate([p["facet"].map(FACETS.index).to_numpy(np.int8) for p in parts]), pa.int8())}))
    return {"counts": counts, "train_digest": digest, "papers": len(used), "items": len(row_of)}


@dataclass
class FacetData:
    """What open_facet_tokens gives an objective beside the triplet tokens: each row's facet by split,
    and each item's sentence labels."""

    row_facets: dict[str, np.ndarray]
    labels: pa.ChunkedArray

    def item_labels(self, row: int) -> list[int]:
        return self.labels[row].as_py()


def open_facet_tokens(folder: Path):
    """Every rank: (TripletTokens, FacetData) of a built folder, memory-mapped."""
    from encoders.training.triplet_table import open_tokens

    data = open_tokens(folder)
    split = data.store.rows.column("split").to_numpy(zero_copy_only=False)
    facet = data.store.rows.column("facet").to_numpy().astype(np.int64)
    labels = pa.ipc.open_file(pa.memory_map(str(Path(folder) / LABELS))).read_all().column("facets")
    return data, FacetData({SPLIT_TRAIN: facet[split == SPLIT_TRAIN], SPLIT_VAL: facet[split == SPLIT_VAL]}, labels)
