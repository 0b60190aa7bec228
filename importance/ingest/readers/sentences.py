"""Sentences of section text where the format marks none (JATS and S2ORC/unArXive paragraphs), for the
sections table (METHODS.md §1.5): pysbd's rule-based English segmenter (abbreviations, decimals,
"et al.", "Fig. 1A" and the like stay inside a sentence), run per paragraph so that a sentence never
crosses one. ScisummNet marks its sentences (<S>) and is read as marked.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from importance.ingest.readers.common import clean_ws


@lru_cache(maxsize=1)
def _segmenter():
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(paragraphs: Iterable[str | None]) -> list[str]:
    """The sentences of the paragraphs, in order, white space folded."""
    out = []
    for p in paragraphs:
        p = clean_ws(p)
        if p:
            out += [t for t in (clean_ws(x) for x in _segmenter().segment(p)) if t]
    return out
