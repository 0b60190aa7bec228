"""Input roles (train, map, train+map) and the cited-only rule: a "map" input's papers and
reference lists without their bodies, a "train" input's papers off the map, and cited-only papers
mapped by how many mapped corpus papers cite them."""
import argparse
import json
from collections import Counter

import pyarrow.parquet as pq
import pytest

from importance.ingest import sections
from importance.ingest.job import IngestConfig, input_role, parse_input, run_ingest
from importance.ingest.readers import clscisumm, jats, parse_file_accounted, s2orc, scisummnet
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError


@pytest.fixture
def classify_calls(monkeypatch):
    """Every call of the section classifier, wherever a reader reaches it (a counting spy around
    the real function)."""
    calls = []
    real = sections.classify_sections

    def spy(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    for module in (sections, jats, s2orc, scisummnet):
        monkeypatch.setattr(module, "classify_sections", spy)
    return calls


def _records(fmt, source, files, bodies):
    out = []
    for path in files:
        out += parse_file_accounted(fmt, source, str(path), path.read_bytes(), bodies=bodies)
    return out


def _by_kind(records):
    return Counter(kind for kind, _ in records)


@pytest.mark.parametrize("fmt, files", [
    ("jats", lambda root: sorted((root / "sample" / "elife").glob("*.xml.gz"))[:6]),
    ("unarxive", lambda root: [root / "tests" / "data" / "unarxive-4.jsonl"]),
    ("scisummnet", lambda root: sorted((root / "sample" / "scisummnet").glob("A*/*.gz"))[:6]),
    ("clscisumm", lambda root: sorted((root / "tests" / "data" / "clscisumm").glob("*/*_XML/*.xml"))),
])
def test_map_role_reads_no_bodies(repo_root, classify_calls, fmt, files):
    paths = files(repo_root)
    assert paths
    train = _records(fmt, fmt, paths, bodies=True)
    assert classify_calls, "the spy must see the train role's section classification"
    classify_calls.clear()
    mapped = _records(fmt, fmt, paths, bodies=False)
    assert classify_calls == []
    kinds = _by_kind(mapped)
    assert kinds["mention"] == kinds["sentence"] == 0 and kinds["reject"] == _by_kind(train)["reject"]
    assert _by_kind(train)["mention"] + _by_kind(train)["sentence"] > 0
    strip = lambda recs: [{k: v for k, v in r.items() if k != "has_fulltext"}  # noqa: E731
                          for kind, r in recs if kind == "paper"]
    assert strip(mapped) == strip(train) and strip(mapped)
    assert all(r["has_fulltext"] is False for kind, r in mapped if kind == "paper")
    assert [r for kind, r in mapped if kind == "ref"] == [r for kind, r in train if kind == "ref"]
    # citances are the citation links of ScisummNet and CL-SciSumm: read in both roles
    assert kinds["citance"] == _by_kind(train)["citance"]
    assert [r for kind, r in mapped if kind == "file"] == [r for kind, r in train if kind == "file"]


def test_map_role_never_touches_a_body(repo_root, monkeypatch):
    """The body walkers themselves are not reached (not only the classifier)."""
    def boom(*_):
        raise AssertionError("a body was read")

    monkeypatch.setattr(jats, "top_blocks", boom)
    monkeypatch.setattr(s2orc, "top_sections", boom)
    monkeypatch.setattr(scisummnet, "section_sentences", boom)
    monkeypatch.setattr(clscisumm, "section_sentences", boom)
    elife = sorted((repo_root / "sample" / "elife").glob("*.xml.gz"))[:3]
    recs = _records("jats", "elife", elife, bodies=False)
    recs += _records("unarxive", "ux", [repo_root / "tests" / "data" / "unarxive-4.jsonl"], bodies=False)
    assert _by_kind(recs)["paper"] == 7 and _by_kind(recs)["reject"] == 0


def test_role_spelling_and_errors(tmp_path):
    assert parse_input("sample/elife:jats:elife") == {"path": "sample/elife", "format": "jats", "source": "elife"}
    assert parse_input("sample/pubmed:pubmed_csv:pubmed:map")["role"] == "map"
    assert parse_input("a:b/elife:jats:elife:train+map") == {"path": "a:b/elife", "format": "jats",
                                                             "source": "elife", "role": "train+map"}
    assert parse_input("a:b/elife:jats:elife")["path"] == "a:b/elife"  # a ':' in the path, no role
    with pytest.raises(argparse.ArgumentTypeError, match="has role 'mapp'; set role to one of: train, map, train"):
        parse_input("sample/elife:jats:elife:mapp")
    assert input_role({"path": "x"}) == "train+map"
    with pytest.raises(UserError) as e:
        input_role({"path": "sample/elife", "role": ["train", "map"]})
    assert str(e.value).count(". ") == 0 and "sample/elife" in str(e.value)
    cfg = IngestConfig(inputs=[{"path": str(tmp_path), "format": "jats", "source": "x", "role": "embed"}])
    with pytest.raises(UserError, match="role 'embed'"):  # before Spark starts
        run_ingest(cfg, RunLayout(tmp_path / "run"))
    cfg = IngestConfig(inputs=[{"path": str(tmp_path), "format": "jats", "source": "x"}], cited_only_min_citations=-1)
    with pytest.raises(UserError, match="cited_only_min_citations is -1"):
        run_ingest(cfg, RunLayout(tmp_path / "run"))


def _unarxive_doc(arxiv: str, title: str, refs: dict) -> dict:
    return {"paper_id": arxiv, "metadata": {"id": arxiv, "title": title, "categories": "cs.LG"},
            "abstract": {"text": f"Abstract of {title}."},
            "bib_entries": {k: {"bib_entry_raw": raw, "ids": {}} for k, raw in refs.items()},
            "body_text": [{"section": "Introduction", "sec_number": "1", "sec_type": "section", "text": "x",
                           "cite_spans": [{"ref_id": k} for k in refs]}]}


SHARED = "Shared, R. A paper two corpus papers cite. Journal of Tests, 2019."
ALONE = "Alone, B. A paper one corpus paper cites. Journal of Tests, 2018."


def test_spark_mixed_roles_and_the_cited_only_rule(spark, repo_root, tmp_path):
    """Train-only eLife, map-only unArXive and PubMed in one run, cited-only papers mapped from 2
    mapped citing papers: every count adds up, map papers cite in no pair."""
    from importance.features import build_pairs

    ux = tmp_path / "ux"
    ux.mkdir()
    docs = [_unarxive_doc("2301.00001", "First map paper", {"a": SHARED, "b": ALONE}),
            _unarxive_doc("2301.00002", "Second map paper", {"a": SHARED})]
    (ux / "a.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    elife = tmp_path / "elife"
    elife.mkdir()
    for p in sorted((repo_root / "sample" / "elife").glob("*.xml.gz"))[:8]:
        (elife / p.name).write_bytes(p.read_bytes())
    # the same article in a map input too: its full-text row is kept, and it is mapped
    twin = tmp_path / "twin"
    twin.mkdir()
    first = sorted(elife.iterdir())[0]
    (twin / "twin.xml.gz").write_bytes(first.read_bytes())
    cfg = IngestConfig(inputs=[
        {"path": str(elife), "format": "jats", "source": "elife", "role": "train"},
        {"path": str(twin), "format": "jats", "source": "twin", "role": "map"},
        {"path": str(ux), "format": "unarxive", "source": "unarxive", "role": "map"},
        {"path": str(repo_root / "sample" / "pubmed" / "dev-data-small.csv.gz"), "format": "pubmed_csv",
         "source": "pubmed", "role": "map"},
    ], cited_only_min_citations=2, shuffle_partitions=4, output_partitions=1)
    layout = RunLayout(tmp_path / "run")
    s = run_ingest(cfg, layout, spark=spark)
    per = s["per_source"]
    assert s["check_input_equals_papers_plus_rejects"] and s["check_files_found_equals_accounted"]
    assert {k: per[k]["role"] for k in per} == {"elife": "train", "twin": "map", "unarxive": "map", "pubmed": "map"}
    assert per["twin"]["input_records"] == per["twin"]["record_rejects"] == 1 and per["twin"]["papers_corpus"] == 0
    papers = pq.read_table(layout.table("papers")).to_pandas().set_index("paper_id")
    refs = pq.read_table(layout.table("references")).to_pandas()
    ments = pq.read_table(layout.table("mentions")).to_pandas()

    corpus = papers[papers.source_file.notna()]
    el = corpus[corpus.source == "elife"]
    assert len(el) == 8 and el.has_fulltext.all() and el.mapped.sum() == 1
    assert el.mapped[el.source_file.str.endswith(first.name)].all()
    assert per["elife"]["papers_fulltext"] == 8 and per["elife"]["papers_mapped"] == 1
    mp = corpus[corpus.source != "elife"]
    assert len(mp) == per["unarxive"]["papers_corpus"] + per["pubmed"]["papers_corpus"] and len(mp) > 2
    assert not mp.has_fulltext.any() and mp.mapped.all()
    assert per["unarxive"]["papers_mapped"] == 2 and per["unarxive"]["mentions"] == 0
    assert set(ments.citing_id) <= set(el.index) and len(ments) == per["elife"]["mentions"] > 0
    assert (refs.citing_id.str.startswith("arxiv:")).sum() == 3 == per["unarxive"]["references"]

    # cited-only: SHARED (2 mapped citing papers) mapped; ALONE (1) left out, its reference kept;
    # eLife's (only train citing papers) kept unmapped, as triplet positives
    ux_refs = refs[refs.citing_id.str.startswith("arxiv:")].set_index(["citing_id", "ref_key"]).cited_id
    shared, alone = ux_refs[("arxiv:2301.00001", "a")], ux_refs[("arxiv:2301.00001", "b")]
    assert ux_refs[("arxiv:2301.00002", "a")] == shared and papers.loc[shared, "mapped"]
    assert alone not in papers.index
    assert per["unarxive"]["cited_only_mapped"] == 1 and per["unarxive"]["cited_only_left_out"] == 1
    assert per["elife"]["cited_only_not_mapped"] > 0 and per["elife"]["cited_only_mapped"] == 0
    title_only = papers[papers.source_file.isna()]
    assert not title_only.mapped[title_only.source == "elife"].any()
    totals = s["cited_only"]
    assert totals["all"] == totals["mapped"] + totals["not_mapped"] + totals["left_out"]
    assert len(title_only) == totals["mapped"] + totals["not_mapped"]
    assert totals["left_out"] == 1 and len(set(refs.cited_id) - set(papers.index)) >= 1
    for src, d in per.items():
        assert d["check_title_only_equals_cited_only_kept"], src

    # importance pairs: only the full-text (train) papers cite
    read = lambda name: spark.read.parquet(str(layout.table(name)))  # noqa: E731
    pairs = build_pairs(read("papers"), read("references"), read("mentions")).toPandas()
    assert len(pairs) > 0 and set(pairs.citing_id) <= set(el.index)


def test_spark_default_roles_map_everything(spark, repo_root, tmp_path):
    """No role = train+map: full text, mapped, and every cited-only paper mapped (today's rule)."""
    ux = tmp_path / "ux"
    ux.mkdir()
    (ux / "a.jsonl").write_text(json.dumps(_unarxive_doc("2301.00001", "A paper", {"a": SHARED, "b": ALONE})) + "\n")
    s = run_ingest(IngestConfig(inputs=[{"path": str(ux), "format": "unarxive", "source": "ux"}],
                                shuffle_partitions=4, output_partitions=1), RunLayout(tmp_path / "run"), spark=spark)
    papers = pq.read_table(RunLayout(tmp_path / "run").table("papers")).to_pandas()
    assert papers.mapped.all() and len(papers) == 3 and papers.has_fulltext.sum() == 1
    assert s["per_source"]["ux"]["role"] == "train+map" and s["cited_only"] == {
        "all": 2, "mapped": 2, "not_mapped": 0, "left_out": 0}
