"""S2ORC / unarXive JSONL: one full-text paper per line -> paper, references (bib_entries), mentions.

Each line is one input record: a line that is not valid JSON (or has no usable id) becomes one
reject naming its line number; the other lines of the file are still ingested. A paper id a file
already gave is rejected as a duplicate here, with its references and mentions (the first line wins,
as the ingest's rule for duplicates picks it).

unarXive 2022 lines carry `paper_id` (the arXiv id), `metadata` (arXiv metadata: title, authors_parsed,
doi, versions, journal-ref, categories), `discipline`, `abstract`, `body_text` paragraphs
(`section`, `sec_number`, `cite_spans[].ref_id`) and `bib_entries[key]` = {bib_entry_raw, ids:
{doi, arxiv_id, pubmed_id, pmc_id, open_alex_id}, contained_arXiv_ids}. S2ORC pdf_parses lines use
the same body_text/cite_spans shape with structured bib entries (title, authors, year, other_ids);
both are read here.

paper_id = doi:<DOI> when the paper has one, else arxiv:<id> (S2ORC without either: s2orc:<id>).
fields = the arXiv archives of metadata.categories, primary first ("astro-ph.SR cs.LG" ->
Astrophysics, Computer Science; importance.ingest.fields); a category missing from the archive table gives
an item reject. Without arXiv categories: S2ORC's fields of study (mag_field_of_study,
s2fieldsofstudy), else unarXive's `discipline`.
Mentions: one per cite_span, in the paragraph's top-level section (the first component of
sec_number; unnumbered sections stand alone), classified by importance.ingest.sections heading rules with
the position fallback; when the top-level heading matches no rule, the paragraph's own heading is
tried. References: doi / pmid columns; an arXiv id (else PMC id) goes to hint_id ("arxiv:<id>") so
that resolution can match corpus papers by it. The reference string as written (`bib_entry_raw`,
S2ORC `raw_text`) is kept in `raw`; when an entry has no structured title, authors or year (unArXive),
they come from that string (importance.ingest.readers.refstrings, docs/METHODS.md §1.2.1), and so do a DOI
and an arXiv id the structured ids lack. Years, structured or parsed, and the paper's own year are
kept only when plausible: 1600 <= year <= citing year + 1 (the paper's own: current year + 1).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from importance.ingest.fields import arxiv_fields
from importance.ingest.readers.common import (DUPLICATE_REASON, MENTION, PAPER, REF, BadRecord, author, bom_encoding,
                                              clean_ws, json_truncated, norm_doi, norm_title, open_text_stream,
                                              parse_year, reject, section_records, starts_with, utf8_problem, warning)
from importance.ingest.readers.refstrings import clean_raw, find_ids, first_work, parse_reference, plausible_year
from importance.ingest.readers.sentences import context_at, sentence_bounds, split_sentences
from importance.ingest.headings import known_class
from importance.ingest.sections import classify_sections
from sciencemap.ids import norm_arxiv

_MARKUP = re.compile(r"\{\{(?:cite|formula|figure|table):[^}]*\}\}")


def _lines(path: str, data: bytes):
    """(line number, bytes) of a JSONL file, gunzipping as a stream (no second full copy in memory).
    The first bytes are looked at before any line: binary content, a UTF-16/32 byte-order mark
    (JSON Lines are UTF-8: such a file's lines cannot be split) or text that does not start a JSON
    value reject the whole file with that cause."""
    stream = open_text_stream(path, data)
    head = stream.peek(4096)[:4096]
    enc = bom_encoding(head)
    if enc in ("utf-16", "utf-32"):
        raise BadRecord(f"wrong encoding: {enc.upper()} (byte-order mark); JSON Lines files are UTF-8")
    start = starts_with(head)
    if start and start[0] not in "{[":
        raise BadRecord(f"not JSON Lines: the file starts with {start!r}")
    n = 0
    try:
        for line in stream:
            n += 1
            yield n, line
    except (EOFError, OSError) as e:  # truncated gzip: the lines read so far were already parsed
        raise BadRecord(f"truncated or corrupt gzip after line {n}: {e}") from None


def parse(path: str, data: bytes, source: str, bodies: bool = True, sections: bool = False):
    """Generator: records of every good line, one reject per bad line; without bodies no line's
    body_text is read (paper and references only); with sections each paper's top-level sections
    and their sentences too."""
    n_lines, seen = 0, set()
    for lineno, raw in _lines(path, data):
        if not raw.strip():
            continue
        n_lines += 1
        rid = f"line {lineno}"
        try:  # decoded once; a few bad bytes in one string keep the record, with a warning
            text, replaced = raw.decode("utf-8-sig"), None
        except UnicodeDecodeError:
            text, replaced = raw.decode("utf-8-sig", errors="replace"), utf8_problem(raw, where=False)
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            if json_truncated(e, text):  # a cut line: the parser ran into its end
                reason = f"truncated JSON on line {lineno}: the line ends before the record is complete ({e.msg})"
            else:
                reason = f"malformed JSON on line {lineno}, column {e.colno:,}: {e.msg}"
            yield reject(path, rid, reason[:500], source)
            continue
        try:
            recs = parse_doc(doc, path, source, lineno, bodies, sections)
        except BadRecord as e:
            yield reject(path, rid, str(e), source)
            continue
        except Exception as e:  # odd shapes (a list where a dict is expected...) reject the line only
            yield reject(path, rid, f"unreadable record on line {lineno}: {type(e).__name__}: {e}"[:500], source)
            continue
        paper_id = recs[0][1]["paper_id"]
        if paper_id in seen:  # the ingest's rule (the first row in a file wins), here: its references
            # and mentions share the kept row's (citing_id, source_file) and could not be told apart later
            yield reject(path, paper_id, DUPLICATE_REASON, source)
            continue
        seen.add(paper_id)
        yield from recs
        if replaced:
            yield warning(path, recs[0][1]["paper_id"], f"line {lineno}: {replaced} replaced by U+FFFD", source)
    if n_lines == 0:
        raise BadRecord("empty file")


def _paper_year(meta: dict, arxiv: str | None) -> int | None:
    """The first version's year, else metadata.year, else the year of a new-style arXiv id; only
    a plausible one (refstrings.plausible_year without a citing year: up to the current year + 1)."""
    for v in meta.get("versions") or []:
        y = plausible_year(parse_year((v or {}).get("created")))
        if y:
            return y
    if meta.get("year") and plausible_year(parse_year(str(meta["year"]))):
        return plausible_year(parse_year(str(meta["year"])))
    m = re.match(r"^(\d\d)(\d\d)\.", arxiv or "")
    return plausible_year(2000 + int(m.group(1))) if m else None


def _authors(meta: dict) -> list[dict]:
    parsed = meta.get("authors_parsed")
    if parsed:
        return [author(a[0], " ".join(x for x in a[1:] if x) or None) for a in parsed if a and a[0]]
    out = []
    for a in meta.get("authors") or []:  # S2ORC: [{first, middle[], last}]
        if isinstance(a, dict) and a.get("last"):
            given = " ".join([a.get("first") or ""] + list(a.get("middle") or [])).strip()
            out.append(author(a["last"], given or None))
    return out


def _fields_of_study(doc: dict, meta: dict) -> list[str]:
    """S2ORC's subject labels (MAG's top-level fields): mag_field_of_study / fieldsOfStudy as a list
    of names, or s2fieldsofstudy as [{category, source}]; each name once, in order."""
    names = []
    for src in (meta, doc):
        for key in ("mag_field_of_study", "fieldsOfStudy", "s2fieldsofstudy"):
            vals = src.get(key) or []
            for x in [vals] if isinstance(vals, str) else vals:
                name = clean_ws(x.get("category") if isinstance(x, dict) else str(x))
                if name and name not in names:
                    names.append(name)
    return names


def parse_doc(doc: dict, path: str, source: str, lineno: int, bodies: bool = True,
              sections: bool = False) -> list[tuple[str, dict]]:
    if not isinstance(doc, dict):
        raise BadRecord(f"line {lineno} is not a JSON object")
    meta = doc.get("metadata") or {}
    # unarXive's paper_id is the arXiv id; S2ORC's is a numeric S2 id, which norm_arxiv never matches.
    arxiv = (norm_arxiv(meta.get("id") or doc.get("arxiv_id") or (meta.get("external_ids") or {}).get("ArXiv"))
             or norm_arxiv(str(doc.get("paper_id") or "")))
    doi = norm_doi(meta.get("doi") or (meta.get("external_ids") or {}).get("DOI"))
    s2 = str(doc.get("paper_id")) if doc.get("paper_id") is not None else None
    if doi:
        paper_id = f"doi:{doi}"
    elif arxiv:
        paper_id = f"arxiv:{arxiv}"
    elif s2:
        paper_id = f"s2orc:{s2}"
    else:
        raise BadRecord(f"record on line {lineno} without DOI, arXiv id or paper_id")
    alt_ids = sorted({x for x in (f"doi:{doi}" if doi else None, f"arxiv:{arxiv}" if arxiv else None) if x}
                     | {paper_id})

    title = clean_ws(meta.get("title") or doc.get("title"))
    abstract = doc.get("abstract")
    if isinstance(abstract, dict):
        abstract = abstract.get("text")
    elif isinstance(abstract, list):  # S2ORC: list of paragraphs
        abstract = " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in abstract)
    abstract = clean_ws(abstract or meta.get("abstract"))
    fields, unknown = arxiv_fields(meta.get("categories"))
    if not fields:  # not an arXiv paper, or one without categories
        fields = _fields_of_study(doc, meta) or ([clean_ws(doc["discipline"])] if doc.get("discipline") else [])
    venue = clean_ws(meta.get("journal-ref") or meta.get("venue") or meta.get("journal")) or ("arXiv" if arxiv else None)
    year = _paper_year(meta, arxiv)
    out: list[tuple[str, dict]] = [(PAPER, {
        "paper_id": paper_id, "title": title, "abstract": abstract, "authors": _authors(meta),
        "year": year, "venue": venue, "fields": fields, "keywords": [], "mesh": [],
        "source": source,
        "has_fulltext": bodies, "source_file": path, "ord": lineno, "title_norm": norm_title(title),
        "alt_ids": alt_ids})]
    out += [reject(path, paper_id, f"unknown arXiv category {c!r} (not in importance/ingest/data/arxiv_archives.tsv): "
                   "no field from it", source, level="item") for c in unknown]

    for key, bib in (doc.get("bib_entries") or {}).items():
        out.append((REF, _reference(paper_id, key, bib or {}, path, year)))
    if not bodies:
        return out

    tops = top_sections(doc.get("body_text") or [])
    titles = [sec.title for sec in tops]
    sources: list = []
    classes = classify_sections(titles, [None if known_class(None, t) else sec.text for sec, t in zip(tops, titles)],
                                sources=sources)
    if sections:
        out += section_records(paper_id, path, titles, classes, sources, [
            split_sentences(_MARKUP.sub(" ", p.get("text") or "") for p, _ in sec.paragraphs) for sec in tops])
    for pos, (sec, cls) in enumerate(zip(tops, classes)):
        for p, own in sec.paragraphs:
            text, starts = p.get("text") or "", None
            for span in p.get("cite_spans") or []:
                rid = span.get("ref_id")
                if rid is None:
                    continue
                if starts is None:
                    starts = sentence_bounds(text)
                out.append((MENTION, {
                    "citing_id": paper_id, "ref_key": str(rid), "section_title": sec.title or own,
                    "section_type": p.get("sec_type") or None, "section_class": cls, "position": pos,
                    "context": _citing_sentence(text, starts, span), "source_file": path}))
    return out


def _citing_sentence(text: str, starts: list[int], span: dict) -> str | None:
    """mentions.context: the sentence around a cite span (its start/end offsets in the paragraph; a
    span without offsets gets none), unArXive's {{cite:...}} and similar markup blanked."""
    begin, end = span.get("start"), span.get("end")
    if not isinstance(begin, int) or not (0 <= begin <= len(text)):
        return None
    ctx = context_at(text, starts, begin, end if isinstance(end, int) else begin)
    return clean_ws(_MARKUP.sub(" ", ctx)) if ctx else None


@dataclass
class TopSection:
    """A top-level section of an S2ORC/unArXive body: its heading (None when untitled), its
    paragraphs in order as (paragraph, the paragraph's own heading), and its text."""
    title: str | None
    paragraphs: list = field(default_factory=list)

    @property
    def first_own(self) -> str | None:
        return next((own for _, own in self.paragraphs if own), None)

    @property
    def text(self) -> str:
        return clean_ws(" ".join(_MARKUP.sub(" ", p.get("text") or "") for p, _ in self.paragraphs)) or ""


def top_sections(paras: list) -> list[TopSection]:
    """Paragraphs grouped by top-level section, in order of first appearance.

    unArXive types its paragraphs (sec_type "section", "subsection", "subsubsection", "" for
    paragraph-level text) and numbers subsections either in full ("2.1") or within their parent
    ("1", "2"). In a typed document each section-type paragraph starts (or continues) a top-level
    section, by heading and number, and every other paragraph belongs to the section before it,
    except where the subsections show that an unseen section began (a section whose text is all
    in subsections has no paragraph of its own): a full number naming another parent ("3.1" in
    section 2), or a within-parent number that starts again ("1" after "3"). Such a section is
    untitled. Untyped documents (S2ORC) group by the first component of sec_number, unnumbered
    paragraphs ("-1", "") by their own heading. A section's title is the heading of its own
    (unnested) paragraphs."""
    typed = any(isinstance(p, dict) and p.get("sec_type") == "section" for p in paras)
    sections: dict[object, TopSection] = {}
    current: TopSection | None = None
    parent = last_sub = None  # the current section's number; its last subsection's number
    for p in paras:
        if not isinstance(p, dict):
            continue
        own = clean_ws(_MARKUP.sub(" ", p.get("section") or "")) or None
        num = str(p.get("sec_number") or "").strip()
        if typed:
            if p.get("sec_type") == "section":
                key: object = ("section", own, num)
                parent, last_sub = num, None
            elif current is None:
                key = ("t:" + (own or ""))
            else:
                if p.get("sec_type") == "subsection" and num and num != "-1":
                    head, _, rest = num.partition(".")
                    restarted = (rest and head != parent) or (not rest and head.isdigit() and last_sub is not None
                                                               and last_sub.isdigit() and int(head) < int(last_sub))
                    if restarted:
                        current = TopSection(None)
                        sections[("unseen", len(sections))] = current
                        parent = head if rest else None
                    last_sub = rest.split(".")[0] if rest else head
                current.paragraphs.append((p, own))
                continue
            nested = False
        else:
            key = ("n:" + num.split(".")[0]) if num and num != "-1" else ("t:" + (own or ""))
            nested = "." in num
        sec = sections.setdefault(key, TopSection(None))
        if not nested and sec.title is None:  # the section's own paragraphs name it
            sec.title = own
        sec.paragraphs.append((p, own))
        current = sec
    return list(sections.values())


_TRAILING_NUMBER = re.compile(r"(\d+)/?\s*$")


def _trailing_number(v) -> str | None:
    """unarXive gives PubMed/PMC ids as URLs (https://pubmed.ncbi.nlm.nih.gov/34495856): keep the number."""
    if not v:  # most references carry no PubMed or PMC id
        return None
    m = _TRAILING_NUMBER.search(str(v))
    return m.group(1) if m else None


def _first(v):
    if isinstance(v, list):
        return v[0] if v else None
    return v


def _entry_year(value, citing_year: int | None) -> int | None:
    """A structured entry's year: the year parse_year finds in its text, if plausible. An int of
    four digits in parse_year's range is that year as it is (no text made and searched)."""
    if type(value) is int and 1500 <= value <= 2099:
        return plausible_year(value, citing_year)
    return plausible_year(parse_year(str(value or "")), citing_year)


def _reference(citing: str, key: str, bib: dict, path: str, citing_year: int | None = None) -> dict:
    """One reference row: structured S2ORC fields when the entry has them, else what the raw string
    gives (module docstring); ids from the structured fields first, then from the string."""
    ids = bib.get("ids") or {}
    other = bib.get("other_ids") or {}  # S2ORC: {"DOI": [...], "ArXiv": [...], "PubMed": [...]}
    raw = clean_ws(bib.get("bib_entry_raw") or bib.get("raw_text")) or None
    title = clean_ws(bib.get("title"))
    structured = bool(title or bib.get("authors") or bib.get("year"))
    parsed = parse_reference(raw, citing_year) if raw and not structured else None
    doi = norm_doi(ids.get("doi") or _first(other.get("DOI")))
    pmid = _trailing_number(ids.get("pubmed_id") or _first(other.get("PubMed")))
    arxiv = norm_arxiv(ids.get("arxiv_id") or _first(other.get("ArXiv")))
    if not arxiv:
        for c in bib.get("contained_arXiv_ids") or []:
            arxiv = norm_arxiv(c.get("id") if isinstance(c, dict) else c)
            if arxiv:
                break
    if raw and not (doi and arxiv):  # ids written in the string
        sdoi, sarxiv = (parsed.doi, parsed.arxiv) if parsed else find_ids(first_work(clean_raw(raw)))[:2]
        doi, arxiv = doi or sdoi, arxiv or sarxiv
    pmc = _trailing_number(ids.get("pmc_id") or _first(other.get("PubMedCentral")))
    hint = f"arxiv:{arxiv}" if arxiv else (f"pmc:{pmc}" if pmc else None)

    if parsed is not None:
        title, year, authors = parsed.title, parsed.year, parsed.authors
    else:
        year = _entry_year(bib.get("year"), citing_year)
        authors = [author(a.get("last"), " ".join([a.get("first") or ""] + list(a.get("middle") or [])).strip() or None)
                   for a in bib.get("authors") or [] if isinstance(a, dict) and a.get("last")]
    return {"citing_id": citing, "ref_key": str(key), "title": title, "authors": authors, "year": year,
            "doi": doi, "pmid": pmid, "hint_id": hint, "title_norm": norm_title(title), "raw": raw,
            "source_file": path}
