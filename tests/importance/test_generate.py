"""Synthetic corpus generator (importance.generate): contracts, determinism, and the importance job running on it."""
import pyarrow.parquet as pq
import pytest

from importance.ingest.authors import shares_author
from importance.generate import SECTION_MIX, GenerateConfig, run_generate
from importance.job import ImportanceConfig, read_triplets_meta, run_importance
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    cfg = GenerateConfig(mentions=30_000, seed=3, chunk_papers=60)
    return RunLayout(root / "a"), run_generate(cfg, RunLayout(root / "a")), cfg, root


def test_schema_counts_and_determinism(corpus):
    layout, summary, cfg, root = corpus
    tables = {n: pq.read_table(layout.table(n)) for n in ("papers", "references", "mentions", "rejects")}
    for n, t in tables.items():
        assert t.schema.remove_metadata().equals(SCHEMAS[n]), n
    assert len(list(layout.table("mentions").glob("*.parquet"))) > 1  # chunked
    assert tables["rejects"].num_rows == 0
    assert 0.9 * cfg.mentions < tables["mentions"].num_rows < 1.1 * cfg.mentions
    m = tables["mentions"].to_pandas()
    mix = m.section_class.value_counts(normalize=True)
    assert abs(mix["I"] - SECTION_MIX["I"]) < 0.03 and abs(mix["M"] - SECTION_MIX["M"]) < 0.03
    refs = tables["references"].to_pandas()
    papers = tables["papers"].to_pandas()
    assert papers.paper_id.is_unique and set(refs.cited_id) <= set(papers.paper_id)
    assert set(m.citing_id + "#" + m.ref_key) <= set(refs.citing_id + "#" + refs.ref_key)
    assert not refs.duplicated(["citing_id", "cited_id"]).any()
    # entry_shares_author == the Python matcher on the citing paper's and the entry's authors
    authors = papers.set_index("paper_id").authors
    sample = refs.sample(500, random_state=1)
    exp = [shares_author(list(authors[c]), list(a)) for c, a in zip(sample.citing_id, sample.authors)]
    assert sample.entry_shares_author.tolist() == exp and sum(exp) > 20
    indeg = refs.groupby("cited_id").size()
    assert indeg.max() > 20 * indeg.median()  # heavy tail: hub papers
    again = run_generate(cfg, RunLayout(root / "b"))
    assert again["mentions"] == summary["mentions"]
    for n in ("papers", "references", "mentions"):
        assert pq.read_table(layout.table(n)).equals(pq.read_table(RunLayout(root / "b").table(n))), n
    other = run_generate(GenerateConfig(mentions=30_000, seed=4, chunk_papers=60), RunLayout(root / "c"))
    assert other["references"] != summary["references"]


def test_importance_job_runs_on_generated_corpus(corpus, spark):
    layout, summary, _, _ = corpus
    s = run_importance(ImportanceConfig(shuffle_partitions=4), layout, spark=spark)
    pairs = pq.read_table(layout.table("pairs")).to_pandas()
    refs = pq.read_table(layout.table("references")).to_pandas()
    assert s["n_pairs"] == len(pairs) == len(refs)
    assert 0.08 < s["share_self_citation_pairs"] < 0.3  # ~15% by construction, as measured on eLife
    res = s["resolution_rate_per_source"]["synthetic"]
    assert res["references"] == len(refs) and 0.02 < res["rate"] < 0.4
    assert s["n_triplets"] > 0 and 0 < s["share_hard_negatives"] < 1
    assert read_triplets_meta(layout.table("triplets"))["H"] == 2
    # S from the Spark higher-order functions equals the pure-Python author matcher
    papers = pq.read_table(layout.table("papers")).to_pandas().set_index("paper_id")
    sample = pairs.sample(400, random_state=0).merge(refs, on=["citing_id", "cited_id"])
    for r in sample.itertuples():
        cited = papers.authors.get(r.cited_id) if papers.has_fulltext.get(r.cited_id) else r.authors
        assert r.S == int(shares_author(list(papers.authors[r.citing_id]), list(cited))), (r.citing_id, r.cited_id)
    assert sample.S.sum() > 0
