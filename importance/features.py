"""Pairs table (METHODS.md §1): per (citing, cited) pair the mention counts per section class,
the self-citation flag S and a seeded tie-break hash."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from importance.authors import spark_family_key

COUNT_COLS = {"I": "f_I", "M": "f_M", "R": "f_R", "D": "f_D", "O": "f_O"}


def tie_hash(seed: int, a: str = "citing_id", b: str = "cited_id"):
    return F.xxhash64(F.lit(int(seed)), F.col(a), F.col(b))


def _author_rows(df: DataFrame, id_cols: list[str], authors_col: str) -> DataFrame:
    a = df.select(*id_cols, F.explode(authors_col).alias("a"))
    return a.select(*id_cols, spark_family_key(F.col("a.family"), F.col("a.given")).alias("nk"),
                    F.col("a.orcid").alias("orcid"))


def self_citations(pairs: DataFrame, papers: DataFrame, references: DataFrame) -> DataFrame:
    """(citing_id, cited_id) pairs that share an author. Cited side: the cited paper's authors when
    it is a full-text corpus paper with authors, else the reference entry's authors."""
    corpus_auth = papers.where(F.col("has_fulltext") & (F.size(F.coalesce("authors", F.array())) > 0)).select(
        F.col("paper_id").alias("cited_id"), F.col("authors").alias("c_authors"))
    ref_auth = references.groupBy("citing_id", "cited_id").agg(F.first("authors", ignorenulls=True).alias("r_authors"))
    cited = (pairs.select("citing_id", "cited_id").join(corpus_auth, "cited_id", "left")
             .join(ref_auth, ["citing_id", "cited_id"], "left")
             .select("citing_id", "cited_id", F.coalesce("c_authors", "r_authors").alias("authors"))
             .where(F.col("authors").isNotNull()))
    b = _author_rows(cited, ["citing_id", "cited_id"], "authors")
    a = _author_rows(papers.select(F.col("paper_id").alias("citing_id"), "authors")
                     .where(F.col("authors").isNotNull()), ["citing_id"], "authors").withColumnRenamed(
        "nk", "a_nk").withColumnRenamed("orcid", "a_orcid").withColumnRenamed("citing_id", "a_citing")
    by_name = (b.join(a, (F.col("citing_id") == F.col("a_citing")) & (F.col("nk") == F.col("a_nk")))
               .where(F.col("orcid").isNull() | F.col("a_orcid").isNull() | (F.col("orcid") == F.col("a_orcid")))
               .select("citing_id", "cited_id"))
    by_orcid = (b.join(a, (F.col("citing_id") == F.col("a_citing")) & (F.col("orcid") == F.col("a_orcid")))
                .select("citing_id", "cited_id"))
    return by_name.unionByName(by_orcid).distinct()


def build_pairs(papers: DataFrame, references: DataFrame, mentions: DataFrame, seed: int = 0) -> DataFrame:
    """One row per distinct (citing, cited) reference pair (self-references dropped), with f_* counts,
    S and tie_hash; `importance` is added later by entropy.score."""
    pairs = (references.where(F.col("cited_id").isNotNull() & (F.col("cited_id") != F.col("citing_id")))
             .select("citing_id", "cited_id").distinct())
    counts = (mentions.where(F.col("cited_id").isNotNull())
              .groupBy("citing_id", "cited_id").pivot("section_class", list(COUNT_COLS)).count())
    for cls, col in COUNT_COLS.items():
        counts = counts.withColumnRenamed(cls, col)
    out = pairs.join(counts, ["citing_id", "cited_id"], "left")
    for col in COUNT_COLS.values():
        out = out.withColumn(col, F.coalesce(F.col(col), F.lit(0)).cast("int"))
    selfc = self_citations(pairs, papers, references).withColumn("S", F.lit(1))
    out = out.join(selfc, ["citing_id", "cited_id"], "left").withColumn("S", F.coalesce("S", F.lit(0)).cast("int"))
    return out.withColumn("tie_hash", tie_hash(seed))
