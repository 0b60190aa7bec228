"""The inputs the full-text objectives train on (METHODS.md §8.9, §8.10), cases of the item store
(encoders.training.item_store) built from the `sections` table ([ingest] keep_sections), the papers'
titles and abstracts and the seed triplets:

    <run>/train_tokens/cosaemb_tokens-<fingerprint>/     CoSAEmb
        items.arrow   "a:<paper>" the abstract view ("[TTL] title [SEP] [ABS] abstract") and
                      "c:<paper>:<section position>:<k>" the section chunks (encoders.fulltext.chunks)
        rows.arrow    a, p, n, split, kind: local rows (chunk k, chunk k+1 of the section, another
                      paper's chunk; kind "local"), global rows (a section's first chunk, its own
                      abstract, another paper's abstract; "global") and inter-document rows (the seed
                      triplets on abstracts; kind = the triplet's negative kind)
    <run>/train_tokens/section_pairs-<fingerprint>/      SciJEPa and section_cl
        items.arrow   "h:<paper>" title [SEP] abstract, "m:<paper>" the method, "d:<paper>" the conclusion
        rows.arrow    a (context), p (target), n (= p: pairs have no negative), split, kind (the task)

No chunk, section or pair of a held-out paper (an anchor of a validation triplet) is a train row, nor a
negative of one: its rows are validation rows (a seeded sample of val_max a kind).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sciencemap.contracts import SPLIT_TRAIN, SPLIT_VAL
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import dataset

COSAEMB_KIND, COSAEMB_FORMAT = "cosaemb_tokens", "sciencemap.cosaemb_tokens/1"
PAIRS_KIND, PAIRS_FORMAT = "section_pairs", "sciencemap.section_pairs/1"
LEVELS = ("inter", "global", "local")     # CoSAEmb's row kinds, in the order of their margins
PAIR_ITEMS = {"head": "h:", "method": "m:", "conclusion": "d:"}
NEGATIVE_TRIES = 20


def level_of_kind(kind: str) -> int:
    """A CoSAEmb row's level (index into LEVELS) from its kind: an inter row's kind is its negative's."""
    return LEVELS.index(kind) if kind in ("global", "local") else 0


def abstract_item(pid: str) -> str:
    return "a:" + pid


def chunk_item(pid: str, position, k: int) -> str:
    return f"c:{pid}:{position}:{k}"


def is_chunk(item: str) -> bool:
    return item.startswith("c:")


def held_out_papers(layout: RunLayout) -> set[str]:
    """The anchors of the validation seed triplets: nothing of theirs is trained on."""
    from encoders.training.triplet_table import _read_triplets

    t = _read_triplets(layout)
    return set(t.loc[t["split"] == SPLIT_VAL, "anchor_id"])


def fulltext_inputs(objective: str, layout: RunLayout) -> dict:
    from encoders.training.item_store import files_state

    sections = layout.table("sections")
    if not sections.exists():
        raise UserError(f"{sections} is missing: the {objective} objective reads the papers' sections; run the "
                        "ingest stage with [ingest] keep_sections = true")
    return {"triplets": files_state(layout.table("triplets")), "papers": files_state(layout.table("papers")),
            "sections": files_state(sections)}


def _papers(layout: RunLayout, wanted: set[str]):
    """(paper_id, title, abstract) of the papers in `wanted`, batch by batch."""
    value_set = pa.array(sorted(wanted), pa.string())
    for batch in dataset(layout.table("papers"), "run the ingest stage first").to_batches(
            columns=["paper_id", "title", "abstract"]):
        t = pa.Table.from_batches([batch])
        t = t.filter(pc.is_in(t["paper_id"], value_set=value_set))
        yield from zip(*(t[c].to_pylist() for c in ("paper_id", "title", "abstract")))


class _PaperCounter:
    """count(text) -> tokens (no special tokens), a paper's sentences tokenized in one call first."""

    def __init__(self, tokenizer):
        self.tokenizer, self.cache = tokenizer, {}

    def prefill(self, texts: list[str]) -> None:
        texts = [t for t in dict.fromkeys(texts) if t]
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        self.cache = dict(zip(texts, map(len, ids)))

    def __call__(self, text: str) -> int:
        if text not in self.cache:
            self.cache[text] = len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return self.cache[text]


def _other_paper(rng, pool: np.ndarray, pool_paper: np.ndarray, paper: np.ndarray) -> np.ndarray:
    """For each row, a random entry of `pool` whose paper differs from the row's (-1 where none was found)."""
    if len(pool) == 0:
        return np.full(len(paper), -1, np.int64)
    pick = rng.integers(len(pool), size=len(paper))
    for _ in range(NEGATIVE_TRIES):
        bad = pool_paper[pick] == paper
        if not bad.any():
            break
        pick[bad] = rng.integers(len(pool), size=int(bad.sum()))
    out = pool[pick].astype(np.int64)
    out[pool_paper[pick] == paper] = -1
    return out


def apply_shares(train: pd.DataFrame, shares, seed: int) -> pd.DataFrame:
    """Train rows thinned so that the kinds hold `shares` (inter, global, local) of them: the most rows
    with those shares, no row used twice; empty shares = every row."""
    if not shares:
        return train
    s = np.asarray(shares, float) / sum(shares)
    level = train["kind"].map(level_of_kind).to_numpy()
    n = np.bincount(level, minlength=len(LEVELS))
    total = min(n[i] / s[i] for i in range(len(LEVELS)) if s[i] > 0)
    rng = np.random.default_rng([seed, 17])
    keep = []
    for i in range(len(LEVELS)):
        rows = np.flatnonzero(level == i)
        keep.append(np.sort(rng.permutation(rows)[:int(total * s[i])]))
    return train.iloc[np.sort(np.concatenate(keep))]


def write_train_val(folder: Path, row_of: dict, train: pd.DataFrame, val: pd.DataFrame) -> str:
    """rows.arrow of a store: the train rows, then the val ones (a, p, n item rows, split, kind); returns the
    train rows' digest (their item ids in order: part of the checkpoint fingerprint)."""
    from encoders.training.item_store import ROWS, write_rows
    from encoders.training.triplet_table import data_digest

    ids_of = {r: i for i, r in row_of.items()}
    digest = data_digest({k: [ids_of[r] for r in train[c]] for k, c in (("ai", "a"), ("pi", "p"), ("ni", "n"))})
    out = pd.concat([train, val])
    write_rows(folder / ROWS, pa.table({
        **{k: pa.array(out[k].to_numpy(np.int32), pa.int32()) for k in ("a", "p", "n")},
        "split": pa.array(out["split"].to_numpy(object), pa.string()),
        "kind": pa.array(out["kind"].to_numpy(object), pa.string())}))
    return digest


def build_cosaemb(layout: RunLayout, folder: Path, tokenizer, max_length: int, sep: str, val_max: int, seed: int,
                  shares=()) -> dict:
    from encoders.fulltext.chunks import abstract_text, chunk_section, section_tag
    from encoders.fulltext.sections_table import paper_sections, section_paper_ids
    from encoders.training.item_store import ITEMS, write_items
    from encoders.training.triplet_table import _read_triplets, _val_sample

    trip = _read_triplets(layout)
    held = set(trip.loc[trip["split"] == SPLIT_VAL, "anchor_id"])
    sections = layout.table("sections")
    with_sections = section_paper_ids(sections)
    wanted = with_sections | set(trip["anchor_id"]) | set(trip["positive_id"]) | set(trip["negative_id"])
    titles: dict[str, str | None] = {}
    chunks: list[tuple[str, int, int, str]] = []      # (paper, section position, k, section class) per chunk
    by_class: dict[str, int] = {}
    counter = _PaperCounter(tokenizer)

    def texts():
        for pid, title, abstract in _papers(layout, wanted):
            if pid in with_sections:
                titles[pid] = title
            if title or abstract:
                yield abstract_item(pid), abstract_text(title, abstract, sep)
        for pid, secs in paper_sections(sections, set(titles)):
            counter.prefill([s for _, _, sents, _ in secs for s in sents])
            for heading, cls, sents, pos in secs:
                tag = section_tag(cls, heading)
                by_class[cls or ""] = by_class.get(cls or "", 0) + 1
                if tag is None:
                    continue
                for k, text in enumerate(chunk_section(titles[pid], tag, sents, counter, max_length)):
                    chunks.append((pid, pos, k, cls))
                    yield chunk_item(pid, pos, k), text

    row_of = write_items(folder / ITEMS, texts(), tokenizer, max_length)
    rng = np.random.default_rng([seed, 29])
    paper_no = {p: i for i, p in enumerate(sorted(titles))}
    c = pd.DataFrame(chunks, columns=["paper", "pos", "k", "cls"])
    c["row"] = [row_of[chunk_item(p, s, k)] for p, s, k in zip(c["paper"], c["pos"], c["k"])]
    c["pno"] = c["paper"].map(paper_no).to_numpy(np.int64)
    c["held"] = c["paper"].isin(held)
    nxt = c.shift(-1)
    local = c[(nxt["paper"] == c["paper"]) & (nxt["pos"] == c["pos"]) & (nxt["k"] == c["k"] + 1)]
    local = pd.DataFrame({"a": local["row"], "p": nxt.loc[local.index, "row"].astype(np.int64),
                          "pno": local["pno"], "held": local["held"], "kind": "local"})
    first = c[(c["k"] == 0) & c["paper"].map(lambda p: abstract_item(p) in row_of)]
    glob = pd.DataFrame({"a": first["row"], "p": first["paper"].map(lambda p: row_of[abstract_item(p)]),
                         "pno": first["pno"], "held": first["held"], "kind": "global"})
    # negatives: another paper's chunk (local) or abstract (global); a train row's never from a held-out paper
    abstracts = pd.DataFrame({"paper": list(titles)})
    abstracts = abstracts[abstracts["paper"].map(lambda p: abstract_item(p) in row_of)]
    abstracts["row"] = abstracts["paper"].map(lambda p: row_of[abstract_item(p)])
    abstracts["pno"] = abstracts["paper"].map(paper_no)
    abstracts["held"] = abstracts["paper"].isin(held)
    for df, pool in ((local, c), (glob, abstracts)):
        df["n"] = -1
        for is_val in (False, True):
            sel = df["held"].to_numpy() == is_val
            src = pool if is_val else pool[~pool["held"]]
            df.loc[sel, "n"] = _other_paper(rng, src["row"].to_numpy(), src["pno"].to_numpy(),
                                            df.loc[sel, "pno"].to_numpy())
        df["split"] = np.where(df["held"], SPLIT_VAL, SPLIT_TRAIN)
    # inter-document rows: the seed triplets on the abstract view
    ids = {k: trip[col].map(lambda p: row_of.get(abstract_item(p), -1)) for k, col in
           (("a", "anchor_id"), ("p", "positive_id"), ("n", "negative_id"))}
    inter = pd.DataFrame({**ids, "split": trip["split"].to_numpy(), "kind": trip["negative_kind"].fillna("").to_numpy()})
    dropped = int((inter[["a", "p", "n"]] < 0).any(axis=1).sum())
    rows = pd.concat([inter, local[["a", "p", "n", "split", "kind"]], glob[["a", "p", "n", "split", "kind"]]],
                     ignore_index=True)
    no_negative = int(((rows["n"] < 0) & (rows["kind"].isin(["local", "global"]))).sum())
    rows = rows[(rows[["a", "p", "n"]] >= 0).all(axis=1)]
    train = apply_shares(rows[rows["split"] == SPLIT_TRAIN], shares, seed)
    level = rows["kind"].map(level_of_kind)
    val = pd.concat([_val_sample(rows[(rows["split"] == SPLIT_VAL) & (level == i)], val_max, seed)
                     for i in range(len(LEVELS))])
    digest = write_train_val(folder, row_of, train, val)
    n_level = lambda df, i: int((df["kind"].map(level_of_kind) == i).sum())  # noqa: E731
    counts = {"triplets_total": int(len(trip)), "dropped_no_text": dropped, "rows_without_negative": no_negative,
              "papers_with_sections": len(titles), "held_out_papers": len(held & set(titles)),
              "sections_by_class": dict(sorted(by_class.items())), "chunks": len(c),
              "chunks_by_class": {k: int(v) for k, v in c["cls"].value_counts().sort_index().items()},
              "chunks_per_tagged_section": round(len(c) / max(int((c["k"] == 0).sum()), 1), 3),
              "rows_available": {lv: {s: n_level(rows[rows["split"] == s], i) for s in (SPLIT_TRAIN, SPLIT_VAL)}
                                 for i, lv in enumerate(LEVELS)},
              "train_triplets": int(len(train)), "val_triplets": int(len(val)),
              "train_by_level": {lv: n_level(train, i) for i, lv in enumerate(LEVELS)}}
    return {"counts": counts, "train_digest": digest, "items": len(row_of)}


def build_pairs(layout: RunLayout, folder: Path, tokenizer, max_length: int, sep: str, val_max: int, seed: int,
                rule: str) -> dict:
    from encoders.fulltext.pairs import RULES, TASKS, section_pairs
    from encoders.fulltext.sections_table import paper_sections, section_paper_ids, strip_positions
    from encoders.training.item_store import ITEMS, write_items
    from encoders.training.triplet_table import _read_triplets, _val_sample

    trip = _read_triplets(layout)
    held = set(trip.loc[trip["split"] == SPLIT_VAL, "anchor_id"])
    sections = layout.table("sections")
    head = {pid: (t, a) for pid, t, a in _papers(layout, section_paper_ids(sections))}
    pairs: list[tuple[str, str, str]] = []       # (paper, task, split)
    tasks_by_rule = {r: dict.fromkeys(TASKS, 0) for r in RULES}
    ctx_item = {"abstract_method": PAIR_ITEMS["head"], "method_conclusion": PAIR_ITEMS["method"]}
    tgt_item = {"abstract_method": PAIR_ITEMS["method"], "method_conclusion": PAIR_ITEMS["conclusion"]}

    def texts():
        for pid, secs in paper_sections(sections, set(head)):
            title, abstract = head[pid]
            secs = strip_positions(secs)
            for r in RULES:
                got = section_pairs(title, abstract, secs, r, sep)
                for task, *_ in got:
                    tasks_by_rule[r][task] += 1
                if r != rule:
                    continue
                for task, context, target in got:
                    pairs.append((pid, task, SPLIT_VAL if pid in held else SPLIT_TRAIN))
                    yield ctx_item[task] + pid, context
                    yield tgt_item[task] + pid, target

    row_of = write_items(folder / ITEMS, texts(), tokenizer, max_length)
    df = pd.DataFrame(pairs, columns=["paper", "kind", "split"])
    df["a"] = [row_of[ctx_item[t] + p] for p, t in zip(df["paper"], df["kind"])]
    df["p"] = [row_of[tgt_item[t] + p] for p, t in zip(df["paper"], df["kind"])]
    df["n"] = df["p"]
    train = df[df["split"] == SPLIT_TRAIN]
    val = _val_sample(df[df["split"] == SPLIT_VAL], val_max, seed)
    digest = write_train_val(folder, row_of, train, val)
    counts = {"triplets_total": int(len(df)), "dropped_no_text": 0, "rule": rule,
              "papers_with_sections": len(head), "held_out_papers": len(held & set(head)),
              "tasks_by_rule": tasks_by_rule, "train_triplets": int(len(train)), "val_triplets": int(len(val)),
              "train_by_task": {t: int((train["kind"] == t).sum()) for t in TASKS}}
    return {"counts": counts, "train_digest": digest, "items": len(row_of)}


def prepare_fulltext(objective: str, kind: str, fmt: str, layout: RunLayout, enc, val_max: int, seed: int,
                     settings: dict, build) -> tuple[Path, bool]:
    """Rank 0: the store of `kind` for these inputs and settings, built if missing by
    build(layout, tmp, tokenizer, max_length, sep, val_max, seed)."""
    from encoders.training.item_store import prepare, tokenizer_digest

    inputs = {**fulltext_inputs(objective, layout), "format": fmt, "tokenizer": tokenizer_digest(enc.path),
              "vocabulary": len(enc.tokenizer), "max_length": enc.max_length, "sep": enc.sep, "val_max": val_max,
              "seed": seed, **settings}
    return prepare(layout.train_tokens_dir, kind, inputs, lambda tmp: build(
        layout, tmp, enc.tokenizer, enc.max_length, enc.sep, val_max, seed))
