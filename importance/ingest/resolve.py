"""Reference resolution: match reference-list entries to corpus papers (Spark joins, no collect).

Keys, in priority order: DOI, PMID, a known paper id (ScisummNet citances name the cited ACL id),
normalised title + year. A key shared by several corpus papers resolves to the smallest paper_id.
Unresolved references still get a cited_id: doi:<doi>, else pmid:<pmid>, else the hint id
(arxiv:<id>), else ref:<first 16 hex of sha1(normalised title|year)>, else, for an entry with
neither id nor title but a raw reference string, ref:<first 16 hex of sha1(normalised raw string)>
(raw_norm: lowercase, every run of characters other than letters and digits one space, trimmed),
and are cited-only papers (has_fulltext = false, source = the citing paper's source; title null
when the entry has none). A cited-only paper cited by at least `min_citations` mapped corpus papers
is a mapped `papers` row; below that, one cited by a full-text paper is a papers row with mapped =
false (a triplet positive needs its title) and the others are left out of papers (`kept` false).
A reference with neither an id, a title nor a raw string is rejected ("reference without any id,
title or raw string").
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

SELF_REF_REASON = "reference to the citing paper itself"
NO_ID_REASON = "reference without any id, title or raw string"


def raw_norm(col):
    """A raw reference string as its fallback key: lowercase, every run of characters other than
    letters and digits one space, trimmed (null stays null)."""
    return F.trim(F.regexp_replace(F.lower(col), r"[^\p{L}\p{N}]+", " "))


def raw_fallback_id(raw: str) -> str | None:
    """The same key in Python (tests, tools): ref:<first 16 hex of sha1(raw_norm)>."""
    import hashlib
    import re

    norm = re.sub(r"[^\w]+|_+", " ", (raw or "").lower()).strip()
    return "ref:" + hashlib.sha1(norm.encode()).hexdigest()[:16] if norm else None


def corpus_keys(papers: DataFrame) -> DataFrame:
    """(key, paper_id) for every corpus paper: its ids and its title|year key."""
    ids = papers.select(F.explode(F.array_union(F.array("paper_id"), F.coalesce("alt_ids", F.array().cast("array<string>")))).alias("key"),
                        "paper_id")
    ty = papers.where(F.col("title_norm").isNotNull() & F.col("year").isNotNull()).select(
        F.concat(F.lit("ty:"), "title_norm", F.lit("|"), F.col("year").cast("string")).alias("key"), "paper_id")
    return ids.unionByName(ty).groupBy("key").agg(F.min("paper_id").alias("paper_id"))


def resolve_references(refs: DataFrame, papers: DataFrame, min_citations: int = 1,
                       stash=None) -> tuple[DataFrame, DataFrame, DataFrame]:
    """Return (references with cited_id, `resolved`, the entry's author keys and
    entry_shares_author: the references table's rows, with `citing_fulltext`, whether the citing
    paper's body was read; cited-only papers with `kept`; rejects).
    `stash(df, name)`, when given, materialises the resolved rows once (all three outputs read them).

    refs: internal reference rows (citing_id, ref_key, title, authors, year, doi, pmid, hint_id,
    title_norm, raw, source_file). papers: corpus papers (paper_id, alt_ids, title_norm, year, source,
    has_fulltext, mapped, authors or their author keys).

    The reference rows (the wide table) are shuffled once, by citing_id, to meet one row per citing
    paper: its resolved entries (ref_key -> paper id), author keys, source and roles. Everything the
    three outputs need is then on the stashed row: joining the hits by (citing_id, ref_key) and the
    citing papers by citing_id, twice more for the unresolved rows, moved every wide row three times.
    """
    from importance.features import citing_author_keys, citing_key_columns, keys_of, shares_author
    from importance.ingest.authors import author_keys_spark

    keys = corpus_keys(papers)
    cand = refs.select("citing_id", "ref_key", F.explode(F.array(
        F.struct(F.lit(1).alias("prio"), F.concat(F.lit("doi:"), "doi").alias("key")),
        F.struct(F.lit(2).alias("prio"), F.concat(F.lit("pmid:"), "pmid").alias("key")),
        F.struct(F.lit(3).alias("prio"), F.col("hint_id").alias("key")),
        F.struct(F.lit(4).alias("prio"), F.concat(F.lit("ty:"), "title_norm", F.lit("|"),
                                                  F.col("year").cast("string")).alias("key")),
    )).alias("c")).where(F.col("c.key").isNotNull() & F.col("ref_key").isNotNull()).select(
        "citing_id", "ref_key", "c.prio", "c.key")
    # the corpus keys as the build table of a shuffled hash join (a sort-merge join would sort every
    # candidate key); the hits then partitioned by citing_id, so both aggregates run without a shuffle
    hits = (cand.join(keys.hint("shuffle_hash"), "key").where(F.col("paper_id") != F.col("citing_id"))
            .repartition("citing_id")
            .groupBy("citing_id", "ref_key")
            .agg(F.min_by("paper_id", F.struct("prio", "paper_id")).alias("resolved_id"))
            .groupBy("citing_id")
            .agg(F.map_from_entries(F.collect_list(F.struct("ref_key", "resolved_id"))).alias("_hits")))
    # the citing paper's keys from its authors as completed (ScisummNet's from its citances), not stored ones
    keyed = papers.withColumns(author_keys_spark(F.col("authors")))
    citing = citing_author_keys(keyed, F.col("source").alias("citing_source"),
                          F.col("has_fulltext").alias("citing_fulltext"), F.col("mapped").alias("citing_mapped"),
                          F.lit(True).alias("_citing_in_corpus")).join(hits, "citing_id", "left")
    r = refs.join(citing.hint("shuffle_hash"), "citing_id", "left")
    r = r.withColumn("resolved_id", F.col("_hits")[F.col("ref_key")]).drop("_hits")
    fallback = F.when(F.col("title_norm").isNotNull(), F.concat(F.lit("ref:"), F.substring(
        F.sha1(F.concat("title_norm", F.lit("|"), F.coalesce(F.col("year").cast("string"), F.lit("")))), 1, 16)))
    raw_fallback = F.when(raw_norm(F.col("raw")) != "", F.concat(F.lit("ref:"), F.substring(F.sha1(raw_norm(F.col("raw"))), 1, 16)))
    r = r.withColumn("cited_id", F.coalesce("resolved_id", F.concat(F.lit("doi:"), "doi"),
                                             F.concat(F.lit("pmid:"), "pmid"), F.col("hint_id"), fallback, raw_fallback))
    r = r.withColumn("resolved", F.col("resolved_id").isNotNull())
    # the entry's own author keys, and whether one is its citing paper's (features.shares_author)
    r = r.withColumns(author_keys_spark(F.col("authors")))
    r = r.withColumn("entry_shares_author", shares_author(citing_key_columns(), keys_of(r))).drop("a_k", "a_o")
    # A reference to the citing paper's own id (eLife lists its own data sets under the article DOI)
    # is no citation; it is rejected rather than turned into a second, title-only row of that paper.
    reason = (F.when(F.col("cited_id").isNull(), F.lit(NO_ID_REASON))
              .when(F.col("cited_id") == F.col("citing_id"), F.lit(SELF_REF_REASON)))
    r = r.withColumn("_reject", reason)
    if stash is not None:
        r = stash(r, "resolved_references")
    rejects = r.where(F.col("_reject").isNotNull()).select(
        "source_file", F.concat_ws("#", "citing_id", "ref_key").alias("record_id"), F.lit("resolve").alias("stage"),
        F.col("_reject").alias("reason"), F.col("citing_source").alias("source"), F.lit("item").alias("level"))
    # coalesced, as they were computed: a column read back from the stash is nullable, these are not
    good = r.where(F.col("_reject").isNull()).drop("_reject")
    good = good.withColumns({**keys_of(good), "entry_shares_author": F.coalesce("entry_shares_author", F.lit(False))})
    corpus_ids = papers.select(F.col("paper_id").alias("cited_id"))
    unresolved = (good.where(~F.col("resolved") & F.col("_citing_in_corpus"))
                  .join(corpus_ids, "cited_id", "left_anti"))
    # citing_fulltext stays (not a column of the references table): the mentions join only those references
    out = good.drop("citing_source", "citing_mapped", "_citing_in_corpus")
    return out, cited_only_papers(unresolved, min_citations), rejects


def cited_only_papers(unresolved: DataFrame, min_citations: int = 1) -> DataFrame:
    """One papers row per unresolved cited_id, with `kept` and `mapped` (module docstring);
    metadata from its first reference that has a title (order: has title, citing_id, ref_key), so
    the choice is deterministic.

    Two aggregates joined by cited_id, not one: a count of distinct citing papers beside the other
    aggregates makes Spark expand every row in two and sort the wide rows twice; here the count runs
    over the narrow columns and the metadata is one min over a struct led by the order (unique per
    reference, so the same row as min_by)."""
    counts = unresolved.select("cited_id", "citing_id", "citing_mapped", "citing_fulltext").groupBy("cited_id").agg(
        F.countDistinct(F.when(F.col("citing_mapped"), F.col("citing_id"))).alias("_cited_by"),
        F.max(F.coalesce("citing_fulltext", F.lit(False))).alias("_by_fulltext"))
    first = F.min(F.struct(F.col("title").isNull().alias("no_title"), "citing_id", "ref_key", "title", "authors",
                           "year", F.col("citing_source").alias("source"), "title_norm")).alias("m")
    rows = (unresolved.groupBy("cited_id").agg(first)
            .select("cited_id", "m.title", "m.authors", "m.year", "m.source", "m.title_norm")
            .join(counts, "cited_id"))
    mapped = (F.lit(min_citations) > 0) & (F.col("_cited_by") >= F.lit(min_citations))
    return rows.select(F.col("cited_id").alias("paper_id"), "title", F.lit(None).cast("string").alias("abstract"),
                       "authors", "year", F.lit(None).cast("string").alias("venue"),
                       F.array().cast("array<string>").alias("fields"), F.array().cast("array<string>").alias("keywords"),
                       F.lit(None).alias("mesh"), "source",
                       F.lit(False).alias("has_fulltext"), F.lit(None).cast("string").alias("source_file"),
                       mapped.alias("mapped"), (mapped | F.col("_by_fulltext")).alias("kept"), "title_norm")
