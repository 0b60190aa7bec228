"""The CL-SciSumm reader (importance.ingest.readers.clscisumm): papers, citances and their sections, in the
text form of the annotation (training set) and the CSV form (test set)."""
import csv
import random
import shutil

from lxml import etree

from importance.ingest.readers import parse_file, parse_file_accounted
from importance.ingest.readers import clscisumm as clscisumm_reader
from importance.ingest.readers.common import clean_ws


def _recs(path, source="cls", accounted=False):
    parse = parse_file_accounted if accounted else parse_file
    return list(parse("clscisumm", source, str(path), path.read_bytes()))


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
        msg = e.msg
    rej, status = _recs(bad, accounted=True)
    assert rej[0] == "reject" and rej[1]["stage"] == "ingest"
    assert rej[1]["reason"].startswith("truncated XML, no sentence recovered: ") and msg in rej[1]["reason"]
    assert status[0] == "file" and status[1]["status"] == "rejected" and status[1]["reason"] == rej[1]["reason"]


CSV_RP = "C98-1097"
HEADER = ["Citance Number", "Reference Article", "Citing Article", "Citation Marker Offset", "Citation Marker",
          "Citation Offset", "Citation Text", "Citation Text Clean", "Reference Offset", "Reference Text",
          "Discourse Facet"]


def _csv_rows(path):
    """The fixture's CSV read independently (csv.DictReader): header, rows."""
    with path.open(newline="", encoding="utf-8") as f:
        r = csv.DictReader(f)
        return r.fieldnames, list(r)


def test_csv_annotation_rows_equal_the_text_form(clscisumm, clscisumm_csv):
    """The CSV form (test set) and the text form (training set) of the same annotation give the same
    rows: citing paper, cited sentence ids, citation text; quoted commas and doubled quotes survive."""
    csv_file = clscisumm_csv / "annotation" / f"{CSV_RP}.annotator1.csv"
    raw = csv_file.read_bytes()
    assert b'"<S sid =""15"" ssid = ""15"">' in raw and b'"Jobbins and Evett, 1998"' in raw  # quoted, doubled
    header, rows = _csv_rows(csv_file)
    assert header == HEADER and len(rows) == 12
    got = clscisumm_reader.annotation_rows(csv_file.name, raw.decode())
    text = (clscisumm.root / CSV_RP / "annotation" / f"{CSV_RP}.annv3.txt").read_text(errors="replace")
    expected = clscisumm_reader.annotation_rows("x.annv3.txt", text)
    assert [(a["citing"], a["sids"], a["number"]) for a in got] == [(a["citing"], a["sids"], a["number"])
                                                                     for a in expected]
    assert [a["citing"] for a in got] == [r["Citing Article"] for r in rows]
    # sids: the <S sid> markup of Citation Text, then Citation Offset ("'31','32'" as well as "['15']")
    assert got[0]["sids"] == ["15"] and got[2]["sids"] == ["31", "32"]
    assert got[0]["text"] == rows[0]["Citation Text Clean"] and "," in got[0]["text"]


def test_annotation_file_is_auxiliary_and_rejects_the_rows_no_citing_file_takes(clscisumm_csv):
    folder = clscisumm_csv
    present = {p.stem for p in (folder / "Citance_XML").glob("*.xml")}
    for name, n_rows in ((f"{CSV_RP}.annotator1.csv", 12), (f"{CSV_RP}.annotator2.csv", 4)):
        path = folder / "annotation" / name
        _, rows = _csv_rows(path)
        recs = list(parse_file_accounted("clscisumm", "cls", str(path), path.read_bytes()))
        status = recs[-1][1]
        assert status["status"] == "auxiliary" and status["citances"] == n_rows == len(rows)
        assert status["papers"] == status["record_rejects"] == 0 and CSV_RP in status["reason"]
        rejects = [d for k, d in recs if k == "reject"]
        absent = [r["Citing Article"] for r in rows if r["Citing Article"] not in present]
        assert len(rejects) == len(absent) > 0 and all(d["level"] == "citance" for d in rejects)
        assert [d["reason"] for d in rejects] == [
            f"citing paper {c} has no file {CSV_RP}/Citance_XML/{c}.xml" for c in absent]


def test_citance_file_takes_its_rows_from_every_annotator(clscisumm, clscisumm_csv):
    folder = clscisumm_csv
    path = folder / "Citance_XML" / "C02-1033.xml"
    recs = _recs(path)
    cits = [d for k, d in recs if k == "citance"]
    sids = [r["Citation Offset"].strip("[]'") for name in ("annotator1", "annotator2")
            for r in _csv_rows(folder / "annotation" / f"{CSV_RP}.{name}.csv")[1] if r["Citing Article"] == "C02-1033"]
    assert len(cits) == len(sids) == 4 and len({c["record_id"] for c in cits}) == 4
    assert cits[0]["key"] == cits[2]["key"] and cits[1]["key"] == cits[3]["key"]  # same citance, two annotators
    sents = [d for k, d in recs if k == "sentence"]
    expected = clscisumm.expected_sections(path.read_bytes(), sids)
    for c, (title, cls) in zip(cits, expected):
        hit = [s for s in sents if s["key"] == c["key"]]
        assert hit and (hit[0]["section_title"], hit[0]["section_class"]) == (title, cls)
    assert {cls for _, cls in expected} - {"O"}  # placed in sections, not all O


def test_rejected_citing_file_rejects_its_annotated_rows_and_a_stray_file_is_skipped(clscisumm_csv, tmp_path):
    src = clscisumm_csv
    folder = tmp_path / CSV_RP
    shutil.copytree(src, folder)
    broken = folder / "Citance_XML" / "ICDAR99.xml"  # annotated by both annotators
    broken.write_bytes(random.Random(3).randbytes(2000))
    recs = list(parse_file_accounted("clscisumm", "cls", str(broken), broken.read_bytes()))
    kinds = [k for k, _ in recs]
    assert kinds == ["reject", "reject", "reject", "file"]
    rows, whole, status = [d for k, d in recs if k == "reject"][:2], recs[2][1], recs[3][1]
    assert whole["level"] == "record" and whole["reason"].startswith("not text: binary data")
    assert [r["level"] for r in rows] == ["citance", "citance"]
    assert all(r["reason"] == f"citing paper's Citance_XML file rejected: {whole['reason']}" for r in rows)
    assert status["status"] == "rejected" and status["citances"] == 2 and status["record_rejects"] == 1
    ann = folder / "annotation" / f"{CSV_RP}.annotator1.csv"  # no longer rejects the ICDAR99 row itself
    rej = [d for k, d in parse_file_accounted("clscisumm", "cls", str(ann), ann.read_bytes()) if k == "reject"]
    assert len(rej) == 8 and not [d for d in rej if "ICDAR99" in d["reason"]]
    stray = folder / "C98-1097.xml"  # a valid paper beside the expected folders
    stray.write_bytes((folder / "Reference_XML" / "C98-1097.xml").read_bytes())
    (rec,) = parse_file_accounted("clscisumm", "cls", str(stray), stray.read_bytes())
    assert rec[0] == "file" and rec[1]["status"] == "skipped" and "Reference_XML" in rec[1]["reason"]


def test_truncated_citing_file_is_kept_with_a_warning_saying_what_was_lost(clscisumm, tmp_path):
    src = clscisumm.root / clscisumm.reference / "Citance_XML" / "C02-1033.xml"
    data = src.read_bytes()
    cut = data[: len(data) // 2]
    path = tmp_path / "X" / "Citance_XML" / "C02-1033.xml"
    path.parent.mkdir(parents=True)
    path.write_bytes(cut)
    recs = list(parse_file_accounted("clscisumm", "cls", str(path), cut))
    (warn,) = [d for k, d in recs if k == "warning"]
    n_s = len(etree.fromstring(cut, etree.XMLParser(recover=True)).findall(".//S"))
    last_line = len(cut.split(b"\n"))
    assert warn["record_id"] == "acl:c02-1033" and warn["warning"].startswith("recovered from truncated XML (")
    assert f"{n_s} sentences" in warn["warning"] and f"after line {last_line}" in warn["warning"]
    assert recs[-1][1]["status"] == "parsed" and recs[-1][1]["warnings"] == 1
