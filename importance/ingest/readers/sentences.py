"""Sentences of section text where the format marks none (JATS and S2ORC/unArXive paragraphs), for the
sections table (METHODS.md §1.5): sciencemap.text.split_sentences (pysbd), run per paragraph so that a
sentence never crosses one. ScisummNet marks its sentences (<S>) and is read as marked. And the
citing sentence of each in-text citation, by a cheaper rule (below).
"""
from __future__ import annotations

import re

from importance.ingest.readers.common import clean_ws
from sciencemap.text import split_sentences  # noqa: F401  (the readers' sentences: pysbd, in sciencemap.text)


# The citing sentence of an in-text citation (mentions.context, METHODS.md §8.1). pysbd on every
# paragraph of every full text would cost more than the rest of the reader, so the sentence around a
# citation is cut by a cheap rule instead: a boundary is ". ", "! " or "? " (closing quotes and
# brackets allowed) followed by a capital, a digit or an opening bracket, except after common
# abbreviations, a single capital (an initial) or inside a bracket. Contexts are capped at
# CONTEXT_CHARS around the citation (a missed boundary then costs only length).
CONTEXT_CHARS = 600
_BOUNDARY = re.compile(r"[.!?][\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_ABBREVIATION = re.compile(
    r"(?:\bet al|\be\.g|\bi\.e|\bcf|\bvs|\bFigs?|\bEqs?|\bRefs?|\bTab|\bSupp?l?|\bNo|\bNos|\bDr|\bMr|\bMrs|\bMs|"
    r"\bca|\bapprox|\bresp|\bSec|\bSect|\bCh|\bVol|\bp|\bpp|\bSt|\bspp?|\bvar|\bsubsp|\b[A-Z]|\b[a-z])\.$")


def sentence_bounds(text: str) -> list[int]:
    """Start offsets of the sentences of a paragraph (0 first), by the rule above."""
    from bisect import bisect_left

    starts = [0]
    opens = closes = None
    for m in _BOUNDARY.finditer(text):
        dot = m.start() + 1
        if _ABBREVIATION.search(text, max(0, dot - 12), dot):
            continue
        if opens is None:   # bracket positions, found once per paragraph that has a boundary
            opens = [b.start() for b in _OPEN.finditer(text)]
            closes = [b.start() for b in _CLOSE.finditer(text)]
        if bisect_left(opens, m.start()) > bisect_left(closes, m.start()):   # inside a bracket
            continue
        starts.append(m.end())
    return starts


_OPEN, _CLOSE = re.compile(r"[(\[]"), re.compile(r"[)\]]")


def context_at(text: str, starts: list[int], begin: int, end: int | None = None) -> str | None:
    """The sentence of `text` holding the span [begin, end), white space folded, at most CONTEXT_CHARS
    (cut around the span); starts = sentence_bounds(text)."""
    from bisect import bisect_right

    if not text:
        return None
    end = begin if end is None else end
    i = bisect_right(starts, begin) - 1
    lo, hi = starts[max(i, 0)], (starts[i + 1] if i + 1 < len(starts) else len(text))
    if hi - lo > CONTEXT_CHARS:
        half = max(0, (CONTEXT_CHARS - (end - begin)) // 2)
        lo, hi = max(lo, begin - half), min(hi, max(end, begin) + half)
    return clean_ws(text[lo:hi]) or None
