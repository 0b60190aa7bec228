"""The S2ORC / unarXive JSONL reader (importance.ingest.readers.s2orc)."""
import gzip
import json
from collections import Counter

from importance.ingest.readers import parse_file
from importance.ingest.readers.common import DUPLICATE_REASON
from importance.ingest.readers.s2orc import norm_arxiv
from importance.ingest.headings import class_from_heading


def test_unarxive_against_raw_json(parse_data, of_kind, test_data):
    raw = [json.loads(line) for line in (test_data / "unarxive-4.jsonl").read_text().splitlines()]
    recs = parse_data("unarxive", "unarxive-4.jsonl", "unarxive")
    papers = of_kind(recs, "paper")
    assert [p["paper_id"] for p in papers] == [f"arxiv:{d['paper_id']}" for d in raw]
    assert not of_kind(recs, "reject")
    for d in raw:
        pid = f"arxiv:{d['paper_id']}"
        ments = [m for m in of_kind(recs, "mention") if m["citing_id"] == pid]
        n_spans = sum(len(p["cite_spans"]) for p in d["body_text"])
        assert len(ments) == n_spans
        assert Counter(m["ref_key"] for m in ments) == Counter(
            c["ref_id"] for p in d["body_text"] for c in p["cite_spans"])
        refs = {r["ref_key"]: r for r in of_kind(recs, "ref") if r["citing_id"] == pid}
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
    assert p0["year"] == 2022 and p0["has_fulltext"] is True
    # fields: the arXiv archives of the categories, primary first (never the source name "arxiv").
    assert [(d["metadata"]["categories"], p["fields"]) for d, p in zip(raw, papers)] == [
        ("cond-mat.stat-mech", ["Condensed Matter"]), ("physics.ed-ph cs.GR", ["Physics", "Computer Science"]),
        ("hep-ph hep-lat", ["High Energy Physics - Phenomenology", "High Energy Physics - Lattice"]),
        ("hep-ph hep-ex", ["High Energy Physics - Phenomenology", "High Energy Physics - Experiment"])]
    # Sections: a mention in a paragraph whose own heading is "Introduction" is class I.
    intro = [m for m in of_kind(recs, "mention") if (m["section_title"] or "").lower() == "introduction"]
    assert intro and {m["section_class"] for m in intro} == {"I"}
    # Heading classes agree with the rules applied to the raw top-level section headings.
    for m in of_kind(recs, "mention"):
        if m["section_title"] and class_from_heading(m["section_title"]):
            assert m["section_class"] == class_from_heading(m["section_title"])
    # The paper with no body citations gives a paper row and nothing else.
    assert not [m for m in of_kind(recs, "mention") if m["citing_id"] == "arxiv:2212.11739"]


def test_unarxive_bad_lines_are_rejected_others_kept(of_kind, test_data):
    lines = (test_data / "unarxive-4.jsonl").read_bytes().splitlines()
    data = b"\n".join([lines[0], lines[1][: len(lines[1]) // 2], b"[1, 2]", lines[2]]) + b"\n"
    recs = list(parse_file("s2orc", "unarxive", "bad.jsonl", data))
    rej = of_kind(recs, "reject")
    assert [(r["record_id"], r["reason"].split(" on line")[0]) for r in rej] == [
        ("line 2", "truncated JSON"), ("line 3", "line 3 is not a JSON object")]  # the cause, not "invalid"
    assert [p["paper_id"] for p in of_kind(recs, "paper")] == ["arxiv:2212.11827", "arxiv:2212.11825"]
    gz = list(parse_file("s2orc", "unarxive", "t.jsonl.gz", gzip.compress(data)[:-30]))
    assert of_kind(gz, "reject")[-1]["reason"].startswith("truncated or corrupt gzip")
    assert list(parse_file("s2orc", "unarxive", "e.jsonl", b"\n\n"))[0][1]["reason"] == "empty file"
    assert norm_arxiv("arXiv:hep-ph/0511200v2") == "hep-ph/0511200" and norm_arxiv("2104.06921v3") == "2104.06921"


def test_s2orc_structured_bib_entries(of_kind):
    # S2ORC pdf_parses shape: numeric S2 paper_id, structured bib entries with other_ids lists.
    doc = {"paper_id": "77499681", "metadata": {"title": "A study", "doi": None},
           "body_text": [{"section": "2.1 Experimental setup", "sec_number": None, "text": "as in [1]",
                          "cite_spans": [{"start": 6, "end": 9, "text": "[1]", "ref_id": "BIBREF0"}]}],
           "bib_entries": {"BIBREF0": {"title": "Prior work", "year": 2001, "authors": [
               {"first": "Ada", "middle": ["B"], "last": "Lovelace"}],
               "other_ids": {"DOI": ["10.1000/X.Y"], "PubMed": ["123"], "ArXiv": []}}}}
    recs = list(parse_file("s2orc", "s2orc", "s.jsonl", json.dumps(doc).encode()))
    assert of_kind(recs, "paper")[0]["paper_id"] == "s2orc:77499681"
    (ref,) = of_kind(recs, "ref")
    assert (ref["title"], ref["year"], ref["doi"], ref["pmid"], ref["hint_id"]) == ("Prior work", 2001, "10.1000/x.y", "123", None)
    assert ref["authors"] == [{"family": "Lovelace", "given": "Ada B", "orcid": None}]
    (m,) = of_kind(recs, "mention")
    assert (m["ref_key"], m["section_class"], m["position"]) == ("BIBREF0", "M", 0)


def test_s2orc_fields_without_arxiv_categories_and_unknown_categories(of_kind):
    base = {"body_text": [], "bib_entries": {}}
    docs = [{"paper_id": "1", "metadata": {"title": "A", "mag_field_of_study": ["Medicine", "Biology"]}},
            {"paper_id": "2", "metadata": {"title": "B", "s2fieldsofstudy": [
                {"category": "Physics", "source": "external"}, {"category": "Physics", "source": "s2-fos-model"}]}},
            {"paper_id": "2212.00001", "discipline": "Mathematics", "metadata": {"title": "C"}},
            {"paper_id": "2212.00002", "discipline": "Physics",
             "metadata": {"title": "D", "categories": "astro-ph.SR nope.XX"}}]
    data = "\n".join(json.dumps(base | d) for d in docs).encode()
    recs = list(parse_file("s2orc", "s2orc", "f.jsonl", data))
    assert [p["fields"] for p in of_kind(recs, "paper")] == [["Medicine", "Biology"], ["Physics"], ["Mathematics"],
                                                             ["Astrophysics"]]
    (rej,) = of_kind(recs, "reject")
    assert rej["level"] == "item" and rej["record_id"] == "arxiv:2212.00002" and "'nope.XX'" in rej["reason"]


def test_unarxive_raw_strings_give_title_year_ids_never_the_raw_string(parse_data, of_kind, test_data):
    raw = [json.loads(line) for line in (test_data / "unarxive-4.jsonl").read_text().splitlines()]
    refs = of_kind(parse_data("unarxive", "unarxive-4.jsonl", "unarxive"), "ref")
    by_key = {(r["citing_id"], r["ref_key"]): r for r in refs}
    for d in raw:
        for key, bib in d["bib_entries"].items():
            r = by_key[(f"arxiv:{d['paper_id']}", key)]
            assert r["raw"] == " ".join(bib["bib_entry_raw"].split())  # the string as written, in its own column
            assert r["title"] != r["raw"] and (r["year"] is None or 1600 <= r["year"] <= 2023)
    # real entries of 2212.11825 (hep-ph, no titles) and 2212.11813 (Elsevier numbered, titles)
    r = by_key[("arxiv:2212.11825", next(k for k, b in raw[2]["bib_entries"].items()
                                         if b["bib_entry_raw"].startswith("L. Y. Glozman, Int. J.")))]
    assert (r["title"], r["year"], r["doi"], r["hint_id"]) == (None, 2021, "10.1142/s0217751x20440315",
                                                                "arxiv:1907.01820")
    r = next(r for r in refs if r["raw"].startswith("T. McLoughlin, R. S. Laramee"))
    assert r["title"] == "Over Two Decades of Integration-Based, Geometric Flow Visualization" and r["year"] == 2010
    assert [a["family"] for a in r["authors"]] == ["McLoughlin", "Laramee", "Peikert", "Post", "Chen"]
    assert r["title_norm"] == "over two decades of integration based geometric flow visualization"


def test_s2orc_structured_fields_win_and_years_must_be_plausible(of_kind):
    base = {"metadata": {"title": "T", "year": 2020}, "body_text": []}
    bib = {"B0": {"title": "Structured title", "year": 2099, "authors": [{"first": "A", "last": "Bee"}],
                  "raw_text": "A. Bee, A raw title, J. Phys. 1, 2 (2019), arXiv:1911.05957.", "other_ids": {}},
           "B1": {"bib_entry_raw": "C. Dee, Another work, Phys. Rev. D 12, 2041 (2027) doi:10.3847/2041-8213/x1",
                  "ids": {}}}
    docs = [dict(base, paper_id="1", bib_entries=bib),
            {"paper_id": "2", "metadata": {"title": "U", "year": 2095}, "body_text": [], "bib_entries": {}}]
    recs = list(parse_file("s2orc", "s2orc", "s.jsonl", "\n".join(json.dumps(d) for d in docs).encode()))
    refs = {r["ref_key"]: r for r in of_kind(recs, "ref")}
    b0, b1 = refs["B0"], refs["B1"]
    # structured fields kept (the structured year 2099 is implausible for a 2020 paper: dropped);
    # the arXiv id the structured ids lack comes from the raw string, which is kept as written
    assert (b0["title"], b0["year"], b0["hint_id"], b0["raw"]) == ("Structured title", None, "arxiv:1911.05957",
                                                                   bib["B0"]["raw_text"])
    assert [a["family"] for a in b0["authors"]] == ["Bee"]
    # raw only: parsed; (2027) is beyond the citing year + 1, 2041 is a page, the DOI prefix is no year
    assert (b1["title"], b1["year"], b1["doi"]) == ("Another work", None, "10.3847/2041-8213/x1")
    assert [p["year"] for p in of_kind(recs, "paper")] == [2020, None]  # a paper year of 2095 is dropped


def test_a_structured_year_is_what_its_text_gives_whatever_its_json_type():
    from importance.ingest.readers.common import parse_year
    from importance.ingest.readers.refstrings import plausible_year
    from importance.ingest.readers.s2orc import _entry_year

    for value in (2019, "2019", "c. 2019", 19999, 1499, 1500, 2099, 2100, True, None, 0, "", 2019.0, -2019):
        for citing_year in (None, 1990, 2020):
            assert _entry_year(value, citing_year) == plausible_year(parse_year(str(value or "")), citing_year)
    assert (_entry_year(2019, 2020), _entry_year(2019, 1990), _entry_year(19999, 2020)) == (2019, None, 1999)


def test_a_paper_id_repeated_in_a_file_is_one_duplicate_reject_without_its_records(of_kind, test_data):
    # The ingest joins a kept paper's references and mentions on (citing_id, source_file): a second
    # row of the id in the same file must give none, or its mentions would count twice.
    lines = (test_data / "unarxive-4.jsonl").read_bytes().splitlines()
    again = json.loads(lines[0])
    again["body_text"] = [dict(again["body_text"][0], text="cited again [1]")]
    data = b"\n".join([lines[0], lines[1], json.dumps(again).encode(), lines[0]]) + b"\n"
    recs = list(parse_file("s2orc", "unarxive", "d.jsonl", data))
    first = list(parse_file("s2orc", "unarxive", "d.jsonl", b"\n".join(lines[:2]) + b"\n"))
    assert [(r["record_id"], r["reason"]) for r in of_kind(recs, "reject")] == [("arxiv:2212.11827", DUPLICATE_REASON)] * 2
    for kind in ("paper", "ref", "mention"):
        assert of_kind(recs, kind) == of_kind(first, kind), kind
