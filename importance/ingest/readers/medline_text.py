"""MEDLINE text format (PubMed "MEDLINE" export / .nbib): one record per blank-line-separated block.

Lines are `TAG - value` with a 4-character tag padded by spaces ("PMID- 123", "TI  - ..."); a value
continues on following lines indented by 6 spaces. Each block -> one paper (paper_id pmid:<PMID>,
has_fulltext false): TI title, AB abstract, FAU "Family, Given" (else AU "Family Initials"; CN as a
collective family name; AUID "ORCID: ..." attaches to the author before it), DP year, JT venue
(else TA), MH MeSH "Descriptor/qualifier/*qualifier" with "*" marking a major topic on the
descriptor or a qualifier (ui null, tree_numbers empty), fields = the MeSH categories of the major
descriptors (importance.ingest.fields.mesh_fields, by name), keywords = the OT (other term) lines, each
once, as written (readers.common.keyword_list; OTO names their owner, not read), AID/LID
"... [doi]" as an alternative id.
A block without PMID is rejected.
"""
from __future__ import annotations

import re

from importance.ingest.fields import mesh_fields
from importance.ingest.readers.common import (PAPER, BadRecord, author, clean_ws, decode_text, decompress, keyword_list,
                                              norm_doi, norm_title, parse_year, reject, require_text, warning)

_FIELD = re.compile(r"^([A-Z][A-Z0-9 ]{1,3})\s*- ?(.*)$")


def _blocks(text: str):
    """(first line number, [(tag, value)]) per record; continuation lines join their field."""
    fields: list[list[str]] = []
    start = None
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            if fields:
                yield start, [(t, v) for t, v in fields]
                fields, start = [], None
            continue
        m = _FIELD.match(line) if not line.startswith(" ") else None
        if m:
            fields.append([m.group(1).strip(), m.group(2).strip()])
            start = start or lineno
        elif fields:
            fields[-1][1] += " " + line.strip()
        else:  # text before any tag: keep it as an unknown field so the block is still counted
            fields.append(["?", line.strip()])
            start = start or lineno
    if fields:
        yield start, [(t, v) for t, v in fields]


def parse_mesh(value: str) -> dict:
    """'Prescription Drugs/*pharmacology' -> name 'Prescription Drugs', major True."""
    parts = [p.strip() for p in value.split("/")]
    name = parts[0].lstrip("*").strip()
    major = any(p.startswith("*") for p in parts)
    return {"ui": None, "name": name, "major": major, "tree_numbers": []}


def parse(path: str, data: bytes, source: str) -> list[tuple[str, dict]]:
    """Content first (empty, not text, not MEDLINE text); bytes that are not UTF-8 are replaced and
    each record holding one gets a warning."""
    data = decompress(path, data)
    require_text(data)
    text, replaced = decode_text(data)
    if not any(_FIELD.match(line) for line in text.splitlines()):
        raise BadRecord(f"not MEDLINE text: no 'TAG - value' line (the file starts with {text.lstrip()[:40]!r})")
    out = []
    for n, (lineno, fields) in enumerate(_blocks(text), 1):
        rec = _record(fields, path, source, n, lineno)
        out.append(rec)
        if replaced and rec[0] == PAPER and any("\ufffd" in v for _, v in fields):
            out.append(warning(path, rec[1]["paper_id"], f"record at line {lineno:,}: bytes not valid UTF-8 "
                                                         f"replaced by U+FFFD (in the file: {replaced})", source))
    if not out:
        raise BadRecord("no MEDLINE records in file")
    if not data.endswith(b"\n") and out[-1][0] == PAPER:  # exports end with a line break: this one may be cut
        out.append(warning(path, out[-1][1]["paper_id"], "the file ends without a final line break: "
                                                         "this last record may be cut short", source))
    return out


def _record(fields, path, source, n, lineno):
    first = {}
    for t, v in fields:
        first.setdefault(t, v)
    pmid = (first.get("PMID") or "").strip()
    if not pmid.isdigit():
        title = clean_ws(first.get("TI"))
        rid = f"record {n} (line {lineno})" + (f": {title[:80]}" if title else "")
        return reject(path, rid, "MEDLINE record without PMID", source)
    authors = []
    has_fau = any(t == "FAU" for t, _ in fields)  # FAU and AU repeat each author: read one of them
    for t, v in fields:
        if t == "FAU":
            fam, _, given = v.partition(",")
            authors.append(author(fam.strip(), given.strip() or None))
        elif t == "AU" and not has_fau:
            fam, _, inits = v.rpartition(" ")
            authors.append(author(fam or inits, inits if fam else None))
        elif t == "CN":
            authors.append(author(v))
        elif t == "AUID" and authors and "orcid" in v.lower():
            authors[-1]["orcid"] = author("x", None, v.split(":", 1)[-1].strip())["orcid"]
    doi = None
    for t, v in fields:
        if t in ("AID", "LID") and v.endswith("[doi]"):
            doi = norm_doi(v[:-5])
            if doi:
                break
    title = clean_ws(first.get("TI"))
    paper_id = f"pmid:{pmid}"
    mesh = [parse_mesh(v) for t, v in fields if t == "MH"]
    return PAPER, {
        "paper_id": paper_id, "title": title, "abstract": clean_ws(first.get("AB")), "authors": authors,
        "year": parse_year(first.get("DP")), "venue": clean_ws(first.get("JT") or first.get("TA")),
        "fields": mesh_fields(mesh), "keywords": keyword_list(v for t, v in fields if t == "OT"),
        "mesh": mesh, "source": source, "has_fulltext": False, "source_file": path, "ord": n,
        "title_norm": norm_title(title),
        "alt_ids": sorted({paper_id} | ({f"doi:{doi}"} if doi else set()))}
