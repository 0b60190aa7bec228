"""The input the facet objectives (FLeW, UniFAR; METHODS.md §8) train on, a case of the item store
(encoders.training.item_store): every facet triplet of the run (`triplets` rows with a facet), the
papers' titles and their abstracts split into facets (`abstract_facets`), tokenized once.

    <run>/train_tokens/<kind>-<fingerprint>/
        items.arrow      item_id, input_ids: the items an objective makes of each paper (FLeW: one per
                         facet it is used for, on facet text; UniFAR: one, title [SEP] sentences;
                         with unifar_questions, one per question too, "?q:<question_id>")
        rows.arrow       a, p, n (item rows), split, kind, facet (index into FACETS): train rows, then
                         the val sample; question rows (kind "question", facet -1) are train rows
        labels.arrow     facets (list<int8>) per item: its sentences' facet indices (-1 none)
        meta.json        what the fingerprint covers, the counts, the train data digest

The objective says how items are made (`FacetItems`); the rest is the same for both.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sciencemap.contracts import FACETS, SPLIT_TRAIN, SPLIT_VAL
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import dataset, table_files

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
                         sample_triplets: int = 0, questions: str = "") -> tuple[Path, bool]:
    """Rank 0: the folder of this run's facet items for these settings, built if missing. `questions`:
    a `questions` table (UniFAR's question–document loss) whose rows join the train rows;
    sample_triplets > 0: a budget's seeded sample of whole anchors (build)."""
    from encoders.training.item_store import prepare, tokenizer_digest

    inputs = {**facet_inputs(objective, layout, questions), "format": items.format,
              "tokenizer": tokenizer_digest(enc.path), "max_length": enc.max_length, "sep": enc.sep,
              "val_max": val_max, "seed": seed}
    if sample_triplets:   # absent without a sample: the stores of runs without a budget stay valid
        inputs["sample_triplets"] = sample_triplets
    return prepare(layout.train_tokens_dir, items.kind, inputs, lambda tmp: build(
        items, layout, tmp, enc.tokenizer, enc.max_length, val_max, seed, Path(questions) if questions else None,
        sample_triplets))


def build_probe(items: FacetItems, layout: RunLayout, enc, folder: Path, val_max: int, seed: int,
                sample_triplets: int, questions: str = "") -> dict:
    """A budget's probe (encoders.training.budget): `build` on a sample, into `folder`."""
    return build(items, layout, folder, enc.tokenizer, enc.max_length, val_max, seed,
                 Path(questions) if questions else None, sample_triplets)


def facet_inputs(objective: str, layout: RunLayout, questions: str = "") -> dict:
    """The tables a facet store is made of, by their files (a table rewritten: another store, another plan)."""
    from encoders.training.item_store import files_state

    facets_table = layout.table("abstract_facets")
    if not facets_table.exists():
        raise UserError(f"{facets_table} is missing: run `python jobs/facets.py splitter-label --run {layout.root}` "
                        f"(the {objective} objective reads abstracts split into facets)")
    if questions and not table_files(questions):
        raise UserError(f"unifar_questions = {questions!r}: no Parquet table there (columns question_id, question, paper_id)")
    return {"triplets": files_state(layout.table("triplets")), "papers": files_state(layout.table("papers")),
            "abstract_facets": files_state(facets_table), **({"questions": files_state(Path(questions))} if questions else {})}


QUESTION_ITEM = "?q:"   # item id of a question: this prefix + its question_id (no paper id starts so)
QUESTION_KIND = "question"


def read_questions(path: Path) -> pd.DataFrame:
    """question_id, question, paper_id of a `questions` table, rows without any of them dropped."""
    from sciencemap.contracts import SCHEMAS

    names = SCHEMAS["questions"].names
    t = dataset(path, "give a Parquet table of (question_id, question, paper_id)")
    missing = [c for c in names if c not in t.schema.names]
    if missing:
        raise UserError(f"{path}: the questions table lacks {missing} (needs {names})")
    return t.to_table(columns=names).to_pandas().dropna().drop_duplicates(["question_id", "paper_id"])


def question_rows(qs: pd.DataFrame, row_of: dict, paper_items: list[str], item_id, seed: int) -> pd.DataFrame:
    """One train row per (question, paper) whose both items exist: anchor = the question, positive = the
    paper, negative = a seeded random other paper (the loss also uses the micro-batch's other papers)."""
    from sciencemap.contracts import FACETS

    pos = [item_id(FACETS[0], p) for p in qs.paper_id]
    q = [QUESTION_ITEM + x for x in qs.question_id]
    keep = [a in row_of and b in row_of for a, b in zip(q, pos)]
    rng = np.random.default_rng(seed)
    neg = []
    for p, k in zip(pos, keep):
        n = p
        while k and n == p and len(paper_items) > 1:
            n = paper_items[int(rng.integers(len(paper_items)))]
        neg.append(n)
    df = pd.DataFrame({"anchor_id": q, "positive_id": pos, "negative_id": neg, "split": SPLIT_TRAIN,
                       "negative_kind": QUESTION_KIND, "facet": None})
    return df[keep]


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
          seed: int, questions: Path | None = None, sample_triplets: int = 0) -> dict:
    """Every facet triplet of the run on the objective's items, and the question rows when `questions`
    is given (all of them, also in a sample); sample_triplets > 0: only the train triplets of a
    seeded sample of whole anchors (triplet_table.sample_anchors, over the facet triplets) and the
    val sample. Returns what meta.json records."""
    from encoders.training.item_store import ITEMS, ROWS, write_items, write_rows
    from encoders.training.triplet_table import _read_triplets, _val_sample, data_digest, sample_anchors

    df = _read_triplets(layout, facet="*")
    total, available = int(len(df)), None
    if sample_triplets:   # before the papers are read: only the sample's are tokenized
        train = df[df["split"] == SPLIT_TRAIN]
        available = int(len(train))
        df = pd.concat([sample_anchors(train, seed, sample_triplets), _val_sample(df[df["split"] == SPLIT_VAL], val_max, seed)])
    used: dict[str, set] = {}
    for col in ("anchor_id", "positive_id", "negative_id"):
        for f, pid in zip(df["facet"], df[col]):
            used.setdefault(pid, set()).add(f)
    qs = read_questions(questions) if questions is not None else None
    if qs is not None:   # a question's paper is read like any other (UniFAR: one item a paper, whatever the facet)
        for pid in qs.paper_id:
            used.setdefault(pid, set()).add(FACETS[0])
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
        if qs is not None:   # a question is read as a title alone (UniFAR: token attention)
            for qid, text in qs.drop_duplicates("question_id")[["question_id", "question"]].itertuples(index=False):
                for item, t, _ in items.texts(QUESTION_ITEM + qid, text, [], [], {FACETS[0]}):
                    yield item, t

    row_of = write_items(folder / ITEMS, texts(), tokenizer, max_length)
    with pa.ipc.new_file(str(folder / LABELS), pa.schema([("facets", pa.list_(pa.int8()))])) as out:
        out.write_table(pa.table({"facets": pa.array([labels_of.get(i, []) for i in sorted(row_of, key=row_of.get)],
                                                     pa.list_(pa.int8()))}))
    for col in ("anchor_id", "positive_id", "negative_id"):
        df[col] = [items.item_id(f, p) for f, p in zip(df["facet"], df[col])]
    has_text = df[["anchor_id", "positive_id", "negative_id"]].isin(row_of.keys()).all(axis=1)
    counts = {"triplets_total": total, "dropped_no_text": int((~has_text).sum()),
              "papers_with_facet_split": len(split_of), **({"train_triplets_available": available} if sample_triplets else {})}
    df = df[has_text]
    parts = [df[df["split"] == SPLIT_TRAIN], _val_sample(df[df["split"] == SPLIT_VAL], val_max, seed)]
    for name, part in zip((SPLIT_TRAIN, SPLIT_VAL), parts):
        counts[f"{name}_triplets"] = int(len(part))
        counts[f"{name}_by_facet"] = {f: int((part["facet"] == f).sum()) for f in FACETS}
    if qs is not None:
        papers = sorted({r for r in row_of if not r.startswith(QUESTION_ITEM)})
        qrows = question_rows(qs, row_of, papers, items.item_id, seed)
        counts["question_rows"], counts["question_rows_dropped_no_paper"] = int(len(qrows)), int(len(qs) - len(qrows))
        parts[0] = pd.concat([parts[0], qrows], ignore_index=True)
    train = parts[0]
    digest = data_digest({"ai": [f"{f}:{a}" for f, a in zip(train["facet"], train["anchor_id"])],
                          "pi": train["positive_id"].tolist(), "ni": train["negative_id"].tolist()})
    rows = lambda col: pa.array(  # noqa: E731
        np.concatenate([p[col].map(row_of).to_numpy(np.int32) for p in parts]), pa.int32())
    write_rows(folder / ROWS, pa.table({
        "a": rows("anchor_id"), "p": rows("positive_id"), "n": rows("negative_id"),
        "split": pa.array(np.concatenate([p["split"].to_numpy(object) for p in parts]), pa.string()),
        "kind": pa.array(np.concatenate([p["negative_kind"].fillna("").to_numpy(object) for p in parts]), pa.string()),
        # a question row has no facet: -1
        "facet": pa.array(np.concatenate([p["facet"].map(lambda f: FACETS.index(f) if f in FACETS else -1).to_numpy(np.int8)
                                          for p in parts]), pa.int8())}))
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
