"""Importance-aware triplet sampling (METHODS.md §3, the seed paper's Algorithm 1) on Spark.

Per anchor, references (cited papers that have a title) are sorted by importance descending, ties
by the seeded tie_hash ascending (then cited_id). Step t = 0..K-1 pops the most important remaining
reference as positive; for t < H the negative is the least important remaining reference (hard),
afterwards a paper the anchor does not cite (easy). Sampling stops when references run out:
with n references, step t exists iff (t < H and n >= 2t + 2) or (t >= H and n >= t + 1 + H),
so an anchor with one reference gives no triplet when H >= 1 (there is no hard negative for it).

All choices are window functions with total orders or seeded xxhash64 values, so the output does
not depend on partitioning. Easy negatives: every candidate paper (has a title) gets a hash bucket;
slot (anchor, t) looks at 3 consecutive buckets from hash(seed, anchor, t) and takes the
candidate with the smallest hash(seed, anchor, t, paper) that the anchor does not cite (and is not
the anchor). Buckets hold ~8 papers, so the join stays linear in the number of slots.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
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
    bucket_size: int = 8


def sample_triplets(pairs: DataFrame, papers: DataFrame, cfg: TripletConfig) -> DataFrame:
    """pairs: citing_id, cited_id, importance, tie_hash. papers: paper_id, title."""
    seed = int(cfg.seed)
    texts = papers.where(F.col("title").isNotNull() & (F.length(F.trim("title")) > 0)).select("paper_id")
    refs = (pairs.join(texts.withColumnRenamed("paper_id", "cited_id"), "cited_id", "left_semi")
            .join(texts.withColumnRenamed("paper_id", "citing_id"), "citing_id", "left_semi"))
    if cfg.anchor_fraction < 1.0:
        refs = refs.where(F.pmod(F.xxhash64(F.lit(seed), F.lit("anchor"), "citing_id"), F.lit(1_000_000))
                          < int(cfg.anchor_fraction * 1_000_000))
    w = Window.partitionBy("citing_id").orderBy(F.col("importance").desc(), F.col("tie_hash").asc(), F.col("cited_id").asc())
    ranked = (refs.withColumn("r", F.row_number().over(w) - 1)
              .withColumn("n", F.count(F.lit(1)).over(Window.partitionBy("citing_id"))))
    K, H = int(cfg.K), int(cfg.H)
    t_ok = lambda t: ((t < H) & (F.col("n") >= 2 * t + 2)) | ((t >= H) & (F.col("n") >= t + 1 + H))  # noqa: E731
    pos = (ranked.where((F.col("r") < K) & t_ok(F.col("r")))
           .select(F.col("citing_id").alias("anchor_id"), F.col("r").alias("t"), F.col("cited_id").alias("positive_id"), "n"))
    hard = (ranked.withColumn("t", F.col("n") - 1 - F.col("r"))
            .where((F.col("t") < H) & (F.col("t") < K) & t_ok(F.col("t")))
            .select(F.col("citing_id").alias("anchor_id"), "t", F.col("cited_id").alias("negative_id"),
                    F.lit("hard").alias("negative_kind")))
    with_hard = pos.join(hard, ["anchor_id", "t"], "inner") if H > 0 else None
    easy_slots = pos.where(F.col("t") >= H).select("anchor_id", "t", "positive_id")
    easy = easy_negatives(easy_slots, texts, pairs, seed, cfg.bucket_size)
    parts = [easy.select("anchor_id", "t", "positive_id", "negative_id", F.lit("easy").alias("negative_kind"))]
    if with_hard is not None:
        parts.append(with_hard.select("anchor_id", "t", "positive_id", "negative_id", "negative_kind"))
    trip = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    trip = remove_contradictions(trip)
    split = F.when(F.pmod(F.xxhash64(F.lit(seed), F.lit("split"), "anchor_id"), F.lit(10_000))
                   < int(round(cfg.val_fraction * 10_000)), F.lit(SPLIT_VAL)).otherwise(F.lit(SPLIT_TRAIN))
    return trip.withColumn("split", split)


def easy_negatives(slots: DataFrame, texts: DataFrame, pairs: DataFrame, seed: int, bucket_size: int = 8) -> DataFrame:
    n_cand = texts.count()  # one number to the driver: the bucket count
    B = max(1, n_cand // max(1, bucket_size))
    cands = texts.select(F.col("paper_id").alias("negative_id"),
                         F.pmod(F.xxhash64(F.lit(seed), F.lit("bucket"), "paper_id"), F.lit(B)).alias("b"))
    b0 = F.pmod(F.xxhash64(F.lit(seed), F.lit("slot"), "anchor_id", "t"), F.lit(B))
    s = slots.withColumn("b", F.explode(F.array(*[F.pmod(b0 + k, F.lit(B)) for k in range(min(3, B))])))
    cited = pairs.select(F.col("citing_id").alias("anchor_id"), F.col("cited_id").alias("negative_id"))
    j = (s.join(cands, "b").where(F.col("negative_id") != F.col("anchor_id"))
         .join(cited, ["anchor_id", "negative_id"], "left_anti")
         .withColumn("h", F.xxhash64(F.lit(seed), F.lit("easy"), "anchor_id", "t", "negative_id")))
    return j.groupBy("anchor_id", "t", "positive_id").agg(F.min_by("negative_id", F.struct("h", "negative_id")).alias("negative_id"))


def remove_contradictions(trip: DataFrame) -> DataFrame:
    """Drop triplets whose (anchor, doc) appears both as a positive and as a negative."""
    posp = trip.select("anchor_id", F.col("positive_id").alias("doc"))
    negp = trip.select("anchor_id", F.col("negative_id").alias("doc"))
    bad = posp.intersect(negp)
    return (trip.join(bad.withColumnRenamed("doc", "positive_id"), ["anchor_id", "positive_id"], "left_anti")
                .join(bad.withColumnRenamed("doc", "negative_id"), ["anchor_id", "negative_id"], "left_anti"))
