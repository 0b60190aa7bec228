"""The PubMed CSV reader (importance.ingest.readers.pubmed_csv)."""
from importance.ingest.readers import parse_file


def test_pubmed_csv(repo_root, of_kind):
    path = repo_root / "sample/pubmed/dev-data-small.csv.gz"
    recs = list(parse_file("pubmed_csv", "pubmed", str(path), path.read_bytes()))
    papers = of_kind(recs, "paper")
    assert len(papers) == 200 and not of_kind(recs, "reject")
    p = papers[0]
    assert p["paper_id"] == "pmid:31594900" and p["has_fulltext"] is False
    assert p["mesh"][0] == {"ui": None, "name": "Africa South of the Sahara", "major": False, "tree_numbers": ["Z01.058.290"]}
    # No major flags in the file: all descriptors, from their tree numbers; Africa South of the
    # Sahara (Z), Female (no tree number), Humans and Pregnancy (check tags) give none.
    assert p["fields"] == ["Health Services Administration", "Health Care Quality, Access, and Evaluation",
                           "Health Care Economics and Organizations", "Behavior and Behavior Mechanisms",
                           "Therapeutics", "Health Care Facilities, Manpower, and Services", "Social Sciences",
                           "Population Characteristics"]
    # The file's meshroot column (tree letters such as "Health Care [N]") is not a field.
    assert all(q["fields"] for q in papers) and not any("[" in f for q in papers for f in q["fields"])
    assert [m["tree_numbers"] for m in p["mesh"][1:3]] == [[], ["N04.590.374.350", "N05.300.430"]]
    bad = b"Title,abstractText,meshMajor,pmid,meshid,meshroot\nT,A,['x'],,[],[]\nT2,A2,[oops,5,[],[]\n"
    recs = list(parse_file("pubmed_csv", "pubmed", "b.csv", bad))
    assert sorted(d["reason"].split(":")[0] for _, d in recs) == ["malformed list column", "row without a numeric pmid"]
