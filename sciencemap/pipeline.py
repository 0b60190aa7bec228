"""The runner behind jobs/pipeline.py: the registered stages in order, in one process, except a
stage's part that reads nothing an earlier stage writes (Stage.beside, Stage.early: evaluate's
measurements beside the render stage), which runs in a process of its own beside that stage.

Stages share one StageContext, so the two Spark stages share one SparkSession. `stages.json` in
the run directory records each finished stage with a hash of its settings; a restarted run skips
those, which is how an interrupted pipeline resumes. A stage re-run invalidates every stage after it.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from sciencemap.config import check_settings, config_from, load_toml
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.stages import Stage, StageContext, all_stages, pipeline_stages
from sciencemap.storage import write_json_atomic


@dataclass
class PipelineOptions:
    run: Path
    config: str | None = None
    first: str | None = None
    last: str | None = None
    force: bool = False


def settings_hash(cfg) -> str:
    """What a finished stage is recorded with: its settings, less those its outputs do not depend on
    (setting(outputs=False))."""
    skip = {f.name for f in fields(cfg) if not f.metadata.get("outputs", True)}
    settings = {k: v for k, v in asdict(cfg).items() if k not in skip}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def select(stages: list[Stage], first: str | None, last: str | None) -> list[Stage]:
    names = [s.name for s in stages]
    for n in (first, last):
        if n is not None and n not in names:
            raise UserError(f"unknown stage {n!r}; stages are {names}")
    i = names.index(first) if first else 0
    j = names.index(last) if last else len(stages) - 1
    if i > j:
        raise UserError(f"--from {first} comes after --to {last}; swap them")
    return stages[i : j + 1]


def run_pipeline(opts: PipelineOptions) -> dict:
    stages = pipeline_stages()
    names = [s.name for s in stages]
    # every stage's section is known ([place] too, which jobs/place.py reads from the same file)
    toml = load_toml(opts.config, sections=[s.name for s in all_stages()])
    chosen = select(stages, opts.first, opts.last)
    configs = {s.name: config_from(s.config, toml.get(s.name), origin=f"config file {opts.config} [{s.name}]")
               for s in chosen}  # all settings checked up front
    for s in all_stages():   # the other sections' settings too: a mistake there is found now, not later
        if s.name in toml and s.name not in configs:
            check_settings(s.config, toml[s.name], origin=f"config file {opts.config} [{s.name}]")
    layout = RunLayout(Path(opts.run))
    layout.root.mkdir(parents=True, exist_ok=True)
    if opts.config:
        shutil.copyfile(opts.config, layout.config_used)
    state = json.loads(layout.stages_json.read_text()) if layout.stages_json.exists() else {}

    summaries, t_start = {}, time.time()
    started_early: dict[str, tuple[float, str]] = {}   # stage -> (when its early part started, beside which stage)
    with StageContext(pipeline=True) as ctx:
        for stage in chosen:
            cfg = configs[stage.name]
            digest = settings_hash(cfg)
            done = state.get(stage.name)
            if done and done["settings"] == digest and not opts.force:
                print(f"[{stage.name}] already done with these settings ({done['seconds']:.1f} s); skipped")
                continue
            t0, beside = started_early.pop(stage.name, (time.time(), None))
            print(f"[{stage.name}] starting" + (f" (its early part running since {beside} started)" if beside else ""),
                  flush=True)
            rest = chosen[chosen.index(stage) + 1:]
            for later in rest:
                # this stage runs, so every later one will: a part that reads nothing this stage
                # writes starts now, beside it
                if later.early is not None and later.beside is not None and later.beside(configs[later.name]) == stage.name:
                    print(f"[{later.name}] starting beside {stage.name}, in a process of its own", flush=True)
                    started_early[later.name] = (time.time(), stage.name)
                    ctx.start_early(later.name, later.early, configs[later.name], layout)
            summaries[stage.name] = stage.run(cfg, layout, ctx)
            seconds = time.time() - t0
            print(f"[{stage.name}] done in {seconds:.1f} s", flush=True)
            for later in names[names.index(stage.name) + 1 :]:
                state.pop(later, None)
            state[stage.name] = {"settings": digest, "seconds": seconds, "finished": time.time()}
            write_json_atomic(layout.stages_json, state)
            for name in ctx.held():     # e.g. the Spark JVM, its heap, once the Spark stages are done
                if not any(name in s.shares for s in rest):
                    ctx.release(name)
    print(f"pipeline finished in {time.time() - t_start:.1f} s; outputs in {layout.root}")
    if layout.report_md.exists():
        print(f"report: {layout.report_md}")
    return summaries
