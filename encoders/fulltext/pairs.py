"""SciJEPa's within-paper prediction pairs (METHODS.md §8.10): title + abstract → method section, and
method section → conclusion, one task per example, from a paper's sections in order.

Two rules find the sections:
- "class" (the default): the sections the section classifier put in M are the method; the
  conclusion is the D sections, else the R ones. It reads eLife, where Methods come last, right.
- "position" (the paper's rule): a heading naming a method (method, methodology, approach, model,
  materials, experimental setup, ...) else the second section; a heading naming a conclusion or
  discussion else the last section.
Sections of one class are joined in order. A task whose either side has no text gives no pair.
"""
from __future__ import annotations

import re
from typing import Sequence

TASKS = ("abstract_method", "method_conclusion")
RULES = ("class", "position")
_METHOD = re.compile(r"\b(methods?|methodology|approach|models?|materials|experimental\s+(setup|design|procedures?)|"
                     r"framework|system\s+description)\b", re.IGNORECASE)
_CONCLUSION = re.compile(r"\b(conclusions?|concluding|discussion|summary)\b", re.IGNORECASE)

Section = tuple[str | None, str | None, Sequence[str]]   # (heading, section class, sentences)


def _text(sections: Sequence[Section]) -> str:
    return " ".join(s for _, _, sents in sections for s in sents if s and s.strip()).strip()


def method_and_conclusion(sections: Sequence[Section], rule: str = "class") -> tuple[str, str]:
    """(method text, conclusion text) of a paper's sections by the rule ('' where none)."""
    if rule == "class":
        method = _text([s for s in sections if s[1] == "M"])
        conclusion = _text([s for s in sections if s[1] == "D"]) or _text([s for s in sections if s[1] == "R"])
        return method, conclusion
    if rule == "position":
        named = [s for s in sections if s[0] and _METHOD.search(s[0])]
        method = _text(named[:1]) if named else _text(sections[1:2])
        named = [s for s in sections if s[0] and _CONCLUSION.search(s[0])]
        conclusion = _text(named[-1:]) if named else (_text(sections[-1:]) if len(sections) > 2 else "")
        return method, conclusion
    raise ValueError(f"unknown pair rule {rule!r}; use one of {RULES}")


def section_pairs(title: str | None, abstract: str | None, sections: Sequence[Section],
                  rule: str = "class", sep: str = "[SEP]") -> list[tuple[str, str, str]]:
    """(task, context, target) examples of one paper: title [SEP] abstract → method, method → conclusion."""
    method, conclusion = method_and_conclusion(sections, rule)
    head = " ".join(x for x in (title or "", sep if title and abstract else "", abstract or "") if x).strip()
    out = []
    if head and method:
        out.append(("abstract_method", head, method))
    if method and conclusion and method != conclusion:
        out.append(("method_conclusion", method, conclusion))
    return out
