"""CL-SciSumm 2018 training set (WING-NUS/scisumm-corpus): one folder per reference paper (RP).

Layout read: `<RP>/Reference_XML/<RP>.xml`, `<RP>/Citance_XML/<citing>.xml`, `<RP>/annotation/<RP>.ann.txt`.
Every Reference_XML and Citance_XML file is one paper record (the ScisummNet `<PAPER>` XML: title in
`<S sid="0">`, `<ABSTRACT>`, `<SECTION title=...>`); paper_id is acl:<lowercased file name>. Citance_XML
files have no title sentence, so those papers keep a null title; a file is rejected only when even
lxml's recovering parser yields no `<PAPER>` with sentences (reason: the strict parser's message).

A Citance_XML file also cites its folder's RP. Its citances are the annotation lines naming it as
"Citing Article"; each becomes a `citance` record whose text key is that of the cited sentences (by
sid) in this very file, so ingest's citance join places it in the SECTION holding those sentences and
yields one reference per (citing, RP) that survives duplicate-paper dedup (joined on citing_id only).
A citing file without annotation lines gets one citance with no text (-> one mention of class O).
The annotation file is read next to the Citance_XML file (same folder tree), not as its own record.
"""
from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from lxml import etree

from importance.readers.common import CITANCE, PAPER, BadRecord, clean_ws, decompress, norm_title
from importance.readers.scisummnet import FIELD, KEY_LEN, VENUES, abstract_text, acl_year, section_sentences, text_key

_PARSER = dict(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)
_SID = re.compile(r'sid\s*=\s*"(\d+)"')
_FIELD = re.compile(r"\s*([A-Za-z ]+?)\s*:\s*(.*)", re.S)


def parse_paper_xml(data: bytes):
    """Strict parse, then lxml recover=True, then recover on the bytes decoded as UTF-8 with
    replacement (invalid bytes stop libxml2's recovery). Returns (root, parser message or None)."""
    try:
        return etree.fromstring(data, etree.XMLParser(**_PARSER)), None
    except etree.XMLSyntaxError as e:
        msg = str(e)
    root = etree.fromstring(data, etree.XMLParser(recover=True, **_PARSER))
    if not _usable(root):
        fixed = data.decode("utf-8", errors="replace").encode("utf-8")
        root = etree.fromstring(fixed, etree.XMLParser(recover=True, encoding="utf-8", **_PARSER))
    return root, msg


def _usable(root) -> bool:
    return root is not None and root.tag == "PAPER" and next(root.iter("S"), None) is not None


def _title(root) -> str | None:
    t = root.find("S")
    return clean_ws(html.unescape("".join(t.itertext()))) if t is not None else None


def _local(path: str) -> Path:
    """Spark gives file: URIs; tests give plain paths."""
    return Path(unquote(urlparse(path).path)) if path.startswith("file:") else Path(path)


def parse_annotation(text: str) -> list[dict]:
    """Annotation lines -> [{number, citing, sids, text}] ("Field: value | Field: value | ...")."""
    out = []
    for line in text.splitlines():
        if "Citance Number" not in line:
            continue
        fields = {}
        for part in line.split(" | "):
            m = _FIELD.match(part)
            if m:
                fields.setdefault(m.group(1).strip(), m.group(2).strip())
        citing = re.sub(r"\.(xml|txt)$", "", fields.get("Citing Article", "").strip())
        ctext = fields.get("Citation Text", "")
        if not citing:
            continue
        out.append({"number": fields.get("Citance Number", str(len(out) + 1)), "citing": citing,
                    "sids": _SID.findall(ctext), "text": re.sub(r"<[^>]+>", " ", ctext)})
    return out


def _annotations_for(path: str, rp: str, citing: str) -> list[dict] | None:
    """This citing paper's annotation lines; None when the RP folder has no annotation file."""
    folder = _local(path).parent.parent / "annotation"
    files = sorted(folder.glob("*.txt")) if folder.is_dir() else []  # .ann.txt, .annv3.txt
    if not files:
        return None
    out = []
    for f in files:
        out += [a for a in parse_annotation(f.read_bytes().decode("utf-8", errors="replace"))
                if a["citing"] == citing]  # exact: some folders hold X.xml and x.xml
    return out


def parse(path: str, data: bytes, source: str) -> list[tuple[str, dict]]:
    parts = path.rstrip("/").split("/")
    name, kind = parts[-1], (parts[-2] if len(parts) >= 2 else "")
    if kind not in ("Reference_XML", "Citance_XML") or not name.endswith(".xml"):
        return []  # annotation and other files are read through the Citance_XML files
    rp = parts[-3] if len(parts) >= 3 else ""
    pid = name[:-4]
    data = decompress(path, data)
    root, msg = parse_paper_xml(data)
    if not _usable(root):
        raise BadRecord(f"malformed XML: {msg}" if msg else "not a CL-SciSumm <PAPER> with sentences")
    title = _title(root)  # Citance_XML files carry no title sentence: title stays null
    paper_id = f"acl:{pid.lower()}"
    abstract = abstract_text(root)
    out: list[tuple[str, dict]] = [(PAPER, {
        "paper_id": paper_id, "title": title, "abstract": abstract,
        "authors": [], "year": acl_year(pid), "venue": VENUES.get(pid[:1].upper(), "ACL Anthology") if acl_year(pid)
        else None, "fields": [FIELD], "keywords": [], "mesh": [], "source": source, "has_fulltext": True,
        "source_file": path, "ord": 0, "title_norm": norm_title(title), "alt_ids": [paper_id]})]
    sentences, by_sid = section_sentences(root, paper_id, path)
    out += sentences
    if kind == "Citance_XML" and rp:
        out += _citances(path, rp, pid, paper_id, by_sid, source)
    return out


def _citances(path, rp, pid, paper_id, by_sid, source) -> list[tuple[str, dict]]:
    base = {"citing_id": paper_id, "cited_id": f"acl:{rp.lower()}", "ref_key": rp, "authors": [],
            "source_file": path, "source": source}
    anns = _annotations_for(path, rp, pid) or []
    out = []
    for a in anns:
        # Key of the first cited sentence found in a SECTION of this file: an exact sentence match.
        key = next((by_sid[s] for s in a["sids"] if by_sid.get(s)), None) or text_key(a["text"]) or None
        out.append((CITANCE, dict(base, key=key, prefix=key[:KEY_LEN] if key else None,
                                  suffix=key[-KEY_LEN:] if key else None,
                                  record_id=f"{rp}#{pid}#{a['number']}")))
    if not out:  # cites the RP, place unknown: null keys match no sentence -> class O
        out.append((CITANCE, dict(base, key=None, prefix=None, suffix=None, record_id=f"{rp}#{pid}")))
    return out
