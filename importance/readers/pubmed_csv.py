"""PubMed CSV with MeSH names and tree numbers (pubmed-multilabel-mesh-sample format).

Columns used: Title, abstractText, meshMajor (Python-literal list of descriptor names), pmid,
meshid (list of lists of tree numbers, aligned with meshMajor). One row -> one paper (paper_id
pmid:<pmid>); a bad row -> one reject. The `major` flag is false: the file lists all descriptors
without marking major topics, so fields = the MeSH categories of all of them (importance.fields.
mesh_fields, from the tree numbers), as for the other MEDLINE readers. The file's `meshroot` column
is not read: it names tree letters (Organisms [B], Geographicals [Z]), facets rather than subjects.
"""
from __future__ import annotations

import ast
import csv
import io

from importance.fields import mesh_fields
from importance.readers.common import PAPER, BadRecord, clean_ws, decompress, norm_title, reject

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


def parse(path: str, data: bytes, source: str) -> list[tuple[str, dict]]:
    data = decompress(path, data)
    csv.field_size_limit(1 << 30)
    reader = csv.DictReader(io.StringIO(data.decode("utf-8", errors="replace")))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise BadRecord(f"CSV without column(s) {missing}")
    out = []
    for i, row in enumerate(reader):
        pmid = (row.get("pmid") or "").strip()
        rid = pmid or f"row {i + 1}"
        if not pmid.isdigit():
            out.append(reject(path, rid, "row without a numeric pmid", source))
            continue
        try:
            names = [str(x) for x in _literal_list(row.get("meshMajor"))]
            trees = _literal_list(row.get("meshid"))
        except (ValueError, SyntaxError) as e:
            out.append(reject(path, rid, f"malformed list column: {e}", source))
            continue
        mesh = [{"ui": None, "name": n, "major": False, "tree_numbers": t} for n, t in align_trees(names, trees)]
        title = clean_ws(row.get("Title"))
        out.append((PAPER, {
            "paper_id": f"pmid:{pmid}", "title": title, "abstract": clean_ws(row.get("abstractText")),
            "authors": [], "year": None, "venue": None, "fields": mesh_fields(mesh), "keywords": [], "mesh": mesh,
            "source": source,
            "has_fulltext": False, "source_file": path, "ord": i, "title_norm": norm_title(title),
            "alt_ids": [f"pmid:{pmid}"]}))
    if not out:
        raise BadRecord("CSV without data rows")
    return out
