"""Importance-aware triplet sampling (METHODS.md §3, the seed paper's Algorithm 1) on Spark.

Per anchor, references (cited papers that have a title) are sorted by importance descending, ties
by the seeded tie_hash ascending (then cited_id). Step t = 0..K-1 pops the most important remaining
reference as positive; for t < H the negative is the least important remaining reference (hard),
afterwards a paper the anchor does not cite (easy). Sampling stops when references run out:
with n references, step t exists iff (t < H and n >= 2t + 2) or (t >= H and n >= t + 1 + H),
so an anchor with one reference gives no triplet when H >= 1 (there is no hard negative for it).

All choices are sorts with total orders or seeded xxhash64 values (min over sets), so the output
does not depend on partitioning. Easy negatives: every candidate paper (has a title) gets a hash
bucket; slot (anchor, t) looks at 3 consecutive buckets from hash(seed, anchor, t) and takes the
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


def has_title(col="title"):
    return F.col(col).isNotNull() & (F.length(F.trim(col)) > 0)


def sample_triplets(pairs: DataFrame, papers: DataFrame, cfg: TripletConfig, n_candidates: int | None = None) -> DataFrame:
    """pairs: citing_id, cited_id, importance, tie_hash [, has_text: both papers have a title, which
    saves two joins]. papers: paper_id, title. n_candidates: number of papers with a title, if known.

    One shuffle groups each anchor's references into an array sorted by (importance desc, tie_hash,
    cited_id); steps t are generated from the array (positive = L[t], hard negative = L[n-1-t]),
    so Algorithm 1 needs no window and no join; easy slots join a small table of candidate buckets."""
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
    lists = refs.groupBy(F.col("citing_id").alias("anchor_id")).agg(F.sort_array(F.collect_list(F.struct(
        (-F.col("importance")).alias("ni"), "tie_hash", "cited_id"))).alias("L"))
    lists = lists.select("anchor_id", F.transform("L", lambda x: x["cited_id"]).alias("L"))
    n = F.size("L")
    steps = lists.select("anchor_id", "L", F.explode(F.sequence(F.lit(0), F.lit(K - 1))).alias("t"))
    ok = ((F.col("t") < H) & (n >= 2 * F.col("t") + 2)) | ((F.col("t") >= H) & (n >= F.col("t") + 1 + H))
    steps = steps.where(ok).withColumn("positive_id", F.element_at("L", F.col("t") + 1))
    hard = steps.where(F.col("t") < H).select(
        "anchor_id", "t", "positive_id", F.element_at("L", n - F.col("t")).alias("negative_id"),
        F.lit("hard").alias("negative_kind"))
    easy = easy_negatives(steps.where(F.col("t") >= H).select("anchor_id", "t", "positive_id", "L"),
                          texts, None, seed, cfg.bucket_size, n_candidates)
    trip = hard.unionByName(easy.select("anchor_id", "t", "positive_id", "negative_id", F.lit("easy").alias("negative_kind")))
    trip = remove_contradictions(trip)
    split = F.when(F.pmod(F.xxhash64(F.lit(seed), F.lit("split"), "anchor_id"), F.lit(10_000))
                   < int(round(cfg.val_fraction * 10_000)), F.lit(SPLIT_VAL)).otherwise(F.lit(SPLIT_TRAIN))
    return trip.withColumn("split", split)


def easy_negatives(slots: DataFrame, texts: DataFrame, pairs: DataFrame | None, seed: int, bucket_size: int = 8,
                   n_candidates: int | None = None) -> DataFrame:
    """slots: anchor_id, t, positive_id [, L = the anchor's cited ids]. Candidates (papers with a
    title) are hashed into B buckets of ~bucket_size; slot (anchor, t) sees the buckets b0, b0+1,
    b0+2 from hash(seed, anchor, t) and takes the candidate with the smallest hash(seed, anchor, t,
    paper) that is not the anchor and not cited by it (not in L; without L, an anti-join with pairs)."""
    n_cand = texts.count() if n_candidates is None else n_candidates  # one number: the bucket count
    B = max(1, n_cand // max(1, bucket_size))
    W = min(3, B)
    cands = texts.select(F.col("paper_id").alias("id"),
                         F.pmod(F.xxhash64(F.lit(seed), F.lit("bucket"), "paper_id"), F.lit(B)).alias("b"))
    # window table: b0 -> candidates of buckets b0 .. b0+W-1 (W rows per candidate, grouped once)
    win = (cands.select("id", F.explode(F.array(*[F.pmod(F.col("b") - k, F.lit(B)) for k in range(W)])).alias("b0"))
           .groupBy("b0").agg(F.collect_list("id").alias("C")))
    s = slots.withColumn("b0", F.pmod(F.xxhash64(F.lit(seed), F.lit("slot"), "anchor_id", "t"), F.lit(B)))
    if "L" not in slots.columns:
        cited = pairs.groupBy(F.col("citing_id").alias("anchor_id")).agg(F.collect_list("cited_id").alias("L"))
        s = s.join(cited, "anchor_id", "left")
    j = s.join(win, "b0")
    L = F.coalesce(F.col("L"), F.array().cast("array<string>"))
    ok = F.filter("C", lambda c: (c != F.col("anchor_id")) & ~F.array_contains(L, c))
    best = F.array_min(F.transform(ok, lambda c: F.struct(
        F.xxhash64(F.lit(seed), F.lit("easy"), F.col("anchor_id"), F.col("t"), c).alias("h"), c.alias("id"))))
    return j.select("anchor_id", "t", "positive_id", best["id"].alias("negative_id")).where(F.col("negative_id").isNotNull())


def remove_contradictions(trip: DataFrame) -> DataFrame:
    """Drop triplets whose (anchor, doc) appears both as a positive and as a negative.

    An anchor has at most K triplets, so one window over the anchor (one shuffle of the triplets)
    collects its positives and negatives; no intersect and no anti-joins. (With the sampling above
    a contradiction cannot arise: hard negatives are other references, easy ones are uncited; the
    check guards the contract.)"""
    w = Window.partitionBy("anchor_id")
    return (trip.withColumn("_pos", F.collect_set("positive_id").over(w))
                .withColumn("_neg", F.collect_set("negative_id").over(w))
                .where(~F.array_contains("_neg", F.col("positive_id")) & ~F.array_contains("_pos", F.col("negative_id")))
                .drop("_pos", "_neg"))
