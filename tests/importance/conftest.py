"""What the importance tests share: an independent reading of the CL-SciSumm test release in
tests/data/clscisumm (the reader test and the ingest test check the same facts against it)."""
from __future__ import annotations

import html
import re
from types import SimpleNamespace

import pytest
from lxml import etree

from importance.ingest.readers.common import clean_ws
from importance.ingest.sections import classify_sections


def _expected_sections(xml: bytes, sids: list[str]) -> list[tuple[str | None, str]]:
    """Independent expectation: the SECTION holding each sid, via lxml XPath on a recovering parse."""
    root = etree.fromstring(xml, etree.XMLParser(recover=True))
    secs = root.findall("SECTION")
    titles = [clean_ws(s.get("title")) for s in secs]
    classes = classify_sections(titles, [html.unescape(" ".join(s.xpath(".//S//text()"))) for s in secs])
    out = []
    for sid in sids:
        hit = [i for i, s in enumerate(secs) if s.xpath(f".//S[@sid='{sid}']")]
        if hit:
            out.append((titles[hit[0]], classes[hit[0]]))
        else:
            out.append((None, "O"))
    return out


def _annotated_sids(folder, citing: str) -> list[str]:
    """The citing sentence ids the annotation file gives for one citing paper."""
    text = next((folder / "annotation").glob("*.txt")).read_text(errors="replace")
    sids = []
    for line in text.splitlines():
        if re.search(rf"Citing Article:\s*{re.escape(citing)}\s*\|", line):
            ctext = line.split("Citation Text:")[1].split("|")[0]
            sids.append(re.findall(r'sid\s*=\s*"(\d+)"', ctext)[0])
    return sids


@pytest.fixture(scope="session")
def clscisumm(test_data):
    return SimpleNamespace(
        root=test_data / "clscisumm",
        reference="C98-1097",
        citing=["C02-1033", "P04470", "P6230"],  # P04470 and P6230 are malformed (tag mismatch)
        expected_sections=_expected_sections,
        annotated_sids=_annotated_sids,
    )


@pytest.fixture(scope="session")
def clscisumm_csv(test_data, tmp_path_factory):
    """The CL-SciSumm fixture's RP folder in the CSV form of the 2018 test set: its Reference_XML
    and Citance_XML files with the annotator CSVs of tests/data/clscisumm-csv instead of the text
    annotation (assembled here, so the papers are kept once, in tests/data/clscisumm)."""
    import shutil

    rp = "C98-1097"
    folder = tmp_path_factory.mktemp("clscisumm-csv") / rp
    for part in ("Reference_XML", "Citance_XML"):
        shutil.copytree(test_data / "clscisumm" / rp / part, folder / part)
    shutil.copytree(test_data / "clscisumm-csv" / rp / "annotation", folder / "annotation")
    return folder
