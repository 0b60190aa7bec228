"""Pairs table (METHODS.md §1): per (citing, cited) pair the mention counts per section class,
the self-citation flag S and a seeded tie-break hash.

Built for scale: two joins attach to each reference-list row the author keys of the citing paper
and of the cited corpus paper (else the entry's own). The keys are normalised once at ingest
(`author_keys`, `orcid_author_keys`): normalising names here made this stage ~3x slower. S is
three set intersections per row (no explode, no distinct, no Python UDF), then reference rows and
mentions go through ONE hash aggregation by (citing, cited) (counts by conditional sums, no
pivot). The same pass keeps what the job's summary needs (reference rows, resolution flag, citing
source) so that the summary comes from one aggregation over the persisted pairs instead of
re-running joins.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


COUNT_COLS = {"I": "f_I", "M": "f_M", "R": "f_R", "D": "f_D", "O": "f_O"}


def tie_hash(seed: int, a: str = "citing_id", b: str = "cited_id"):
    return F.xxhash64(F.lit(int(seed)), F.col(a), F.col(b))


def keys_of(df: DataFrame) -> dict:
    """The stored author keys of a papers/references DataFrame (authors.KEY_COLUMNS, written by
    ingest and the generator; null = none). Only a table without them (written before they
    existed) gets them computed from `authors`: a per-row fallback would read the wide `authors`
    column again, which alone costs as much as the rest of the stage."""
    from importance.authors import KEY_COLUMNS, author_keys_spark

    if all(c in df.columns for c in KEY_COLUMNS):
        return {c: F.coalesce(F.col(c), F.array().cast("array<string>")) for c in KEY_COLUMNS}
    return author_keys_spark(F.col("authors"))


def shares_author(a: dict, b: dict):
    """authors.same_author over two author lists, from their stored keys (see importance.authors):
    three hash-based set intersections, no per-row string work."""
    k, o = "author_keys", "orcid_author_keys"
    hit = F.arrays_overlap(a[k], b[k]) | F.arrays_overlap(a[o], b[k]) | F.arrays_overlap(a[k], b[o])
    return F.coalesce(hit, F.lit(False))


def build_pairs(papers: DataFrame, references: DataFrame, mentions: DataFrame, seed: int = 0,
                keep_summary_cols: bool = False, sources: list[str] | None = None) -> DataFrame:
    """One row per distinct (citing, cited) reference pair (self-references dropped), with f_* counts,
    S and tie_hash; `importance` is added later by entropy.score.

    S is decided per reference-list row (the pair shares an author if any of its entries does),
    then references and mentions are aggregated together in ONE hash aggregation (only fixed-width
    buffers: sums and maxima of ints). With keep_summary_cols: also n_refs (reference-list rows of
    the pair), resolved (cited is a full-text corpus paper), has_text (both have a title) and
    src (index of the citing paper's source in `sources`)."""
    text = (F.col("title").isNotNull() & (F.length(F.trim("title")) > 0)).cast("int")
    # only full-text papers cite: author keys of the citing side from those rows only
    pk = keys_of(papers)
    citing = papers.where("has_fulltext").select(
        F.col("paper_id").alias("citing_id"), pk["author_keys"].alias("a_k"), pk["orcid_author_keys"].alias("a_o"),
        F.col("source").alias("_src"), text.alias("a_text"))
    # cited side: the corpus paper's authors when it is a full-text paper with authors, else the
    # reference entry's own; one pair of arrays travels on to the second join
    cited_has = F.col("has_fulltext") & (F.size(pk["author_keys"]) > 0)
    cited = papers.select(F.col("paper_id").alias("cited_id"), cited_has.alias("use_c"),
                          F.when(cited_has, pk["author_keys"]).alias("c_k"),
                          F.when(cited_has, pk["orcid_author_keys"]).alias("c_o"),
                          F.col("has_fulltext").cast("int").alias("resolved"), text.alias("c_text"))
    rk = keys_of(references)
    # Shuffled hash joins with the papers side as the build table: a sort-merge join would sort
    # every reference row with its key arrays (measured 6 s of 31 s at 10M mentions). The build
    # side per task is papers / shuffle partitions, so size the partitions for the corpus.
    r = (references.where(F.col("cited_id").isNotNull() & (F.col("cited_id") != F.col("citing_id")))
         .select("citing_id", "cited_id", rk["author_keys"].alias("r_k"), rk["orcid_author_keys"].alias("r_o"))
         .join(cited.hint("shuffle_hash"), "cited_id", "left")
         .select("citing_id", "cited_id", F.when(F.col("use_c"), F.col("c_k")).otherwise(F.col("r_k")).alias("c_k"),
                 F.when(F.col("use_c"), F.col("c_o")).otherwise(F.col("r_o")).alias("c_o"), "resolved", "c_text")
         .join(citing.hint("shuffle_hash"), "citing_id", "left"))
    a_keys = {"author_keys": F.coalesce("a_k", F.array().cast("array<string>")),
              "orcid_author_keys": F.coalesce("a_o", F.array().cast("array<string>"))}
    c_keys = {"author_keys": F.col("c_k"), "orcid_author_keys": F.col("c_o")}
    src = (F.array_position(F.array(*[F.lit(x) for x in sources]), F.col("_src")).cast("int")
           if sources else F.lit(0))
    zero = F.lit(0)
    ref_rows = r.select("citing_id", "cited_id", F.lit(1).alias("is_ref"), F.lit(None).cast("string").alias("cls"),
                        shares_author(a_keys, c_keys).cast("int").alias("S"),
                        F.coalesce("resolved", zero).alias("resolved"),
                        F.coalesce(F.col("a_text") * F.col("c_text"), zero).alias("has_text"), src.alias("src"))
    men_rows = mentions.where(F.col("cited_id").isNotNull()).select(
        "citing_id", "cited_id", F.lit(0).alias("is_ref"), F.col("section_class").alias("cls"),
        zero.alias("S"), zero.alias("resolved"), zero.alias("has_text"), zero.alias("src"))
    aggs = [F.sum("is_ref").alias("n_refs")]
    aggs += [F.sum((F.col("cls") == c).cast("int")).alias(col) for c, col in COUNT_COLS.items()]
    aggs += [F.max(c).alias(c) for c in ("S", "resolved", "has_text", "src")]
    pairs = ref_rows.unionByName(men_rows).groupBy("citing_id", "cited_id").agg(*aggs).where("n_refs > 0")
    cols = ["citing_id", "cited_id"] + [F.coalesce(F.col(c), F.lit(0)).cast("int").alias(c) for c in COUNT_COLS.values()]
    cols += ["S", tie_hash(seed).alias("tie_hash")]
    if keep_summary_cols:
        cols += ["n_refs", (F.col("resolved") == 1).alias("resolved"), "src", (F.col("has_text") == 1).alias("has_text")]
    return pairs.select(*cols)
