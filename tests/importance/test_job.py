"""Ingest + importance on a small real subset with planted bad inputs (one run, several checks)."""
import gzip
import shutil

import pyarrow.parquet as pq
import pytest

from sciencemap.layout import RunLayout
from importance.ingest.job import DUPLICATE_CITANCE_REASON, IngestConfig, run_ingest
from importance.job import ImportanceConfig, read_triplets_meta, run_importance
from sciencemap.runtime import UserError

NOREF = b"""<article><front><article-meta><article-id pub-id-type="doi">10.9999/X.1</article-id>
<title-group><article-title>Planted</article-title></title-group></article-meta></front>
<body><sec sec-type="intro"><title>Introduction</title><p><xref ref-type="bibr" rid="b1">1</xref>
<xref ref-type="bibr" rid="b2">2</xref></p></sec></body>
<back><ref-list><ref id="b1"><element-citation><year>2000</year></element-citation></ref>
<ref id="b2"><element-citation><article-title>Some title</article-title><year>2001</year></element-citation></ref>
</ref-list></back></article>"""


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory, repo_root):
    tmp = tmp_path_factory.mktemp("imp")
    el, sc, pm = tmp / "elife", tmp / "scisummnet", tmp / "pubmed"
    el.mkdir()
    files = sorted((repo_root / "sample/elife").glob("*.xml.gz"))[:12]
    for f in files:
        shutil.copy(f, el / f.name)
    shutil.copy(files[0], el / "zz_duplicate.xml.gz")
    (el / "empty.xml").write_bytes(b"")
    (el / "trunc.xml.gz").write_bytes(files[1].read_bytes()[:3000])
    (el / "planted.xml").write_bytes(NOREF)
    for d in sorted((repo_root / "sample/scisummnet").iterdir())[:40]:
        shutil.copytree(d, sc / d.name)
    pm.mkdir()
    shutil.copy(repo_root / "sample/pubmed/dev-data-small.csv.gz", pm / "a.csv.gz")
    lines = gzip.decompress((repo_root / "sample/pubmed/dev-data-small.csv.gz").read_bytes()).decode().split("\n")
    # header + first record again (a duplicate pmid); records may span lines, so take whole CSV rows
    import csv
    import io
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    buf = io.StringIO()
    csv.writer(buf).writerows(rows[:2])
    (pm / "b.csv").write_text(buf.getvalue())
    cfg = IngestConfig(inputs=[{"path": str(el), "format": "jats", "source": "elife"},
                               {"path": str(sc), "format": "scisummnet", "source": "scisummnet"},
                               {"path": str(pm), "format": "pubmed_csv", "source": "pubmed"}])
    layout = RunLayout(tmp / "run")
    ing = run_ingest(cfg, layout, spark=spark)
    imp = run_importance(ImportanceConfig(), layout, spark=spark)
    return layout, ing, imp


def test_counts_add_up(run):
    layout, ing, _ = run
    ps = ing["per_source"]
    assert ing["check_input_equals_papers_plus_rejects"]
    assert ps["elife"]["input_records"] == 16  # 12 + duplicate + empty + truncated + planted
    assert ps["elife"]["papers_corpus"] == 13
    assert ps["elife"]["rejects"]["duplicate paper id"] == 1
    assert ps["elife"]["rejects"]["empty file"] == 1
    assert ps["elife"]["rejects"]["reference without any id, title or raw string"] >= 1
    assert any(r.startswith("truncated or corrupt gzip") for r in ps["elife"]["rejects"])
    assert ps["pubmed"]["input_records"] == 201 and ps["pubmed"]["papers_corpus"] == 200
    assert ps["pubmed"]["rejects"] == {"duplicate paper id": 1}
    s = ps["scisummnet"]
    # every citance: a mention, or rejected (citing paper outside the corpus; the same citing sentence
    # and cited paper as another citance: one in-text citation, one mention)
    assert s["check_citances"] and s["input_citances"] == s["citances_in_corpus"] + s["citance_rejects"]
    assert s["citance_rejects"] == (s["rejects"]["citing paper outside corpus"]
                                    + s["rejects"].get(DUPLICATE_CITANCE_REASON, 0)) and s["citances_in_corpus"] > 40
    assert s["mentions"] == s["citances_in_corpus"]
    papers = pq.read_table(layout.table("papers")).to_pandas()
    assert papers.paper_id.is_unique
    assert (papers.has_fulltext.sum()) == ps["elife"]["papers_fulltext"] + s["papers_fulltext"]
    rejects = pq.read_table(layout.table("rejects")).to_pandas()
    dup = rejects[rejects.reason == "duplicate paper id"]
    assert set(dup.source_file.str.rsplit("/", n=1).str[-1]) == {"zz_duplicate.xml.gz", "b.csv"}
    # the duplicate file's copy of the article brings no second reference list
    refs = pq.read_table(layout.table("references"), columns=["citing_id", "ref_key"]).to_pandas()
    twice = dup[dup.source_file.str.endswith("zz_duplicate.xml.gz")].record_id.iloc[0]
    assert not refs.duplicated().any() and (refs.citing_id == twice).sum() > 10


def test_ingest_writes_author_keys_equal_to_the_expression(run):
    """papers.author_keys and references.author_keys as written by ingest match the authors."""
    from importance.ingest.authors import author_keys_arrow

    for name in ("papers", "references"):
        t = pq.read_table(run[0].table(name), columns=["authors", "author_keys", "orcid_author_keys"])
        expected = author_keys_arrow(t.column("authors").combine_chunks())
        for c in ("author_keys", "orcid_author_keys"):
            assert t.column(c).null_count == 0
            assert expected[c].to_pylist() == t.column(c).to_pylist(), (name, c)
        assert sum(len(k) for k in t.column("author_keys").to_pylist()) > 100

def test_ingest_writes_entry_shares_author(run):
    """references.entry_shares_author == the Python matcher on the citing paper's authors (as
    ingest completed them) and the entry's own authors."""
    from importance.ingest.authors import shares_author

    papers = pq.read_table(run[0].table("papers"), columns=["paper_id", "authors"]).to_pandas().set_index("paper_id")
    refs = pq.read_table(run[0].table("references"), columns=["citing_id", "authors", "entry_shares_author"]).to_pandas()
    exp = [shares_author(list(papers.authors[c] if papers.authors[c] is not None else []), list(a if a is not None else []))
           for c, a in zip(refs.citing_id, refs.authors)]
    assert refs.entry_shares_author.tolist() == exp
    assert 0 < sum(exp) < len(exp)


def test_references_mentions_and_title_only(run):
    layout, _, _ = run
    refs = pq.read_table(layout.table("references")).to_pandas()
    planted = refs[refs.citing_id == "doi:10.9999/x.1"]
    assert list(planted.ref_key) == ["b2"] and planted.cited_id.iloc[0].startswith("ref:")
    ments = pq.read_table(layout.table("mentions")).to_pandas()
    assert ments.cited_id.notna().all()
    papers = pq.read_table(layout.table("papers")).to_pandas().set_index("paper_id")
    assert not papers.loc[planted.cited_id.iloc[0], "has_fulltext"]
    assert papers.loc[planted.cited_id.iloc[0], "title"] == "Some title"
    assert set(refs.cited_id) <= set(papers.index)


def test_importance_outputs(run):
    layout, _, imp = run
    pairs = pq.read_table(layout.table("pairs")).to_pandas()
    assert len(pairs) == imp["n_pairs"] > 100
    w = pq.read_table(layout.table("weights")).to_pandas()
    assert list(w.feature) == ["I", "R", "D", "S"] and abs(w.weight.sum() - 1) < 1e-9
    exp = (pairs.f_I * w.weight[0] + pairs.f_R * w.weight[1] + pairs.f_D * w.weight[2] + pairs.S * w.weight[3])
    assert (abs(exp - pairs.importance) < 1e-9).all()
    trip = pq.read_table(layout.table("triplets")).to_pandas()
    assert len(trip) == imp["n_triplets"] > 0
    assert read_triplets_meta(layout.table("triplets"))["K"] == 5
    assert not set(zip(trip.anchor_id, trip.positive_id)) & set(zip(trip.anchor_id, trip.negative_id))


def test_user_errors(tmp_path, spark):
    with pytest.raises(UserError, match="does not exist"):
        run_ingest(IngestConfig(inputs=[{"path": str(tmp_path / "nope"), "format": "jats", "source": "x"}]),
                   RunLayout(tmp_path / "r"), spark=spark)
    with pytest.raises(UserError, match="run jobs/ingest.py"):
        run_importance(ImportanceConfig(), RunLayout(tmp_path / "r2"), spark=spark)
