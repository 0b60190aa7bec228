"""Author matching for self-citation (METHODS.md §1): normalised family name + first initial,
ORCID when both authors carry one."""
from __future__ import annotations

import re

from importance.readers.common import strip_accents


def family_key(family: str | None, given: str | None) -> str | None:
    """'Müller-Lüdenscheidt', 'Hans' -> 'mullerludenscheidt|h' (lowercase, no accents/punctuation)."""
    if not family:
        return None
    fam = re.sub(r"[^a-z]", "", strip_accents(family).lower())
    if not fam:
        return None
    g = re.sub(r"[^a-z]", "", strip_accents(given or "").lower())
    return f"{fam}|{g[:1]}"


def same_author(a: dict, b: dict) -> bool:
    if a.get("orcid") and b.get("orcid"):
        return a["orcid"] == b["orcid"]
    ka, kb = family_key(a.get("family"), a.get("given")), family_key(b.get("family"), b.get("given"))
    return ka is not None and ka == kb


def shares_author(xs: list[dict] | None, ys: list[dict] | None) -> bool:
    return any(same_author(a, b) for a in xs or [] for b in ys or [])


def _accent_table() -> tuple[str, str]:
    """Latin-1 + Latin Extended-A letters that decompose to one ASCII letter (for Spark translate)."""
    src, dst = [], []
    for cp in range(0xC0, 0x250):
        c = chr(cp)
        base = strip_accents(c).lower()
        if len(base) == 1 and "a" <= base <= "z" and c.lower() != base:
            src.append(c)
            dst.append(base)
    return "".join(src), "".join(dst)


ACCENTS_FROM, ACCENTS_TO = _accent_table()


def spark_family_key(family_col, given_col):
    """family_key as a Spark column expression (accents of Latin scripts stripped with translate)."""
    from pyspark.sql import functions as F

    def letters(c):
        return F.regexp_replace(F.translate(F.lower(c), ACCENTS_FROM, ACCENTS_TO), "[^a-z]", "")

    fam = letters(family_col)
    return F.when(F.length(fam) > 0, F.concat(fam, F.lit("|"), F.substring(letters(F.coalesce(given_col, F.lit(""))), 1, 1)))
