"""Section classification (METHODS.md §1.1): a paper's top-level sections -> I / M / R / D / O.

Classes: I (introduction/background/related work), M (methods), R (results), D (discussion,
conclusion), O (anything else). Nested sections inherit their top-level section's class; readers
pass a paper's top-level sections to classify_sections, which decides in four steps: JATS
sec-type; a heading that names its class (an IMRaD keyword heading by the keyword rules below, or
a whole heading from UNAMBIGUOUS_HEADINGS); appendices by place (after back matter or the
conclusion); the learned model (importance.section_model) for the rest, the paper decoded as one
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

CLASSES = ("I", "M", "R", "D", "O")

# JATS sec-type values (lowercase) -> class. Unknown types fall through to the heading rules.
SEC_TYPES = {
    "intro": "I", "introduction": "I", "background": "I",
    "methods": "M", "materials": "M", "subjects": "M", "materials|methods": "M",
    "results": "R", "cases": "R", "case": "R",
    "discussion": "D", "conclusions": "D", "conclusion": "D",
    "supplementary-material": "O", "additional-information": "O", "datasets": "O",
    "display-objects": "O", "abbreviations": "O", "acknowledgments": "O", "funding": "O",
}

# (class, keyword regex) in rule order; matched against the normalised heading.
HEADING_RULES: list[tuple[str, str]] = [
    ("O", r"acknowledg\w*|funding|abbreviations?|supplementa\w*|appendix|appendices|references|"
          r"author contributions?|competing interests?|conflicts? of interest|data availability|"
          r"abstract|figure legends?|supporting information"),
    ("I", r"introduction|background|related work|related research|previous work|prior work|"
          r"literature review|literature|motivation|overview|state of the art"),
    ("R", r"experimental results?|results?|findings|error analysis|case reports?|case presentation"),
    ("D", r"discussion|conclusions?|concluding remarks|summary|future work|future directions|"
          r"limitations|outlook|implications"),
    ("M", r"materials?|methods?|methodology|experimental (?:setup|set-up|settings?|design|procedures?|details)|"
          r"procedures?|study design|study population|participants|patients|subjects|"
          r"statistical analys[ie]s|data collection|data sets?|datasets?|corpus|corpora|"
          r"implementation|setup|model|models|algorithm|approach|framework|system|architecture|"
          r"training|features?"),
    ("R", r"experiments?|evaluation|analysis|comparison|performance"),
]
_COMPILED = [(cls, order, re.compile(r"\b(?:" + pat + r")\b")) for order, (cls, pat) in enumerate(HEADING_RULES)]
# Leading numbering: "1", "2.3.", "IV.", "A." (roman/alpha only when followed by a dot or bracket).
_NUMBERING = re.compile(r"^\s*(?:\d+(?:\.\d+)*[.)]?|(?:[ivxlc]+|[a-z])[.)])\s*", re.I)


def normalise_heading(title: str | None) -> str:
    if not title:
        return ""
    t = _NUMBERING.sub("", title.strip())
    t = re.sub(r"[^\w\s-]", " ", t.lower())
    return re.sub(r"\s+", " ", t).strip()


# The words that make a heading say its IMRaD part outright ("keyword" headings); the
# other O words count too (an acknowledgements heading is informative). "Experiments", "Our
# approach", "Evaluation" are not among them: such headings need the section's text.
IMRAD_KEYWORDS = re.compile(
    r"\b(?:introduction|background|related work|previous work|prior work|methods?|methodology|materials?|"
    r"results?|discussion|conclusions?|concluding remarks|acknowledg\w*|appendix|appendices|references|"
    r"abstract|funding)\b")
HEADING_KINDS = ("empty", "numbered", "other", "keyword")


def heading_kind(title: str | None) -> str:
    """empty (no heading), numbered (numbering only: "2.", "IV", "3.1"), keyword (an IMRaD or
    back-matter word: IMRAD_KEYWORDS), or other (words, none of them such a keyword)."""
    raw = (title or "").strip()
    if not re.sub(r"[\W_]+", "", raw):
        return "empty"
    if re.fullmatch(r"[\s.)(:\-]*(?:\d+(?:\.\d+)*|[ivxlcIVXLC]+|[A-Za-z])?[\s.)(:\-]*", raw):
        return "numbered"
    return "keyword" if IMRAD_KEYWORDS.search(normalise_heading(raw)) else "other"


def class_from_sec_type(sec_type: str | None) -> str | None:
    if not sec_type:
        return None
    whole = SEC_TYPES.get(sec_type.strip().lower())
    if whole:
        return whole
    for part in sec_type.lower().split("|"):
        cls = SEC_TYPES.get(part.strip())
        if cls:
            return cls
    return None


def class_from_heading(title: str | None) -> str | None:
    """Leftmost keyword match wins (ties: longer keyword, then earlier rule); None if no rule fires."""
    t = normalise_heading(title)
    if not t:
        return None
    best = None
    for cls, order, rx in _COMPILED:
        m = rx.search(t)
        if m:
            key = (m.start(), -(m.end() - m.start()), order)
            if best is None or key < best[0]:
                best = (key, cls)
    return best[1] if best else None


# Headings that name their class beyond the IMRaD keywords: the whole heading (numbering stripped;
# an article, "our", "proposed" or "basic" allowed in front) is one of these. Like the keyword
# headings they fix a section's class; they also give the classifier's free training labels.
_LEAD = r"(?:(?:the|our|a|an|proposed|basic)\s)?"
UNAMBIGUOUS_HEADINGS = {
    "I": r"motivation|related (?:research|works?)|previous (?:approaches|research)|past work|relevant work|"
         r"literature (?:survey|review)|state of the art",
    "M": r"experimental (?:setup|set-up|settings?|design|framework|data|procedures?)|evaluation (?:setup|set-up|"
         r"metrics|measures|framework)|models?|decoding|features?|feature (?:representation|set|functions)|"
         r"approach(?:es)?|approach overview|training|data(?: ?sets?)?|data (?:collection|preparation)|"
         r"algorithms?|learning algorithm|preliminaries|definitions?|notation|system (?:description|architecture|"
         r"overview)|architecture|implementation|inference|parameter estimation|corpus|corpora|corpus statistics|"
         r"task (?:description|definition)|task|problem (?:description|formulation|definition|statement)|"
         r"resources|preprocessing|probability model|framework|method(?:ology)? overview|formulation",
    "R": r"experiments?|experimentation|(?:experimental|empirical|human|automatic|intrinsic|extrinsic) evaluation|"
         r"evaluation|(?:error )?analysis|experiments and (?:analysis|evaluation)|(?:experimental|empirical) "
         r"study|[a-z]+ experiments|comparison|evaluation and (?:analysis|comparison)|numerical "
         r"(?:experiments|simulations)|simulations",
    "D": r"future (?:work|directions)|further (?:work|research)|summary(?: and (?:future work|outlook))?|"
         r"discussions|outlook|limitations|final remarks",
}
_UNAMBIGUOUS = {c: re.compile(_LEAD + "(?:" + p + ")") for c, p in UNAMBIGUOUS_HEADINGS.items()}


def class_from_unambiguous_heading(title: str | None) -> str | None:
    """The class of a heading that is, as a whole, one of UNAMBIGUOUS_HEADINGS ("4 Experiments"
    -> R, "Our Approach" -> M); None otherwise."""
    h = normalise_heading(title)
    for cls, rx in _UNAMBIGUOUS.items():
        if h and rx.fullmatch(h):
            return cls
    return None


def known_class(sec_type: str | None, title: str | None) -> str | None:
    """The class a section's labels state outright: its JATS sec-type, else a keyword heading
    (heading_kind "keyword") by the heading rules, else an unambiguous heading; None when only the
    model can tell."""
    cls = class_from_sec_type(sec_type)
    if cls is None and heading_kind(title) == "keyword":
        cls = class_from_heading(title)
    return cls or class_from_unambiguous_heading(title)


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


def classify_sections(titles: Sequence[str | None], texts: Sequence[str | None] | None = None,
                      sec_types: Sequence[str | None] | None = None, positions: Sequence[int] | None = None,
                      n_sections: int | None = None, model=None, research: bool = True) -> list[str]:
    """The classes of one paper's top-level sections, in order (METHODS.md §1.1).

    sec-type, then keyword headings fix a section's class; the others are scored by the learned
    model (importance.section_model: heading, text, position, neighbours) and the paper decoded as
    one sequence. Sections after back matter or after the conclusion are appendices (O:
    appendix_sections). positions default to 0..n-1 and n_sections to the number of titles (give both
    when the list is a subset of the paper's sections). model: a SectionModel other than the
    shipped one (evaluation). research=False (a review, feature or editorial, by the article's own
    type): its topical sections are not parts of an IMRaD paper, so only sec-type and headings give
    classes and the rest keeps the position rule (first block I, else O)."""
    from importance.section_model import default_model, features, neighbour_classes

    n = len(titles)
    texts = list(texts) if texts is not None else [None] * n
    sec_types = list(sec_types) if sec_types is not None else [None] * n
    positions = list(positions) if positions is not None else list(range(n))
    total = n_sections or n
    fixed = [known_class(st, t) for st, t in zip(sec_types, titles)]
    fixed = ["O" if a else f for f, a in zip(fixed, appendix_sections(titles, fixed))]
    if n == 0 or all(fixed):
        return fixed
    model = model or (default_model() if research else None)
    if model is None:
        return [f or _position_fallback(t, p) for f, t, p in zip(fixed, titles, positions)]
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
