"""Pairs table (METHODS.md §1): per (citing, cited) pair the mention counts per section class,
the self-citation flag S and a seeded tie-break hash.

Built for scale: two joins attach to each reference-list row the author keys of the citing paper
and of the cited corpus paper (else the entry's own), S is computed per row with Spark's
higher-order functions (no explode, no distinct, no Python UDF), then reference rows and mentions
go through ONE hash aggregation by (citing, cited) (counts by conditional sums, no pivot). The same pass keeps what
the job's summary needs (reference rows, resolution flag, citing source) so that the summary comes
from one aggregation over the persisted pairs instead of re-running joins.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


COUNT_COLS = {"I": "f_I", "M": "f_M", "R": "f_R", "D": "f_D", "O": "f_O"}


def tie_hash(seed: int, a: str = "citing_id", b: str = "cited_id"):
    return F.xxhash64(F.lit(int(seed)), F.col(a), F.col(b))


def author_keys(col):
    """array<string> of author keys: "family|i" (normalised family name + first initial), with
    "#orcid" appended when the author has an ORCID; authors with neither are dropped. A flat string
    array keeps the shuffle small; each name is normalised once (one regexp_replace for the family,
    one regexp_extract for the initial)."""
    from importance.authors import ACCENTS_FROM, ACCENTS_TO

    def fold(c):
        return F.translate(F.lower(c), ACCENTS_FROM, ACCENTS_TO)

    def one(a):
        fam = F.regexp_replace(fold(a["family"]), "[^a-z]", "")
        ini = F.regexp_extract(fold(F.coalesce(a["given"], F.lit(""))), "([a-z])", 1)
        nk = F.when(F.length(fam) > 0, F.concat(fam, F.lit("|"), ini)).otherwise(F.lit(""))
        return F.when(a["orcid"].isNotNull(), F.concat(nk, F.lit("#"), a["orcid"])).otherwise(nk)

    return F.filter(F.transform(F.coalesce(col, F.array()), one), lambda k: k != "")


def _names(keys, with_orcid: bool | None):
    k = keys if with_orcid is None else F.filter(keys, lambda x: F.contains(x, F.lit("#")) == F.lit(with_orcid))
    return F.filter(F.transform(k, lambda x: F.substring_index(x, "#", 1)), lambda x: x != "")


def _orcids(keys):
    return F.transform(F.filter(keys, lambda x: F.contains(x, F.lit("#"))), lambda x: F.substring_index(x, "#", -1))


def shares_author(a_keys, b_keys):
    """True when two author_keys arrays share an author (authors.same_author): equal ORCIDs when
    both authors have one, else equal name keys. As sets: ORCIDs overlap, or a name of one side
    equals the name of an author WITHOUT ORCID on the other side (hash-based arrays_overlap)."""
    a, b = F.coalesce(a_keys, F.array()), F.coalesce(b_keys, F.array())
    hit = (F.arrays_overlap(_orcids(a), _orcids(b)) | F.arrays_overlap(_names(a, None), _names(b, False))
           | F.arrays_overlap(_names(a, False), _names(b, None)))
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
    citing = papers.where("has_fulltext").select(F.col("paper_id").alias("citing_id"),
                                                 author_keys(F.col("authors")).alias("a_keys"),
                                                 F.col("source").alias("_src"), text.alias("a_text"))
    cited = papers.select(F.col("paper_id").alias("cited_id"),
                          F.when(F.col("has_fulltext"), author_keys(F.col("authors"))).alias("c_keys"),
                          F.col("has_fulltext").cast("int").alias("resolved"), text.alias("c_text"))
    r = (references.where(F.col("cited_id").isNotNull() & (F.col("cited_id") != F.col("citing_id")))
         .select("citing_id", "cited_id", author_keys(F.col("authors")).alias("r_keys"))
         .join(cited, "cited_id", "left").join(citing, "citing_id", "left"))
    # cited side: the corpus paper's authors when it has any, else the reference entry's
    c_keys = F.when(F.size(F.coalesce("c_keys", F.array())) > 0, F.col("c_keys")).otherwise(F.col("r_keys"))
    src = (F.array_position(F.array(*[F.lit(x) for x in sources]), F.col("_src")).cast("int")
           if sources else F.lit(0))
    zero = F.lit(0)
    ref_rows = r.select("citing_id", "cited_id", F.lit(1).alias("is_ref"), F.lit(None).cast("string").alias("cls"),
                        shares_author(F.col("a_keys"), c_keys).cast("int").alias("S"),
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
