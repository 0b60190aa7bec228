"""JATS / NLM article XML (eLife, PMC .nxml) -> one paper, its reference list and in-text mentions.

paper_id = doi:<lowercased DOI>, else pmid:<PMID>, else pmc:<PMCID>. Mentions are every
xref[@ref-type="bibr"] inside <body>; a space-separated rid gives one mention per id. Each mention
carries its top-level section (nested sections inherit it): title, sec-type, class and the index of
that section among the body's top-level blocks. Content placed directly under <body> (PMC articles
with an untitled introduction) forms an untitled pseudo-section.

References: element-citation / mixed-citation fields (article-title, person-group names, year,
pub-id DOI/PMID); a reference year is kept only when plausible (1600 to the article's year + 1). A
mixed-citation's text is the reference as written and goes to `raw`; a mixed-citation with no tagged
parts at all (_TAGGED_PARTS) is split by importance.ingest.readers.refstrings like any raw string.

fields = subject groups of article-meta/article-categories, never article types (subject_fields):
groups typed as subjects or disciplines (PLOS "Discipline-v2": their own top-level subjects, an
"A/B" path cut to "A"), and "heading" groups, which eLife uses for its subject areas (its article
type is in "display-channel") but PMC journals mostly for the type ("Research Article"): without a
display-channel group, a heading made only of article-type words is left out.

keywords = the <kwd> elements of article-meta's author kwd-groups (author_keywords): groups typed
as author keywords ("author-keywords", "author", "author-generated") or untyped (most PMC
journals), in the article's language (a group's xml:lang, else the article's; "en" by default as
in the JATS DTD). Other groups are left out, eLife's "research-organism" ("Mouse", "Other")
above all: like MeSH's organism check tags, it says what was studied on, not what about. Inline
markup is flattened and whitespace collapsed as for titles; each keyword once (case-insensitively),
as written.
"""
from __future__ import annotations

import re

from importance.ingest.headings import known_class
from importance.ingest.readers.common import (MENTION, PAPER, REF, BadRecord, author, clean_ws, decompress,
                                              keep_warning, keyword_list, norm_doi, norm_title, parse_xml,
                                              parse_year, section_records)
from importance.ingest.readers.refstrings import parse_reference, plausible_year
from importance.ingest.readers.sentences import context_at, sentence_bounds, split_sentences
from importance.ingest.section_model import BODY_WORDS
from importance.ingest.sections import classify_sections

# What a recovery warning counts (kept of those the bytes open).
RECOVERY_UNITS = (("sec", "sections"), ("ref", "references"), ("xref", "cross-references"))
AUTHOR_KWD_GROUP_TYPES = re.compile(r"^author([-_ ]?(keywords?|generated))?$", re.I)
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
SUBJECT_GROUP_TYPES = re.compile(r"^(subject|subjects|subject-area|discipline(-v\d+)?)$", re.I)
# Words of article-type headings ("Research Article", "Original Articles", "Letter to the Editor",
# "Case Report", "Mini-Review"); a heading with any other word ("Epidemiology") is a subject.
ARTICLE_TYPE_WORDS = frozenset('''
    a abstract abstracts addendum analysis and announcement article articles book brief case cases
    comment commentaries commentary communication communications concern correction corrections
    correspondence corrigendum database debate discussion editor editorial editorials editors erratum
    errata essay essays expression feature features for from full highlights hypothesis in insight
    insights invited issue length letter letters memoriam meta method methodology methods mini
    minireview news note notes obituary of on opinion original paper papers perspective perspectives
    primary proceedings protocol protocols rapid regular reply report reports research resource
    resources response retraction review reviews short software special studies study systematic
    technical the to tool tools'''.split())


# Elements that make a mixed-citation structured; without any of them it is a plain string.
_TAGGED_PARTS = ("article-title", "chapter-title", "source", "year", "person-group", "name", "string-name",
                 "collab", "part-title", "data-title")


def _text(el) -> str | None:
    if el is None:
        return None
    if not len(el):  # no child elements (most names, years, titles): its text is all itertext gives
        return clean_ws(el.text or "")
    return clean_ws("".join(el.itertext()))


def _child(el, tag: str):
    """el.find(tag) for a plain child tag, filtered in lxml's C code rather than parsed as a path
    (a reference list has ~4 names a reference, each asked for two children)."""
    return next(el.iterchildren(tag), None)


def _abstract_text(el) -> str | None:
    """Paragraph text without eLife's object-id and trailing "DOI: ..." paragraph."""
    paras = [p for p in el.iter("p")] or [el]
    parts = []
    for p in paras:
        t = clean_ws("".join(x for x in p.xpath(".//text()[not(ancestor::object-id)]")))
        if t and not t.startswith("DOI:"):
            parts.append(t)
    return clean_ws(" ".join(parts))


def is_article_type(heading: str) -> bool:
    words = re.findall(r"[a-z]+", heading.lower())
    return bool(words) and all(w in ARTICLE_TYPE_WORDS for w in words)


def subject_fields(meta) -> list[str]:
    """The article's subjects, each once, in document order (module docstring)."""
    groups = [(g, (g.get("subj-group-type") or "").strip().lower()) for g in meta.iter("subj-group")]
    headings_are_subjects = any(t == "display-channel" for _, t in groups)  # eLife
    out: list[str] = []
    for g, t in groups:
        names = [s for s in (_text(x) for x in g.findall("subject")) if s]
        if SUBJECT_GROUP_TYPES.match(t):
            names = [clean_ws(s.split("/")[0]) for s in names]
        elif t == "heading":
            names = [s for s in names if headings_are_subjects or not is_article_type(s)]
        else:
            continue
        for s in names:
            if s and s not in out:
                out.append(s)
    return out


def author_keywords(meta, lang: str | None = None) -> list[str]:
    """The article's author keywords (module docstring); `lang` is the article's xml:lang."""
    lang = (lang or "en").lower().split("-")[0]
    values = []
    for g in meta.findall("kwd-group"):
        kind = (g.get("kwd-group-type") or "").strip()
        if kind and not AUTHOR_KWD_GROUP_TYPES.match(kind):
            continue
        glang = g.get(XML_LANG)
        if glang and glang.strip().lower().split("-")[0] != lang:
            continue
        values += [_text(k) for k in g.findall("kwd")]
    return keyword_list(values)


def parse(path: str, data: bytes, source: str, bodies: bool = True, sections: bool = False) -> list[tuple[str, dict]]:
    """The paper, its references and (bodies) its mentions, and (sections) its top-level sections
    with their sentences; without bodies the <body> is not read."""
    data = decompress(path, data)
    # A truncated article is rejected, not recovered: recovery would silently drop its reference list.
    root, recovery = parse_xml(data, "article")
    if root.tag != "article":
        raise BadRecord(f"not a JATS article (root element <{root.tag}>)")
    meta = root.find("front/article-meta")
    if meta is None:
        raise BadRecord("JATS article without front/article-meta")
    ids = {}
    for aid in meta.findall("article-id"):
        kind = (aid.get("pub-id-type") or "").lower()
        if aid.text and aid.text.strip():
            ids.setdefault(kind, aid.text.strip())
    doi = norm_doi(ids.get("doi"))
    pmid = ids.get("pmid")
    pmc = ids.get("pmc") or ids.get("pmcid")
    if doi:
        paper_id = f"doi:{doi}"
    elif pmid:
        paper_id = f"pmid:{pmid}"
    elif pmc:
        paper_id = f"pmc:{pmc.lower().removeprefix('pmc')}"
    else:
        raise BadRecord("JATS article without DOI, PMID or PMC id")
    alt_ids = sorted({x for x in (f"doi:{doi}" if doi else None, f"pmid:{pmid}" if pmid else None,
                                  f"pmc:{pmc.lower().removeprefix('pmc')}" if pmc else None) if x})

    title = _text(meta.find("title-group/article-title"))
    abstracts = meta.findall("abstract")
    plain = [a for a in abstracts if not a.get("abstract-type")]
    abstract = _abstract_text((plain or abstracts)[0]) if abstracts else None

    authors = []
    for contrib in meta.iter("contrib"):
        if contrib.get("contrib-type") != "author":
            continue
        name = contrib.find("name")
        if name is None:
            continue
        orcid = None
        for cid in contrib.iter("contrib-id", "uri"):
            if (cid.get("contrib-id-type") or cid.get("content-type") or "").lower() == "orcid":
                orcid = _text(cid)
        authors.append(author(_text(_child(name, "surname")), _text(_child(name, "given-names")), orcid))

    year = None
    dates = meta.findall("pub-date")
    pref = sorted(dates, key=lambda d: 0 if (d.get("pub-type") in ("epub", "ppub") or d.get("date-type") == "pub") else 1)
    for d in pref:
        year = parse_year(_text(d.find("year")))
        if year:
            break
    venue = _text(root.find("front/journal-meta/journal-title-group/journal-title")) or \
        _text(root.find("front/journal-meta/journal-title"))
    fields = subject_fields(meta)
    keywords = author_keywords(meta, root.get(XML_LANG))

    out: list[tuple[str, dict]] = [(PAPER, {
        "paper_id": paper_id, "title": title, "abstract": abstract, "authors": authors, "year": year,
        "venue": venue, "fields": fields, "keywords": keywords, "mesh": [], "source": source, "has_fulltext": bodies,
        "source_file": path, "ord": 0, "title_norm": norm_title(title), "alt_ids": alt_ids})]
    out += keep_warning(recovery, data, root, RECOVERY_UNITS, path, paper_id, source)

    seen = set()
    for ref in root.iter("ref"):
        key = ref.get("id")
        if not key or key in seen:
            continue
        seen.add(key)
        cit = None
        for tag in ("element-citation", "mixed-citation", "citation", "nlm-citation"):
            cit = ref.find(f".//{tag}")
            if cit is not None:
                break
        if cit is None:
            cit = ref
        rdoi = rpmid = None
        for pid in cit.iter("pub-id"):
            t = (pid.get("pub-id-type") or "").lower()
            if t == "doi" and not rdoi:
                rdoi = norm_doi(pid.text)
            elif t == "pmid" and not rpmid and pid.text and pid.text.strip().isdigit():
                rpmid = pid.text.strip()
        if not rdoi:  # eLife's older XML puts the DOI in an ext-link (text first: hrefs can be stale)
            for link in cit.iter("ext-link"):
                rdoi = norm_doi(link.text) or norm_doi(link.get("{http://www.w3.org/1999/xlink}href"))
                if rdoi:
                    break
        rtitle = _text(cit.find(".//article-title")) or _text(cit.find(".//chapter-title"))
        if not rtitle and (cit.get("publication-type") or "") in ("book", "thesis", "report", "software", "data"):
            rtitle = _text(cit.find("source"))
        group = None
        for pg in cit.iter("person-group"):
            if (pg.get("person-group-type") or "author") == "author":
                group = pg
                break
        rauthors = [author(_text(_child(n, "surname")), _text(_child(n, "given-names")))
                    for n in (group if group is not None else cit).iter("name")]
        ryear = plausible_year(parse_year(_text(cit.find(".//year"))), year)
        # A mixed-citation is the reference as written: kept in `raw`; one that holds only text
        # (no tagged title, source, year or names) is read like any raw reference string.
        raw = _text(cit) if cit.tag == "mixed-citation" else None
        hint = None
        if raw and not any(True for _ in cit.iter(*_TAGGED_PARTS)):
            parsed = parse_reference(raw, year)
            rtitle, rauthors, ryear = parsed.title, parsed.authors, parsed.year
            rdoi = rdoi or parsed.doi
            hint = f"arxiv:{parsed.arxiv}" if parsed.arxiv else None
        out.append((REF, {
            "citing_id": paper_id, "ref_key": key, "title": rtitle, "authors": rauthors,
            "year": ryear, "doi": rdoi, "pmid": rpmid,
            "hint_id": hint, "title_norm": norm_title(rtitle), "raw": raw, "source_file": path}))
    if not bodies:
        return out

    blocks = top_blocks(root.find("body"))
    titles = [b[0] for b in blocks]
    types = [b[1] for b in blocks]
    # the text is read only where sec-type and heading leave the class open
    texts = [None if known_class(st, t) else block_text(els) for t, st, els in blocks]
    sources: list = []
    classes = classify_sections(titles, texts, types, research=is_research_article(root), sources=sources)
    if sections:
        out += section_records(paper_id, path, titles, classes, sources,
                               [split_sentences(block_paragraphs(els)) for _, _, els in blocks])
    contexts = CitingSentences()
    for pos, ((stitle, stype, els), cls) in enumerate(zip(blocks, classes)):
        for el in els:
            for x in el.iter("xref"):
                if x.get("ref-type") != "bibr":
                    continue
                context = contexts.of(x)
                for rid in (x.get("rid") or "").split():
                    out.append((MENTION, {
                        "citing_id": paper_id, "ref_key": rid, "section_title": stitle,
                        "section_type": stype, "section_class": cls, "position": pos,
                        "context": context, "source_file": path}))
    return out


class CitingSentences:
    """The sentence around each citation <xref> (mentions.context): the text of its nearest enclosing
    <p> (else its parent: a table cell, a caption title) is read once, with the xrefs' offsets in it."""

    def __init__(self):
        self._paragraphs: dict = {}

    def of(self, xref) -> str | None:
        box = next(xref.iterancestors("p"), None)
        if box is None:
            box = xref.getparent()
        if box not in self._paragraphs:
            parts, spans = [], {}
            _walk(box, parts, spans, [0])
            text = "".join(parts)
            self._paragraphs[box] = (text, sentence_bounds(text), spans)
        text, starts, spans = self._paragraphs[box]
        begin, end = spans.get(xref, (0, 0))
        return context_at(text, starts, begin, end)


def _walk(el, parts: list, spans: dict, pos: list) -> None:
    """Text of el in document order into parts; spans[xref] = its (start, end) offsets."""
    def add(s):
        if s:
            parts.append(s)
            pos[0] += len(s)
    add(el.text)
    for child in el:
        if isinstance(child.tag, str):   # not a comment or processing instruction
            start = pos[0]
            _walk(child, parts, spans, pos)
            if child.tag == "xref":
                spans[child] = (start, pos[0])
        add(child.tail)


# Article types (JATS article-type, eLife's display channel) that are not research papers: their
# sections are topics, not IMRaD parts (METHODS.md §1.1).
NON_RESEARCH_TYPES = frozenset("""review-article editorial letter news article-commentary book-review correction
    retraction partial-retraction obituary product-review meeting-report reply discussion announcement calendar
    collection introduction in-brief addendum""".split())
NON_RESEARCH_CHANNELS = frozenset(("feature article", "insight", "editorial", "correction", "retraction"))


def is_research_article(root) -> bool:
    """False for reviews, features, editorials and the like, by the article's own type."""
    if (root.get("article-type") or "").strip().lower() in NON_RESEARCH_TYPES:
        return False
    meta = root.find("front/article-meta")
    channels = ([(_text(s) or "").lower() for g in meta.iter("subj-group") if g.get("subj-group-type") == "display-channel"
                 for s in g.findall("subject")] if meta is not None else [])
    return not any(c in NON_RESEARCH_CHANNELS for c in channels)


def top_blocks(body) -> list[tuple[str | None, str | None, list]]:
    """The body's top-level blocks in order, as (title, sec-type, elements): each <sec> is one;
    content placed directly under <body> between sections forms an untitled pseudo-section."""
    blocks: list[tuple[str | None, str | None, list]] = []
    if body is None:
        return blocks
    loose = None
    for child in body:
        if not isinstance(child.tag, str):
            continue
        if child.tag == "sec":
            loose = None
            blocks.append((_text(child.find("title")), child.get("sec-type"), [child]))
        else:
            if loose is None:
                loose = (None, None, [])
                blocks.append(loose)
            loose[2].append(child)
    return blocks


_NOT_RUNNING_TEXT = ("fig", "table-wrap", "boxed-text", "disp-formula", "supplementary-material", "title", "label",
                     "caption")


def block_paragraphs(elements):
    """The running text of a block, paragraph by paragraph (not figure, table or box captions)."""
    for el in elements:
        paras = [el] if el.tag == "p" else el.iter("p")
        for p in paras:
            if any(a.tag in _NOT_RUNNING_TEXT for a in p.iterancestors()):
                continue
            t = clean_ws("".join(p.itertext()))
            if t:
                yield t


def block_text(elements, max_words: int = BODY_WORDS) -> str:
    """The running text of a block, up to about max_words words: what the section classifier reads."""
    parts, n = [], 0
    for t in block_paragraphs(elements):
        parts.append(t)
        n += t.count(" ") + 1
        if n >= max_words:
            break
    return " ".join(parts)
