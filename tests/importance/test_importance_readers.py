import gzip
import re
from collections import Counter

from lxml import etree

from importance.readers import parse_file
from importance.readers.scisummnet import acl_year, parse_authors
from importance.sections import class_from_sec_type

ELIFE = "sample/elife/elife00007.xml.gz"


def _kinds(recs, kind):
    return [d for k, d in recs if k == kind]


def test_jats_elife_article(repo_root):
    path = repo_root / ELIFE
    recs = list(parse_file("jats", "elife", str(path), path.read_bytes()))
    paper = _kinds(recs, "paper")[0]
    assert paper["paper_id"] == "doi:10.7554/elife.00007"
    assert paper["year"] == 2012 and paper["venue"] == "eLife"
    assert paper["fields"] == ["Genomics and evolutionary biology", "Plant biology"]
    assert [a["family"] for a in paper["authors"]] == ["Schuman", "Barthel", "Baldwin"]
    assert "DOI:" not in paper["abstract"] and paper["abstract"].startswith("From an herbivore")
    # Independent count with lxml: refs and bibr xref ids per top-level section class.
    root = etree.fromstring(gzip.decompress(path.read_bytes()))
    refs = root.findall("back/ref-list/ref")
    assert len(_kinds(recs, "ref")) == len(refs) > 40
    expected = Counter()
    for sec in root.find("body").findall("sec"):
        n = sum(len(x.get("rid").split()) for x in sec.iter("xref") if x.get("ref-type") == "bibr")
        expected[class_from_sec_type(sec.get("sec-type")) or "O"] += n
    got = Counter(m["section_class"] for m in _kinds(recs, "mention"))
    assert got == +expected and got["I"] > 0 and got["R"] > 0 and got["D"] > 0
    byref = {r["ref_key"]: r for r in _kinds(recs, "ref")}
    assert byref["bib1"]["doi"] == "10.1111/j.1469-8137.2009.03046.x" and byref["bib1"]["year"] == 2009


def test_jats_multi_rid_and_untitled_intro():
    xml = b"""<article><front><article-meta><article-id pub-id-type="pmid">42</article-id>
    <title-group><article-title>T</article-title></title-group></article-meta></front>
    <body><p>Intro text <xref ref-type="bibr" rid="r1 r2">1,2</xref></p>
    <sec><title>2. Methods</title><sec><title>Sub</title><p><xref ref-type="bibr" rid="r2">2</xref></p></sec></sec>
    <sec><title>Results and Discussion</title><p><xref ref-type="bibr" rid="r1">1</xref></p></sec></body>
    <back><ref-list><ref id="r1"><element-citation><article-title>A</article-title><year>2001</year>
    <pub-id pub-id-type="pmid">7</pub-id></element-citation></ref>
    <ref id="r2"><mixed-citation>no title</mixed-citation></ref></ref-list></back></article>"""
    recs = list(parse_file("jats", "pmc", "x.nxml", xml))
    assert _kinds(recs, "paper")[0]["paper_id"] == "pmid:42"
    ments = [(m["ref_key"], m["section_class"], m["position"]) for m in _kinds(recs, "mention")]
    assert ments == [("r1", "I", 0), ("r2", "I", 0), ("r2", "M", 1), ("r1", "R", 2)]
    assert _kinds(recs, "ref")[0]["pmid"] == "7"


def test_bad_inputs_become_rejects(repo_root):
    good = gzip.decompress((repo_root / ELIFE).read_bytes())
    cases = {
        "empty.xml": b"",
        "trunc.xml.gz": gzip.compress(good)[:5000],
        "trunc.xml": good[: len(good) // 2],
        "noid.xml": b"<article><front><article-meta><title-group><article-title>x</article-title>"
                    b"</title-group></article-meta></front></article>",
    }
    reasons = {}
    for name, data in cases.items():
        recs = list(parse_file("jats", "elife", name, data))
        assert [k for k, _ in recs] == ["reject"], name
        reasons[name] = recs[0][1]["reason"]
    assert reasons["empty.xml"] == "empty file"
    assert reasons["trunc.xml.gz"].startswith("truncated or corrupt gzip")
    assert reasons["trunc.xml"].startswith("truncated XML")
    assert "without DOI" in reasons["noid.xml"]
    # recoverable damage (an undefined entity) is parsed leniently, not rejected
    damaged = good.replace(b"</article-title>", b"&bogus;</article-title>", 1)
    assert _kinds(list(parse_file("jats", "elife", "d.xml", damaged)), "paper")


def test_scisummnet_paper_and_citances(repo_root):
    d = repo_root / "sample/scisummnet/A94-1006"
    recs = list(parse_file("scisummnet", "scisummnet", str(d / "A94-1006.xml.gz"), (d / "A94-1006.xml.gz").read_bytes()))
    p = _kinds(recs, "paper")[0]
    assert p["paper_id"] == "acl:a94-1006" and p["year"] == 1994 and p["venue"] == "ANLP"
    sents = _kinds(recs, "sentence")
    assert {s["section_title"] for s in sents} >= {"4 Conclusions", "Acknowledgements"}
    assert {s["section_class"] for s in sents if s["section_title"] == "4 Conclusions"} == {"D"}
    cpath = d / "citing_sentences.json.gz"
    cits = _kinds(list(parse_file("scisummnet", "scisummnet", str(cpath), cpath.read_bytes())), "citance")
    assert cits and all(c["cited_id"] == "acl:a94-1006" for c in cits)
    assert acl_year("P05-1022") == 2005 and acl_year("J93-2004") == 1993
    assert parse_authors("Kenneth Ward, Church | Zden&#x11B;k, &#x17D;abokrtsk&yacute;") == [
        {"family": "Church", "given": "Kenneth Ward", "orcid": None},
        {"family": "Žabokrtský", "given": "Zdeněk", "orcid": None}]


def test_pubmed_csv(repo_root):
    path = repo_root / "sample/pubmed/dev-data-small.csv.gz"
    recs = list(parse_file("pubmed_csv", "pubmed", str(path), path.read_bytes()))
    papers = _kinds(recs, "paper")
    assert len(papers) == 200 and not _kinds(recs, "reject")
    p = papers[0]
    assert p["paper_id"] == "pmid:31594900" and p["has_fulltext"] is False
    assert p["mesh"][0] == {"ui": None, "name": "Africa South of the Sahara", "major": False, "tree_numbers": ["Z01.058.290"]}
    assert "Health Care [N]" in p["fields"]
    assert [m["tree_numbers"] for m in p["mesh"][1:3]] == [[], ["N04.590.374.350", "N05.300.430"]]
    bad = b"Title,abstractText,meshMajor,pmid,meshid,meshroot\nT,A,['x'],,[],[]\nT2,A2,[oops,5,[],[]\n"
    recs = list(parse_file("pubmed_csv", "pubmed", "b.csv", bad))
    assert sorted(d["reason"].split(":")[0] for _, d in recs) == ["malformed list column", "row without a numeric pmid"]
