"""Pairs table (METHODS.md §1): per (citing, cited) pair the mention counts per section class,
the self-citation flag S and a seeded tie-break hash.

Built for scale (the job runs once per ablation setting over the same ingest output):
- author keys are normalised once at ingest (`author_keys`, `orcid_author_keys`); normalising
  names here made this stage ~3x slower;
- whether a reference entry's own authors share one with its citing paper is decided once at
  ingest (`entry_shares_author`, where both lists are in hand), so reference rows travel through
  the shuffles without author arrays; only a reference resolved to a full-text corpus paper (about
  1 in 10 in the generated corpora, 1 in 200 on eLife) is re-decided here against that paper's
  own author list;
- reference rows and mentions then go through ONE hash aggregation by (citing, cited) (counts by
  conditional sums, no pivot), which also keeps what the job's summary needs.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


COUNT_COLS = {"I": "f_I", "M": "f_M", "R": "f_R", "D": "f_D", "O": "f_O"}


def _empty():
    return F.array().cast("array<string>")


def tie_hash(seed: int, a: str = "citing_id", b: str = "cited_id"):
    return F.xxhash64(F.lit(int(seed)), F.col(a), F.col(b))


def keys_of(df: DataFrame) -> dict:
    """The stored author keys of a papers/references DataFrame (authors.KEY_COLUMNS, written by
    ingest and the generator; null = none). Only a table without them (written before they
    existed) gets them computed from `authors`: a per-row fallback would read the wide `authors`
    column again, which alone costs as much as the rest of the stage."""
    from importance.ingest.authors import KEY_COLUMNS, author_keys_spark

    if all(c in df.columns for c in KEY_COLUMNS):
        return {c: F.coalesce(F.col(c), _empty()) for c in KEY_COLUMNS}
    return author_keys_spark(F.col("authors"))


def shares_author(a: dict, b: dict):
    """authors.same_author over two author lists, from their stored keys (see importance.ingest.authors):
    three hash-based set intersections, no per-row string work."""
    k, o = "author_keys", "orcid_author_keys"
    hit = F.arrays_overlap(a[k], b[k]) | F.arrays_overlap(a[o], b[k]) | F.arrays_overlap(a[k], b[o])
    return F.coalesce(hit, F.lit(False))


def citing_author_keys(papers: DataFrame, *extra) -> DataFrame:
    """citing_id, a_k, a_o (the citing paper's author keys) and any extra columns of papers."""
    pk = keys_of(papers)
    return papers.select(F.col("paper_id").alias("citing_id"), pk["author_keys"].alias("a_k"),
                         pk["orcid_author_keys"].alias("a_o"), *extra)


def citing_key_columns() -> dict:
    return {"author_keys": F.coalesce("a_k", _empty()), "orcid_author_keys": F.coalesce("a_o", _empty())}


def with_entry_shares_author(references: DataFrame, papers: DataFrame) -> DataFrame:
    """references + entry_shares_author (contracts): the entry's own authors share an author with
    its citing paper (ingest; and tables written before the column existed)."""
    rk = keys_of(references)
    return (references.drop("entry_shares_author").join(citing_author_keys(papers), "citing_id", "left")
            .withColumn("entry_shares_author", shares_author(citing_key_columns(), rk)).drop("a_k", "a_o"))


def build_pairs(papers: DataFrame, references: DataFrame, mentions: DataFrame, seed: int = 0,
                keep_summary_cols: bool = False, sources: list[str] | None = None) -> DataFrame:
    """One row per distinct (citing, cited) reference pair of a full-text citing paper (self-references
    dropped), with f_* counts, S and tie_hash; `importance` is added later by entropy.score.

    S is decided per reference-list row (the pair shares an author if any of its entries does): the
    cited full-text paper's authors when it has any, else the entry's own (entry_shares_author).
    Shuffles: reference rows once by cited_id (to meet the cited papers), then reference rows and
    mentions together once by citing_id; in those partitions they meet the citing papers (only the
    papers side moves) and are aggregated by (citing, cited) without another shuffle. With
    keep_summary_cols: also n_refs (reference-list rows of the pair), resolved (cited is a full-text
    corpus paper), has_text (both have a title) and src (index of the citing paper's source in
    `sources`)."""
    text = (F.col("title").isNotNull() & (F.length(F.trim("title")) > 0)).cast("int")
    pk = keys_of(papers)
    use_c = F.col("has_fulltext") & (F.size(pk["author_keys"]) > 0)
    cited = papers.select(F.col("paper_id").alias("cited_id"),
                          F.when(use_c, pk["author_keys"]).alias("c_k"), F.when(use_c, pk["orcid_author_keys"]).alias("c_o"),
                          F.col("has_fulltext").cast("int").alias("resolved"), text.alias("c_text"))
    if "entry_shares_author" not in references.columns:
        references = with_entry_shares_author(references, papers)
    # Shuffled hash joins with the papers side as the build table (a sort-merge join would sort
    # every reference row); the build side per task is papers / shuffle partitions. The cited
    # paper's author keys travel on only for the rows that need them (c_k null otherwise).
    zero, null_keys = F.lit(0), F.lit(None).cast("array<string>")
    ref_rows = (references.where(F.col("cited_id").isNotNull() & (F.col("cited_id") != F.col("citing_id")))
                .select("citing_id", "cited_id", F.coalesce("entry_shares_author", F.lit(False)).cast("int").alias("e_S"))
                .join(cited.hint("shuffle_hash"), "cited_id", "left")
                .select("citing_id", "cited_id", F.lit(1).alias("is_ref"), F.lit(None).cast("string").alias("cls"), "e_S",
                        "c_k", "c_o", F.coalesce("resolved", zero).alias("resolved"), F.coalesce("c_text", zero).alias("c_text")))
    men_rows = mentions.where(F.col("cited_id").isNotNull()).select(
        "citing_id", "cited_id", zero.alias("is_ref"), F.col("section_class").alias("cls"), zero.alias("e_S"),
        null_keys.alias("c_k"), null_keys.alias("c_o"), zero.alias("resolved"), zero.alias("c_text"))
    src = (F.array_position(F.array(*[F.lit(x) for x in sources]), F.col("source")).cast("int")
           if sources else zero)
    citing = citing_author_keys(papers.where("has_fulltext"), src.alias("src"), text.alias("a_text"))
    parts = int(papers.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    # Inner: only full-text papers cite in pairs (a "map" input's reference lists are map links only).
    rows = (ref_rows.unionByName(men_rows).repartition(parts, "citing_id")
            .join(citing.hint("shuffle_hash"), "citing_id"))  # rows stay put; citing papers move
    by_corpus = shares_author(citing_key_columns(), {"author_keys": F.col("c_k"), "orcid_author_keys": F.col("c_o")}).cast("int")
    S = F.when(F.col("c_k").isNotNull(), by_corpus).otherwise(F.col("e_S"))
    aggs = [F.sum("is_ref").alias("n_refs")]
    aggs += [F.sum((F.col("cls") == c).cast("int")).alias(col) for c, col in COUNT_COLS.items()]
    aggs += [F.max(S).alias("S"), F.max("resolved").alias("resolved"), F.max("c_text").alias("c_text"),
             F.max(F.coalesce("src", zero)).alias("src"), F.max(F.coalesce("a_text", zero)).alias("a_text")]
    pairs = rows.groupBy("citing_id", "cited_id").agg(*aggs).where("n_refs > 0")
    out = ["citing_id", "cited_id"] + [F.coalesce(F.col(c), zero).cast("int").alias(c) for c in COUNT_COLS.values()]
    out += ["S", tie_hash(seed).alias("tie_hash")]
    if keep_summary_cols:
        out += ["n_refs", (F.col("resolved") == 1).alias("resolved"), "src",
                ((F.col("a_text") * F.col("c_text")) == 1).alias("has_text")]
    return pairs.select(*out)
