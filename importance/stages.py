"""The importance package's stages, registered through the `sciencemap.stages` entry points.

ingest and importance run on Spark; they share one SparkSession per process (the runner's or the
job door's StageContext), made here on first use and stopped, its JVM with it, when the context
closes or (the pipeline) once no later stage shares it.
"""
from __future__ import annotations

import json

from sciencemap.stages import Stage, StageContext

from importance.generate import GenerateConfig
from importance.ingest.job import IngestConfig
from importance.job import ImportanceConfig


def spark_session(ctx: StageContext, cfg, size, stage: str):
    """The shared session; the first Spark stage starts it with the settings derived for it."""
    from importance.ingest.spark import start_spark, stop_spark

    return ctx.shared("spark", lambda: start_spark(cfg, size, stage), close=stop_spark)


def _ingest(cfg, layout, ctx):
    from importance.ingest.job import check_inputs, input_size, list_input, run_ingest

    check_inputs(cfg)  # before Spark starts: a wrong path is one sentence, not a JVM log
    listings = [list_input(spec) for spec in cfg.inputs]  # one walk of each input root
    size = input_size(cfg.inputs, listings)
    return run_ingest(cfg, layout, spark=spark_session(ctx, cfg, size, "ingest"), size=size, listings=listings)


def _show_ingest(s: dict) -> str:
    skipped = s.get("skipped_files", {}).get("total", 0)
    return (json.dumps(s["per_source"], indent=1) +
            f"\ningest done in {s['seconds']} s; counts add up: {s['check_input_equals_papers_plus_rejects']}; "
            f"every file accounted for: {s.get('check_files_found_equals_accounted')} ({skipped:,} skipped, "
            f"{s.get('warnings', {}).get('total', 0):,} warnings)")


def _importance(cfg, layout, ctx):
    from importance.job import input_size, run_importance

    size = input_size(layout)
    return run_importance(cfg, layout, spark=spark_session(ctx, cfg, size, "importance"), size=size)


def _show_importance(s: dict) -> str:
    keys = ("n_pairs", "n_triplets", "share_hard_negatives", "resolution_rate_per_source", "seconds")
    return json.dumps({k: s[k] for k in keys}, indent=1)


def _generate(cfg, layout, ctx):
    from importance.generate import run_generate

    return run_generate(cfg, layout)


INGEST = Stage("ingest", 10, IngestConfig, _ingest, creates_run=True, show=_show_ingest, shares=("spark",),
               summary="Read full-text papers (JATS, ScisummNet, S2ORC/unarXive, MEDLINE, PubMed CSV) into "
                       "the papers, references, mentions, rejects, warnings and files tables (Spark).")
IMPORTANCE = Stage("importance", 20, ImportanceConfig, _importance, show=_show_importance, shares=("spark",),
                   summary="Citation features per citing->cited pair, entropy weights (Table 3), importance "
                           "scores and Algorithm 1 training triplets (Spark).")
GENERATE = Stage("generate", 5, GenerateConfig, _generate, creates_run=True, in_pipeline=False,
                 summary="Write a synthetic corpus (papers, references, mentions, rejects) for scale tests "
                         "(importance/generate.py documents the model).")
