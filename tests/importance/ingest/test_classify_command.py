"""`sciencemap classify-sections` (importance.ingest.classify): a user's table of sections in, classes out."""
import csv
import gzip
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from importance.ingest.classify import main
from importance.ingest.section_training import DEFAULT_DEV, read_tsv
from importance.ingest.sections import classify_sections
from sciencemap.cli import main as sciencemap_main

COLUMNS = ["paper_id", "section_index", "n_sections", "title", "text", "sec_type"]


@pytest.fixture(scope="module")
def dev_rows(repo_root):
    """Three real papers of the development set (with a JATS-like sec-type added to one row)."""
    rows = read_tsv(repo_root / DEFAULT_DEV)
    papers = list(dict.fromkeys(r["paper_id"] for r in rows))[:3]
    out = [dict(r, sec_type="") for r in rows if r["paper_id"] in papers]
    out[1]["sec_type"] = "methods"
    return out


def write_tsv(path, rows, columns=COLUMNS):
    opener = gzip.open if str(path).endswith(".gz") else open
    csv.field_size_limit(sys.maxsize)
    with opener(path, "wt", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns, delimiter="\t", extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def test_tsv_in_tsv_out(tmp_path, dev_rows):
    write_tsv(tmp_path / "s.tsv.gz", dev_rows)
    assert main(["--input", str(tmp_path / "s.tsv.gz"), "--output", str(tmp_path / "c.tsv")]) == 0
    out = read_tsv(tmp_path / "c.tsv")
    assert [(r["paper_id"], r["section_index"]) for r in out] == [(r["paper_id"], r["section_index"]) for r in dev_rows]
    assert "text" not in out[0] and {"section_class", "class_source"} <= set(out[0])
    # the classes are those of classify_sections on each paper
    for pid in dict.fromkeys(r["paper_id"] for r in dev_rows):
        mine = [r for r in dev_rows if r["paper_id"] == pid]
        want = classify_sections([r["title"] or None for r in mine], [r["text"] for r in mine],
                                 [r["sec_type"] or None for r in mine], [int(r["section_index"]) for r in mine],
                                 int(mine[0]["n_sections"]))
        assert [r["section_class"] for r in out if r["paper_id"] == pid] == want
    assert out[1]["section_class"] == "M" and out[1]["class_source"] == "sec-type"
    sources = {r["class_source"] for r in out}
    assert "model" in sources and sources <= {"sec-type", "heading", "appendix", "model"}


def test_parquet_in_parquet_out_keeps_text_and_reads_file_order(tmp_path, dev_rows):
    # no section_index / n_sections: the rows in file order are the paper's sections
    table = pa.Table.from_pylist([{"paper_id": r["paper_id"], "title": r["title"], "text": r["text"]}
                                  for r in dev_rows])
    pq.write_table(table, tmp_path / "s.parquet")
    assert sciencemap_main(["classify-sections", "--input", str(tmp_path / "s.parquet"),
                            "--output", str(tmp_path / "c.parquet"), "--keep-text"]) == 0
    out = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert len(out) == len(dev_rows) and out[0]["text"] == dev_rows[0]["text"]
    assert {r["section_class"] for r in out} <= set("IMRDO")


@pytest.mark.parametrize("case,message", [
    ("missing column", "lacks column(s) text"),
    ("paper again", "appears again after other papers"),
    ("same index", "two rows with the same section_index"),
    ("bad index", "is not a whole number"),
])
def test_bad_tables_are_one_clear_error(tmp_path, capsys, case, message):
    rows = [{"paper_id": "p1", "section_index": "0", "title": "1 Introduction", "text": "x"},
            {"paper_id": "p2", "section_index": "0", "title": "Intro", "text": "y"},
            {"paper_id": "p1", "section_index": "1", "title": "2.", "text": "z"}]
    cols = ["paper_id", "section_index", "title", "text"]
    if case == "missing column":
        cols = cols[:3]
    elif case == "same index":
        rows = [rows[0], dict(rows[2], section_index="0")]
    elif case == "bad index":
        rows = [dict(rows[0], section_index="first")]
    write_tsv(tmp_path / "s.tsv", rows, cols)
    assert main(["--input", str(tmp_path / "s.tsv"), "--output", str(tmp_path / "c.tsv")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c.tsv").exists()  # nothing half-written
