"""The ingest stage on Spark: every input record is a paper or a reject, every input file a row of
`files`, references resolve."""
import csv
import json
import random
import shutil
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlparse

import pandas as pd
import pyarrow.parquet as pq
import pytest

from importance.ingest.job import DUPLICATE_CITANCE_REASON, DUPLICATE_REASON, HIDDEN_FILE_REASON, IngestConfig, run_ingest
from importance.ingest.readers.clscisumm import SKIPPED_REASON
from mapping.evaluation.evaluate import ingest_section
from importance.ingest.resolve import raw_fallback_id
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError


DATA = "tests/data"


def test_unknown_format_is_a_user_error(tmp_path):
    cfg = IngestConfig(inputs=[{"path": str(tmp_path), "format": "medline_json", "source": "x"}])
    with pytest.raises(UserError, match="medline_json.*medline_text.*medline_xml.*s2orc.*unarxive"):
        run_ingest(cfg, RunLayout(tmp_path / "run"))


def test_spark_ingest_counts_add_up(spark, repo_root, tmp_path):
    d = repo_root / DATA
    lines = (d / "unarxive-4.jsonl").read_bytes().splitlines()
    # A second JSONL whose first paper cites the first test paper by arXiv id only (resolves by hint),
    # plus one truncated line (a record reject).
    doc = json.loads(lines[3])
    doc["paper_id"], doc["metadata"]["id"] = "2212.99999", "2212.99999"
    # k2: a bibliography entry that is only a string with no id and no title (a footnote, real text
    # of 2212.11773): it must survive as a cited-only paper with a null title, keyed by its raw string.
    footnote = ("We did not show the MRE for Tully's model I and the two pyrazine models, because it always "
                "remained very small throughout the dynamics, never exceeding a value of 0.035.")
    doc["bib_entries"] = {"k1": {"bib_entry_raw": "Someone. A paper. 2022.", "contained_arXiv_ids": [],
                                 "ids": {"arxiv_id": "2212.11827", "doi": ""}},
                          "k2": {"bib_entry_raw": footnote, "contained_arXiv_ids": [], "ids": {}}}
    doc["body_text"] = [{"section": "Methods", "sec_number": "2", "sec_type": "section", "text": "x",
                         "cite_spans": [{"ref_id": "k1"}, {"ref_id": "k1"}, {"ref_id": "k2"}]}]
    ux = tmp_path / "ux"
    ux.mkdir()
    (ux / "a.jsonl").write_bytes((d / "unarxive-4.jsonl").read_bytes())
    # the same paper id again in the same file, cited in another place: a duplicate whose references
    # and mentions share the kept row's (citing_id, source_file), so they must go with it
    again = dict(doc, body_text=[dict(doc["body_text"][0], cite_spans=[{"ref_id": "k1"}, {"ref_id": "k2"}])])
    (ux / "b.jsonl").write_bytes(json.dumps(doc).encode() + b"\n" + lines[0][:1000] + b"\n"
                                 + json.dumps(again).encode() + b"\n")
    mt = tmp_path / "mt"
    mt.mkdir()
    (mt / "a.txt").write_bytes((d / "mesh-papers-10.medline.txt").read_bytes() + b"\nTI  - orphan\n")
    mx = tmp_path / "mx"
    mx.mkdir()
    for name in ("pubmed-29768149.xml", "test_current_medline.xml.gz"):
        (mx / name).write_bytes((d / name).read_bytes())
    cfg = IngestConfig(inputs=[
        {"path": str(ux), "format": "unarxive", "source": "unarxive"},
        {"path": str(mx), "format": "medline_xml", "source": "medline"},
        {"path": str(mt), "format": "medline_text", "source": "medline_text"},
        {"path": str(d / "ehp-116-1694.nxml"), "format": "jats", "source": "pmc"},
    ], shuffle_partitions=4, output_partitions=1)
    layout = RunLayout(tmp_path / "run")
    s = run_ingest(cfg, layout, spark=spark)
    per = s["per_source"]
    assert s["check_input_equals_papers_plus_rejects"]
    assert per["unarxive"]["input_records"] == 7 and per["unarxive"]["papers_corpus"] == 5
    assert per["unarxive"]["record_rejects"] == 2
    assert per["medline"]["input_records"] == per["medline"]["papers_corpus"] == 5
    assert per["medline_text"]["input_records"] == 11 and per["medline_text"]["record_rejects"] == 1
    assert per["medline_text"]["papers_corpus"] == 10 and per["pmc"]["papers_corpus"] == 1
    for src, v in per.items():
        assert v["input_records"] == v["papers_corpus"] + v["record_rejects"], src
    n_spans = sum(len(p["cite_spans"]) for line in lines for p in json.loads(line)["body_text"])
    ments = pq.read_table(layout.table("mentions")).to_pandas()
    refs = pq.read_table(layout.table("references")).to_pandas()
    ux_ments = ments[ments.citing_id.str.startswith("arxiv:")]
    assert len(ux_ments) == n_spans + 3  # every cite_span of the real lines resolves; none of the duplicate's
    rejects = pq.read_table(layout.table("rejects")).to_pandas()
    dup = rejects[rejects.record_id == "arxiv:2212.99999"]
    assert dup.reason.tolist() == [DUPLICATE_REASON] and dup.source_file.str.endswith("b.jsonl").all()
    hit = refs[(refs.citing_id == "arxiv:2212.99999")].sort_values("ref_key")
    assert hit.cited_id.tolist() == ["arxiv:2212.11827", raw_fallback_id(footnote)]
    papers = pq.read_table(layout.table("papers")).to_pandas()
    # raw reference strings: their own column, never the title; the raw-only entry is a cited-only
    # paper with a null title; no year outside [1600, citing year + 1]
    assert pq.read_schema(next(layout.table("references").glob("*.parquet"))).field("raw").type == "string"
    ux_refs = refs[refs.citing_id.str.startswith("arxiv:")]
    assert ux_refs.raw.notna().all() and not (ux_refs.title == ux_refs.raw).any()
    k2 = hit[hit.ref_key == "k2"].iloc[0]
    assert k2.raw == footnote and pd.isna(k2.title) and pd.isna(k2.year)
    only = papers[papers.paper_id == raw_fallback_id(footnote)].iloc[0]
    assert pd.isna(only.title) and not only.has_fulltext and only.source == "unarxive"
    assert ux_refs.year.dropna().between(1600, 2023).all()
    assert refs[refs.citing_id == "doi:10.1289/ehp.11570"].raw.isna().all()  # element-citations: no string
    med = papers[papers.paper_id == "pmid:29768149"].iloc[0]
    assert med.source == "medline" and not med.has_fulltext and len(med.mesh) == 23
    # keywords through Spark: the readers' lists (MEDLINE KeywordList and OT, JATS untyped kwd-group);
    # [] where a format or a title-only paper has none, never null (like fields).
    kw = dict(zip(papers.paper_id, papers.keywords.map(list)))
    assert kw["pmid:36400559"] == ["Back pain", "Diagnosis", "Management", "Outpatient"]
    assert kw["pmid:27435341"] == ["Complex networks", "link prediction", "literature-based discovery",
                                   "network analysis"]
    assert kw["doi:10.1289/ehp.11570"][:3] == ["basic transcription element-binding protein", "brain",
                                               "endocrine disruption"] and kw["pmid:29768149"] == []
    assert papers.keywords.notna().all() and (~papers.has_fulltext & papers.source_file.isna()).sum() > 0
    assert per["unarxive"]["references_resolved"] >= 1


def test_a_dropped_duplicate_rows_records_go_with_it_whichever_join_drops_them(spark):
    """of_kept_rows: none dropped (no join), a few (broadcast anti join) or many (a join with the
    kept rows): the same rows left, the kept paper row's, by (id, source_file)."""
    from importance.ingest.job import of_kept_rows

    ranked = spark.createDataFrame([("p1", "f1", 1), ("p1", "f2", 2), ("p1", "f3", 3), ("p2", "f1", 1)],
                                   "paper_id string, source_file string, _rn int")
    refs = spark.createDataFrame([("p1", "a", "f1"), ("p1", "b", "f1"), ("p1", "a", "f2"), ("p1", "c", "f3"),
                                  ("p2", "a", "f1")], "citing_id string, ref_key string, source_file string")
    sections = spark.createDataFrame([("p1", 0, "f2"), ("p2", 0, "f1"), ("p2", 1, "f1")],
                                     "paper_id string, position int, source_file string")
    rows = lambda df: sorted(tuple(r) for r in df.collect())  # noqa: E731
    want_refs = [("p1", "a", "f1"), ("p1", "b", "f1"), ("p2", "a", "f1")]
    want_sections = [("p2", 0, "f1"), ("p2", 1, "f1")]
    for limit in (None, 2, 1, 0):   # the default and 2: broadcast; 1 and 0: the join with the kept rows
        r, sec = of_kept_rows(ranked, [(refs, "citing_id"), (sections, "paper_id")], broadcast_limit=limit)
        assert (rows(r), rows(sec)) == (want_refs, want_sections), limit
    only_kept = ranked.where("_rn = 1")
    r, = of_kept_rows(only_kept, [(refs.where("source_file = 'f1'"), "citing_id")])
    assert rows(r) == want_refs


def test_spark_ingest_clscisumm_counts(spark, clscisumm, tmp_path):
    folder, RP, CITING = clscisumm.root, clscisumm.reference, clscisumm.citing
    layout = RunLayout(tmp_path / "run")
    s = run_ingest(IngestConfig(inputs=[{"path": str(folder), "format": "clscisumm", "source": "cls"}]),
                   layout, spark=spark)
    d = s["per_source"]["cls"]
    assert s["check_input_equals_papers_plus_rejects"] and d["check_citances"]
    assert d["input_records"] == 5 and d["papers_corpus"] == 4 and d["record_rejects"] == 1
    papers = pq.read_table(layout.table("papers")).to_pylist()
    assert sorted(p["paper_id"] for p in papers) == sorted(["acl:c98-1097"] + [f"acl:{c.lower()}" for c in CITING])
    refs = pq.read_table(layout.table("references")).to_pylist()
    assert sorted(r["citing_id"] for r in refs) == sorted(f"acl:{c.lower()}" for c in CITING)
    assert {r["cited_id"] for r in refs} == {"acl:c98-1097"} and d["references_resolved"] == 3
    ments = pq.read_table(layout.table("mentions")).to_pylist()
    assert len(ments) == 4 and d["citance_section_match_rate"] == 0.75  # P6230: unannotated -> O
    exp = clscisumm.expected_sections((folder / RP / "Citance_XML" / "C02-1033.xml").read_bytes(),
                                     clscisumm.annotated_sids(folder / RP, "C02-1033"))
    got = sorted((m["section_title"], m["section_class"]) for m in ments if m["citing_id"] == "acl:c02-1033")
    assert got == sorted(exp)
    assert [m["section_class"] for m in ments if m["citing_id"] == "acl:p6230"] == ["O"]


def test_spark_ingest_clscisumm_csv_and_every_file_accounted(spark, clscisumm, clscisumm_csv, tmp_path):
    """The CSV form of the annotation (several annotators) through Spark, in a folder that also holds
    a stray paper beside the expected folders, Documents_TXT, a hidden file, a PDF, an empty file,
    random bytes as a citing paper, a truncated citing paper and a duplicate: every file is a row of
    `files`, every annotated row a mention or a citance reject, and the counts add up."""
    rp = "C98-1097"
    root = tmp_path / "in"
    folder = root / rp
    shutil.copytree(clscisumm_csv, folder)
    cites = folder / "Citance_XML"
    good = (cites / "C02-1033.xml").read_bytes()
    (cites / "ICDAR99.xml").write_bytes(random.Random(5).randbytes(4000))  # annotated by both annotators
    (cites / "X00-1000.xml").write_bytes(good[: len(good) // 2])  # truncated, not annotated
    (cites / "empty.xml").write_bytes(b"")
    (cites / ".C02-1033.xml.swp").write_bytes(b"vim swap")
    (folder / f"{rp}.xml").write_bytes((folder / "Reference_XML" / f"{rp}.xml").read_bytes())  # stray
    (folder / "Documents_TXT").mkdir()
    (folder / "Documents_TXT" / f"{rp}.txt").write_text("plain text of the paper\n")
    (folder / "paper.pdf").write_bytes(b"%PDF-1.4\n" + random.Random(6).randbytes(300))
    (root / "dup" / "Citance_XML").mkdir(parents=True)
    (root / "dup" / "Citance_XML" / "C02-1033.xml").write_bytes(good)  # the same paper id again
    every_file = sorted(str(p) for p in root.rglob("*") if p.is_file())
    assert len(every_file) == 14

    layout = RunLayout(tmp_path / "run")
    s = run_ingest(IngestConfig(inputs=[{"path": str(root), "format": "clscisumm", "source": "cls"}],
                                output_partitions=1), layout, spark=spark)
    d = s["per_source"]["cls"]
    assert s["check_input_equals_papers_plus_rejects"] and d["check_citances"]
    assert s["check_files_found_equals_accounted"] and d["check_files_found_equals_accounted"]
    assert d["files"] == {"found": 14, "parsed": 6, "rejected": 2, "skipped": 4, "auxiliary": 2}
    assert d["input_records"] == 8 and d["papers_corpus"] == 5 and d["record_rejects"] == 3
    assert d["input_citances"] == 19 and d["citances_in_corpus"] == 5 and d["citance_rejects"] == 14

    files = pq.read_table(layout.table("files")).to_pylist()
    local = {str(Path(unquote(urlparse(f["path"]).path))): f for f in files}
    assert sorted(local) == every_file and len(files) == 14  # each file once
    status = {p.removeprefix(str(root) + "/"): (f["status"], f["reason"]) for p, f in local.items()}
    assert status[f"{rp}/{rp}.xml"] == ("skipped", SKIPPED_REASON)
    assert status[f"{rp}/Documents_TXT/{rp}.txt"] == ("skipped", SKIPPED_REASON)
    assert status[f"{rp}/Citance_XML/.C02-1033.xml.swp"] == ("skipped", HIDDEN_FILE_REASON)
    assert status[f"{rp}/paper.pdf"] == ("skipped", "not a clscisumm input (name does not match *.{xml,txt,csv})")
    assert status[f"{rp}/Citance_XML/empty.xml"] == ("rejected", "empty file")
    assert status[f"{rp}/Citance_XML/ICDAR99.xml"][0] == "rejected"
    assert status[f"{rp}/Citance_XML/ICDAR99.xml"][1].startswith("not text: binary data")
    assert {status[f"{rp}/annotation/{rp}.annotator{i}.csv"][0] for i in (1, 2)} == {"auxiliary"}
    assert s["skipped_files"]["total"] == 4 and len(s["skipped_files"]["first"]) == 4
    assert {(x["reason"], x["count"]) for x in s["skipped_files"]["by_reason"]} == {
        (SKIPPED_REASON, 2), (HIDDEN_FILE_REASON, 1),
        ("not a clscisumm input (name does not match *.{xml,txt,csv})", 1)}

    # Every annotated row: a mention (one per citing sentence) or a citance reject.
    rows = []
    for f in sorted((folder / "annotation").glob("*.csv")):
        with f.open(newline="") as fh:
            rows += [(f.name, r) for r in csv.DictReader(fh)]
    assert len(rows) == 16
    rejects = pq.read_table(layout.table("rejects")).to_pylist()
    row_rejects = [r for r in rejects if ".csv#" in (r["record_id"] or "")]
    ments = pq.read_table(layout.table("mentions")).to_pylist()
    annotated = {"acl:c02-1033", "acl:p04470"}  # the annotated citing papers present
    assert len(row_rejects) + sum(m["citing_id"] in annotated for m in ments) == len(rows)
    reasons = Counter(r["reason"].split(":")[0] for r in row_rejects)
    assert reasons == {DUPLICATE_CITANCE_REASON: 3, "citing paper's Citance_XML file rejected": 2,
                       "citing paper P07-1061 has no file C98-1097/Citance_XML/P07-1061.xml": 6,
                       "citing paper P06128 has no file C98-1097/Citance_XML/P06128.xml": 1,
                       "citing paper S0885 has no file C98-1097/Citance_XML/S0885.xml": 1}
    # placed in their sections (the SECTION holding each annotated sentence), not all in class O
    for citing in ("C02-1033", "P04470"):
        sids = list(dict.fromkeys(r["Citation Offset"].strip("[]'") for _, r in rows if r["Citing Article"] == citing))
        exp = clscisumm.expected_sections((cites / f"{citing}.xml").read_bytes(), sids)
        got = sorted((m["section_title"], m["section_class"]) for m in ments
                     if m["citing_id"] == f"acl:{citing.lower()}")
        assert got == sorted(exp)
    assert {m["section_class"] for m in ments if m["citing_id"] in annotated} - {"O"}
    assert [m["section_class"] for m in ments if m["citing_id"] == "acl:x00-1000"] == ["O"]
    assert [r["reason"] for r in rejects if r["record_id"] == "acl:c02-1033"] == [DUPLICATE_REASON]

    warns = {w["record_id"]: w["warning"] for w in pq.read_table(layout.table("warnings")).to_pylist()}
    assert set(warns) == {"acl:p04470", "acl:p6230", "acl:x00-1000"} and d["warnings"] == 3
    assert warns["acl:x00-1000"].startswith("recovered from truncated XML") and "lost" in warns["acl:x00-1000"]
    assert warns["acl:p04470"].startswith("recovered from malformed XML (Opening and ending tag mismatch")

    report = "\n".join(ingest_section(s))
    assert "| cls | 14 | 6 | 2 | 4 | 2 | 3 | yes |" in report and "Skipped files (4;" in report
    assert "Skipped files by reason:" in report and f"| cls | {HIDDEN_FILE_REASON} | 1 |" in report
    for p in ("paper.pdf", f"Documents_TXT/{rp}.txt", ".C02-1033.xml.swp", f"{rp}/{rp}.xml"):
        assert p in report, p
    assert "Warnings (3;" in report and "recovered from truncated XML" in report
