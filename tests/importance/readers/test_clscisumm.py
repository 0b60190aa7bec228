"""The CL-SciSumm reader (importance.readers.clscisumm): papers, citances and their sections."""
from lxml import etree

from importance.readers import parse_file
from importance.readers.common import clean_ws


def _recs(path, source="cls"):
    return list(parse_file("clscisumm", source, str(path), path.read_bytes()))


def test_reader_papers_citances_and_sections(clscisumm):
    RP, CITING = clscisumm.reference, clscisumm.citing
    folder = clscisumm.root / RP
    ref = _recs(folder / "Reference_XML" / f"{RP}.xml")
    (p,) = [d for k, d in ref if k == "paper"]
    root = etree.fromstring((folder / "Reference_XML" / f"{RP}.xml").read_bytes())
    assert p["paper_id"] == "acl:c98-1097" and p["title"] == clean_ws(root.find("S").text) and p["year"] == 1998
    assert p["fields"] == ["Computational Linguistics"]
    assert not [d for k, d in ref if k == "citance"]  # the RP itself cites nothing here
    n_ment = 0
    for cid in CITING:
        path = folder / "Citance_XML" / f"{cid}.xml"
        recs = _recs(path)
        assert not [d for k, d in recs if k == "reject"]  # malformed ones are recovered, not rejected
        (paper,) = [d for k, d in recs if k == "paper"]
        assert paper["paper_id"] == f"acl:{cid.lower()}" and paper["title"] is None  # no title sentence
        sids = clscisumm.annotated_sids(folder, cid)
        cits = [d for k, d in recs if k == "citance"]
        assert {(c["citing_id"], c["cited_id"], c["ref_key"]) for c in cits} == {(paper["paper_id"], "acl:c98-1097", RP)}
        assert len(cits) == max(1, len(sids))
        sents = [d for k, d in recs if k == "sentence"]
        expected = clscisumm.expected_sections(path.read_bytes(), sids)
        for c, (title, cls) in zip(cits, expected):
            # The sentence the citance key matches exactly lies in the SECTION holding the sid.
            hit = [s for s in sents if s["key"] == c["key"]]
            assert hit and (hit[0]["section_title"], hit[0]["section_class"]) == (title, cls)
        if not sids:
            assert cits[0]["key"] is None  # unannotated: cites the RP, section unknown
        n_ment += len(cits)
    assert n_ment == 2 + 1 + 1


def test_empty_and_unrecoverable_files_rejected_with_parser_message(clscisumm, tmp_path):
    RP = clscisumm.reference
    empty = clscisumm.root / "C04-1089/Citance_XML/J13-2001.xml"
    (rej,) = _recs(empty)
    assert rej[0] == "reject" and rej[1]["level"] == "record" and "PAPER" in rej[1]["reason"]
    src = clscisumm.root / RP / "Citance_XML" / "P04470.xml"
    bad = tmp_path / RP / "Citance_XML" / "P04470.xml"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(src.read_bytes()[:20])  # cut inside the ABSTRACT: no sentence is recoverable
    try:
        etree.fromstring(bad.read_bytes())
        raise AssertionError("expected a parse error")
    except etree.XMLSyntaxError as e:
        msg = str(e)
    (rej,) = _recs(bad)
    assert rej[0] == "reject" and rej[1]["reason"] == f"malformed XML: {msg}" and rej[1]["stage"] == "ingest"
