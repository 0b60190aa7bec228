"""papers.keywords (METHODS.md §5.7): author keywords from JATS kwd-groups (eLife's research-organism
group left out), MEDLINE XML KeywordList and MEDLINE text OT lines; an empty list for the formats
without keywords."""
import gzip
import re

from lxml import etree

from importance.ingest.readers import parse_file
from importance.ingest.readers.common import keyword_list


def _paper(of_kind, fmt, path, source="x"):
    (p,) = of_kind(list(parse_file(fmt, source, str(path), path.read_bytes())), "paper")
    return p


def test_keyword_list_normalises_and_dedups_case_insensitively():
    assert keyword_list([" Cell  biology\n", "cell biology", None, "", "  ", "CRISPR", "crispr", "Mouse"]) == [
        "Cell biology", "CRISPR", "Mouse"]


def test_jats_elife_author_keywords_without_research_organisms(repo_root, of_kind):
    # elife01939: <kwd><italic>Nematostella vectensis</italic></kwd> flattened; its research-organism
    # group (<italic>D. melanogaster</italic>, other) left out, as is each group's <title>.
    p = _paper(of_kind, "jats", repo_root / "sample/elife/elife01939.xml.gz", "elife")
    assert p["keywords"] == ["Hox", "TALE", "evolution", "network", "transcription factors", "Nematostella vectensis"]
    p = _paper(of_kind, "jats", repo_root / "sample/elife/elife00011.xml.gz", "elife")
    assert p["keywords"] == ["Circadian rhythms", "transcription", "nascent RNA", "high-throughput sequencing",
                             "RNA processing", "post-transcriptional regulation"]   # organism: Mouse
    # Every eLife sample article: its author-keywords group read here with lxml, never an organism
    # that is not also an author keyword.
    organisms = set()
    for path in sorted((repo_root / "sample/elife").glob("*.xml.gz")):
        meta = etree.fromstring(gzip.decompress(path.read_bytes())).find("front/article-meta")
        groups = {g.get("kwd-group-type"): [" ".join("".join(k.itertext()).split()) for k in g.findall("kwd")]
                  for g in meta.findall("kwd-group")}
        p = _paper(of_kind, "jats", path, "elife")
        assert p["keywords"] == groups["author-keywords"], path.name
        organisms |= set(groups["research-organism"]) - set(groups["author-keywords"])
    assert {"Mouse", "Human", "Other"} <= organisms and not organisms & {
        k for path in (repo_root / "sample/elife").glob("elife0000*.xml.gz")
        for k in _paper(of_kind, "jats", path, "elife")["keywords"]}


def test_jats_pmc_keywords(parse_data, of_kind):
    """PMC files: untyped kwd-groups are author keywords; files without a kwd-group get []."""
    kw = {name: of_kind(parse_data("jats", name, "pmc"), "paper")[0]["keywords"] for name in
          ("1471-2180-11-174.nxml.gz", "mds526.nxml.gz", "pntd.0002065.nxml.gz", "ehp-116-1694.nxml")}
    assert kw == {
        "1471-2180-11-174.nxml.gz": [],
        "mds526.nxml.gz": ["cancer", "demographic", "diagnosis", "inequalities", "socio-economic", "stage"],
        "pntd.0002065.nxml.gz": [],
        "ehp-116-1694.nxml": ["basic transcription element-binding protein", "brain", "endocrine disruption",
                              "PBDE-47", "polybrominated diphenyl ethers", "thyroid hormone",
                              "thyroid hormone receptor", "thyroid-stimulating hormone", "thyrotropin"]}


def test_jats_keyword_groups_types_languages_and_markup(of_kind):
    xml = """<article xml:lang="en"><front><article-meta><article-id pub-id-type="pmid">9</article-id>
    <kwd-group kwd-group-type="author-keywords"><title>Author keywords</title><kwd>Cell
       <italic>biology</italic></kwd><kwd>  </kwd><kwd>CRISPR</kwd></kwd-group>
    <kwd-group kwd-group-type="research-organism"><kwd>Mouse</kwd></kwd-group>
    <kwd-group kwd-group-type="abbreviations"><kwd>PCR</kwd></kwd-group>
    <kwd-group><kwd>cell biology</kwd><kwd>Zebrafish</kwd></kwd-group>
    <kwd-group kwd-group-type="author" xml:lang="en-GB"><kwd>Tumour</kwd></kwd-group>
    <kwd-group xml:lang="pt"><kwd>biologia celular</kwd></kwd-group>
    </article-meta></front>
    <sub-article><front-stub><kwd-group><kwd>decision letter</kwd></kwd-group></front-stub></sub-article>
    </article>""".encode()
    p = _paper(of_kind, "jats", _Bytes("k.nxml", xml))
    assert p["keywords"] == ["Cell biology", "CRISPR", "Zebrafish", "Tumour"]
    # A Portuguese article: a group without xml:lang is in the article's language, the en-GB one is
    # left out; no kwd-group at all: [].
    pt = xml.replace(b'xml:lang="en"', b'xml:lang="pt"', 1)
    assert _paper(of_kind, "jats", _Bytes("k.nxml", pt))["keywords"] == ["Cell biology", "CRISPR", "Zebrafish",
                                                                         "biologia celular"]
    bare = re.sub(rb"<kwd-group.*?</kwd-group>", b"", xml, flags=re.S)
    assert _paper(of_kind, "jats", _Bytes("k.nxml", bare))["keywords"] == []


def test_medline_xml_keyword_lists(parse_data, of_kind):
    papers = {p["paper_id"]: p["keywords"] for p in of_kind(parse_data("medline_xml", "test_current_medline.xml.gz"),
                                                              "paper")}
    assert papers == {"pmid:36400559": ["Back pain", "Diagnosis", "Management", "Outpatient"],
                      "pmid:2930949": [], "pmid:11446611": [], "pmid:28786991": []}
    assert of_kind(parse_data("medline_xml", "pubmed-29768149.xml"), "paper")[0]["keywords"] == []
    xml = b"""<PubmedArticleSet><PubmedArticle><MedlineCitation><PMID>5</PMID><Article><ArticleTitle>T</ArticleTitle>
    </Article><KeywordList Owner="NOTNLM"><Keyword MajorTopicYN="N">Gut <i>microbiota</i></Keyword>
    <Keyword MajorTopicYN="N">obesity</Keyword></KeywordList><KeywordList Owner="NLM">
    <Keyword MajorTopicYN="N">Obesity</Keyword><Keyword MajorTopicYN="Y">Space Flight</Keyword></KeywordList>
    </MedlineCitation></PubmedArticle></PubmedArticleSet>"""
    assert _paper(of_kind, "medline_xml", _Bytes("k.xml", xml))["keywords"] == ["Gut microbiota", "obesity",
                                                                                 "Space Flight"]


def test_medline_text_ot_lines(parse_data, of_kind, test_data):
    text = (test_data / "mesh-papers-10.medline.txt").read_text()
    papers = of_kind(parse_data("medline_text", "mesh-papers-10.medline.txt"), "paper")
    for block, p in zip(re.split(r"\n\s*\n", text.strip()), papers):
        assert p["keywords"] == re.findall(r"^OT  - (.*)$", block, re.M), p["paper_id"]
    lbd = next(p for p in papers if p["paper_id"] == "pmid:27435341")
    assert lbd["keywords"] == ["Complex networks", "link prediction", "literature-based discovery",
                               "network analysis"]
    assert sum(bool(p["keywords"]) for p in papers) == 3
    recs = parse_file("medline_text", "m", "m.txt", b"PMID- 7\nTI  - T\nOTO - NOTNLM\nOT  - gene\n      therapy\n"
                      b"OT  - Gene Therapy\nOT  - CAR-T\n\nPMID- 8\nTI  - U\n")
    assert [d["keywords"] for _, d in recs] == [["gene therapy", "CAR-T"], []]


def test_formats_without_keywords_give_empty_lists(repo_root, test_data, of_kind, parse_data, clscisumm):
    """Like `fields`, a list on every row: [] where the format has no keywords (never null)."""
    sc = repo_root / "sample/scisummnet/A94-1006/A94-1006.xml.gz"
    csv = repo_root / "sample/pubmed/dev-data-small.csv.gz"
    ref = clscisumm.root / clscisumm.reference / "Reference_XML" / f"{clscisumm.reference}.xml"
    papers = (of_kind(parse_data("s2orc", "unarxive-4.jsonl"), "paper")
              + of_kind(list(parse_file("pubmed_csv", "pubmed", str(csv), csv.read_bytes())), "paper")
              + [_paper(of_kind, "scisummnet", sc), _paper(of_kind, "clscisumm", ref)])
    assert len(papers) > 10 and all(p["keywords"] == [] for p in papers)


class _Bytes:
    """A hand-made file for _paper: a name and its bytes."""

    def __init__(self, name: str, data: bytes):
        self.name, self.data = name, data

    def __str__(self):
        return self.name

    def read_bytes(self):
        return self.data
