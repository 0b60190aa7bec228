"""MEDLINE / PubMed XML (PubmedArticleSet or the older MedlineCitationSet; .xml or .xml.gz).

Each MedlineCitation (inside a PubmedArticle when present) is one input record -> one paper
(paper_id pmid:<PMID>, has_fulltext false), with title, abstract (AbstractText parts joined, a
Label kept as "LABEL: text"), authors (LastName + ForeName/Initials, CollectiveName as family name,
ORCID from Identifier[@Source="ORCID"]), year (PubDate Year, else MedlineDate, else ArticleDate),
venue (Journal/Title), MeSH {ui, name, major, tree_numbers=[]} where major = MajorTopicYN="Y" on the
descriptor or on any of its qualifiers, and fields = the MeSH categories of the major descriptors
(importance.ingest.fields.mesh_fields, by UI), keywords = the Keyword elements of every KeywordList
(Owner NOTNLM: the authors'; NLM, KIE, NASA...: indexers'), each once, as written (readers.common.
keyword_list). A record without PMID is rejected.

The file is parsed as a stream (lxml iterparse over a gunzip stream) and each record is cleared
once read, so parser memory stays flat as files grow. A file that breaks off mid-way keeps the
records before the break and adds one reject for the rest, naming the cause (truncated, wrong
encoding, malformed). Byte sequences that are not UTF-8 are replaced by U+FFFD as the stream is
read (readers.common.Utf8Repair), and each record holding one gets a warning. PubmedData/ReferenceList is not read:
MEDLINE has no in-text citations, so it gives no mentions.
"""
from __future__ import annotations

from lxml import etree

from importance.ingest.fields import mesh_fields
from importance.ingest.readers.common import (PAPER, BadRecord, Utf8Repair, author, bom_encoding, clean_ws, keyword_list,
                                              norm_doi, norm_title, open_text_stream, parse_year, reject, starts_with,
                                              warning, xml_encoding, xml_error)

RECORD_TAGS = ("MedlineCitation", "PubmedArticle", "PubmedBookArticle")


def _text(el) -> str | None:
    return clean_ws("".join(el.itertext())) if el is not None else None


def parse(path: str, data: bytes, source: str):
    """Generator over the file's records (papers and record rejects)."""
    if not data or data.isspace():
        raise BadRecord("empty file")
    stream = open_text_stream(path, data)  # binary content is named before lxml sees it
    head = stream.peek(4096)[:4096]
    start = starts_with(head, bom_encoding(head) or "utf-8")
    if not start:
        raise BadRecord("empty file")
    if not start.startswith("<"):
        raise BadRecord(f"not XML: the file starts with {start!r}")
    if xml_encoding(head) in ("utf-8", "utf8"):  # MEDLINE is UTF-8: a few bad bytes must not end the file
        stream = repaired = Utf8Repair(stream)
    else:
        repaired = None
    ctx = etree.iterparse(stream, events=("end",), tag=RECORD_TAGS, resolve_entities=False,
                          no_network=True, load_dtd=False, huge_tree=True)
    n = 0
    try:
        for _, el in ctx:
            parent = el.getparent()
            if el.tag == "MedlineCitation" and parent is not None and parent.tag in ("PubmedArticle",):
                continue  # read with its PubmedArticle (PubmedData holds the DOI)
            n += 1
            if el.tag == "PubmedBookArticle":
                yield reject(path, f"record {n}", "PubmedBookArticle (book record) is not a journal article", source)
            else:
                cit = el if el.tag == "MedlineCitation" else el.find("MedlineCitation")
                rec = _record(cit, el, path, source, n)
                yield rec
                if repaired is not None and repaired.replaced and rec[0] == PAPER and _holds_replacement(el):
                    yield warning(path, rec[1]["paper_id"], f"record {n:,}: bytes not valid UTF-8 replaced by "
                                                            f"U+FFFD (in the file: {repaired.note()})", source)
            # Free the finished record and everything before it (flat memory on big files).
            el.clear(keep_tail=False)
            while el.getprevious() is not None:
                del el.getparent()[0]
    except (EOFError, OSError) as e:
        raise BadRecord(f"truncated or corrupt gzip after {n} records: {e}") from None
    except etree.XMLSyntaxError as e:
        raise BadRecord(_syntax_reason(e, n)) from None
    if n == 0:
        raise BadRecord("no MedlineCitation records in file")


def _holds_replacement(el) -> bool:
    return any("\ufffd" in t for t in el.itertext()) or any("\ufffd" in v for x in el.iter() for v in x.attrib.values())


def _syntax_reason(e, n: int) -> str:
    """The cause of a stream parse error: truncated (the data ended inside an element), wrong
    encoding, or malformed markup; the records before it were kept."""
    msg = xml_error(e)
    low = msg.lower()
    if "premature end of data" in low or "end of data" in low or "endtag: '</' not found" in low:
        cause = "truncated XML"
    elif "encoding" in low or "labelled" in low or "not proper utf" in low:
        cause = "wrong encoding"
    elif n == 0 and ("document is empty" in low or "start tag expected" in low):
        cause = "not XML"
    else:
        cause = "malformed XML"
    return f"{cause} after {n} records: {msg}"


def _record(cit, wrapper, path: str, source: str, n: int):
    if cit is None:
        return reject(path, f"record {n}", "PubmedArticle without MedlineCitation", source)
    pmid = (cit.findtext("PMID") or "").strip()
    if not pmid.isdigit():
        title = _text(cit.find("Article/ArticleTitle"))
        rid = f"record {n}" + (f": {title[:80]}" if title else "")
        return reject(path, rid, "MEDLINE record without PMID", source)
    art = cit.find("Article")
    if art is None:
        return reject(path, f"pmid:{pmid}", "MEDLINE record without Article", source)
    title = _text(art.find("ArticleTitle")) or _text(art.find("VernacularTitle"))
    parts = []
    for at in art.findall("Abstract/AbstractText"):
        t = _text(at)
        if t:
            label = (at.get("Label") or "").strip()
            parts.append(f"{label}: {t}" if label else t)
    authors = []
    for a in art.findall("AuthorList/Author"):
        orcid = None
        for ident in a.findall("Identifier"):
            if (ident.get("Source") or "").upper() == "ORCID" and ident.text:
                orcid = ident.text
        family = _text(a.find("LastName")) or _text(a.find("CollectiveName"))
        if family:
            authors.append(author(family, _text(a.find("ForeName")) or _text(a.find("Initials")), orcid))
    pd = art.find("Journal/JournalIssue/PubDate")
    year = None
    if pd is not None:
        year = parse_year(pd.findtext("Year")) or parse_year(pd.findtext("MedlineDate"))
    year = year or parse_year(art.findtext("ArticleDate/Year"))
    venue = _text(art.find("Journal/Title")) or _text(cit.find("MedlineJournalInfo/MedlineTA"))
    mesh = []
    for mh in cit.findall("MeshHeadingList/MeshHeading"):
        d = mh.find("DescriptorName")
        if d is None:
            continue
        major = d.get("MajorTopicYN") == "Y" or any(q.get("MajorTopicYN") == "Y" for q in mh.findall("QualifierName"))
        mesh.append({"ui": d.get("UI"), "name": _text(d), "major": major, "tree_numbers": []})
    doi = None
    for eid in art.findall("ELocationID"):
        if eid.get("EIdType") == "doi":
            doi = norm_doi(eid.text)
            break
    if not doi and wrapper is not cit:
        for aid in wrapper.findall("PubmedData/ArticleIdList/ArticleId"):
            if aid.get("IdType") == "doi":
                doi = norm_doi(aid.text)
                break
    paper_id = f"pmid:{pmid}"
    alt_ids = sorted({paper_id} | ({f"doi:{doi}"} if doi else set()))
    return PAPER, {
        "paper_id": paper_id, "title": title, "abstract": clean_ws(" ".join(parts)), "authors": authors,
        "year": year, "venue": venue, "fields": mesh_fields(mesh),
        "keywords": keyword_list(_text(k) for k in cit.findall("KeywordList/Keyword")), "mesh": mesh, "source": source,
        "has_fulltext": False, "source_file": path, "ord": n, "title_norm": norm_title(title), "alt_ids": alt_ids}
