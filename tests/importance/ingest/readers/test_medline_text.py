"""The MEDLINE text (.nbib) reader (importance.ingest.readers.medline_text)."""
import re

from importance.ingest.readers import parse_file
from importance.ingest.readers.medline_text import parse_mesh


def test_medline_text(parse_data, of_kind, test_data):
    text = (test_data / "mesh-papers-10.medline.txt").read_text()
    recs = parse_data("medline_text", "mesh-papers-10.medline.txt", "medline")
    papers = of_kind(recs, "paper")
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
    # fields: MeSH categories of the major descriptors, matched by name (Drug Interactions G07,
    # Medical Subject Headings and PubMed L01, Prescription Drugs D26).
    assert p["fields"] == ["Physiological Phenomena", "Information Science", "Pharmaceutical Preparations"]
    assert all(q["fields"] for q in papers) and all("Information Science" in q["fields"] for q in papers)
    mh = parse_file("medline_text", "medline", "m.txt", b"PMID- 7\nTI  - T\nMH  - Humans\nMH  - *United States\n"
                    b"MH  - Neoplasms/*pathology\nMH  - Lung\n\nPMID- 8\nMH  - Lung\nMH  - Aged\n")
    assert [d["fields"] for _, d in mh] == [["Neoplasms"], ["Respiratory System"]]
    huh = next(p for p in papers if p["paper_id"] == "pmid:28028289")
    assert huh["authors"][0] == {"family": "Huh", "given": "Sun", "orcid": "0000-0002-8559-8640"}
    group = next(p for p in papers if p["paper_id"] == "pmid:26227021")
    assert {"family": "Updating Guidelines Working Group", "given": None, "orcid": None} in group["authors"]
    bad = b"PMID- 1\nTI  - One\n\nTI  - No pmid here\n      continued\nAB  - x\n\nPMID- 3\nTI  - Three\n"
    recs = list(parse_file("medline_text", "medline", "b.txt", bad))
    assert [k for k, _ in recs] == ["paper", "reject", "paper"]
    assert recs[1][1]["reason"] == "MEDLINE record without PMID" and "No pmid here continued" in recs[1][1]["record_id"]
