"""The ingest stage on Spark: every input record is a paper or a reject, references resolve."""
import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from importance.ingest import IngestConfig, run_ingest
from importance.resolve import raw_fallback_id
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
    (ux / "b.jsonl").write_bytes(json.dumps(doc).encode() + b"\n" + lines[0][:1000] + b"\n")
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
    assert per["unarxive"]["input_records"] == 6 and per["unarxive"]["papers_corpus"] == 5
    assert per["unarxive"]["record_rejects"] == 1
    assert per["medline"]["input_records"] == per["medline"]["papers_corpus"] == 5
    assert per["medline_text"]["input_records"] == 11 and per["medline_text"]["record_rejects"] == 1
    assert per["medline_text"]["papers_corpus"] == 10 and per["pmc"]["papers_corpus"] == 1
    for src, v in per.items():
        assert v["input_records"] == v["papers_corpus"] + v["record_rejects"], src
    n_spans = sum(len(p["cite_spans"]) for line in lines for p in json.loads(line)["body_text"])
    ments = pq.read_table(layout.table("mentions")).to_pandas()
    refs = pq.read_table(layout.table("references")).to_pandas()
    ux_ments = ments[ments.citing_id.str.startswith("arxiv:")]
    assert len(ux_ments) == n_spans + 3  # every cite_span of the real lines resolves to its bib entry
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
