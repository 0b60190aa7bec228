"""The stage list and the runner behind jobs/pipeline.py.

Stages run in one process: the two Spark stages share one local SparkSession, the torch and
mapping stages follow. `stages.json` in the run directory records each finished stage with a hash
of its settings; a restarted run skips those, which is how an interrupted pipeline resumes.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from importance.contracts import RunLayout
from importance.runtime import UserError, config_from, load_toml


@dataclass(frozen=True)
class Stage:
    name: str
    module: str
    config_class: str
    function: str
    spark: bool = False


STAGES = (
    Stage("ingest", "importance.ingest", "IngestConfig", "run_ingest", spark=True),
    Stage("importance", "importance.job", "ImportanceConfig", "run_importance", spark=True),
    Stage("train", "encoders.train", "TrainConfig", "run_train"),
    Stage("embed", "encoders.embed", "EmbedConfig", "run_embed"),
    Stage("knn", "mapping.knn", "KnnConfig", "run_knn"),
    Stage("cluster", "mapping.cluster", "ClusterConfig", "run_cluster"),
    Stage("render", "mapping.render", "RenderConfig", "run_render"),
    Stage("evaluate", "mapping.evaluate", "EvaluateConfig", "run_evaluate"),
)
STAGE_NAMES = [s.name for s in STAGES]


@dataclass
class PipelineOptions:
    run: Path
    config: str | None = None
    first: str | None = None
    last: str | None = None
    force: bool = False


def _settings_hash(cfg) -> str:
    return hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True, default=str).encode()).hexdigest()[:16]


def _selected(first: str | None, last: str | None) -> list[Stage]:
    i = STAGE_NAMES.index(first) if first else 0
    j = STAGE_NAMES.index(last) if last else len(STAGES) - 1
    if i > j:
        raise UserError(f"--from {first} comes after --to {last}; swap them")
    return list(STAGES[i : j + 1])


def run_pipeline(opts: PipelineOptions) -> dict:
    toml = load_toml(opts.config)
    unknown = sorted(set(toml) - set(STAGE_NAMES))
    if unknown:
        raise UserError(f"config {opts.config} has unknown section(s) {unknown}; stages are {STAGE_NAMES}")
    layout = RunLayout(Path(opts.run))
    layout.root.mkdir(parents=True, exist_ok=True)
    if opts.config:
        shutil.copyfile(opts.config, layout.config_used)
    state_file = layout.root / "stages.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}

    spark = None
    summaries, t_start = {}, time.time()
    try:
        for stage in _selected(opts.first, opts.last):
            mod = importlib.import_module(stage.module)
            cfg = config_from(getattr(mod, stage.config_class), toml.get(stage.name))
            digest = _settings_hash(cfg)
            done = state.get(stage.name)
            if done and done["settings"] == digest and not opts.force:
                print(f"[{stage.name}] already done with these settings ({done['seconds']:.1f} s); skipped")
                continue
            print(f"[{stage.name}] starting", flush=True)
            t0 = time.time()
            kwargs = {}
            if stage.spark:
                if spark is None:
                    from importance.spark import get_spark

                    spark = get_spark()
                kwargs["spark"] = spark
            summary = getattr(mod, stage.function)(cfg, layout, **kwargs)
            seconds = time.time() - t0
            summaries[stage.name] = summary
            print(f"[{stage.name}] done in {seconds:.1f} s", flush=True)
            # A stage re-run invalidates everything after it.
            for later in STAGE_NAMES[STAGE_NAMES.index(stage.name) + 1 :]:
                state.pop(later, None)
            state[stage.name] = {"settings": digest, "seconds": seconds, "finished": time.time()}
            tmp = state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=2))
            os.replace(tmp, state_file)
    finally:
        if spark is not None:
            spark.stop()
    print(f"pipeline finished in {time.time() - t_start:.1f} s; outputs in {layout.root}")
    if layout.report_md.exists():
        print(f"report: {layout.report_md}")
    return summaries
