"""Readers for unarXive/S2ORC JSONL, MEDLINE XML, MEDLINE text and PMC .nxml, on real files in tests/data."""
import gzip
import json
import re
from collections import Counter

import pyarrow.parquet as pq
import pytest
from lxml import etree

from sciencemap.layout import RunLayout
from importance.ingest import IngestConfig, run_ingest
from importance.readers import parse_file
from importance.readers.medline_text import parse_mesh
from importance.readers.s2orc import norm_arxiv
from sciencemap.runtime import UserError
from importance.sections import class_from_heading

DATA = "tests/data"


def _kinds(recs, kind):
    return [d for k, d in recs if k == kind]


def _parse(repo_root, fmt, name, source="x"):
    p = repo_root / DATA / name
    return list(parse_file(fmt, source, str(p), p.read_bytes()))


def test_unarxive_against_raw_json(repo_root):
    raw = [json.loads(line) for line in (repo_root / DATA / "unarxive-4.jsonl").read_text().splitlines()]
    recs = _parse(repo_root, "unarxive", "unarxive-4.jsonl", "unarxive")
    papers = _kinds(recs, "paper")
    assert [p["paper_id"] for p in papers] == [f"arxiv:{d['paper_id']}" for d in raw]
    assert not _kinds(recs, "reject")
    for d in raw:
        pid = f"arxiv:{d['paper_id']}"
        ments = [m for m in _kinds(recs, "mention") if m["citing_id"] == pid]
        n_spans = sum(len(p["cite_spans"]) for p in d["body_text"])
        assert len(ments) == n_spans
        assert Counter(m["ref_key"] for m in ments) == Counter(
            c["ref_id"] for p in d["body_text"] for c in p["cite_spans"])
        refs = {r["ref_key"]: r for r in _kinds(recs, "ref") if r["citing_id"] == pid}
        assert set(refs) == set(d["bib_entries"])
        for key, bib in d["bib_entries"].items():
            ids = bib.get("ids") or {}
            if ids.get("doi"):
                assert refs[key]["doi"] == ids["doi"].lower()
            if ids.get("arxiv_id"):
                assert refs[key]["hint_id"] == "arxiv:" + ids["arxiv_id"].lower()
    p0 = papers[0]
    assert p0["title"].startswith(raw[0]["metadata"]["title"].split()[0])
    assert [a["family"] for a in p0["authors"]] == [a[0] for a in raw[0]["metadata"]["authors_parsed"]]
    assert p0["year"] == 2022 and p0["has_fulltext"] is True and p0["fields"][0] == raw[0]["discipline"]
    # Sections: a mention in a paragraph whose own heading is "Introduction" is class I.
    intro = [m for m in _kinds(recs, "mention") if (m["section_title"] or "").lower() == "introduction"]
    assert intro and {m["section_class"] for m in intro} == {"I"}
    # Heading classes agree with the rules applied to the raw top-level section headings.
    for m in _kinds(recs, "mention"):
        if m["section_title"] and class_from_heading(m["section_title"]):
            assert m["section_class"] == class_from_heading(m["section_title"])
    # The paper with no body citations gives a paper row and nothing else.
    assert not [m for m in _kinds(recs, "mention") if m["citing_id"] == "arxiv:2212.11739"]


def test_unarxive_bad_lines_are_rejected_others_kept(repo_root):
    lines = (repo_root / DATA / "unarxive-4.jsonl").read_bytes().splitlines()
    data = b"\n".join([lines[0], lines[1][: len(lines[1]) // 2], b"[1, 2]", lines[2]]) + b"\n"
    recs = list(parse_file("s2orc", "unarxive", "bad.jsonl", data))
    rej = _kinds(recs, "reject")
    assert [(r["record_id"], r["reason"].split(" on line")[0]) for r in rej] == [
        ("line 2", "invalid JSON"), ("line 3", "line 3 is not a JSON object")]
    assert [p["paper_id"] for p in _kinds(recs, "paper")] == ["arxiv:2212.11827", "arxiv:2212.11825"]
    gz = list(parse_file("s2orc", "unarxive", "t.jsonl.gz", gzip.compress(data)[:-30]))
    assert _kinds(gz, "reject")[-1]["reason"].startswith("truncated or corrupt gzip")
    assert list(parse_file("s2orc", "unarxive", "e.jsonl", b"\n\n"))[0][1]["reason"] == "empty file"
    assert norm_arxiv("arXiv:hep-ph/0511200v2") == "hep-ph/0511200" and norm_arxiv("2104.06921v3") == "2104.06921"


def test_medline_xml_efetch_file(repo_root):
    recs = _parse(repo_root, "medline_xml", "pubmed-29768149.xml", "medline")
    (p,) = _kinds(recs, "paper")
    assert p["paper_id"] == "pmid:29768149" and "doi:10.1056/nejmoa1715274" in p["alt_ids"]
    assert p["title"] == "Inhaled Combined Budesonide-Formoterol as Needed in Mild Asthma."
    assert p["year"] == 2018 and p["venue"] == "The New England journal of medicine"
    assert p["abstract"].startswith("BACKGROUND: In patients with mild asthma") and "RESULTS: " in p["abstract"]
    assert p["authors"][0] == {"family": "O'Byrne", "given": "Paul M", "orcid": None}
    # Independent reading of the raw XML: UI, name, major (descriptor or any qualifier).
    root = etree.parse(str(repo_root / DATA / "pubmed-29768149.xml")).getroot()
    expected = []
    for mh in root.iter("MeshHeading"):
        d = mh.find("DescriptorName")
        flags = [d.get("MajorTopicYN")] + [q.get("MajorTopicYN") for q in mh.findall("QualifierName")]
        expected.append({"ui": d.get("UI"), "name": d.text, "major": "Y" in flags, "tree_numbers": []})
    assert p["mesh"] == expected and len(expected) == 23
    assert {m["name"] for m in p["mesh"] if m["major"]} >= {"Asthma", "Budesonide", "Terbutaline"}


def test_medline_xml_current_format_and_bad_records(repo_root):
    recs = _parse(repo_root, "medline_xml", "test_current_medline.xml.gz", "medline")
    papers = _kinds(recs, "paper")
    raw = gzip.decompress((repo_root / DATA / "test_current_medline.xml.gz").read_bytes())
    pmids = re.findall(rb"<MedlineCitation[^>]*>\s*<PMID[^>]*>(\d+)<", raw)
    assert [p["paper_id"] for p in papers] == ["pmid:" + x.decode() for x in pmids] and len(papers) == 4
    back = next(p for p in papers if p["paper_id"] == "pmid:2930949")
    # Back Pain is major only through its qualifier "physiopathology" (MajorTopicYN="Y").
    assert [m["name"] for m in back["mesh"] if m["major"]] == ["Back Pain"]
    assert back["year"] == 1985 and back["authors"] == [{"family": "Reuler", "given": "J B", "orcid": None}]
    # A record without PMID is rejected, the other kept; ORCID and MedlineDate are read.
    xml = b"""<PubmedArticleSet><PubmedArticle><MedlineCitation><Article><ArticleTitle>No id</ArticleTitle>
    </Article></MedlineCitation></PubmedArticle><PubmedArticle><MedlineCitation><PMID>5</PMID><Article>
    <Journal><JournalIssue><PubDate><MedlineDate>1998 Dec-1999 Jan</MedlineDate></PubDate></JournalIssue>
    <Title>J</Title></Journal><ArticleTitle>T</ArticleTitle><AuthorList><Author><LastName>Doe</LastName>
    <Initials>J</Initials><Identifier Source="ORCID">https://orcid.org/0000-0001-2345-6789</Identifier>
    </Author></AuthorList></Article></MedlineCitation></PubmedArticle></PubmedArticleSet>"""
    recs = list(parse_file("medline_xml", "medline", "m.xml", xml))
    assert [k for k, _ in recs] == ["reject", "paper"]
    assert recs[0][1]["reason"] == "MEDLINE record without PMID" and "No id" in recs[0][1]["record_id"]
    assert recs[1][1]["year"] == 1998
    assert recs[1][1]["authors"] == [{"family": "Doe", "given": "J", "orcid": "0000-0001-2345-6789"}]
    trunc = list(parse_file("medline_xml", "medline", "t.xml", raw[: len(raw) * 3 // 4]))
    assert [k for k, _ in trunc][-1] == "reject" and "truncated XML after" in trunc[-1][1]["reason"]


def test_medline_text(repo_root):
    text = (repo_root / DATA / "mesh-papers-10.medline.txt").read_text()
    recs = _parse(repo_root, "medline_text", "mesh-papers-10.medline.txt", "medline")
    papers = _kinds(recs, "paper")
    assert [p["paper_id"] for p in papers] == ["pmid:" + x for x in re.findall(r"^PMID- (\d+)", text, re.M)]
    p = papers[0]
    assert p["title"] == ("Characterization of the mechanism of drug-drug interactions from PubMed using MeSH terms.")
    assert p["year"] == 2017 and p["venue"] == "PloS one" and "doi:10.1371/journal.pone.0173548" in p["alt_ids"]
    assert p["abstract"].startswith("Identifying drug-drug interaction") and p["abstract"].endswith("more accurate.")
    assert p["authors"][3] == {"family": "Tu", "given": "Yi-Cheng", "orcid": None}
    # MeSH count and major flags against the raw MH lines of each record.
    for block, paper in zip(re.split(r"\n\s*\n", text.strip()), papers):
        mh = re.findall(r"^MH  - (.*)$", block, re.M)
        assert [m["name"] for m in paper["mesh"]] == [x.split("/")[0].lstrip("*") for x in mh]
        assert [m["major"] for m in paper["mesh"]] == ["*" in x for x in mh]
    assert parse_mesh("Prescription Drugs/*pharmacology")["major"] is True
    huh = next(p for p in papers if p["paper_id"] == "pmid:28028289")
    assert huh["authors"][0] == {"family": "Huh", "given": "Sun", "orcid": "0000-0002-8559-8640"}
    group = next(p for p in papers if p["paper_id"] == "pmid:26227021")
    assert {"family": "Updating Guidelines Working Group", "given": None, "orcid": None} in group["authors"]
    bad = b"PMID- 1\nTI  - One\n\nTI  - No pmid here\n      continued\nAB  - x\n\nPMID- 3\nTI  - Three\n"
    recs = list(parse_file("medline_text", "medline", "b.txt", bad))
    assert [k for k, _ in recs] == ["paper", "reject", "paper"]
    assert recs[1][1]["reason"] == "MEDLINE record without PMID" and "No pmid here continued" in recs[1][1]["record_id"]


def test_pmc_nxml_untitled_intro_and_nested_sections(repo_root):
    recs = _parse(repo_root, "jats", "ehp-116-1694.nxml", "pmc")
    (p,) = _kinds(recs, "paper")
    assert p["paper_id"] == "doi:10.1289/ehp.11570" and p["year"] == 2008
    root = etree.parse(str(repo_root / DATA / "ehp-116-1694.nxml")).getroot()
    body = root.find("body")
    n_xref = sum(len(x.get("rid").split()) for x in body.iter("xref") if x.get("ref-type") == "bibr")
    ments = _kinds(recs, "mention")
    assert len(ments) == n_xref and len(_kinds(recs, "ref")) == len(root.findall(".//ref-list/ref"))
    loose = sum(len(x.get("rid").split()) for c in body if c.tag != "sec"
                for x in c.iter("xref") if x.get("ref-type") == "bibr")
    assert loose > 0 and Counter((m["section_title"], m["section_class"]) for m in ments)[(None, "I")] == loose
    # Untitled nested and top-level sections.
    xml = b"""<article><front><article-meta><article-id pub-id-type="pmc">PMC99</article-id></article-meta></front>
    <body><sec><p><xref ref-type="bibr" rid="a">1</xref></p></sec>
    <sec sec-type="methods"><title>Methods</title><sec><p><xref ref-type="bibr" rid="b">2</xref></p></sec></sec>
    <sec><p><xref ref-type="bibr" rid="a">1</xref></p></sec></body></article>"""
    recs = list(parse_file("jats", "pmc", "u.nxml", xml))
    assert _kinds(recs, "paper")[0]["paper_id"] == "pmc:99"
    assert [(m["ref_key"], m["section_class"], m["position"]) for m in _kinds(recs, "mention")] == [
        ("a", "I", 0), ("b", "M", 1), ("a", "O", 2)]


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
    doc["bib_entries"] = {"k1": {"bib_entry_raw": "Someone. A paper. 2022.", "contained_arXiv_ids": [],
                                 "ids": {"arxiv_id": "2212.11827", "doi": ""}}}
    doc["body_text"] = [{"section": "Methods", "sec_number": "2", "sec_type": "section", "text": "x",
                         "cite_spans": [{"ref_id": "k1"}, {"ref_id": "k1"}]}]
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
    assert len(ux_ments) == n_spans + 2  # every cite_span of the real lines resolves to its bib entry
    hit = refs[(refs.citing_id == "arxiv:2212.99999")]
    assert hit.cited_id.tolist() == ["arxiv:2212.11827"]
    papers = pq.read_table(layout.table("papers")).to_pandas()
    med = papers[papers.paper_id == "pmid:29768149"].iloc[0]
    assert med.source == "medline" and not med.has_fulltext and len(med.mesh) == 23
    assert per["unarxive"]["references_resolved"] >= 1


def test_s2orc_structured_bib_entries():
    # S2ORC pdf_parses shape: numeric S2 paper_id, structured bib entries with other_ids lists.
    doc = {"paper_id": "77499681", "metadata": {"title": "A study", "doi": None},
           "body_text": [{"section": "2.1 Experimental setup", "sec_number": None, "text": "as in [1]",
                          "cite_spans": [{"start": 6, "end": 9, "text": "[1]", "ref_id": "BIBREF0"}]}],
           "bib_entries": {"BIBREF0": {"title": "Prior work", "year": 2001, "authors": [
               {"first": "Ada", "middle": ["B"], "last": "Lovelace"}],
               "other_ids": {"DOI": ["10.1000/X.Y"], "PubMed": ["123"], "ArXiv": []}}}}
    recs = list(parse_file("s2orc", "s2orc", "s.jsonl", json.dumps(doc).encode()))
    assert _kinds(recs, "paper")[0]["paper_id"] == "s2orc:77499681"
    (ref,) = _kinds(recs, "ref")
    assert (ref["title"], ref["year"], ref["doi"], ref["pmid"], ref["hint_id"]) == ("Prior work", 2001, "10.1000/x.y", "123", None)
    assert ref["authors"] == [{"family": "Lovelace", "given": "Ada B", "orcid": None}]
    (m,) = _kinds(recs, "mention")
    assert (m["ref_key"], m["section_class"], m["position"]) == ("BIBREF0", "M", 0)
