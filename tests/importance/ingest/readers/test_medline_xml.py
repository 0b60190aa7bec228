"""The MEDLINE/PubMed XML reader (importance.ingest.readers.medline_xml)."""
import gzip
import re

from lxml import etree

from importance.ingest.readers import parse_file


def test_medline_xml_efetch_file(parse_data, of_kind, test_data):
    recs = parse_data("medline_xml", "pubmed-29768149.xml", "medline")
    (p,) = of_kind(recs, "paper")
    assert p["paper_id"] == "pmid:29768149" and "doi:10.1056/nejmoa1715274" in p["alt_ids"]
    assert p["title"] == "Inhaled Combined Budesonide-Formoterol as Needed in Mild Asthma."
    assert p["year"] == 2018 and p["venue"] == "The New England journal of medicine"
    assert p["abstract"].startswith("BACKGROUND: In patients with mild asthma") and "RESULTS: " in p["abstract"]
    assert p["authors"][0] == {"family": "O'Byrne", "given": "Paul M", "orcid": None}
    # Independent reading of the raw XML: UI, name, major (descriptor or any qualifier).
    root = etree.parse(str(test_data / "pubmed-29768149.xml")).getroot()
    expected = []
    for mh in root.iter("MeshHeading"):
        d = mh.find("DescriptorName")
        flags = [d.get("MajorTopicYN")] + [q.get("MajorTopicYN") for q in mh.findall("QualifierName")]
        expected.append({"ui": d.get("UI"), "name": d.text, "major": "Y" in flags, "tree_numbers": []})
    assert p["mesh"] == expected and len(expected) == 23
    assert {m["name"] for m in p["mesh"] if m["major"]} >= {"Asthma", "Budesonide", "Terbutaline"}
    # fields: MeSH categories of the major descriptors (Asthma C08+C20, Bronchodilator Agents D27,
    # Budesonide D04, Formoterol Fumarate and Terbutaline D02), in order, each once.
    assert p["fields"] == ["Respiratory Tract Diseases", "Immune System Diseases", "Chemical Actions and Uses",
                           "Polycyclic Compounds", "Organic Chemicals"]


def test_medline_xml_current_format_and_bad_records(parse_data, of_kind, test_data):
    recs = parse_data("medline_xml", "test_current_medline.xml.gz", "medline")
    papers = of_kind(recs, "paper")
    raw = gzip.decompress((test_data / "test_current_medline.xml.gz").read_bytes())
    pmids = re.findall(rb"<MedlineCitation[^>]*>\s*<PMID[^>]*>(\d+)<", raw)
    assert [p["paper_id"] for p in papers] == ["pmid:" + x.decode() for x in pmids] and len(papers) == 4
    back = next(p for p in papers if p["paper_id"] == "pmid:2930949")
    # Back Pain is major only through its qualifier "physiopathology" (MajorTopicYN="Y").
    assert [m["name"] for m in back["mesh"] if m["major"]] == ["Back Pain"]
    assert back["fields"] == ["Nervous System Diseases", "Pathological Conditions, Signs and Symptoms"]
    # Major "Emigrants and Immigrants" is M01 Persons (whom, not what): only Tuberculosis counts.
    tb = next(p for p in papers if p["paper_id"] == "pmid:28786991")
    assert {m["name"] for m in tb["mesh"] if m["major"]} == {"Emigrants and Immigrants", "Tuberculosis"}
    assert tb["fields"] == ["Bacterial Infections and Mycoses"]
    assert back["year"] == 1985 and back["authors"] == [{"family": "Reuler", "given": "J B", "orcid": None}]
    # A record without PMID is rejected, the other kept; ORCID and MedlineDate are read.
    xml = b"""<PubmedArticleSet><PubmedArticle><MedlineCitation><Article><ArticleTitle>No id</ArticleTitle>
    </Article></MedlineCitation></PubmedArticle><PubmedArticle><MedlineCitation><PMID>5</PMID><Article>
    <Journal><JournalIssue><PubDate><MedlineDate>1998 Dec-1999 Jan</MedlineDate></PubDate></JournalIssue>
    <Title>J</Title></Journal><ArticleTitle>T</ArticleTitle><AuthorList><Author><LastName>Doe</LastName>
    <Initials>J</Initials><Identifier Source="ORCID">https://orcid.org/0000-0001-2345-6789</Identifier>
    </Author></AuthorList></Article></MedlineCitation></PubmedArticle></PubmedArticleSet>"""
    recs = list(parse_file("medline_xml", "medline", "m.xml", xml))
    assert [k for k, _ in recs] == ["reject", "paper"]
    assert recs[0][1]["reason"] == "MEDLINE record without PMID" and "No id" in recs[0][1]["record_id"]
    assert recs[1][1]["year"] == 1998
    assert recs[1][1]["authors"] == [{"family": "Doe", "given": "J", "orcid": "0000-0001-2345-6789"}]
    trunc = list(parse_file("medline_xml", "medline", "t.xml", raw[: len(raw) * 3 // 4]))
    assert [k for k, _ in trunc][-1] == "reject" and "truncated XML after" in trunc[-1][1]["reason"]


def test_medline_xml_fields_fallback_and_non_subjects(of_kind):
    """No major descriptor with a subject category -> the categories of all descriptors; check
    tags (even flagged major), V (Publication Characteristics) and Z (Geographicals) never count."""
    def rec(pmid, headings):
        mh = "".join(f'<MeshHeading><DescriptorName UI="{ui}" MajorTopicYN="{yn}">{name}</DescriptorName>{q}'
                     f"</MeshHeading>" for ui, name, yn, q in headings)
        return (f"<MedlineCitation><PMID>{pmid}</PMID><Article><ArticleTitle>T</ArticleTitle></Article>"
                f"<MeshHeadingList>{mh}</MeshHeadingList></MedlineCitation>")
    major_q = '<QualifierName UI="Q000473" MajorTopicYN="Y">pathology</QualifierName>'
    xml = ("<MedlineCitationSet>"
           + rec(1, [("D006801", "Humans", "Y", ""), ("D000068397", "Clinical Study", "Y", ""),
                     ("D014481", "United States", "Y", ""), ("D008168", "Lung", "N", ""),
                     ("D009369", "Neoplasms", "N", "")])
           + rec(2, [("D008168", "Lung", "N", ""), ("D009369", "Neoplasms", "N", major_q)])
           + rec(3, [("D006801", "Humans", "N", ""), ("D005260", "Female", "N", "")])
           + "<MedlineCitation><PMID>4</PMID><Article><ArticleTitle>No MeSH</ArticleTitle></Article></MedlineCitation>"
           + "</MedlineCitationSet>").encode()
    papers = of_kind(list(parse_file("medline_xml", "medline", "f.xml", xml)), "paper")
    assert [p["fields"] for p in papers] == [["Respiratory System", "Neoplasms"], ["Neoplasms"], [], []]
