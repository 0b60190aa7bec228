"""PubMed CSV with MeSH names and tree numbers (pubmed-multilabel-mesh-sample format).

Columns used: Title, abstractText, meshMajor (Python-literal list of descriptor names), pmid,
meshid (list of lists of tree numbers, aligned with meshMajor). One row -> one paper (paper_id
pmid:<pmid>); a bad row -> one reject. The `major` flag is false: the file lists all descriptors
without marking major topics, so fields = the MeSH categories of all of them (importance.ingest.fields.
mesh_fields, from the tree numbers), as for the other MEDLINE readers. The file's `meshroot` column
is not read: it names tree letters (Organisms [B], Geographicals [Z]), facets rather than subjects.
"""
from __future__ import annotations

import ast
import csv
import io

from importance.ingest.fields import mesh_fields
from importance.ingest.readers.common import (PAPER, BadRecord, clean_ws, decode_text, decompress, norm_title, reject,
                                              require_text, warning)

REQUIRED = ("Title", "abstractText", "meshMajor", "pmid")


def _literal_list(text: str | None) -> list:
    if not text or not text.strip():
        return []
    val = ast.literal_eval(text)
    if not isinstance(val, (list, tuple)):
        raise ValueError("not a list")
    return list(val)


NO_TREE = ("Female", "Male")  # check tags the files list without tree numbers


def align_trees(names: list[str], trees: list) -> list[tuple[str, list[str]]]:
    """meshid omits descriptors that have no tree numbers in the file (Female, Male): align the rest
    in order; if the lengths still disagree, keep the names without tree numbers (never mis-assign)."""
    if len(trees) == len(names):
        return [(n, [str(x) for x in t]) for n, t in zip(names, trees)]
    rest = [n for n in names if n not in NO_TREE]
    if len(rest) == len(trees):
        it = iter(trees)
        return [(n, [] if n in NO_TREE else [str(x) for x in next(it)]) for n in names]
    return [(n, []) for n in names]


def _rows(reader):
    """(row index, row) of a strict csv.DictReader; a quoting error (a file cut inside a quoted
    field: "unexpected end of data") ends the rows with BadRecord naming the line."""
    i = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            cause = "truncated CSV (the file ends inside a quoted field)" if "unexpected end" in str(e) \
                else "malformed CSV"
            raise BadRecord(f"{cause} at line {reader.line_num:,}, after {i:,} rows: {e}") from None
        yield i, row
        i += 1


def parse(path: str, data: bytes, source: str):
    """Generator: one paper or reject per row; content checked first (empty, not text), bytes that
    are not UTF-8 replaced (a warning for each paper holding one)."""
    data = decompress(path, data)
    require_text(data)
    text, replaced = decode_text(data)
    csv.field_size_limit(1 << 30)
    reader = csv.DictReader(io.StringIO(text), strict=True)
    try:
        fieldnames = reader.fieldnames or []
    except csv.Error as e:
        raise BadRecord(f"malformed CSV header: {e}") from None
    missing = [c for c in REQUIRED if c not in fieldnames]
    if missing:
        raise BadRecord(f"not a PubMed CSV: no column(s) {missing} (header: {fieldnames[:6]!r:.200})")
    n, last_paper = 0, None
    for i, row in _rows(reader):
        n += 1
        last_paper = None
        pmid = (row.get("pmid") or "").strip()
        rid = pmid or f"row {i + 1}"
        present = sum(v is not None for k, v in row.items() if k is not None)  # DictReader: None = missing
        if present < len(fieldnames):
            yield reject(path, rid, f"row {i + 1:,} has {present} of {len(fieldnames)} columns "
                                    f"(cut short or a line break outside quotes)", source)
            continue
        if not pmid.isdigit():
            yield reject(path, rid, "row without a numeric pmid", source)
            continue
        try:
            names = [str(x) for x in _literal_list(row.get("meshMajor"))]
            trees = _literal_list(row.get("meshid"))
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError) as e:
            yield reject(path, rid, f"malformed list column: {type(e).__name__}: {e}"[:500], source)
            continue
        mesh = [{"ui": None, "name": d, "major": False, "tree_numbers": t} for d, t in align_trees(names, trees)]
        title = clean_ws(row.get("Title"))
        yield PAPER, {
            "paper_id": f"pmid:{pmid}", "title": title, "abstract": clean_ws(row.get("abstractText")),
            "authors": [], "year": None, "venue": None, "fields": mesh_fields(mesh), "keywords": [], "mesh": mesh,
            "source": source,
            "has_fulltext": False, "source_file": path, "ord": i, "title_norm": norm_title(title),
            "alt_ids": [f"pmid:{pmid}"]}
        last_paper = f"pmid:{pmid}"
        if replaced and any("\ufffd" in (v or "") for v in row.values() if isinstance(v, str)):
            yield warning(path, f"pmid:{pmid}", f"row {i + 1:,}: bytes not valid UTF-8 replaced by U+FFFD "
                                                f"(in the file: {replaced})", source)
    if not n:
        raise BadRecord("CSV without data rows")
    if last_paper and not text.endswith(("\n", "\r")):  # the last row's last field may be cut short
        yield warning(path, last_paper, "the file ends without a final line break: this last row may be cut short",
                      source)
