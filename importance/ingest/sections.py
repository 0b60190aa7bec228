"""Section classification (METHODS.md §1.1): a paper's top-level sections -> I / M / R / D / O.

Classes: I (introduction/background/related work), M (methods), R (results), D (discussion,
conclusion), O (anything else). Nested sections inherit their top-level section's class; readers
pass a paper's top-level sections to classify_sections, which decides in four steps: JATS
sec-type; a heading that names its class (an IMRaD keyword heading by the keyword rules below, or
a whole heading from UNAMBIGUOUS_HEADINGS); appendices by place (after back matter or the
conclusion); the learned model (importance.ingest.section_model) for the rest, the paper decoded as one
sequence.

Decision on combined headings: a mention has one section_class, so "Results and discussion" counts
as R. The rule is "leftmost keyword wins within a heading" (ties: the longer keyword, then rule
order), so "Results and discussion" -> R, "Discussion and conclusions" -> D, "Methods and results"
-> M, "Experimental results" -> R (longer match at the same place). JATS sec-type
"results|discussion" follows the same decision: the first listed type that maps wins. Why R and not
D (or both): a combined section reports the paper's own findings and compares them with the cited
work as it goes; splitting its mentions between R and D would need sentence-level cues we do not
have, and counting them in both would double-count.

Measured: bench/section_f1.py (figures in METHODS.md §1.1).
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

from importance.ingest.headings import (CLASSES, class_from_heading, class_from_sec_type, heading_kind, known_class,
                                        normalise_heading)
from importance.ingest.section_model import default_model, features, neighbour_classes

# Back matter: after such a section, what follows is an appendix.
BACK_MATTER = re.compile(r"\b(?:acknowledg\w*|references|bibliography|funding|data availability|appendix|appendices|"
                         r"supplementa\w*|author contributions?|competing interests?|conflicts? of interest)\b")


def appendix_sections(titles: Sequence[str | None], known: Sequence[str | None]) -> list[bool]:
    """Which sections are appendices by their place: those whose class is not otherwise known and
    that come after back matter (acknowledgements, references, data availability...) or after the
    paper's conclusion (a keyword heading of class D). The labelling guidelines define an appendix
    by the first; the second holds for 26 of 32 such sections of the hand-labelled training set
    (the others are fragments that continue the conclusion, and one ethics statement)."""
    out, closed = [], False
    for i, (t, k) in enumerate(zip(titles, known)):
        out.append(closed and k is None)
        if k == "O" and i > 0 and BACK_MATTER.search(normalise_heading(t)):
            closed = True
        if k == "D" and heading_kind(t) == "keyword":
            closed = True
    return out


def _position_fallback(title: str | None, position: int | None) -> str:
    """Without the model: the heading rules, then the first block of a body is I, else O."""
    return class_from_heading(title) or ("I" if position == 0 else "O")


CLASS_SOURCES = ("sec_type", "heading", "appendix", "model", "position")


def classify_sections(titles: Sequence[str | None], texts: Sequence[str | None] | None = None,
                      sec_types: Sequence[str | None] | None = None, positions: Sequence[int] | None = None,
                      n_sections: int | None = None, model=None, research: bool = True,
                      sources: list | None = None) -> list[str]:
    """The classes of one paper's top-level sections, in order (METHODS.md §1.1).

    sec-type, then keyword headings fix a section's class; the others are scored by the learned
    model (importance.ingest.section_model: heading, text, position, neighbours) and the paper decoded as
    one sequence. Sections after back matter or after the conclusion are appendices (O:
    appendix_sections). positions default to 0..n-1 and n_sections to the number of titles (give both
    when the list is a subset of the paper's sections). model: a SectionModel other than the
    shipped one (evaluation). research=False (a review, feature or editorial, by the article's own
    type): its topical sections are not parts of an IMRaD paper, so only sec-type and headings give
    classes and the rest keeps the position rule (first block I, else O). `sources`: a list that
    receives what decided each class (CLASS_SOURCES: the sections table's class_source)."""
    n = len(titles)
    texts = list(texts) if texts is not None else [None] * n
    sec_types = list(sec_types) if sec_types is not None else [None] * n
    positions = list(positions) if positions is not None else list(range(n))
    total = n_sections or n
    fixed = [known_class(st, t) for st, t in zip(sec_types, titles)]
    appendix = appendix_sections(titles, fixed)
    if sources is not None:
        sources[:] = ["appendix" if a else None if f is None else "sec_type" if class_from_sec_type(st) else "heading"
                      for f, a, st in zip(fixed, appendix, sec_types)]
    fixed = ["O" if a else f for f, a in zip(fixed, appendix)]
    if n == 0 or all(fixed):
        return fixed
    model = model or (default_model() if research else None)
    if model is None:
        if sources is not None:
            sources[:] = [s or ("heading" if class_from_heading(t) else "position") for s, t in zip(sources, titles)]
        return [f or _position_fallback(t, p) for f, t, p in zip(fixed, titles, positions)]
    if sources is not None:
        sources[:] = [s or "model" for s in sources]
    near = neighbour_classes(titles)
    logp = np.stack([model.log_probabilities(features(t, x, p, total, nb)) if f is None
                     else np.zeros(len(model.classes))
                     for f, t, x, p, nb in zip(fixed, titles, texts, positions, near)])
    return model.decode(logp, fixed)


def macro_f1(truth: Iterable[str], pred: Iterable[str], classes: Iterable[str] = CLASSES) -> dict:
    """Macro-F1 over the classes that occur in truth or prediction, plus per-class precision,
    recall, F1 and support (number of true labels)."""
    pairs = list(zip(truth, pred))
    tp, fp, fn = Counter(), Counter(), Counter()
    for t, p in pairs:
        if t == p:
            tp[t] += 1
        else:
            fp[p] += 1
            fn[t] += 1
    per = {}
    for c in classes:
        if tp[c] + fp[c] + fn[c] == 0:
            continue
        prec = tp[c] / (tp[c] + fp[c]) if tp[c] + fp[c] else 0.0
        rec = tp[c] / (tp[c] + fn[c]) if tp[c] + fn[c] else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per[c] = {"precision": prec, "recall": rec, "f1": f1, "support": tp[c] + fn[c]}
    f1s = {c: v["f1"] for c, v in per.items()}
    return {"n": len(pairs), "macro_f1": sum(f1s.values()) / len(f1s) if f1s else float("nan"),
            "per_class_f1": f1s, "per_class": per,
            "accuracy": sum(tp.values()) / len(pairs) if pairs else float("nan")}


def heading_rules_vs_sec_type(articles: Iterable[bytes]) -> dict:
    """Score the heading rules against JATS sec-type labels on top-level titled sections.

    `articles` are JATS XML documents (bytes, already decompressed). Only sections whose sec-type
    maps to a class and that carry a title are scored; an unmatched heading is predicted O.
    """
    from lxml import etree

    truth, pred = [], []
    parser = etree.XMLParser(recover=True, resolve_entities=False, no_network=True, load_dtd=False)
    for data in articles:
        root = etree.fromstring(data, parser)
        if root is None:
            continue
        for body in root.iter("body"):
            for sec in body.findall("sec"):
                t = class_from_sec_type(sec.get("sec-type"))
                title_el = sec.find("title")
                title = "".join(title_el.itertext()) if title_el is not None else ""
                if t and title.strip():
                    truth.append(t)
                    pred.append(class_from_heading(title) or "O")
            break
    return macro_f1(truth, pred)
