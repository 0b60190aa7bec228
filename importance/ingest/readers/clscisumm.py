"""CL-SciSumm 2018 training and test sets (WING-NUS/scisumm-corpus): one folder per reference paper (RP).

Layout read: `<RP>/Reference_XML/<RP>.xml`, `<RP>/Citance_XML/<citing>.xml` and the annotation files
`<RP>/annotation/*.txt` (training set: "Field: value | Field: value" lines) or `<RP>/annotation/*.csv`
(test set, one file per annotator: a header row Citance Number, Reference Article, Citing Article,
Citation Marker Offset, Citation Marker, Citation Offset, Citation Text, Citation Text Clean,
Reference Offset, Reference Text, Discourse Facet; quoted fields hold commas and doubled quotes).
Every Reference_XML and Citance_XML file is one paper record (the ScisummNet `<PAPER>` XML: title in
`<S sid="0">`, `<ABSTRACT>`, `<SECTION title=...>`); paper_id is acl:<lowercased file name>. Citance_XML
files have no title sentence, so those papers keep a null title. Damaged files are recovered by lxml
(74 of the 584 training Citance_XML files are malformed, 63 files hold bytes that are not UTF-8),
truncated ones too, and the paper carries a warning saying what was kept; a file is rejected only
when nothing with a sentence is left (reasons: readers.common.parse_xml).

A Citance_XML file also cites its folder's RP. Its citances are the annotation rows naming it as
"Citing Article" (in every annotation file of the folder: several annotators may annotate the same
citance); each becomes a `citance` record whose text key is that of the cited sentences in this
very file (sentence ids from the <S sid=...> markup of "Citation Text" and from "Citation Offset"),
so ingest's citance join places it in the SECTION holding those sentences, and citances landing on
the same sentence become one mention (the others are rejected as duplicates). A citing file without
annotation rows gets one citance with no text (-> one mention of class O).
An annotation file is read twice: beside each Citance_XML file (its rows for that file), and as an
input of its own, which the files table lists as auxiliary and which rejects the rows no Citance_XML
file will take (no such citing file, or an empty one), so every annotated row is a citance or a
reject. A Citance_XML file that is rejected rejects its annotated rows with it. Files elsewhere in
an RP folder (Documents_TXT, a stray XML beside the folders) are listed as skipped.
"""
from __future__ import annotations

import csv
import html
import io
import re
from functools import lru_cache
from pathlib import Path

from importance.ingest.readers.common import (CITANCE, PAPER, BadRecord, clean_ws, decode_text, decompress, file_status,
                                              keep_warning, local_path, norm_title, parse_xml, reject, require_text,
                                              warning)
from importance.ingest.readers.scisummnet import FIELD, KEY_LEN, VENUES, abstract_text, acl_year, section_sentences, text_key

PAPER_FOLDERS = ("Reference_XML", "Citance_XML")
ANNOTATION_FOLDER = "annotation"
ANNOTATION_SUFFIXES = (".txt", ".csv")
RECOVERY_UNITS = (("SECTION", "sections"), ("S", "sentences"))
SKIPPED_REASON = ("not a CL-SciSumm input: only <RP>/Reference_XML/*.xml, <RP>/Citance_XML/*.xml and "
                  "<RP>/annotation/*.txt|*.csv are read")
_SID = re.compile(r'\bsid\s*=\s*"(\d+)"')  # sid="15", not ssid="15"
_FIELD = re.compile(r"\s*([A-Za-z ]+?)\s*:\s*(.*)", re.S)


def _title(root) -> str | None:
    t = root.find("S")
    return clean_ws(html.unescape("".join(t.itertext()))) if t is not None else None


def _row(fields: dict, n: int) -> dict:
    """One annotation row (text or CSV form) -> {number, citing, sids, text, facet}: the cited sentence ids
    from the <S sid=...> markup of Citation Text, then those of Citation Offset ("['39','40']" or
    "'31','32'"), each once; the text is Citation Text Clean, else Citation Text without markup; the facet
    is the Discourse Facet as written (human in the 2018 sets, NA in ScisummNet's automatic ones)."""
    citing = re.sub(r"\.(xml|txt|csv)$", "", (fields.get("citing article") or "").strip())
    ctext = fields.get("citation text") or ""
    sids = list(dict.fromkeys(_SID.findall(ctext) + re.findall(r"\d+", fields.get("citation offset") or "")))
    text = clean_ws(fields.get("citation text clean")) or clean_ws(re.sub(r"<[^>]+>", " ", ctext)) or ""
    return {"number": (fields.get("citance number") or "").strip() or str(n), "citing": citing, "sids": sids,
            "text": text, "facet": (fields.get("discourse facet") or "").strip() or None}


def parse_annotation(text: str) -> list[dict]:
    """Annotation lines -> [{number, citing, sids, text}] ("Field: value | Field: value | ...").
    A line without "Citance Number" is no row (blank lines, notes)."""
    out = []
    for line in text.splitlines():
        if "Citance Number" not in line:
            continue
        fields: dict[str, str] = {}
        for part in line.split(" | "):
            m = _FIELD.match(part)
            if m:
                fields.setdefault(m.group(1).strip().lower(), m.group(2).strip())
        out.append(_row(fields, len(out) + 1))
    return out


def parse_annotation_csv(text: str) -> list[dict]:
    """Rows of the CSV form (csv module: quoted fields hold commas, line breaks and doubled quotes);
    header names compared case- and space-insensitively; rows with every field empty are skipped."""
    reader = csv.reader(io.StringIO(text), strict=True)
    try:
        header = next(reader, None)
        names = [" ".join(h.split()).lower() for h in header or []]
        if "citing article" not in names:
            raise BadRecord(f"not a CL-SciSumm annotation CSV: no 'Citing Article' column (header: {header!r:.200})")
        out = []
        for values in reader:
            if any(v.strip() for v in values):
                out.append(_row(dict(zip(names, values)), len(out) + 1))
    except csv.Error as e:
        raise BadRecord(f"malformed CSV at line {reader.line_num:,}: {e}") from None
    return out


def annotation_rows(name: str, text: str) -> list[dict]:
    """The rows of one annotation file, in either form (by suffix: .csv is the CSV form)."""
    return parse_annotation_csv(text) if name.lower().endswith(".csv") else parse_annotation(text)


def _annotation_files(folder: Path) -> list[Path]:
    """The annotation files of an RP folder, as Spark lists them (hidden names are not read)."""
    if not folder.is_dir():
        return []
    return sorted(f for f in folder.iterdir() if f.is_file() and f.name[:1] not in "._"
                  and f.name.lower().endswith(ANNOTATION_SUFFIXES))


def _rows_with_ids(name: str, data: bytes, rp: str) -> tuple[list[dict], str | None]:
    """annotation_rows, each with the record_id of the citance it becomes: RP#citing#file#number
    (number@row where a file repeats a number); and the note on bytes that were not UTF-8."""
    text, replaced = decode_text(decompress(name, data))
    rows, seen = annotation_rows(name, text), set()
    for i, a in enumerate(rows, 1):
        n = a["number"] if a["number"] not in seen else f"{a['number']}@{i}"
        seen.add(a["number"])
        a["record_id"] = f"{rp}#{a['citing']}#{name}#{n}"
    return rows, replaced


def _annotations_for(path: str, rp: str, citing: str) -> list[dict] | None:
    """This citing paper's annotation rows in every annotation file of its RP folder; None when the
    folder has none. An unreadable annotation file gives no rows here (it is rejected as an input)."""
    files = _annotation_files(local_path(path).parent.parent / ANNOTATION_FOLDER)
    if not files:
        return None
    out = []
    for f in files:
        st = f.stat()
        out += [a for a in _annotation_file_rows(str(f), (st.st_size, st.st_mtime_ns), rp)
                if a["citing"] == citing]  # exact: some folders hold X.xml and x.xml
    return out


@lru_cache(maxsize=64)
def _annotation_file_rows(path: str, stamp: tuple[int, int], rp: str) -> tuple[dict, ...]:
    """The rows of one annotation file, read and parsed once per process: every Citance_XML file of
    the RP folder asks for them (stamp: size and modification time, so a changed file is read
    again). An unreadable file gives no rows (it is rejected as an input of its own)."""
    try:
        rows, _ = _rows_with_ids(Path(path).name, Path(path).read_bytes(), rp)
    except (BadRecord, OSError):
        return ()
    return tuple(rows)


def parse(path: str, data: bytes, source: str, bodies: bool = True):
    """Generator: a paper file's records, an annotation file's status and row rejects, or 'skipped'.
    Without bodies a paper gives no sentence records; its citances are keyed by their own text."""
    parts = path.rstrip("/").split("/")
    name, kind = parts[-1], (parts[-2] if len(parts) >= 2 else "")
    rp = parts[-3] if len(parts) >= 3 else ""
    if kind == ANNOTATION_FOLDER and name.lower().endswith(ANNOTATION_SUFFIXES):
        yield from _annotation_file(path, name, data, rp, source)
        return
    if kind not in PAPER_FOLDERS or not name.endswith(".xml"):
        yield file_status("skipped", SKIPPED_REASON)
        return
    pid = name[:-4]
    anns = _annotations_for(path, rp, pid) if kind == "Citance_XML" and rp else None
    try:
        out, by_sid = _paper(path, pid, data, source, bodies)
    except BadRecord as e:  # its annotated rows go with it, each a citance reject
        for a in anns or []:
            yield reject(path, a["record_id"], f"citing paper's Citance_XML file rejected: {e}"[:500], source,
                         level="citance")
        raise
    yield from out
    if kind == "Citance_XML" and rp:
        yield from _citances(path, rp, pid, out[0][1]["paper_id"], by_sid, anns, source)


def _paper(path: str, pid: str, data: bytes, source: str, bodies: bool = True):
    """The PAPER record, its warning if recovered, its SENTENCE records (bodies); and the key of each sid."""
    data = decompress(path, data)
    root, recovery = parse_xml(data, "PAPER", keep_truncated=True)
    if root.tag != "PAPER":
        raise BadRecord(f"not a CL-SciSumm paper (root element <{root.tag}>)")
    if next(root.iter("S"), None) is None:
        if recovery is not None and recovery.message:
            cause = "truncated" if recovery.truncated else "malformed"
            raise BadRecord(f"{cause} XML, no sentence recovered: {recovery.message}")
        raise BadRecord("CL-SciSumm <PAPER> without any sentence")
    title = _title(root)  # Citance_XML files carry no title sentence: title stays null
    paper_id = f"acl:{pid.lower()}"
    abstract = abstract_text(root)
    out: list[tuple[str, dict]] = [(PAPER, {
        "paper_id": paper_id, "title": title, "abstract": abstract,
        "authors": [], "year": acl_year(pid), "venue": VENUES.get(pid[:1].upper(), "ACL Anthology") if acl_year(pid)
        else None, "fields": [FIELD], "keywords": [], "mesh": [], "source": source, "has_fulltext": bodies,
        "source_file": path, "ord": 0, "title_norm": norm_title(title), "alt_ids": [paper_id]})]
    out += keep_warning(recovery, data, root, RECOVERY_UNITS, path, paper_id, source)
    if not bodies:
        return out, {}
    sentences, by_sid = section_sentences(root, paper_id, path)
    return out + sentences, by_sid


def _annotation_file(path: str, name: str, data: bytes, rp: str, source: str):
    """An annotation file as an input of its own: auxiliary (its rows become citances where their
    Citance_XML file is read), and one citance reject per row that no Citance_XML file will take."""
    data = decompress(path, data)
    require_text(data)
    rows, replaced = _rows_with_ids(name, data, rp)
    yield file_status("auxiliary", f"annotation of {rp}: its {len(rows):,} rows are read with the Citance_XML "
                                   f"files of {rp}", citances=len(rows))
    if replaced:
        yield warning(path, f"{rp}#{name}", f"annotation: {replaced}", source)
    citance_dir = local_path(path).parent.parent / "Citance_XML"
    # the citing files' sizes, listed once (not a stat per row)
    sizes = {f.name[:-4]: f.stat().st_size for f in citance_dir.glob("*.xml") if f.is_file()} \
        if citance_dir.is_dir() else {}
    for a in rows:
        if not a["citing"]:
            reason = "annotation row without a Citing Article"
        elif a["citing"] not in sizes:
            reason = f"citing paper {a['citing']} has no file {rp}/Citance_XML/{a['citing']}.xml"
        elif sizes[a["citing"]] == 0:
            reason = f"citing paper {a['citing']}: its Citance_XML file is empty"
        else:
            continue  # read with that Citance_XML file
        yield reject(path, a["record_id"], reason, source, level="citance")


def _citances(path, rp, pid, paper_id, by_sid, anns, source) -> list[tuple[str, dict]]:
    base = {"citing_id": paper_id, "cited_id": f"acl:{rp.lower()}", "ref_key": rp, "authors": [],
            "source_file": path, "source": source}
    out = []
    for a in anns or []:
        # Key of the first cited sentence found in a SECTION of this file: an exact sentence match.
        key = next((by_sid[s] for s in a["sids"] if by_sid.get(s)), None) or text_key(a["text"]) or None
        out.append((CITANCE, dict(base, key=key, prefix=key[:KEY_LEN] if key else None,
                                  suffix=key[-KEY_LEN:] if key else None, record_id=a["record_id"],
                                  context=a["text"] or None)))
    if not out:  # cites the RP, place unknown: null keys match no sentence -> class O
        out.append((CITANCE, dict(base, key=None, prefix=None, suffix=None, record_id=f"{rp}#{pid}", context=None)))
    return out
