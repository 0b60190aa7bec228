"""Missing text is one thing: None, NaN (pandas, numpy), pandas.NA and blank strings all become "".

Stages read titles and abstracts through `clean_text` / `clean_texts` where tables are read, so a
column produced by pyarrow, pandas 2 or pandas 3 (whose string columns hold NaN for missing) never
crashes a stage and never turns into the word "nan".
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Iterable


def clean_text(x) -> str:
    """The stripped string, or "" for anything missing or not text."""
    if x is None:
        return ""
    if isinstance(x, str):
        return x.strip()
    if isinstance(x, float) and math.isnan(x):
        return ""
    if type(x).__name__ in ("NAType", "NaTType"):  # pandas.NA / NaT, without importing pandas
        return ""
    if isinstance(x, bytes):
        return x.decode("utf-8", "replace").strip()
    return ""


def clean_texts(values: Iterable) -> list[str]:
    return [clean_text(v) for v in values]


def text_column(table, name: str) -> list[str]:
    """A string column of a pyarrow table (or pandas frame) as clean Python strings."""
    col = table[name]
    values = col.to_pylist() if hasattr(col, "to_pylist") else list(col)
    return clean_texts(values)


def paper_text(title, abstract, sep: str = "[SEP]") -> str:
    """`title <sep> abstract` (docs/METHODS.md §4); a missing side is left out, never written as 'None'."""
    t, a = clean_text(title), clean_text(abstract)
    if t and a:
        return f"{t} {sep} {a}"
    return t or a


@lru_cache(maxsize=1)
def _segmenter():
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(paragraphs: Iterable[str | None]) -> list[str]:
    """The sentences of the paragraphs, in order, white space folded: pysbd's rule-based English
    segmenter (abbreviations, decimals, "et al.", "Fig. 1A" and the like stay inside a sentence), run
    per paragraph so that a sentence never crosses one. The sections table and the abstract facet
    splitter read text through it."""
    out = []
    for p in paragraphs:
        p = " ".join(clean_text(p).split())
        if p:
            out += [t for t in (" ".join(x.split()) for x in _segmenter().segment(p)) if t]
    return out
