"""Author matching for self-citation (METHODS.md §1): normalised family name + first initial,
ORCID when both authors carry one."""
from __future__ import annotations

import re

import numpy as np

from importance.ingest.readers.common import strip_accents


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


# Stored author keys (contracts: papers/references `author_keys`, `orcid_author_keys`), built once at
# ingest so that same_author over two author lists is two set intersections:
#   author_keys       = per author "#<orcid>" when it has an ORCID, else "family|i" (family_key)
#   orcid_author_keys = "family|i" of the authors that have an ORCID (usually empty)
# Lists a, b share an author iff author_keys(a) ∩ author_keys(b) (equal ORCIDs, or equal names of
# authors without ORCID) or orcid_author_keys(a) ∩ author_keys(b) or author_keys(a) ∩
# orcid_author_keys(b) (a name matches an author without ORCID on the other side); names
# ("x|y") and ORCIDs ("#...") never collide.
KEY_COLUMNS = ("author_keys", "orcid_author_keys")


def _name_key_spark(a):
    from pyspark.sql import functions as F

    def fold(c):
        return F.translate(F.lower(c), ACCENTS_FROM, ACCENTS_TO)

    fam = F.regexp_replace(fold(a["family"]), "[^a-z]", "")
    ini = F.regexp_extract(fold(F.coalesce(a["given"], F.lit(""))), "([a-z])", 1)
    return F.when(F.length(fam) > 0, F.concat(fam, F.lit("|"), ini)).otherwise(F.lit(""))


def author_keys_spark(col) -> dict:
    """{author_keys, orcid_author_keys} as Spark expressions over an `authors` column."""
    from pyspark.sql import functions as F

    authors = F.coalesce(col, F.array())
    keys = F.transform(authors, lambda a: F.when(a["orcid"].isNotNull(), F.concat(F.lit("#"), a["orcid"]))
                       .otherwise(_name_key_spark(a)))
    with_orcid = F.filter(authors, lambda a: a["orcid"].isNotNull())
    return {"author_keys": F.filter(keys, lambda k: (k != "") & (k != "#")),
            "orcid_author_keys": F.filter(F.transform(with_orcid, _name_key_spark), lambda k: k != "")}


def author_keys_arrow(authors) -> dict:
    """author_keys_spark for a pyarrow list<struct<family, given, orcid>> array (the generator's
    writer): the same strings, vectorised (NFKD then letters only, as strip_accents)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    authors = pa.array(authors) if not isinstance(authors, pa.Array) else authors
    authors = pc.if_else(pc.is_null(authors), pa.scalar([], authors.type), authors)
    flat = authors.flatten()
    owner = pc.list_parent_indices(authors).to_numpy()

    def letters(c):
        return pc.replace_substring_regex(pc.utf8_normalize(pc.utf8_lower(c), "NFKD"), "[^a-z]", "")

    fam = pc.fill_null(letters(flat.field("family")), "")
    ini = pc.utf8_slice_codeunits(pc.fill_null(letters(flat.field("given")), ""), 0, 1)
    name = pc.if_else(pc.greater(pc.utf8_length(fam), 0), pc.binary_join_element_wise(fam, ini, "|"), "")
    orcid = flat.field("orcid")
    has_orcid = pc.is_valid(orcid).to_numpy(zero_copy_only=False)
    key = pc.if_else(pa.array(has_orcid), pc.binary_join_element_wise("#", pc.fill_null(orcid, ""), ""), name)

    def lists(values, keep):
        n = np.bincount(owner[keep], minlength=len(authors))
        offsets = pa.array(np.concatenate([[0], np.cumsum(n)]).astype(np.int32))
        return pa.ListArray.from_arrays(offsets, pc.filter(values, pa.array(keep)))

    nonempty = lambda a: pc.not_equal(a, "").to_numpy(zero_copy_only=False)  # noqa: E731
    return {"author_keys": lists(key, nonempty(key) & pc.not_equal(key, "#").to_numpy(zero_copy_only=False)),
            "orcid_author_keys": lists(name, has_orcid & nonempty(name))}


def _overlap_arrow(a, b) -> np.ndarray:
    """Per row i: do the string lists a[i] and b[i] share a value? (pyarrow ListArrays of the same
    length; null lists are empty.) One semi-join of (row, value) pairs in Arrow's C++ hash join."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def pairs(x):
        return pa.table({"r": pc.list_parent_indices(x), "k": x.flatten().cast(pa.string())})

    hit = pairs(a).join(pairs(b), keys=["r", "k"], join_type="left semi").column("r").to_numpy()
    out = np.zeros(len(a), dtype=bool)
    out[hit] = True
    return out


def shares_author_arrow(a: dict, b: dict) -> np.ndarray:
    """Row-wise same-author test of two aligned author-key tables ({author_keys, orcid_author_keys}
    as pyarrow ListArrays): the three set intersections of the module comment, vectorised."""
    k, o = "author_keys", "orcid_author_keys"
    return _overlap_arrow(a[k], b[k]) | _overlap_arrow(a[o], b[k]) | _overlap_arrow(a[k], b[o])
