"""The JATS reader (importance.ingest.readers.jats) on an eLife article, a PMC nxml and hand-made cases."""
import gzip
from collections import Counter

from lxml import etree

from importance.ingest.readers import parse_file
from importance.ingest.headings import class_from_sec_type


ELIFE = "sample/elife/elife00007.xml.gz"


def test_jats_elife_article(repo_root, of_kind):
    path = repo_root / ELIFE
    recs = list(parse_file("jats", "elife", str(path), path.read_bytes()))
    paper = of_kind(recs, "paper")[0]
    assert paper["paper_id"] == "doi:10.7554/elife.00007"
    assert paper["year"] == 2012 and paper["venue"] == "eLife"
    assert paper["fields"] == ["Genomics and evolutionary biology", "Plant biology"]
    assert [a["family"] for a in paper["authors"]] == ["Schuman", "Barthel", "Baldwin"]
    assert "DOI:" not in paper["abstract"] and paper["abstract"].startswith("From an herbivore")
    # Independent count with lxml: refs and bibr xref ids per top-level section class.
    root = etree.fromstring(gzip.decompress(path.read_bytes()))
    refs = root.findall("back/ref-list/ref")
    assert len(of_kind(recs, "ref")) == len(refs) > 40
    expected = Counter()
    for sec in root.find("body").findall("sec"):
        n = sum(len(x.get("rid").split()) for x in sec.iter("xref") if x.get("ref-type") == "bibr")
        expected[class_from_sec_type(sec.get("sec-type")) or "O"] += n
    got = Counter(m["section_class"] for m in of_kind(recs, "mention"))
    assert got == +expected and got["I"] > 0 and got["R"] > 0 and got["D"] > 0
    byref = {r["ref_key"]: r for r in of_kind(recs, "ref")}
    assert byref["bib1"]["doi"] == "10.1111/j.1469-8137.2009.03046.x" and byref["bib1"]["year"] == 2009


def test_jats_multi_rid_and_untitled_intro(of_kind):
    xml = b"""<article><front><article-meta><article-id pub-id-type="pmid">42</article-id>
    <title-group><article-title>T</article-title></title-group></article-meta></front>
    <body><p>Intro text <xref ref-type="bibr" rid="r1 r2">1,2</xref></p>
    <sec><title>2. Methods</title><sec><title>Sub</title><p><xref ref-type="bibr" rid="r2">2</xref></p></sec></sec>
    <sec><title>Results and Discussion</title><p><xref ref-type="bibr" rid="r1">1</xref></p></sec></body>
    <back><ref-list><ref id="r1"><element-citation><article-title>A</article-title><year>2001</year>
    <pub-id pub-id-type="pmid">7</pub-id></element-citation></ref>
    <ref id="r2"><mixed-citation>no title</mixed-citation></ref></ref-list></back></article>"""
    recs = list(parse_file("jats", "pmc", "x.nxml", xml))
    assert of_kind(recs, "paper")[0]["paper_id"] == "pmid:42"
    ments = [(m["ref_key"], m["section_class"], m["position"]) for m in of_kind(recs, "mention")]
    assert ments == [("r1", "I", 0), ("r2", "I", 0), ("r2", "M", 1), ("r1", "R", 2)]
    assert of_kind(recs, "ref")[0]["pmid"] == "7"


def test_pmc_nxml_untitled_intro_and_nested_sections(parse_data, of_kind, test_data):
    recs = parse_data("jats", "ehp-116-1694.nxml", "pmc")
    (p,) = of_kind(recs, "paper")
    assert p["paper_id"] == "doi:10.1289/ehp.11570" and p["year"] == 2008
    root = etree.parse(str(test_data / "ehp-116-1694.nxml")).getroot()
    body = root.find("body")
    n_xref = sum(len(x.get("rid").split()) for x in body.iter("xref") if x.get("ref-type") == "bibr")
    ments = of_kind(recs, "mention")
    assert len(ments) == n_xref and len(of_kind(recs, "ref")) == len(root.findall(".//ref-list/ref"))
    loose = sum(len(x.get("rid").split()) for c in body if c.tag != "sec"
                for x in c.iter("xref") if x.get("ref-type") == "bibr")
    assert loose > 0 and Counter((m["section_title"], m["section_class"]) for m in ments)[(None, "I")] == loose
    # Untitled nested and top-level sections.
    xml = b"""<article><front><article-meta><article-id pub-id-type="pmc">PMC99</article-id></article-meta></front>
    <body><sec><p><xref ref-type="bibr" rid="a">1</xref></p></sec>
    <sec sec-type="methods"><title>Methods</title><sec><p><xref ref-type="bibr" rid="b">2</xref></p></sec></sec>
    <sec><p><xref ref-type="bibr" rid="a">1</xref></p></sec></body></article>"""
    recs = list(parse_file("jats", "pmc", "u.nxml", xml))
    assert of_kind(recs, "paper")[0]["paper_id"] == "pmc:99"
    assert [(m["ref_key"], m["section_class"], m["position"]) for m in of_kind(recs, "mention")] == [
        ("a", "I", 0), ("b", "M", 1), ("a", "O", 2)]


def test_jats_fields_are_subjects_never_article_types(repo_root, parse_data, of_kind):
    """PMC puts the article type in subj-group-type="heading" ("Research Article", "Original
    Articles"); eLife puts its subject areas there and the type in "display-channel"."""
    fields = {name: of_kind(parse_data("jats", name, "pmc"), "paper")[0]["fields"] for name in
              ("1471-2180-11-174.nxml.gz", "mds526.nxml.gz", "pntd.0002065.nxml.gz", "ehp-116-1694.nxml")}
    assert fields == {"1471-2180-11-174.nxml.gz": [],                       # heading "Research Article" only
                      "mds526.nxml.gz": ["Cancer Prevention"],             # under heading "Original Articles"
                      "pntd.0002065.nxml.gz": ["Veterinary Science"],      # Discipline-v2 top level
                      "ehp-116-1694.nxml": []}                              # heading "Research"
    # Every eLife sample article: its heading subjects, read here with lxml; never a display channel.
    channels = set()
    for path in sorted((repo_root / "sample/elife").glob("*.xml.gz")):
        root = etree.fromstring(gzip.decompress(path.read_bytes()))
        cats = root.find("front/article-meta/article-categories")
        typed = [((g.get("subj-group-type") or ""), s.text.strip()) for g in cats.iter("subj-group")
                 for s in g.findall("subject")]
        heading = [s for t, s in typed if t == "heading"]
        channels |= {s for t, s in typed if "display-channel" in t}
        (p,) = of_kind(list(parse_file("jats", "elife", str(path), path.read_bytes())), "paper")
        assert p["fields"] == list(dict.fromkeys(heading)), path.name
    assert "Research article" in channels and not channels & {f for fs in fields.values() for f in fs}
    # Hand-made: PLOS's flat Discipline list with "A/B" paths; a "subject" group; a type heading.
    xml = b"""<article><front><article-meta><article-id pub-id-type="pmid">9</article-id><article-categories>
    <subj-group subj-group-type="heading"><subject>Letter to the Editor</subject></subj-group>
    <subj-group subj-group-type="Discipline"><subject>Evolutionary Biology</subject>
    <subject>Computational Biology/Systems Biology</subject>
    <subject>Evolutionary Biology/Genomics</subject></subj-group>
    <subj-group subj-group-type="subject"><subject>Ecology</subject></subj-group>
    <subj-group subj-group-type="heading"><subject>Clinical Oncology</subject></subj-group>
    </article-categories></article-meta></front></article>"""
    (p,) = of_kind(list(parse_file("jats", "pmc", "h.nxml", xml)), "paper")
    assert p["fields"] == ["Evolutionary Biology", "Computational Biology", "Ecology", "Clinical Oncology"]


def test_pmc_text_only_mixed_citations_are_raw_strings(parse_data, of_kind):
    # pntd.0002065 mixes text-only mixed-citations (PLOS style) with tagged ones
    refs = of_kind(parse_data("jats", "pntd.0002065.nxml.gz", "pmc"), "ref")
    assert all(r["raw"] for r in refs)  # every mixed-citation keeps its text as written
    text_only = next(r for r in refs if r["raw"].startswith("Murphy FA, Gibbs EPJ"))
    assert (text_only["title"], text_only["year"]) == ("Veterinary Virology", 1999)
    assert [a["family"] for a in text_only["authors"]] == ["Murphy", "Gibbs", "Horzinek", "Studdert"]
    assert text_only["title_norm"] == "veterinary virology"
    chapter = next(r for r in refs if r["raw"].startswith("Swanepoel R, Coetzer JAW"))
    assert (chapter["title"], chapter["year"]) == ("Rift Valley fever", 2004)
    tagged = next(r for r in refs if r["raw"].startswith("RichKM"))  # tagged parts win over the text
    assert tagged["title"].startswith("An assessment of the regional and national socio-economic impacts")
    assert [a["family"] for a in tagged["authors"]] == ["Rich", "Wanyoike"] and tagged["year"] == 2010
