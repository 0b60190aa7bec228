"""`sciencemap classify-sections`: the section classifier on a table of sections a user brings.

    sciencemap classify-sections --input sections.tsv --output classes.tsv
    python jobs/classify_sections.py --input sections.parquet --output classes.parquet [--keep-text]

Input: TSV (`.tsv`, `.tsv.gz`, tab-separated with a header) or Parquet (a file or a folder of
files), one row per top-level section with columns paper_id, title and text; section_index (the
section's 0-based place among the paper's top-level sections), n_sections (how many the paper has)
and sec_type (a JATS sec-type) are optional: without them a paper's rows in file order are its
sections, all of them. The rows of one paper must be contiguous (a paper that comes back after
another is an error): the table is streamed paper by paper, so its size is not bounded by memory.

Output (TSV or Parquet, by the output's name): the input's columns (without `text` unless
--keep-text) plus section_class (I / M / R / D / O) and class_source: "sec-type" or "heading" where
the section's own labels state the class, "appendix" where its place after the back matter or the
conclusion makes it an appendix, "model" where the learned model decided
(importance.ingest.sections.classify_sections, METHODS.md §1.1). Written atomically.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import itertools
import sys
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.runtime import UserError
from sciencemap.storage import atomic_file

from importance.ingest.headings import class_from_sec_type, known_class

from importance.ingest.sections import appendix_sections, classify_sections

REQUIRED = ("paper_id", "title", "text")
OUTPUT_COLUMNS = ("section_class", "class_source")
BATCH_ROWS = 4096


def tsv_rows(path: Path, check=None) -> Iterator[dict]:
    """The rows of a TSV file with a header (gzip when the name ends in .gz), streamed; fields
    may be long (a whole section). check(fieldnames, path) is called before the first row."""
    csv.field_size_limit(sys.maxsize)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter="\t")
        if check:
            check(reader.fieldnames or [], path)
        yield from reader


def _parquet_rows(path: Path) -> Iterator[dict]:
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise UserError(f"{path} holds no .parquet files")
    for f in files:
        pf = pq.ParquetFile(f)
        _check_columns(pf.schema_arrow.names, f)
        for batch in pf.iter_batches(batch_size=BATCH_ROWS):
            yield from batch.to_pylist()


def _check_columns(names, path) -> None:
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise UserError(f"{path}: the sections table lacks column(s) {', '.join(missing)} "
                        f"(needs {', '.join(REQUIRED)}; optional section_index, n_sections, sec_type)")


def read_rows(path: Path) -> Iterator[dict]:
    if not path.exists():
        raise UserError(f"input {path} does not exist")
    name = path.name.lower()
    if name.endswith((".tsv", ".tsv.gz", ".txt")):
        return tsv_rows(path, _check_columns)
    if name.endswith(".parquet") or path.is_dir():
        return _parquet_rows(path)
    raise UserError(f"input {path}: give a .tsv, .tsv.gz or .parquet file (or a folder of Parquet files)")


def _int(value, what: str, row: int) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UserError(f"row {row}: {what} {value!r} is not a whole number") from None


def papers(rows: Iterator[dict]) -> Iterator[list[tuple[int, dict]]]:
    """(row number, row) lists, one per paper, in input order; a paper id seen before is an error."""
    done: set[str] = set()
    current: list[tuple[int, dict]] = []
    for i, row in enumerate(rows, start=1):
        pid = row.get("paper_id")
        if pid in (None, ""):
            raise UserError(f"row {i}: empty paper_id")
        if current and pid != current[0][1]["paper_id"]:
            done.add(current[0][1]["paper_id"])
            yield current
            current = []
        if not current and pid in done:
            raise UserError(f"row {i}: paper {pid!r} appears again after other papers; sort the table by paper_id")
        current.append((i, row))
    if current:
        yield current


def classify_paper(rows: list[tuple[int, dict]]) -> list[dict]:
    """The paper's rows with section_class and class_source added, in input order."""
    idx = [_int(r.get("section_index"), "section_index", i) for i, r in rows]
    given = [_int(r.get("n_sections"), "n_sections", i) for i, r in rows]
    positions = [p if p is not None else k for k, p in enumerate(idx)]
    if len(set(positions)) != len(positions):
        raise UserError(f"row {rows[0][0]}: paper {rows[0][1]['paper_id']!r} has two rows with the same section_index")
    order = sorted(range(len(rows)), key=positions.__getitem__)
    total = max([g for g in given if g is not None] + [max(positions) + 1])
    titles = [rows[k][1].get("title") or None for k in order]
    texts = [rows[k][1].get("text") or None for k in order]
    types = [rows[k][1].get("sec_type") or None for k in order]
    classes = classify_sections(titles, texts, types, [positions[k] for k in order], total)
    appendix = appendix_sections(titles, [known_class(st, t) for st, t in zip(types, titles)])
    out: list[dict] = [{} for _ in rows]
    for k, cls, t, st, app in zip(order, classes, titles, types, appendix):
        source = ("sec-type" if class_from_sec_type(st) else "heading" if known_class(None, t)
                  else "appendix" if app else "model")
        out[k] = dict(rows[k][1], section_class=cls, class_source=source)
    return out


def _output_format(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".tsv", ".tsv.gz")):
        return "tsv"
    raise UserError(f"output {path}: name it .tsv, .tsv.gz or .parquet")


def write_rows(path: Path, rows: Iterator[dict], keep_text: bool = False) -> None:
    """Rows to a TSV or Parquet file (by the name), streamed in batches, under one atomic rename.
    Columns: the first row's (without text unless keep_text), then section_class, class_source."""
    fmt = _output_format(path)
    rows = iter(rows)
    first = next(rows, None)
    cols = [c for c in (first or dict.fromkeys(REQUIRED)) if c not in OUTPUT_COLUMNS and (keep_text or c != "text")]
    cols += list(OUTPUT_COLUMNS)
    rows = itertools.chain([first] if first else [], rows)
    with atomic_file(path) as tmp:
        if fmt == "tsv":
            opener = gzip.open if path.name.endswith(".gz") else open
            with opener(tmp, "wt", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=cols, delimiter="\t", extrasaction="ignore")
                writer.writeheader()
                writer.writerows(rows)
            return
        pq_writer = None
        try:
            while batch := list(itertools.islice(rows, BATCH_ROWS)):
                table = pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in batch])
                pq_writer = pq_writer or pq.ParquetWriter(tmp, table.schema)
                pq_writer.write_table(table.cast(pq_writer.schema))
            if pq_writer is None:  # no rows: the columns, empty
                pq.write_table(pa.table({c: pa.array([], pa.string()) for c in cols}), tmp)
        finally:
            if pq_writer is not None:
                pq_writer.close()


def classify_table(input_path: Path, output_path: Path, keep_text: bool = False) -> dict:
    """Classify every section of the input table into the output table; returns the counts."""
    _output_format(output_path)  # a wrong output name is said before any work
    counts: dict[str, int] = {}
    sources: dict[str, int] = {}
    n_papers = 0

    def classified():
        nonlocal n_papers
        for rows in papers(read_rows(input_path)):
            n_papers += 1
            for r in classify_paper(rows):
                counts[r["section_class"]] = counts.get(r["section_class"], 0) + 1
                sources[r["class_source"]] = sources.get(r["class_source"], 0) + 1
                yield r

    write_rows(output_path, classified(), keep_text)
    return {"papers": n_papers, "sections": sum(counts.values()), "classes": counts, "sources": sources,
            "output": str(output_path)}


def run(argv: list[str] | None = None, prog: str | None = None) -> dict:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, type=Path, help="sections table: .tsv, .tsv.gz or Parquet")
    ap.add_argument("--output", required=True, type=Path, help="classes table: .tsv, .tsv.gz or .parquet")
    ap.add_argument("--keep-text", action="store_true", help="copy the text column into the output too")
    a = ap.parse_args(argv)
    summary = classify_table(a.input, a.output, a.keep_text)
    print(f"{summary['sections']:,} sections of {summary['papers']:,} papers -> {a.output}  "
          f"classes {summary['classes']}  decided by {summary['sources']}", file=sys.stderr)
    return summary


# `sciencemap --help` shows it beside the command's name
SUMMARY = ("Classify the sections of a table you bring (TSV or Parquet) as Introduction / Methods / Results / "
           "Discussion / other (headings, JATS sec-types and the shipped section model).")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """`sciencemap classify-sections` / jobs/classify_sections.py: the exit code."""
    from sciencemap.cli import command_main

    return command_main(lambda a: run(a, prog), argv)
