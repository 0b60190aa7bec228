"""The input every current objective trains on: the `triplets` table written by the importance
stage, joined to the `papers` table's text, split into train and a seeded sample of val (METHODS.md §4)."""
from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sciencemap.contracts import SPLIT_TRAIN, SPLIT_VAL
from sciencemap.layout import RunLayout
from sciencemap.storage import dataset
from sciencemap.text import paper_text

TRIPLET_COLUMNS = ["anchor_id", "positive_id", "negative_id", "negative_kind", "split"]
HINT = "run the importance stage first"


def load_texts(papers_dir, ids: set[str], sep: str) -> dict[str, str]:
    """Text of the papers in `ids`, scanning `papers` batch by batch (never the whole corpus at once)."""
    wanted = pa.array(sorted(ids), pa.string())
    out: dict[str, str] = {}
    for batch in dataset(papers_dir, HINT).to_batches(columns=["paper_id", "title", "abstract"]):
        tbl = pa.Table.from_batches([batch])
        tbl = tbl.filter(pc.is_in(tbl["paper_id"], value_set=wanted))
        for pid, title, abstract in zip(*(tbl[c].to_pylist() for c in ("paper_id", "title", "abstract"))):
            text = paper_text(title, abstract, sep)
            if text and pid not in out:  # first row wins on duplicate ids
                out[pid] = text
    return out


def load_triplets(layout: RunLayout, sep: str, val_max: int, seed: int) -> tuple[dict, dict, dict]:
    """Train and val triplets as dicts of lists: ids (ai, pi, ni), texts (a, p, n) and kind;
    plus counts of what was dropped."""
    df = dataset(layout.table("triplets"), HINT).to_table(columns=TRIPLET_COLUMNS).to_pandas()
    # Spark's row order is not stable between runs: sort, then shuffle with our own seed.
    df = df.sort_values(["split", "anchor_id", "positive_id", "negative_id"], kind="stable")
    ids = set(df["anchor_id"]) | set(df["positive_id"]) | set(df["negative_id"])
    texts = load_texts(layout.table("papers"), ids, sep)
    has_text = df[["anchor_id", "positive_id", "negative_id"]].isin(texts.keys()).all(axis=1)
    counts = {"triplets_total": int(len(df)), "dropped_no_text": int((~has_text).sum())}
    df = df[has_text]
    splits = {}
    for split in (SPLIT_TRAIN, SPLIT_VAL):
        part = df[df["split"] == split]
        if split == SPLIT_VAL and len(part) > val_max:
            pick = np.sort(np.random.default_rng(seed).permutation(len(part))[:val_max])
            part = part.iloc[pick]
        d = {"ai": part["anchor_id"].tolist(), "pi": part["positive_id"].tolist(),
             "ni": part["negative_id"].tolist(), "kind": part["negative_kind"].fillna("").tolist()}
        d.update(a=[texts[i] for i in d["ai"]], p=[texts[i] for i in d["pi"]], n=[texts[i] for i in d["ni"]])
        splits[split] = d
        counts[f"{split}_triplets"] = int(len(part))
    return splits[SPLIT_TRAIN], splits[SPLIT_VAL], counts


def data_digest(rows: dict) -> str:
    """Identifies the train triplets and their order (part of the checkpoint fingerprint)."""
    h = hashlib.sha256()
    for row in zip(rows["ai"], rows["pi"], rows["ni"]):
        h.update("\t".join(row).encode() + b"\n")
    return h.hexdigest()[:16]
