"""Helpers shared by the readers: decompression, text normalisation, record tagging.

Readers are pure Python (no Spark import) so that executors only need the `importance` package and
lxml; each yields `(kind, dict)` records that importance.ingest turns into DataFrames.
"""
from __future__ import annotations

import gzip
import html
import io
import re
import unicodedata
import zlib

# Record kinds a reader may yield (see importance.ingest.INTERNAL_SCHEMAS).
PAPER, REF, MENTION, REJECT, SENTENCE, CITANCE = "paper", "ref", "mention", "reject", "sentence", "citance"

_WS = re.compile(r"\s+")
_DOI = re.compile(r"(10\.\d{4,9}/\S+)")


class BadRecord(Exception):
    """A whole input record (file or row) cannot be used; the message becomes the reject reason."""


def _is_gzip(name: str, data: bytes) -> bool:
    return name.endswith(".gz") or data[:2] == b"\x1f\x8b"


def open_stream(name: str, data: bytes) -> io.BufferedIOBase:
    """`data` as a binary stream, gunzipped while it is read (no second full copy in memory) when
    it is a `.gz` file; empty input raises BadRecord. A truncated archive raises EOFError/OSError
    from the read, which the reader turns into a reject that says how far it got."""
    if data is None or len(data) == 0:
        raise BadRecord("empty file")
    stream = io.BytesIO(data)
    return gzip.GzipFile(fileobj=stream) if _is_gzip(name, data) else stream


def decompress(name: str, data: bytes) -> bytes:
    """Gunzip `.gz` files (truncated archives raise BadRecord); empty input raises BadRecord."""
    if data is None or len(data) == 0:
        raise BadRecord("empty file")
    if _is_gzip(name, data):
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:
            raise BadRecord(f"truncated or corrupt gzip: {e}") from None
        if not data.strip():
            raise BadRecord("empty file")
    elif not data.strip():
        raise BadRecord("empty file")
    return data


def clean_ws(text: str | None) -> str | None:
    if text is None:
        return None
    text = _WS.sub(" ", text).strip()
    return text or None


def keyword_list(values) -> list[str]:
    """papers.keywords from raw keyword strings: whitespace collapsed and stripped, case kept as
    written, empty ones dropped, each keyword once (compared case-insensitively: the first spelling
    stays), in order."""
    out, seen = [], set()
    for v in values:
        k = clean_ws(v)
        if k and k.casefold() not in seen:
            seen.add(k.casefold())
            out.append(k)
    return out


def strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def norm_title(title: str | None) -> str | None:
    """Title match key: unescaped, accents stripped, lowercase, letters/digits only, single spaces."""
    if not title:
        return None
    t = strip_accents(html.unescape(title)).lower()
    t = "".join(c if c.isalnum() else " " for c in t)
    t = _WS.sub(" ", t).strip()
    return t or None


def norm_doi(doi: str | None) -> str | None:
    """Lowercased bare DOI (drops https://doi.org/ and doi: prefixes, trailing punctuation)."""
    if not doi:
        return None
    m = _DOI.search(doi.strip())
    if not m:
        return None
    return m.group(1).rstrip(".,;)").lower()


def parse_year(text: str | None) -> int | None:
    if not text:
        return None
    m = re.search(r"(1[5-9]\d\d|20\d\d)", text)
    return int(m.group(1)) if m else None


def reject(source_file: str, record_id: str | None, reason: str, source: str,
           level: str = "record", stage: str = "ingest") -> tuple[str, dict]:
    """level 'record' = a whole input record (counts against input records); 'item' = a part of one."""
    return REJECT, {"source_file": source_file, "record_id": record_id, "stage": stage,
                    "reason": reason, "source": source, "level": level}


def author(family: str | None, given: str | None = None, orcid: str | None = None) -> dict:
    orcid = orcid.strip().rstrip("/").rsplit("/", 1)[-1] if orcid else None
    return {"family": clean_ws(html.unescape(family)) if family else None,
            "given": clean_ws(html.unescape(given)) if given else None,
            "orcid": orcid or None}
