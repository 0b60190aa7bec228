"""Paper ids as the readers write them, and a user's spelling of one brought to that form.

A corpus paper's id is `<scheme>:<id>`: doi:<lowercase DOI>, pmid:<digits>, pmc:<digits> (no "PMC"),
arxiv:<lowercase arXiv id without version>, acl:<lowercase ACL Anthology id>, s2orc:<S2 id>, and
ref:<16 hex> for a cited-only paper known by its title (importance.ingest.resolve). The readers normalise
DOIs and arXiv ids with the functions here, so a look-up normalises a user's id the same way.
"""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_DOI = re.compile(r"(10\.\d{4,9}/\S+)")
_ARXIV_NEW = re.compile(r"(?<![\d.])(\d{4}\.\d{4,5})(?:v\d+)?(?![\d])")
_ARXIV_OLD = re.compile(r"\b([a-z\-]+(?:\.[A-Z]{2})?/\d{7})(?:v\d+)?\b")


def norm_doi(doi: str | None) -> str | None:
    """Lowercased bare DOI (drops https://doi.org/ and doi: prefixes, trailing punctuation)."""
    if not doi:
        return None
    m = _DOI.search(doi.strip())
    if not m:
        return None
    return m.group(1).rstrip(".,;)").lower()


def norm_arxiv(text: str | None) -> str | None:
    """Bare lowercase arXiv id without version: 2104.06921, hep-ph/0511200."""
    if not text:
        return None
    t = str(text).strip()
    t = re.sub(r"^(?:https?://arxiv\.org/(?:abs|pdf)/|arxiv:)", "", t, flags=re.I)
    m = _ARXIV_NEW.search(t) or _ARXIV_OLD.search(t)
    return m.group(1).lower() if m else None


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)\s*:\s*(.+)$")
_PMID = re.compile(r"^(?:pmid\s*:?\s*)?0*(\d{1,9})$", re.I)
_PMC = re.compile(r"^(?:pmc\s*:\s*)?(?:pmc)?0*(\d{1,9})$", re.I)


def paper_id_of(text: str) -> str:
    """A user's spelling of a paper id in the readers' form: a DOI (bare, doi:, or a doi.org link)
    -> doi:<lowercase>; digits or PMID:n -> pmid:n; PMC123 or pmc:PMC123 -> pmc:123; an arXiv id
    or link -> arxiv:<id>; acl:P14-1011 -> acl:p14-1011; any other scheme keeps its id with the
    scheme in lowercase. Unrecognised text comes back stripped."""
    t = text.strip()
    low = t.lower()
    if _DOI.search(t) and not low.startswith(("arxiv:", "ref:", "acl:")):
        return f"doi:{norm_doi(t)}"
    if m := _PMID.match(t):
        return f"pmid:{m.group(1)}"
    if low.startswith("pmc") and (m := _PMC.match(t)):
        return f"pmc:{m.group(1)}"
    if low.startswith(("arxiv:", "https://arxiv.org/", "http://arxiv.org/")) or _ARXIV_NEW.fullmatch(t):
        a = norm_arxiv(t)
        if a:
            return f"arxiv:{a}"
    if m := _SCHEME.match(t):
        scheme, rest = m.group(1).lower(), m.group(2).strip()
        return f"{scheme}:{rest.lower() if scheme in ('acl', 'ref', 'pmc', 'arxiv') else rest}"
    return t


def positions_in(ids: pa.Array | pa.ChunkedArray, value_set: pa.Array) -> np.ndarray:
    """Position of each id in `value_set` (int64, -1 = absent): one Arrow hash look-up, whose hash
    table over `value_set` is built once per call, so callers pass big chunks. With the vector
    store's ids as `value_set`, a paper's vector row."""
    if len(ids) == 0:
        return np.zeros(0, np.int64)
    return np.asarray(pc.fill_null(pc.index_in(ids, value_set=value_set), -1).to_numpy(), np.int64)
