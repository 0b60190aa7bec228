"""One section heading (or JATS sec-type) -> its class, by rules (METHODS.md §1.1).

Classes: I (introduction/background/related work), M (methods), R (results), D (discussion,
conclusion), O (anything else). A heading names its class when it is an IMRaD keyword heading (the
keyword rules below, leftmost keyword wins) or a whole heading of UNAMBIGUOUS_HEADINGS; the rest is
left to the learned model (importance.ingest.section_model) by importance.ingest.sections.
"""
from __future__ import annotations

import re

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
