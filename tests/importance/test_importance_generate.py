"""Synthetic corpus generator: contracts, determinism, and the importance job running on it."""
import pyarrow.parquet as pq
import pytest

from importance.authors import shares_author
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout
from importance.generate import SECTION_MIX, GenerateConfig, run_generate
from importance.job import ImportanceConfig, read_triplets_meta, run_importance


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


def test_spark_author_matching_equals_python(spark):
    """features.shares_author (Spark higher-order functions) == authors.shares_author (Python) on
    names with accents, punctuation, digits, empty names, and ORCID agreements and conflicts."""
    import random

    from pyspark.sql import functions as F

    from importance.authors import author_keys_spark as author_keys
    from importance.features import shares_author as spark_shares

    rnd = random.Random(0)

    def au():
        return (rnd.choice(["Smith", "Müller", "Muller", "O'Brien", "OBrien", "Lee", "", "123"]),
                rnd.choice(["John", "J.", "jane", "", "Åsa", None]), rnd.choice([None, None, "X", "Y"]))

    rows = [([au() for _ in range(rnd.randint(0, 3))] if rnd.random() > .1 else None,
             [au() for _ in range(rnd.randint(0, 3))]) for _ in range(1500)]
    t = "array<struct<family:string,given:string,orcid:string>>"
    df = spark.createDataFrame(rows, f"a {t}, b {t}")
    got = [r.s for r in df.select(spark_shares(author_keys(F.col("a")), author_keys(F.col("b"))).alias("s")).collect()]
    # the same through the stored columns as the generator writes them (pyarrow)
    import pyarrow as pa

    from importance.authors import author_keys_arrow
    from sciencemap.contracts import AUTHOR

    arr = {side: author_keys_arrow(pa.array([[dict(family=f, given=g, orcid=o) for f, g, o in r[i]]
                                             if r[i] is not None else None for r in rows], pa.list_(AUTHOR)))
           for i, side in enumerate("ab")}
    stored = spark.createDataFrame(
        [tuple(arr[s][c][i].as_py() for s in "ab" for c in ("author_keys", "orcid_author_keys")) for i in range(len(rows))],
        "ak array<string>, ao array<string>, bk array<string>, bo array<string>")
    got2 = [r.s for r in stored.select(spark_shares(
        {"author_keys": F.col("ak"), "orcid_author_keys": F.col("ao")},
        {"author_keys": F.col("bk"), "orcid_author_keys": F.col("bo")}).alias("s")).collect()]

    def d(x):
        return [dict(family=f, given=g, orcid=o) for f, g, o in (x or [])]
    exp = [shares_author(d(a), d(b)) for a, b in rows]
    from importance.authors import shares_author_arrow

    got3 = shares_author_arrow(arr["a"], arr["b"]).tolist()  # the generator's entry_shares_author
    assert got == exp and got2 == exp and got3 == exp and 100 < sum(exp) < 1400


def test_arrow_author_keys_equal_spark_keys(spark):
    """The generator's vectorised author_keys (pyarrow) are the same strings as ingest's Spark
    expression, on random awkward names and on every author list of the eLife sample's papers."""
    import random

    import pyarrow as pa
    from pyspark.sql import functions as F

    from importance.authors import author_keys_arrow, author_keys_spark
    from sciencemap.contracts import AUTHOR

    rnd = random.Random(1)
    names = ["Smith", "Müller", "O'Brien", "Ødegård", "Çelik", "van der Berg", "", None, "李", "Ñúñez", "123"]
    rows = [[dict(family=rnd.choice(names), given=rnd.choice(["John", "é", "", None, "Ånd"]),
                  orcid=rnd.choice([None, None, "0000-0001"])) for _ in range(rnd.randint(0, 4))]
            if rnd.random() > .1 else None for _ in range(800)]
    t = "array<struct<family:string,given:string,orcid:string>>"
    df = spark.createDataFrame([(r,) for r in rows], f"a {t}")
    cols = ("author_keys", "orcid_author_keys")
    spark_keys = df.select(*[e.alias(c) for c, e in author_keys_spark(F.col("a")).items()]).collect()
    arrow_keys = author_keys_arrow(pa.array(rows, pa.list_(AUTHOR)))
    for c in cols:
        assert arrow_keys[c].to_pylist() == [r[c] for r in spark_keys], c
    assert sum(len(r.author_keys) for r in spark_keys) > 500 and sum(len(r.orcid_author_keys) for r in spark_keys) > 50

