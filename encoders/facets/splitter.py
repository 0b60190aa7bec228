"""The abstract facet splitter (METHODS.md §8.1): each sentence of an abstract -> background / method /
result, learned from CSAbstruct (Cohan et al. 2019: background, objective, method, result, other per
sentence; background + objective -> background, other dropped, as CSFCube does).

A sentence is read with its place: "<i>/<n> [SEP] sentence" (the i-th of n sentences), because where
a sentence stands decides much of its facet; the position-only rule below is the baseline that says
how much. It gives FLeW its facet text (title [SEP] the facet's sentences; the title alone when the
abstract has none of that facet) and UniFAR its sentence labels.

    python jobs/facets.py splitter-train --data DIR/csabstruct --out MODEL_DIR
    python jobs/facets.py splitter-label --run runs/x [--classifier MODEL_DIR]   # writes abstract_facets
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from sciencemap.contracts import FACETS
from sciencemap.runtime import UserError
from sciencemap.text import split_sentences

CSABSTRUCT_TO_FACET = {"background": "background", "objective": "background", "method": "method",
                       "result": "result", "other": None}
SPLITS = ("train", "dev", "test")


def read_csabstruct(folder: str | Path, split: str) -> list[tuple[list[str], list[str | None]]]:
    """(sentences, facets) per abstract; a facet is None for an "other" sentence."""
    path = Path(folder) / f"{split}.jsonl"
    if not path.is_file():
        raise UserError(f"no CSAbstruct split {path} (expected train.jsonl, dev.jsonl, test.jsonl in {folder})")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        sents, labels = row.get("sentences") or [], row.get("labels") or []
        if len(sents) != len(labels) or any(lab not in CSABSTRUCT_TO_FACET for lab in labels):
            raise UserError(f"{path}:{n}: needs one label in {sorted(CSABSTRUCT_TO_FACET)} per sentence")
        out.append(([" ".join(s.split()) for s in sents], [CSABSTRUCT_TO_FACET[lab] for lab in labels]))
    return out


def placed(sentences: Sequence[str], sep: str = "[SEP]") -> list[str]:
    """The classifier's input for each sentence of one abstract: "<i>/<n> <sep> sentence"."""
    n = len(sentences)
    return [f"{i + 1}/{n} {sep} {s}" for i, s in enumerate(sentences)]


def examples(abstracts, sep: str) -> list[tuple[str, str]]:
    """(input text, facet) of every sentence with a facet."""
    return [(t, f) for sents, facets in abstracts for t, f in zip(placed(sents, sep), facets) if f is not None]


# -- the position-only baseline
def relative_positions(n: int) -> np.ndarray:
    return np.arange(n) / max(n - 1, 1)


def fit_position_rule(abstracts, step: float = 0.05) -> tuple[float, float]:
    """Cut points t1 <= t2 on the relative position r = i / (n - 1): background when r < t1, method
    when r < t2, else result; the pair with the best training accuracy on a grid of `step`."""
    r = np.concatenate([relative_positions(len(s)) for s, _ in abstracts])
    y = np.concatenate([[FACETS.index(f) if f else -1 for f in fs] for _, fs in abstracts])
    keep = y >= 0
    r, y = r[keep], y[keep]
    grid = np.round(np.arange(0, 1 + step / 2, step), 6)
    best, cut = -1.0, (0.0, 0.0)
    for t1 in grid:
        for t2 in grid[grid >= t1]:
            acc = float((_rule(r, t1, t2) == y).mean())
            if acc > best:
                best, cut = acc, (float(t1), float(t2))
    return cut


def _rule(r: np.ndarray, t1: float, t2: float) -> np.ndarray:
    return np.where(r < t1, 0, np.where(r < t2, 1, 2))


def position_rule_scores(abstracts, cut: tuple[float, float]) -> dict:
    from encoders.facets.classifier import macro_f1

    r = np.concatenate([relative_positions(len(s)) for s, _ in abstracts])
    y = np.concatenate([[FACETS.index(f) if f else -1 for f in fs] for _, fs in abstracts])
    keep = y >= 0
    pred = _rule(r[keep], *cut)
    m, per, cm = macro_f1(y[keep], pred, len(FACETS))
    return {"n": int(keep.sum()), "macro_f1": round(m, 4), "accuracy": round(float((pred == y[keep]).mean()), 4),
            "f1": {f: round(v, 4) for f, v in zip(FACETS, per)}, "confusion": cm.tolist(), "cut": list(cut)}


def train_splitter(data: str | Path, out: str | Path, model: str = "minilm", device: str = "auto", **settings) -> dict:
    from encoders.facets.classifier import ClassifierSettings, evaluate, save_classifier, train_classifier

    s = ClassifierSettings(**settings)
    train, dev, test = (read_csabstruct(data, sp) for sp in SPLITS)
    cut = fit_position_rule(train)
    t0 = time.time()
    sep = "[SEP]"
    clf, rec = train_classifier(model, FACETS, examples(train, sep), examples(dev, sep), s, device=device)
    sep = clf.encoder.sep
    if sep != "[SEP]":   # a tokenizer with another separator: its own marker, trained again
        clf, rec = train_classifier(model, FACETS, examples(train, sep), examples(dev, sep), s, device=device)
    rec.test = evaluate(clf, examples(test, sep))
    rule = {"dev": position_rule_scores(dev, cut), "test": position_rule_scores(test, cut)}
    save_classifier(clf, Path(out), rec, extra={"task": "abstract_facets", "data": str(data), "position_rule": rule})
    return {"out": str(out), "seconds": round(time.time() - t0, 1), "best_epoch": rec.best_epoch,
            "dev_macro_f1": rec.dev["macro_f1"], "test": rec.test, "position_rule": rule}


def split_abstracts(clf, abstracts: Sequence[str | None], batch_size: int = 128) -> list[tuple[list[str], list[str]]]:
    """(sentences, facets) of each abstract (empty lists for a missing one), all sentences in batches."""
    sents = [split_sentences([a]) if a else [] for a in abstracts]
    flat = [t for s in sents for t in placed(s, clf.encoder.sep)]
    labels = clf.predict(flat, batch_size) if flat else []
    out, at = [], 0
    for s in sents:
        out.append((s, labels[at:at + len(s)]))
        at += len(s)
    return out


def facet_text(title: str | None, sentences: Sequence[str], facets: Sequence[str], facet: str, sep: str) -> str:
    """FLeW's facet-specific text: title <sep> the abstract's sentences of that facet (the title alone
    when there are none)."""
    from sciencemap.text import paper_text

    return paper_text(title, " ".join(s for s, f in zip(sentences, facets) if f == facet), sep)


def label_abstracts(run: str | Path, classifier: str | Path | None = None, device: str = "auto",
                    everything: bool = False, batch_size: int = 128) -> dict:
    """Split the abstracts of the run's triplet papers (every paper with `everything`) into facets,
    LABEL_BATCH_ROWS papers at a time; writes `abstract_facets` (paper_id, sentences, facets)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from encoders.facets.classifier import LABEL_BATCH_ROWS, open_labeller, write_labelled
    from sciencemap.contracts import SCHEMAS
    from sciencemap.layout import RunLayout

    layout = RunLayout(Path(run))
    papers = layout.table("papers")
    if not papers.exists():
        raise UserError(f"{papers} is missing: run the ingest stage first")
    filt = pc.field("abstract").is_valid()
    if not everything:
        trip = layout.table("triplets")
        if not trip.exists():
            raise UserError(f"{trip} is missing: run the importance stage first (or pass --all)")
        t = ds.dataset(str(trip)).to_table(columns=["anchor_id", "positive_id", "negative_id"])
        ids = pc.unique(pa.chunked_array(t["anchor_id"].chunks + t["positive_id"].chunks + t["negative_id"].chunks))
        filt = filt & pc.field("paper_id").isin(ids)
    t0 = time.time()
    path, clf = open_labeller(layout, classifier, "splitter", FACETS, "the facets", device)
    stats = {"abstracts": 0, "sentences": 0, "by_facet": dict.fromkeys(FACETS, 0), "abstracts_without": dict.fromkeys(FACETS, 0)}

    def labelled():
        for b in ds.dataset(str(papers)).to_batches(columns=["paper_id", "abstract"], filter=filt,
                                                    batch_size=LABEL_BATCH_ROWS):
            if not b.num_rows:
                continue
            done = split_abstracts(clf, b.column("abstract").to_pylist(), batch_size)
            for _, fs in done:
                stats["abstracts"] += 1
                stats["sentences"] += len(fs)
                for f in FACETS:
                    stats["by_facet"][f] += fs.count(f)
                    stats["abstracts_without"][f] += f not in fs
            yield pa.table({"paper_id": b.column("paper_id"), "sentences": [s for s, _ in done],
                            "facets": [f for _, f in done]})

    write_labelled(layout.table("abstract_facets"), SCHEMAS["abstract_facets"], labelled())
    return {**stats, "classifier": str(path), "seconds": round(time.time() - t0, 1)}
