"""Importance stage: papers/references/mentions -> pairs, weights, triplets (+ importance_summary.json)."""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from sciencemap.config import setting
from sciencemap.contracts import SCHEMAS, TRIPLETS_META_KEY
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import (atomic_dir, atomic_file, read_json_metadata, require_table, temporary_sibling,
                                write_json_atomic, write_table_atomic)

from importance.entropy import WEIGHT_METHODS
from importance.ingest.spark import InputSize, SparkSettings, spark_for_stage, tables_size, write_parquet, write_spark_table


@dataclass
class ImportanceConfig(SparkSettings):  # Spark settings: importance/ingest/spark.py, docs/spark.md
    feature_set: str = setting("default", "default (I,R,D,S) | all | no_I | no_M | no_R | no_D | no_S | 'I,R,D,S'")
    weight_method: str = setting("entropy", "feature weights: entropy weight method (METHODS.md §2) or all equal",
                                 choices=WEIGHT_METHODS)
    scaled_score: bool = setting(False, "score with min–max scaled features instead of raw counts")
    K: int = setting(5, "triplets per anchor (Algorithm 1 steps, METHODS.md §3)")
    H: int = setting(2, "of the K steps, how many take a hard negative (a least important reference); "
                        "0 = SPECTER-style baseline (all citations equal)")
    margin: float = setting(1.0, "carried in the triplets' metadata for the trainer")
    seed: int = setting(0, "seed of the tie-break hash, anchor sample, easy negatives and train/val split")
    val_fraction: float = setting(0.2, "share of anchors whose triplets form the validation split")
    anchor_fraction: float = setting(1.0, "share of citing papers sampled as anchors (by hash); 1 = all")
    output_partitions: int = setting(0, "files per written table; 0 = one per ~2M rows (at most shuffle_partitions)")
    facet_signal: str = setting("none", "facet triplets beside the seed's (METHODS.md §8.2): none; section (I -> "
                                "background, M -> method, R/D -> result); intent (the citing sentence's intent: "
                                "run `jobs/facets.py intent-label` first)", choices=("none", "section", "intent"))


def _require_ingested(layout: RunLayout, name: str) -> Path:
    return require_table(layout.table(name), f"run jobs/ingest.py --run {layout.root} first")


def input_size(layout: RunLayout) -> InputSize:
    """Parquet bytes of the tables the job reads (what the Spark settings are derived from)."""
    return tables_size([layout.table(n) for n in ("papers", "references", "mentions")], "ingested tables")


def _read(spark, layout: RunLayout, name: str):
    return spark.read.parquet(str(_require_ingested(layout, name)))


def stamp_parquet_metadata(path: str, key: bytes, value: bytes) -> str:
    """Re-write one Parquet file with `key: value` added to its key-value metadata, one row group at
    a time; Spark's checksum of the old bytes is removed (a later Spark read would fail on it)."""
    import pyarrow.parquet as pq

    part = Path(path)
    f = pq.ParquetFile(part)
    md = dict(f.schema_arrow.metadata or {})
    md[key] = value
    with atomic_file(part) as out, pq.ParquetWriter(out, f.schema_arrow.with_metadata(md)) as w:
        for i in range(f.num_row_groups):
            w.write_table(f.read_row_group(i))
    part.with_name(f".{part.name}.crc").unlink(missing_ok=True)
    return path


def write_triplets(df, dest: Path, meta: dict, partitions: int | None = None) -> Path:
    """Spark writes the parts; then each part is re-written with the sampling settings in its
    Parquet key-value metadata BY THE EXECUTORS, one task per file (the driver never holds triplet
    rows: doing it here made the driver's memory grow with the corpus). Needs the run directory
    on a file system that the executors share with the driver, as every stage does."""
    with atomic_dir(dest) as tmp:
        # repartition, not coalesce: the per-anchor sampling before it keeps all cores. Row groups
        # of 16 MB (not Spark's 128 MB): the re-write holds one row group at a time.
        write_parquet(df, tmp, "triplets", partitions=partitions, shuffle=True,
                      options={"parquet.block.size": str(16 << 20)})
        parts = [str(p) for p in sorted(tmp.glob("*.parquet"))]
        value = json.dumps(meta).encode()
        df.sparkSession.sparkContext.parallelize(parts, max(1, len(parts))).foreach(
            partial(stamp_parquet_metadata, key=TRIPLETS_META_KEY, value=value))
    return dest


def read_triplets_meta(path) -> dict:
    """The sampling settings stamped on the triplets table ({} when missing)."""
    return read_json_metadata(path, TRIPLETS_META_KEY)


def _auto_partitions(n_rows: int, rows_per_file: int, cap: int) -> int:
    return max(1, min(cap, -(-n_rows // rows_per_file)))


def run_importance(cfg: ImportanceConfig, layout: RunLayout, spark=None, size: InputSize | None = None) -> dict:
    """Pairs -> weights -> scored pairs -> triplets, with few Spark jobs:
    1. pairs (one shuffle of references+mentions, two joins with papers) persisted once;
    2. ONE aggregation by source gives Table 3's inputs, pair/self/zero counts, the resolution
       rate per source and the number of candidate papers (METHODS.md §2 in one pass);
    3. write the scored pairs; 4. triplets computed once, written, counted from the written table."""
    from pyspark.sql import functions as F

    import pyarrow as pa

    from importance.entropy import COLUMN, combine_stats, feature_set, format_table3, score, stats_aggs, weights_from_stats
    from importance.features import build_pairs
    from importance.triplets import TripletConfig, has_title, sample_triplets

    t0 = time.time()
    feats = feature_set(cfg.feature_set)
    if cfg.K < 1 or not (0 <= cfg.H <= cfg.K):
        raise UserError(f"need K >= 1 and 0 <= H <= K (got K={cfg.K}, H={cfg.H})")
    for name in ("papers", "references", "mentions"):
        _require_ingested(layout, name)
    spark, used = spark_for_stage(cfg, size or input_size(layout), "importance", spark)
    papers, refs, ments = (_read(spark, layout, n) for n in ("papers", "references", "mentions"))
    timings = {}
    # Materialise the unscored pairs once as Parquet next to the outputs (faster than persist() of
    # a wide row set, and it frees executor memory): the summary aggregation, the scored pairs and
    # the triplets all read it.
    base_dir = temporary_sibling(layout.root / "pairs_base")
    sources = sorted(r[0] for r in papers.where("has_fulltext").select("source").distinct().collect() if r[0])
    build_pairs(papers, refs, ments, seed=cfg.seed, keep_summary_cols=True, sources=sources).write.parquet(str(base_dir))
    base = spark.read.parquet(str(base_dir))

    # one aggregation (grouped by source, combined on the driver): Table 3 stats + summary counts
    zero = F.lit(True)
    for f in feats:
        zero = zero & (F.col(COLUMN[f]) == 0)
    aggs = stats_aggs(feats) + [
        F.countDistinct("citing_id").alias("citing"), F.sum("S").alias("self"), F.sum(zero.cast("int")).alias("zero"),
        F.sum("n_refs").alias("refs"), F.sum(F.when(F.col("resolved"), F.col("n_refs"))).alias("resolved_refs")]
    by_src = [dict(r.asDict(), source=sources[r["src"] - 1] if r["src"] and sources else None)
              for r in base.groupBy("src").agg(*aggs).collect()]
    st = combine_stats(by_src, feats)
    rows = weights_from_stats(st, feats, cfg.weight_method, base)
    n_pairs = st["n"]
    n_cand = papers.where(has_title()).count()  # bucket count of the easy-negative sampler
    timings["pairs+weights_s"] = round(time.time() - t0, 2)

    pairs = score(base, rows, scaled=cfg.scaled_score)
    table3 = format_table3(rows)
    print(f"Table 3 ({cfg.feature_set}, {cfg.weight_method} weights, n = {n_pairs} pairs)")
    print(table3)
    out_parts = cfg.output_partitions or _auto_partitions(n_pairs, 2_000_000, used.shuffle_partitions)
    write_spark_table(pairs, layout.table("pairs"), "pairs", partitions=out_parts)
    write_table_atomic(pa.table({k: [r[k] for r in rows] for k in ("feature", "mean", "std", "entropy", "weight")}),
                       layout.table("weights"), SCHEMAS["weights"])
    timings["write_pairs_s"] = round(time.time() - t0 - timings["pairs+weights_s"], 2)

    t1 = time.time()
    tcfg = TripletConfig(K=cfg.K, H=cfg.H, margin=cfg.margin, seed=cfg.seed, val_fraction=cfg.val_fraction,
                         anchor_fraction=cfg.anchor_fraction)
    trip = sample_triplets(pairs, papers, tcfg, n_candidates=n_cand)
    facet_pairs = {}
    if cfg.facet_signal != "none":
        trip, facet_pairs = _with_facet_triplets(trip, pairs, ments, papers, tcfg, cfg.facet_signal, layout, spark, n_cand)
    meta = {"K": cfg.K, "H": cfg.H, "margin": cfg.margin, "seed": cfg.seed, "feature_set": cfg.feature_set,
            "weight_method": cfg.weight_method, "scaled_score": cfg.scaled_score, "facet_signal": cfg.facet_signal}
    # computed once, written, then counted from the written table (cheaper than persisting it)
    trip_parts = cfg.output_partitions or _auto_partitions(n_pairs // 10, 2_000_000, used.shuffle_partitions)
    write_triplets(trip, layout.table("triplets"), meta, partitions=trip_parts)
    written = spark.read.parquet(str(layout.table("triplets")))
    tcount = written.groupBy("negative_kind", "split", "facet").agg(F.count(F.lit(1)).alias("n")).collect()
    counts = {(r["negative_kind"], r["split"]): r["n"] for r in tcount if r["facet"] is None}
    by_facet = {}
    for r in tcount:
        if r["facet"] is not None:
            d = by_facet.setdefault(r["facet"], {})
            d[f"{r['negative_kind']}/{r['split']}"] = d.get(f"{r['negative_kind']}/{r['split']}", 0) + r["n"]
    n_trip = sum(counts.values())
    timings["triplets_s"] = round(time.time() - t1, 2)
    n_hard = sum(v for (k, _), v in counts.items() if k == "hard")
    anchors = written.where(F.col("facet").isNull()).select(F.countDistinct("anchor_id")).first()[0]

    res = {r["source"]: {"references": r["refs"], "resolved": int(r["resolved_refs"] or 0),
                         "rate": round((r["resolved_refs"] or 0) / r["refs"], 4) if r["refs"] else None}
           for r in sorted(by_src, key=lambda r: str(r["source"]))}
    n_self, n_zero = sum(r["self"] or 0 for r in by_src), sum(r["zero"] or 0 for r in by_src)
    summary = {
        "table3": [{k: r[k] for k in ("feature", "mean", "std", "entropy", "weight")} for r in rows],
        "table3_text": table3, "n_pairs": n_pairs, "n_citing_papers": sum(r["citing"] for r in by_src),
        "share_self_citation_pairs": round(n_self / n_pairs, 4) if n_pairs else None,
        "share_zero_importance_pairs": round(n_zero / n_pairs, 4) if n_pairs else None,
        "n_triplets": n_trip, "share_hard_negatives": round(n_hard / n_trip, 4) if n_trip else None,
        "triplets_by_kind_split": {f"{k}/{s}": v for (k, s), v in sorted(counts.items())},
        "n_anchors_with_triplets": anchors,
        **({"facet_triplets": {f: {"pairs": facet_pairs[f], "triplets": sum(by_facet.get(f, {}).values()),
                                   "by_kind_split": dict(sorted(by_facet.get(f, {}).items()))} for f in facet_pairs}}
           if facet_pairs else {}),
        "resolution_rate_per_source": res, "triplet_meta": meta, "timings": timings,
        "seconds": round(time.time() - t0, 2), "config": asdict(cfg), "spark": used.record(),
    }
    shutil.rmtree(base_dir, ignore_errors=True)
    write_json_atomic(layout.importance_summary, summary)
    return summary


def _with_facet_triplets(trip, pairs, ments, papers, tcfg, signal: str, layout: RunLayout, spark, n_cand: int):
    """The seed triplets + one set of facet triplets per facet (METHODS.md §8.2), and the number of
    pairs each facet graph holds. The section signal is read off the pairs' own counts (f_<class>
    summed by SECTION_CLASSES: no second pass over the mentions); the intent signal joins the mentions with
    the labelled citing sentences."""
    from pyspark.sql import functions as F

    from importance.facets import COUNT, SECTION_CLASSES, facet_counts, with_facet_counts
    from importance.triplets import sample_facet_triplets
    from sciencemap.contracts import FACETS

    if signal == "section":   # columns of the pairs themselves: no join
        fp = pairs.withColumns({COUNT[f]: sum((F.col(f"f_{c}") for c in SECTION_CLASSES[f]), F.lit(0)) for f in FACETS})
        fp = fp.withColumn("c_any", sum((F.col(COUNT[f]) for f in FACETS), F.lit(0)))
    else:
        intents = layout.table("context_intents")
        require_table(intents, f"run `python jobs/facets.py intent-label --run {layout.root}` first (facet_signal = intent)")
        fp = with_facet_counts(pairs, facet_counts(ments, "intent", spark.read.parquet(str(intents))))
    n_pairs = fp.select(*[F.sum((F.col(COUNT[f]) > 0).cast("int")).alias(f) for f in FACETS]).first().asDict()
    trip = trip.unionByName(sample_facet_triplets(fp, papers, tcfg, {f: COUNT[f] for f in FACETS}, n_candidates=n_cand))
    return trip, {f: int(n_pairs[f] or 0) for f in FACETS}
