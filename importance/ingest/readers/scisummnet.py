"""ScisummNet (CL-SciSumm 2019) reference papers and their citing sentences.

Two file kinds live in each `<ACLID>/` folder:
- `<ACLID>.xml[.gz]`: `<PAPER>` with `<S sid="0">` title, `<ABSTRACT>`, `<SECTION title=...>` of
  `<S>` sentences -> a paper row (paper_id acl:<lowercased id>, year and venue from the id) and one
  `sentence` record per sentence (its text key and section) used to place citances in sections.
- `citing_sentences.json[.gz]`: the citances of that paper -> one `citance` record each; the Spark
  stage turns in-corpus ones into references + mentions and rejects the others.

The `citing_paper_authors` field reads "Given, Family | Given, Family" (the SOURCE note says
"Last, First", but the data put the given names first: "Kenneth Ward, Church").
"""
from __future__ import annotations

import html
import re

from importance.ingest.readers.common import (CITANCE, PAPER, SENTENCE, BadRecord, author, clean_ws, decode_text,
                                              decompress, keep_warning, norm_title, parse_json, parse_xml, reject,
                                              require_text, section_records, warning)
from importance.ingest.headings import known_class
from importance.ingest.sections import classify_sections

ACL_ID = re.compile(r"^([A-Z])(\d\d)-(\d{4})$")
VENUES = {"A": "ANLP", "C": "COLING", "D": "EMNLP", "E": "EACL", "H": "HLT", "I": "IJCNLP",
          "J": "Computational Linguistics", "K": "CoNLL", "L": "LREC", "N": "NAACL", "P": "ACL",
          "Q": "TACL", "S": "SemEval/*SEM", "T": "TINLAP", "W": "ACL workshops", "X": "TIPSTER",
          "M": "MUC", "O": "ROCLING", "Y": "PACLIC", "U": "ALTA", "R": "RANLP", "F": "Findings"}
FIELD = "Computational Linguistics"  # the subject of every ACL Anthology paper (clscisumm too)
KEY_LEN = 40  # letters compared at each end of a citance (see citance_keys)


def acl_year(acl_id: str) -> int | None:
    m = ACL_ID.match(acl_id.upper())
    if not m:
        return None
    yy = int(m.group(2))
    return 1900 + yy if yy >= 50 else 2000 + yy


def text_key(text: str | None) -> str:
    """Letters only, lowercased, after undoing (double) HTML escaping: robust to spacing,
    punctuation, hyphenation and citation-marker differences between the XML and the JSON."""
    if not text:
        return ""
    t = html.unescape(html.unescape(text)).lower()
    return re.sub(r"[^a-z]+", "", t)


def parse_authors(s: str | None) -> list[dict]:
    out = []
    for part in (s or "").split("|"):
        part = html.unescape(part).strip()
        if not part:
            continue
        given, _, family = part.partition(",")
        if not family.strip():
            given, family = "", given
        out.append(author(family.strip(), given.strip() or None))
    return out


def _folder_id(path: str) -> str:
    parts = path.rstrip("/").split("/")
    return parts[-2] if len(parts) >= 2 else ""


# What a recovery warning counts (kept of those the bytes open).
RECOVERY_UNITS = (("SECTION", "sections"), ("S", "sentences"))


def parse(path: str, data: bytes, source: str, bodies: bool = True, sections: bool = False) -> list[tuple[str, dict]]:
    """Content first (empty, not text, wrong encoding, not XML/JSON, truncated), then the names.
    Without bodies a paper gives no sentence records (its sections are not read); citances are
    read either way: they are the citation links."""
    name = path.rsplit("/", 1)[-1]
    base = re.sub(r"\.gz$", "", name)
    data = decompress(path, data)
    require_text(data)
    if base.startswith("citing_sentences") and base.endswith(".json"):
        return _parse_citances(path, data, source)
    if base.endswith(".xml"):
        return _parse_paper(path, base[:-4], data, source, bodies, sections)
    raise BadRecord(f"not a ScisummNet file: {name} (a folder holds <ACL id>.xml and citing_sentences.json)")


def _parse_paper(path: str, acl: str, data: bytes, source: str, bodies: bool = True,
                 sections: bool = False) -> list[tuple[str, dict]]:
    root, recovery = parse_xml(data, "PAPER")
    if root.tag != "PAPER":
        raise BadRecord(f"not a ScisummNet paper (root element <{root.tag}>)")
    if not ACL_ID.match(acl.upper()):
        raise BadRecord(f"file name {acl!r} is not an ACL Anthology id")
    paper_id = f"acl:{acl.lower()}"
    t = root.find("S")
    title = clean_ws("".join(t.itertext())) if t is not None else None
    if not title:
        raise BadRecord("ScisummNet paper without a title sentence")
    abstract = abstract_text(root)
    out: list[tuple[str, dict]] = [(PAPER, {
        "paper_id": paper_id, "title": html.unescape(title), "abstract": abstract, "authors": [],
        "year": acl_year(acl), "venue": VENUES.get(acl[0].upper(), "ACL Anthology"), "fields": [FIELD],
        "keywords": [], "mesh": [], "source": source, "has_fulltext": bodies, "source_file": path, "ord": 0,
        "title_norm": norm_title(title), "alt_ids": [paper_id]})]
    out += keep_warning(recovery, data, root, RECOVERY_UNITS, path, paper_id, source)
    if not bodies:
        return out
    sentences, _ = section_sentences(root, paper_id, path, out if sections else None)
    return out + sentences


def abstract_text(root) -> str | None:
    """The <ABSTRACT> sentences of a ScisummNet / CL-SciSumm <PAPER>, joined and unescaped."""
    el = root.find("ABSTRACT")
    text = clean_ws(" ".join("".join(s.itertext()) for s in el.iter("S"))) if el is not None else None
    return html.unescape(text) if text else None


def section_text(sec) -> str:
    """The sentences of a <SECTION>, joined and unescaped: what the section classifier reads."""
    return html.unescape(clean_ws(" ".join("".join(s.itertext()) for s in sec.iter("S"))) or "")


def paper_sections(root) -> list[tuple[str | None, str]]:
    """(title, text) of each <SECTION> of a ScisummNet / CL-SciSumm <PAPER>, in order."""
    return [(clean_ws(sec.get("title")), section_text(sec)) for sec in root.findall("SECTION")]


def section_sentences(root, paper_id: str, path: str, section_out: list | None = None
                      ) -> tuple[list[tuple[str, dict]], dict[str, str]]:
    """SENTENCE records (match key, section title and class, position) of every <SECTION>, in
    order, and the match key of each sentence id (CL-SciSumm annotations cite sentences by sid).
    The sections are classified together (importance.ingest.sections.classify_sections).
    `section_out`: a list that receives the SECTION records too (their <S> sentences, as marked)."""
    sections = root.findall("SECTION")
    titles = [clean_ws(sec.get("title")) for sec in sections]
    texts = [None if known_class(None, t) else section_text(sec) for sec, t in zip(sections, titles)]
    sources: list = []
    classes = classify_sections(titles, texts, sources=sources)
    if section_out is not None:
        section_out += section_records(paper_id, path, titles, classes, sources, [
            [t for t in (clean_ws(html.unescape("".join(x.itertext()))) for x in sec.iter("S")) if t]
            for sec in sections])
    out, by_sid, n = [], {}, 0
    for pos, (sec, stitle, cls) in enumerate(zip(sections, titles, classes)):
        for s in sec.iter("S"):
            key = text_key("".join(s.itertext()))
            if s.get("sid") is not None:
                by_sid[s.get("sid")] = key
            if key:
                out.append((SENTENCE, {"paper_id": paper_id, "ord": n, "key": key, "section_title": stitle,
                                       "section_class": cls, "position": pos, "source_file": path}))
                n += 1
    return out, by_sid


def _parse_citances(path: str, data: bytes, source: str) -> list[tuple[str, dict]]:
    text, replaced = decode_text(data)
    items = parse_json(text)
    if not isinstance(items, list):
        raise BadRecord(f"not a citing_sentences list (the JSON is {type(items).__name__})")
    cited = _folder_id(path)
    if not ACL_ID.match(cited.upper()):
        raise BadRecord(f"folder name {cited!r} of a citing_sentences file is not an ACL Anthology id")
    out = []
    for i, c in enumerate(items):
        rid = f"{cited}#{c.get('citance_No', i) if isinstance(c, dict) else i}"
        citing = c.get("citing_paper_id") if isinstance(c, dict) else None
        if not citing or not ACL_ID.match(str(citing).upper()):
            out.append(reject(path, rid, "citance without a valid citing_paper_id", source, level="citance"))
            continue
        key = text_key(c.get("clean_text") or c.get("raw_text"))
        out.append((CITANCE, {
            "citing_id": f"acl:{citing.lower()}", "cited_id": f"acl:{cited.lower()}", "ref_key": cited,
            "authors": parse_authors(c.get("citing_paper_authors")), "key": key,
            "prefix": key[:KEY_LEN], "suffix": key[-KEY_LEN:], "record_id": rid, "source_file": path,
            "source": source, "context": clean_ws(c.get("clean_text") or c.get("raw_text")) or None}))
        if replaced and "\ufffd" in f"{c.get('clean_text')}{c.get('raw_text')}":
            out.append(warning(path, rid, f"citance text: {replaced} in the file", source))
    return out
