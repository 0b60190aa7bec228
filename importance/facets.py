"""The facet signal of each citing->cited pair (METHODS.md §8.2): how many of the pair's citing sentences
serve each facet (background / method / result), from one of two signals:

- `intent`: the citation-intent classifier's label of the sentence (`context_intents`, written by
  `jobs/facets.py intent-label`), joined on (citing paper, sentence); a mention without a labelled sentence
  counts for no facet;
- `section`: the section class as a proxy: I -> background, M -> method, R and D -> result, O none.

The counts give three facet citation graphs (edge weight = count) and the facet triplets
(importance.triplets.sample_facet_triplets).
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sciencemap.contracts import FACETS

FACET_SIGNALS = ("section", "intent")
SECTION_PROXY = {"I": "background", "M": "method", "R": "result", "D": "result"}
COUNT = {f: f"n_{f}" for f in FACETS}
# the section classes whose mentions count for each facet under the section signal (pairs' f_<class>)
SECTION_CLASSES = {f: tuple(c for c, g in SECTION_PROXY.items() if g == f) for f in FACETS}


def mention_facets(mentions: DataFrame, signal: str, context_intents: DataFrame | None = None) -> DataFrame:
    """citing_id, cited_id, facet (null: the mention serves no facet) per resolved mention."""
    ments = mentions.where(F.col("cited_id").isNotNull())
    if signal == "section":
        facet = F.element_at(F.create_map(*[F.lit(x) for kv in SECTION_PROXY.items() for x in kv]), F.col("section_class"))
        return ments.select("citing_id", "cited_id", facet.alias("facet"))
    if signal == "intent":
        if context_intents is None:
            raise ValueError("the intent signal needs the context_intents table")
        # the label command writes each sentence once per batch it read: a repeat across batches is dropped
        lab = context_intents.select("citing_id", "context", F.col("intent").alias("facet")).dropDuplicates(
            ["citing_id", "context"])
        return (ments.select("citing_id", "cited_id", "context")
                .join(lab, ["citing_id", "context"], "left").select("citing_id", "cited_id", "facet"))
    raise ValueError(f"unknown facet signal {signal!r}; use one of {FACET_SIGNALS}")


def facet_counts(mentions: DataFrame, signal: str, context_intents: DataFrame | None = None) -> DataFrame:
    """citing_id, cited_id, n_background, n_method, n_result: the pair's citing sentences per facet."""
    m = mention_facets(mentions, signal, context_intents)
    return m.groupBy("citing_id", "cited_id").agg(
        *[F.sum((F.col("facet") == f).cast("int")).alias(COUNT[f]) for f in FACETS])


def with_facet_counts(pairs: DataFrame, counts: DataFrame) -> DataFrame:
    """pairs + n_<facet> (0 where the pair has no citing sentence of it) + c_any (their sum)."""
    out = pairs.join(counts, ["citing_id", "cited_id"], "left")
    out = out.withColumns({COUNT[f]: F.coalesce(F.col(COUNT[f]), F.lit(0)) for f in FACETS})
    return out.withColumn("c_any", sum((F.col(COUNT[f]) for f in FACETS), F.lit(0)))
