"""Importance stage: papers/references/mentions -> pairs, weights, triplets (+ importance_summary.json)."""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from importance.contracts import RunLayout
from importance.runtime import UserError, replace_dir
from importance.spark import get_spark, write_spark_table

TRIPLETS_META_KEY = b"sciencemap.triplets"


@dataclass
class ImportanceConfig:
    feature_set: str = "default"        # default (I,R,D,S) | all | no_I | no_M | no_R | no_D | no_S | "I,R,D,S"
    weight_method: str = "entropy"      # entropy | uniform
    scaled_score: bool = False          # score with min–max scaled features instead of raw counts
    K: int = 5
    H: int = 2                          # H = 0: SPECTER-style baseline (all citations equal)
    margin: float = 1.0                 # carried in the triplets' metadata for the trainer
    seed: int = 0
    val_fraction: float = 0.2
    anchor_fraction: float = 1.0
    shuffle_partitions: int = 8
    output_partitions: int = 2


def _read(spark, layout: RunLayout, name: str):
    p = layout.table(name)
    if not p.exists():
        raise UserError(f"table {p} does not exist; run jobs/ingest.py --run {layout.root} first")
    return spark.read.parquet(str(p))


def write_triplets(df, dest: Path, meta: dict, partitions: int | None = None) -> Path:
    """Spark writes the parts; each part is then re-written with the sampling settings in its
    Parquet key-value metadata (one part at a time, so the driver holds one part at most)."""
    import pyarrow.parquet as pq

    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    write_spark_table(df, tmp, "triplets", partitions=partitions)
    for part in sorted(tmp.glob("*.parquet")):
        t = pq.read_table(part)
        md = dict(t.schema.metadata or {})
        md[TRIPLETS_META_KEY] = json.dumps(meta).encode()
        pq.write_table(t.replace_schema_metadata(md), part)
    replace_dir(tmp, dest)
    return dest


def read_triplets_meta(path) -> dict:
    import pyarrow.parquet as pq

    parts = sorted(Path(path).glob("*.parquet"))
    if not parts:
        return {}
    md = pq.read_schema(parts[0]).metadata or {}
    return json.loads(md.get(TRIPLETS_META_KEY, b"{}"))


def run_importance(cfg: ImportanceConfig, layout: RunLayout, spark=None) -> dict:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from importance.entropy import feature_set, format_table3, score, weights_table
    from importance.features import build_pairs
    from importance.triplets import TripletConfig, sample_triplets

    t0 = time.time()
    feats = feature_set(cfg.feature_set)
    if cfg.K < 1 or not (0 <= cfg.H <= cfg.K):
        raise UserError(f"need K >= 1 and 0 <= H <= K (got K={cfg.K}, H={cfg.H})")
    for name in ("papers", "references", "mentions"):
        if not layout.table(name).exists():
            raise UserError(f"table {layout.table(name)} does not exist; run jobs/ingest.py --run {layout.root} first")
    spark = spark or get_spark(shuffle_partitions=cfg.shuffle_partitions)
    papers, refs, ments = (_read(spark, layout, n) for n in ("papers", "references", "mentions"))
    timings = {}
    pairs = build_pairs(papers, refs, ments, seed=cfg.seed).persist(StorageLevel.MEMORY_AND_DISK)
    rows = weights_table(pairs, feats, cfg.weight_method)
    timings["pairs+weights_s"] = round(time.time() - t0, 2)
    pairs = score(pairs, rows, scaled=cfg.scaled_score).persist(StorageLevel.MEMORY_AND_DISK)
    table3 = format_table3(rows)
    print(f"Table 3 ({cfg.feature_set}, {cfg.weight_method} weights, n = {pairs.count()} pairs)")
    print(table3)
    write_spark_table(pairs, layout.table("pairs"), "pairs", partitions=cfg.output_partitions)
    wdf = spark.createDataFrame([(r["feature"], r["mean"], r["std"], r["entropy"], r["weight"]) for r in rows],
                                "feature string, mean double, std double, entropy double, weight double")
    write_spark_table(wdf, layout.table("weights"), "weights", partitions=1)

    t1 = time.time()
    tcfg = TripletConfig(K=cfg.K, H=cfg.H, margin=cfg.margin, seed=cfg.seed, val_fraction=cfg.val_fraction,
                         anchor_fraction=cfg.anchor_fraction)
    trip = sample_triplets(pairs, papers, tcfg).persist(StorageLevel.MEMORY_AND_DISK)
    meta = {"K": cfg.K, "H": cfg.H, "margin": cfg.margin, "seed": cfg.seed, "feature_set": cfg.feature_set,
            "weight_method": cfg.weight_method, "scaled_score": cfg.scaled_score}
    write_triplets(trip, layout.table("triplets"), meta, partitions=cfg.output_partitions)
    counts = {(r["negative_kind"], r["split"]): r["count"] for r in trip.groupBy("negative_kind", "split").count().collect()}
    timings["triplets_s"] = round(time.time() - t1, 2)
    n_trip = sum(counts.values())
    n_hard = sum(v for (k, _), v in counts.items() if k == "hard")

    # Resolution rate per source: share of references whose cited_id is a full-text corpus paper.
    src = papers.select(F.col("paper_id").alias("citing_id"), "source")
    ft = papers.where("has_fulltext").select(F.col("paper_id").alias("cited_id"), F.lit(1).alias("_ft"))
    res = {r["source"]: {"references": r["n"], "resolved": int(r["res"] or 0),
                         "rate": round((r["res"] or 0) / r["n"], 4) if r["n"] else None}
           for r in refs.join(src, "citing_id").join(ft, "cited_id", "left").groupBy("source")
           .agg(F.count("*").alias("n"), F.sum("_ft").alias("res")).collect()}
    stats = pairs.agg(F.count("*").alias("n"), F.countDistinct("citing_id").alias("anchors"),
                      F.sum("S").alias("self"), F.sum((F.col("importance") == 0).cast("int")).alias("zero")).first()
    summary = {
        "table3": [{k: r[k] for k in ("feature", "mean", "std", "entropy", "weight")} for r in rows],
        "table3_text": table3, "n_pairs": stats["n"], "n_citing_papers": stats["anchors"],
        "share_self_citation_pairs": round((stats["self"] or 0) / stats["n"], 4) if stats["n"] else None,
        "share_zero_importance_pairs": round((stats["zero"] or 0) / stats["n"], 4) if stats["n"] else None,
        "n_triplets": n_trip, "share_hard_negatives": round(n_hard / n_trip, 4) if n_trip else None,
        "triplets_by_kind_split": {f"{k}/{s}": v for (k, s), v in sorted(counts.items())},
        "n_anchors_with_triplets": trip.select("anchor_id").distinct().count(),
        "resolution_rate_per_source": res, "triplet_meta": meta, "timings": timings,
        "seconds": round(time.time() - t0, 2), "config": asdict(cfg),
    }
    pairs.unpersist()
    trip.unpersist()
    tmp = layout.importance_summary.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2))
    tmp.replace(layout.importance_summary)
    return summary
