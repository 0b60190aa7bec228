"""Every reader against damaged input (issue 17): empty, truncated, random bytes, wrong encoding,
duplicate ids, a file in an unexpected folder. Nothing raises out of importance.ingest.readers; nothing
vanishes (every file gives records, or a reject, or says it is skipped, each with a reason); and
the reason names the actual cause, checked before the format's own checks (names, root element).
"""
from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from importance.ingest.readers import parse_file_accounted
from importance.ingest.readers.common import DUPLICATE_REASON
from sciencemap.contracts import FILE_STATUSES

SEED = 17
# format -> (where the good file lies in tests/data or sample, the path it is given under)
GOOD = {
    "jats": ("tests/data/ehp-116-1694.nxml", "ehp-116-1694.nxml"),
    "scisummnet": ("sample/scisummnet/W00-0726/W00-0726.xml.gz", "W00-0726/W00-0726.xml"),
    "scisummnet_citances": ("sample/scisummnet/W00-0726/citing_sentences.json.gz", "W00-0726/citing_sentences.json"),
    "clscisumm": ("tests/data/clscisumm/C98-1097/Citance_XML/C02-1033.xml", "C98-1097/Citance_XML/C02-1033.xml"),
    "s2orc": ("tests/data/unarxive-4.jsonl", "unarxive.jsonl"),
    "medline_xml": ("tests/data/pubmed-29768149.xml", "pubmed.xml"),
    "medline_text": ("tests/data/mesh-papers-10.medline.txt", "mesh.txt"),
    "pubmed_csv": ("sample/pubmed/dev-data-small.csv.gz", "pubmed.csv"),
}
FORMATS = sorted(GOOD)
XML_FORMATS = ("jats", "scisummnet", "clscisumm", "medline_xml")
KINDS = {"paper", "ref", "mention", "reject", "sentence", "citance", "warning", "file"}


def _fmt(key: str) -> str:
    return key.split("_citances")[0]


@pytest.fixture(scope="module")
def good(repo_root) -> dict[str, bytes]:
    """Each format's good file, uncompressed (the PubMed CSV cut to its header and 20 rows)."""
    out = {}
    for key, (src, _) in GOOD.items():
        data = (repo_root / src).read_bytes()
        out[key] = gzip.decompress(data) if src.endswith(".gz") else data
    import csv
    import io

    rows = list(csv.reader(io.StringIO(out["pubmed_csv"].decode())))[:21]
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    out["pubmed_csv"] = buf.getvalue().encode()
    return out


def _read(key: str, data: bytes, root: Path, path: str | None = None) -> list[tuple[str, dict]]:
    """parse_file_accounted on `data` written under `root` (CL-SciSumm looks beside the file)."""
    p = root / (path or GOOD[key][1])
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return list(parse_file_accounted(_fmt(key), "fuzz", str(p), data))


def _accounted(recs: list[tuple[str, dict]]) -> dict:
    """The invariants of every outcome; returns the file record."""
    *body, (kind, f) = recs
    assert kind == "file" and f["status"] in FILE_STATUSES
    assert not [k for k, _ in body if k == "file"]
    rejects = [d for k, d in body if k == "reject"]
    assert all(isinstance(d["reason"], str) and d["reason"].strip() for d in rejects)
    warnings = [d for k, d in body if k == "warning"]
    assert all(d["warning"].strip() and d["record_id"] for d in warnings)
    papers = [d for k, d in body if k == "paper"]
    citances = [d for k, d in body if k == "citance"]
    if f["status"] in ("skipped", "auxiliary", "rejected"):
        assert f["reason"] and f["reason"].strip()
    if f["status"] == "rejected":
        assert not papers and not citances and rejects
    if f["status"] == "parsed":  # something came out: records, or rejects of its records
        assert papers or citances or rejects
    assert f["papers"] == len(papers) and f["warnings"] == len(warnings)
    assert f["record_rejects"] == sum(d["level"] == "record" for d in rejects)
    return f


def _reasons(recs) -> list[str]:
    return [d["reason"] for k, d in recs if k == "reject"]


@pytest.mark.parametrize("key", FORMATS)
def test_good_file_parses_cleanly(key, good, tmp_path):
    recs = _read(key, good[key], tmp_path)
    f = _accounted(recs)
    assert f["status"] == "parsed" and f["papers"] + f["citances"] > 0
    assert not [d for k, d in recs if k == "reject" and d["level"] == "record"]


@pytest.mark.parametrize("key", FORMATS)
def test_empty_and_blank_files(key, tmp_path):
    for data in (b"", b"  \n\t\n"):
        recs = _read(key, data, tmp_path)
        assert _accounted(recs)["status"] == "rejected" and _reasons(recs) == ["empty file"]


@pytest.mark.parametrize("key", FORMATS)
def test_random_bytes_are_named_not_text(key, tmp_path):
    rng = random.Random(SEED)
    for n in (64, 3000, 100_000):
        data = rng.randbytes(n)
        recs = _read(key, data, tmp_path)
        assert _accounted(recs)["status"] == "rejected"
        (reason,) = _reasons(recs)
        # the content check comes first: not the file name, not the root element, not "malformed JSON"
        assert reason.startswith(("not text: binary data", "not text: a ")), (n, reason)
    for magic, what in ((b"PK\x03\x04", "a ZIP archive"), (b"%PDF-1.4\n", "a PDF document")):
        recs = _read(key, magic + rng.randbytes(500), tmp_path)
        assert _reasons(recs) == [f"not text: {what}"]


@pytest.mark.parametrize("key", FORMATS)
def test_random_bytes_under_a_gzip_name(key, tmp_path):
    rng = random.Random(SEED + 1)
    name = GOOD[key][1] + ".gz"
    if key == "clscisumm":  # its glob reads only .xml: a .gz there is skipped, by name
        recs = _read(key, gzip.compress(rng.randbytes(2000)), tmp_path, name)
        assert _accounted(recs)["status"] == "skipped"
        return
    recs = _read(key, rng.randbytes(2000), tmp_path, name)  # not gzip at all: read as it is
    assert _reasons(recs)[0].startswith("not text"), _reasons(recs)
    recs = _read(key, gzip.compress(rng.randbytes(2000)), tmp_path, name)  # gzip of random bytes
    assert _accounted(recs)["status"] == "rejected" and _reasons(recs)[0].startswith("not text")


@pytest.mark.parametrize("key", FORMATS)
def test_truncated_files(key, good, tmp_path):
    """Cut at seeded points: never an exception, never silence; the cut the format can see is named."""
    data = good[key]
    rng = random.Random(SEED)
    cuts = sorted({rng.randrange(1, len(data)) for _ in range(12)} | {len(data) // 2})
    for cut in cuts:
        _accounted(_read(key, data[:cut], tmp_path))
    recs = _read(key, data[: len(data) // 2], tmp_path)
    f = _accounted(recs)
    said = " ".join(_reasons(recs) + [d["warning"] for k, d in recs if k == "warning"])
    expected = {"jats": "truncated XML (the file ends at line", "scisummnet": "truncated XML (the file ends",
                "scisummnet_citances": "truncated JSON", "clscisumm": "recovered from truncated XML",
                "s2orc": "truncated JSON on line", "medline_xml": "truncated XML after",
                "medline_text": "this last record may be cut short", "pubmed_csv": "truncated CSV"}[key]
    assert expected in said, said
    if key == "clscisumm":  # recovered and kept, with what was lost
        assert f["status"] == "parsed" and "lost" in said
    # a truncated gzip: the gzip layer's own message
    if key != "clscisumm":
        gz = gzip.compress(data)
        recs = _read(key, gz[: len(gz) // 2], tmp_path, GOOD[key][1] + ".gz")
        _accounted(recs)
        assert any("truncated or corrupt gzip" in r for r in _reasons(recs)), _reasons(recs)


def _latin1(data: bytes) -> bytes:
    """The file with one Latin-1 byte where UTF-8 is expected (é as 0xE9 in 'thé' for the first
    ' the '), and everything already non-ASCII re-encoded as Latin-1 too."""
    text = data.decode("utf-8").replace(" the ", " thé ", 1)
    assert "é" in text
    return text.encode("latin-1", errors="replace")


@pytest.mark.parametrize("key", FORMATS)
def test_latin1_bytes_in_utf8_are_replaced_and_the_record_kept_with_a_warning(key, good, tmp_path):
    clean = _accounted(_read(key, good[key], tmp_path))
    recs = _read(key, _latin1(good[key]), tmp_path)
    f = _accounted(recs)
    assert f["status"] == "parsed" and f["papers"] == clean["papers"] and f["citances"] == clean["citances"]
    warns = [d["warning"] for k, d in recs if k == "warning"]
    assert warns and any("not valid UTF-8" in w and "U+FFFD" in w for w in warns), warns
    texts = " ".join(str(d.get("title")) + str(d.get("abstract")) for k, d in recs if k == "paper")
    assert "\xe9" not in texts  # never decoded as if it were Latin-1: replaced, and said so


@pytest.mark.parametrize("key", FORMATS)
def test_utf16(key, good, tmp_path):
    """UTF-16 without a byte-order mark: wrong encoding, named. With one: read as the text it is,
    except JSON Lines (UTF-8 by definition), rejected naming it."""
    text = good[key].decode("utf-8")
    recs = _read(key, text.encode("utf-16-le"), tmp_path)
    assert _accounted(recs)["status"] == "rejected"
    assert _reasons(recs)[0].startswith("wrong encoding: UTF-16 text without a byte-order mark"), _reasons(recs)
    if key in XML_FORMATS:  # a UTF-16 document must not claim to be UTF-8 in its declaration
        text = text.replace('encoding="UTF-8"', 'encoding="UTF-16"').replace("encoding='UTF-8'", "encoding='UTF-16'")
    recs = _read(key, text.encode("utf-16"), tmp_path)
    f = _accounted(recs)
    if key == "s2orc":
        assert _reasons(recs) == ["wrong encoding: UTF-16 (byte-order mark); JSON Lines files are UTF-8"]
    else:
        clean = _accounted(_read(key, good[key], tmp_path))
        assert f["status"] == "parsed" and f["papers"] == clean["papers"], _reasons(recs)


@pytest.mark.parametrize("key", FORMATS)
def test_another_format_given_is_named(key, good, tmp_path):
    other = {"xml": b'<?xml version="1.0"?>\n<html><body><p>Not a paper.</p></body></html>\n',
             "json": b'{"title": "a JSON object", "n": 1}\n', "text": b"Just a line of prose, nothing else.\n"}
    for kind, data in other.items():
        recs = _read(key, data, tmp_path)
        f = _accounted(recs)
        reasons = _reasons(recs)
        assert f["status"] in ("rejected", "parsed") and reasons, (kind, reasons)
        if kind == "json" and key in XML_FORMATS:
            assert reasons[0].startswith("not XML: the file starts with '{\"title\"")
        if kind == "xml" and key in ("s2orc", "scisummnet_citances"):
            assert reasons[0].startswith(("not JSON Lines: the file starts with", "not JSON: the file starts with"))
        if kind == "xml" and key in ("jats", "scisummnet", "clscisumm"):
            assert "(root element <html>)" in reasons[0]


@pytest.mark.parametrize("key", FORMATS)
def test_duplicate_ids_each_file_gives_its_records(key, good, tmp_path):
    """Two files holding the same paper both parse (ingest keeps one and rejects the other by id)."""
    first = _read(key, good[key], tmp_path / "a")
    second = _read(key, good[key], tmp_path / "b")
    ids = lambda recs: [d["paper_id"] for k, d in recs if k == "paper"]  # noqa: E731
    assert ids(first) == ids(second) and (ids(first) or key == "scisummnet_citances")
    if key == "s2orc":  # the same paper twice in one file: the second line is a duplicate reject
        line = good[key].splitlines()[0]
        recs = _read(key, line + b"\n" + line + b"\n", tmp_path)
        f = _accounted(recs)
        assert len(ids(recs)) == 1 and _reasons(recs) == [DUPLICATE_REASON]
        assert (f["papers"], f["record_rejects"]) == (1, 1)


def test_files_in_unexpected_folders(good, tmp_path):
    cls = good["clscisumm"]
    for path in ("C98-1097/C02-1033.xml", "C98-1097/Documents_TXT/C02-1033.txt", "C02-1033.xml",
                 "C98-1097/Citance_XML/extra/C02-1033.xml"):
        recs = _read("clscisumm", cls, tmp_path, path)
        f = _accounted(recs)
        assert [k for k, _ in recs] == ["file"] and f["status"] == "skipped" and "Citance_XML" in f["reason"]
    recs = _read("scisummnet_citances", good["scisummnet_citances"], tmp_path, "notes/citing_sentences.json")
    assert _reasons(recs) == ["folder name 'notes' of a citing_sentences file is not an ACL Anthology id"]
    recs = _read("scisummnet", good["scisummnet"], tmp_path, "misc/paper.xml")
    assert _reasons(recs) == ["file name 'paper' is not an ACL Anthology id"]
    recs = _read("scisummnet", good["scisummnet"], tmp_path, "W00-0726/notes.json")
    assert _reasons(recs)[0].startswith("not a ScisummNet file: notes.json")
    for key in ("jats", "s2orc", "medline_xml", "medline_text", "pubmed_csv"):  # folders mean nothing there
        recs = _read(key, good[key], tmp_path, f"odd/deeper/{GOOD[key][1]}")
        assert _accounted(recs)["status"] == "parsed"


@pytest.mark.parametrize("key", FORMATS)
def test_parse_file_never_raises_on_mutations(key, good, tmp_path):
    """Seeded byte flips, deletions and insertions anywhere: the reader yields records of the known
    kinds and its file record, never raises."""
    rng = random.Random(SEED)
    data = good[key]
    for _ in range(15):
        b = bytearray(data)
        for _ in range(rng.randrange(1, 20)):
            i = rng.randrange(len(b))
            op = rng.randrange(3)
            if op == 0:
                b[i] = rng.randrange(256)
            elif op == 1:
                del b[i:i + rng.randrange(1, 200)]
            else:
                b[i:i] = rng.randbytes(rng.randrange(1, 50))
        recs = _read(key, bytes(b), tmp_path)
        _accounted(recs)
        assert {k for k, _ in recs} <= KINDS
