"""Importance-aware triplet sampling (METHODS.md §3, the seed paper's Algorithm 1) on Spark.

Per anchor, references (cited papers that have a title) are sorted by importance descending, ties
by the seeded tie_hash ascending (then cited_id). Step t = 0..K-1 pops the most important remaining
reference as positive; for t < H the negative is the least important remaining reference (hard),
afterwards a paper the anchor does not cite (easy). Sampling stops when references run out:
with n references, step t exists iff (t < H and n >= 2t + 2) or (t >= H and n >= t + 1 + H),
so an anchor with one reference gives no triplet when H >= 1 (there is no hard negative for it).

All choices are sorts with total orders or seeded xxhash64 values (min over sets), so the output
does not depend on partitioning. Easy negatives: every candidate paper (has a title) gets a hash
bucket of ~24 papers; an anchor looks at the bucket hash(seed, anchor) and step t takes the
candidate with the smallest hash(seed, anchor, t, paper) that the anchor does not cite (and is not
the anchor). The join stays linear in the number of anchors.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from importance.contracts import SPLIT_TRAIN, SPLIT_VAL


@dataclass
class TripletConfig:
    K: int = 5
    H: int = 2
    margin: float = 1.0
    seed: int = 0
    val_fraction: float = 0.2
    anchor_fraction: float = 1.0   # sample of anchors (hash-based); 1 = all
    bucket_size: int = 24


def has_title(col="title"):
    return F.col(col).isNotNull() & (F.length(F.trim(col)) > 0)


def sample_triplets(pairs: DataFrame, papers: DataFrame, cfg: TripletConfig, n_candidates: int | None = None) -> DataFrame:
    """pairs: citing_id, cited_id, importance, tie_hash [, has_text: both papers have a title, which
    saves two joins]. papers: paper_id, title. n_candidates: number of papers with a title, if known.

    One shuffle groups each anchor's references into an array sorted by (importance desc, tie_hash,
    cited_id); the anchor row joins its bucket of easy candidates; its triplets are then built from
    its arrays (positive = L[t], hard negative = L[n-1-t], easy = min-hash candidate), so Algorithm
    1 and the removal of contradictions need no window."""
    seed = int(cfg.seed)
    texts = papers.where(has_title()).select("paper_id")
    if "has_text" in pairs.columns:
        refs = pairs.where("has_text")
    else:
        refs = (pairs.join(texts.withColumnRenamed("paper_id", "cited_id"), "cited_id", "left_semi")
                .join(texts.withColumnRenamed("paper_id", "citing_id"), "citing_id", "left_semi"))
    if cfg.anchor_fraction < 1.0:
        refs = refs.where(F.pmod(F.xxhash64(F.lit(seed), F.lit("anchor"), "citing_id"), F.lit(1_000_000))
                          < int(cfg.anchor_fraction * 1_000_000))
    K, H = int(cfg.K), int(cfg.H)
    # L: the anchor's references as structs sorted by (importance desc, tie_hash, cited_id); ids are
    # read with element_at(L, i).cited_id (a transform to an id array would be inlined into every
    # use by the optimizer and recomputed per element)
    lists = refs.groupBy(F.col("citing_id").alias("anchor_id")).agg(F.sort_array(F.collect_list(F.struct(
        (-F.col("importance")).alias("ni"), "tie_hash", "cited_id"))).alias("L"))
    n = F.size("L")
    lists = lists.where(n >= (2 if H > 0 else 1))  # fewer references give no step at all

    B = max(1, (texts.count() if n_candidates is None else n_candidates) // max(1, cfg.bucket_size))
    buckets = (texts.select(F.col("paper_id").alias("id"),
                            F.pmod(F.xxhash64(F.lit(seed), F.lit("bucket"), "paper_id"), F.lit(B)).alias("b"))
               .groupBy("b").agg(F.collect_list("id").alias("C")))

    def at(i):  # 1-based
        return F.element_at("L", i)["cited_id"]

    def ok(t):  # step t exists (module docstring); the valid steps are a prefix 0..T-1
        return ((t < H) & (n >= 2 * t + 2)) | ((t >= H) & (n >= t + 1 + H))

    seq = F.sequence(F.lit(0), F.lit(K - 1))
    pos = F.transform(F.filter(seq, ok), lambda t: at(t + 1))                                  # all positives
    hard_neg = F.transform(F.filter(seq, lambda t: ok(t) & (t < H)), lambda t: at(n - t))     # hard negatives
    # Contradictions (a document both a positive and a negative of one anchor) need a repeated cited
    # id in L (a pairs table with duplicate rows); easy negatives are outside L by construction. They
    # are dropped per anchor, on its arrays. Each select materialises its arrays once (a filter on
    # them would be pushed down and inline them again per use).
    lists = lists.select("anchor_id", "L", pos.alias("P"), hard_neg.alias("NH"))
    hard = F.filter(F.transform(F.filter(seq, lambda t: ok(t) & (t < H)), lambda t: F.struct(
        t.alias("t"), at(t + 1).alias("positive_id"), at(n - t).alias("negative_id"), F.lit("hard").alias("negative_kind"))),
        lambda x: ~F.array_contains("NH", x["positive_id"]) & ~F.array_contains("P", x["negative_id"]))
    slots = F.filter(F.transform(F.filter(seq, lambda t: ok(t) & (t >= H)), lambda t: F.struct(
        t.alias("t"), at(t + 1).alias("positive_id"))), lambda x: ~F.array_contains("NH", x["positive_id"]))
    # what travels to the bucket join: the hard triplets, the easy slots and L's ids as 64-bit hashes
    # (a hash collision can only exclude a candidate, never let a cited paper through)
    lists = lists.select("anchor_id", hard.alias("T"), slots.alias("E"),
                         F.transform("L", lambda x: F.xxhash64(x["cited_id"])).alias("LH"),
                         F.pmod(F.xxhash64(F.lit(seed), F.lit("slot"), "anchor_id"), F.lit(B)).alias("b"))
    # easy slots meet the anchor's bucket of candidates (C): not the anchor, not cited by it
    lists = lists.join(buckets, "b", "left") if K > H else lists.withColumn("C", F.lit(None).cast("array<string>"))
    cands = F.filter(F.coalesce("C", F.array().cast("array<string>")),
                     lambda c: (c != F.col("anchor_id")) & ~F.array_contains("LH", F.xxhash64(c)))
    lists = lists.select("anchor_id", "T", "E", cands.alias("C"))

    def easy(t):
        return F.array_min(F.transform("C", lambda c: F.struct(
            F.xxhash64(F.lit(seed), F.lit("easy"), F.col("anchor_id"), t, c).alias("h"), c.alias("id"))))["id"]

    easy_trip = F.filter(F.transform("E", lambda e: F.struct(e["t"].alias("t"), e["positive_id"].alias("positive_id"),
                                                           easy(e["t"]).alias("negative_id"),
                                                           F.lit("easy").alias("negative_kind"))),
                         lambda x: x["negative_id"].isNotNull())
    trip = lists.select("anchor_id", F.explode(F.concat("T", easy_trip)).alias("x")).select(
        "anchor_id", "x.t", "x.positive_id", "x.negative_id", "x.negative_kind")
    split = F.when(F.pmod(F.xxhash64(F.lit(seed), F.lit("split"), "anchor_id"), F.lit(10_000))
                   < int(round(cfg.val_fraction * 10_000)), F.lit(SPLIT_VAL)).otherwise(F.lit(SPLIT_TRAIN))
    return trip.withColumn("split", split)

