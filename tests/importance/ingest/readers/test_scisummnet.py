"""The ScisummNet reader (importance.ingest.readers.scisummnet)."""
from importance.ingest.readers import parse_file
from importance.ingest.readers.scisummnet import acl_year, parse_authors


def test_scisummnet_paper_and_citances(repo_root, of_kind):
    d = repo_root / "sample/scisummnet/A94-1006"
    recs = list(parse_file("scisummnet", "scisummnet", str(d / "A94-1006.xml.gz"), (d / "A94-1006.xml.gz").read_bytes()))
    p = of_kind(recs, "paper")[0]
    assert p["paper_id"] == "acl:a94-1006" and p["year"] == 1994 and p["venue"] == "ANLP"
    assert p["fields"] == ["Computational Linguistics"]
    sents = of_kind(recs, "sentence")
    assert {s["section_title"] for s in sents} >= {"4 Conclusions", "Acknowledgements"}
    assert {s["section_class"] for s in sents if s["section_title"] == "4 Conclusions"} == {"D"}
    cpath = d / "citing_sentences.json.gz"
    cits = of_kind(list(parse_file("scisummnet", "scisummnet", str(cpath), cpath.read_bytes())), "citance")
    assert cits and all(c["cited_id"] == "acl:a94-1006" for c in cits)
    assert acl_year("P05-1022") == 2005 and acl_year("J93-2004") == 1993
    assert parse_authors("Kenneth Ward, Church | Zden&#x11B;k, &#x17D;abokrtsk&yacute;") == [
        {"family": "Church", "given": "Kenneth Ward", "orcid": None},
        {"family": "Žabokrtský", "given": "Zdeněk", "orcid": None}]
