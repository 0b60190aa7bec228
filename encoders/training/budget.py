"""Training bounded by a budget (METHODS.md §4.5): `[train] max_tokens` and / or `max_hours` fix the
number of optimizer steps before the first one, so that the learning-rate schedule (warm-up, then
linear decay) is planned for the real length and a resumed run follows the same trajectory.

    probe     the train triplets of the first anchors in the seeded sample order
              (triplet_table.sample_anchors), enough for PROBE_STEPS + 1 steps and at least
              PROBE_TRIPLETS, tokenized apart: their mean tokens per paper, and for max_hours the
              seconds per optimizer step, timed on them (encoders.training.loop.time_steps)
    plan      budget steps = min(max_tokens / tokens per step, max_hours / seconds per step); when
              they are fewer than one pass over the table, a seeded sample of whole anchors'
              triplets (SAMPLE_SPARE more than the steps read) becomes the train data, and only it
              is tokenized
    steps     the run's steps: min(the epochs / max_steps plan, the token steps recomputed on the
              data actually tokenized, the hours steps, one pass over a sample)
    seen      what those steps read (triplets, papers, tokens), recomputed from the data order

The plan is kept in <run>/train_tokens/plan.json: a re-run with the same inputs and settings reuses
it (a step time is measured once), so a resumed run trains on the same sample for the same steps.
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
from typing import Callable

import numpy as np

from sciencemap.layout import RunLayout
from sciencemap.runtime import Dist, UserError, say
from sciencemap.storage import write_json_atomic

from encoders.config import TrainConfig
from encoders.training import triplet_table
from encoders.training.item_store import build_at
from encoders.training.triplet_table import TripletTokens
from encoders.training.feed import shard_order

PROBE_STEPS = 2          # timed steps, after one untimed (allocations, kernel choice)
PROBE_TRIPLETS = 1024    # for a steady mean of tokens per paper
SAMPLE_SPARE = 1.05      # the probe's mean length is an estimate: a slightly short one must not end the pass early
WALL_CLOCK_SLACK = 1.1   # the hard stop: steps running 10% over max_hours (a slower node than the one measured)
PLAN = "plan.json"
PROBE = "probe"


def check_budget(cfg: TrainConfig) -> None:
    for name in ("max_tokens", "max_hours"):
        if getattr(cfg, name) < 0:
            raise UserError(f"train setting {name}={getattr(cfg, name)} must be >= 0 (0 = no budget)")


def has_budget(cfg: TrainConfig) -> bool:
    return bool(cfg.max_tokens or cfg.max_hours)


def steps_per_epoch(n: int, cfg: TrainConfig, world: int) -> int:
    return math.ceil(math.ceil(math.ceil(n / world) / cfg.batch_size) / cfg.grad_accum)


def triplets_per_step(cfg: TrainConfig, world: int) -> int:
    return cfg.batch_size * cfg.grad_accum * world


def token_steps(cfg: TrainConfig, world: int, tokens_per_paper: float) -> int:
    """Steps within max_tokens: each reads batch_size x grad_accum x world triplets of 3 papers."""
    per_step = triplets_per_step(cfg, world) * 3 * tokens_per_paper
    steps = int(cfg.max_tokens // per_step)
    if steps < 1:
        raise UserError(f"train setting max_tokens={cfg.max_tokens} is less than one optimizer step "
                        f"(about {per_step:.0f} tokens here); raise it or set 0 for no token budget")
    return steps


def hours_steps(cfg: TrainConfig, seconds_per_step: float) -> int:
    steps = int(cfg.max_hours * 3600 // seconds_per_step)
    if steps < 1:
        raise UserError(f"train setting max_hours={cfg.max_hours} is less than one optimizer step "
                        f"({seconds_per_step:.2f} s measured here); raise it or set 0 for no time budget")
    return steps


def plan_budget(cfg: TrainConfig, layout: RunLayout, enc, dist: Dist, settings: dict,
                time_steps: Callable[[TripletTokens], float], objective) -> dict:
    """The budget's plan (see the module doc), the same on every rank; reused from plan.json when
    the inputs and `settings` are those it was made for (and cfg.resume). The objective gives the
    probe: a sample of its own rows, tokenized its own way (budget_probe: the run's triplets by
    default, FLeW's and UniFAR's facet item store), with what else it reads in the key (budget_inputs)."""
    inputs = {**triplet_table.cache_inputs(layout, enc.path, enc.max_length, enc.sep, cfg.val_max, cfg.seed),
              **objective.budget_inputs(layout)}
    key = hashlib.sha256(json.dumps([inputs, settings, dist.world], sort_keys=True, default=str)
                         .encode()).hexdigest()[:16]
    path = layout.train_tokens_dir / PLAN
    kept = None
    if dist.main and cfg.resume and path.is_file():
        kept = json.loads(path.read_text())
        kept = kept if kept.get("key") == key else None
    kept = dist.broadcast(kept)
    if kept:
        if dist.main:
            say(f"train: reusing the budget plan in {path}")
        return kept

    per_step = triplets_per_step(cfg, dist.world)
    probe_size = max(PROBE_TRIPLETS, (PROBE_STEPS + 1) * per_step)
    folder = layout.train_tokens_dir / PROBE
    if dist.main:
        layout.train_tokens_dir.mkdir(parents=True, exist_ok=True)
        build_at(folder, inputs, lambda tmp: objective.budget_probe(layout, enc, tmp, probe_size))
    dist.barrier()
    probe = objective.open_data(folder)
    available = probe.counts["train_triplets_available"]
    if len(probe.train["a"]) == 0:
        raise UserError(f"no usable train triplets in {layout.table('triplets')} "
                        f"({probe.counts['triplets_total']} rows); run the importance stage on a corpus "
                        "with resolved references")
    plan = {"key": key, "max_tokens": cfg.max_tokens, "max_hours": cfg.max_hours,
            "triplets_per_step": per_step, "train_triplets_available": available,
            "steps_by_epochs": cfg.max_steps or cfg.epochs * steps_per_epoch(available, cfg, dist.world),
            "probe_triplets": len(probe.train["a"]), "probe_tokens_per_paper": probe.mean_paper_tokens()}
    budget = []
    if cfg.max_tokens:
        budget.append(token_steps(cfg, dist.world, plan["probe_tokens_per_paper"]))
    if cfg.max_hours:
        plan["seconds_per_step"] = time_steps(probe)
        plan["steps_by_max_hours"] = hours_steps(cfg, plan["seconds_per_step"])
        budget.append(plan["steps_by_max_hours"])
    del probe
    dist.barrier()
    steps, sample = min(*budget, plan["steps_by_epochs"]), 0
    if steps < steps_per_epoch(available, cfg, dist.world):   # less than one pass: a sample
        sample = math.ceil(steps * per_step * SAMPLE_SPARE)
    plan["sample_triplets"] = sample if sample < available else 0
    if dist.main:
        shutil.rmtree(folder, ignore_errors=True)
        write_json_atomic(path, plan)
        say(f"train: budget plan {json.dumps({k: v for k, v in plan.items() if k != 'key'})}")
    return plan


def budget_steps(cfg: TrainConfig, plan: dict, data: TripletTokens, world: int, epoch_steps: int) -> dict:
    """Each budget's steps on the data as tokenized: the token steps from its own mean length, the
    hours steps as measured, each at most one pass when the data is a sample."""
    steps = {}
    if cfg.max_tokens:
        steps["max_tokens"] = token_steps(cfg, world, data.mean_paper_tokens())
    if cfg.max_hours:
        steps["max_hours"] = plan["steps_by_max_hours"]
    if plan["sample_triplets"]:
        steps = {k: min(v, epoch_steps) for k, v in steps.items()}
    return steps


def seen(data: TripletTokens, cfg: TrainConfig, world: int, steps: int, epoch_steps: int) -> dict:
    """What `steps` optimizer steps read, from the data order (encoders.training.feed.shard_order): triplets
    (with repeats across epochs), distinct triplets, distinct papers, real tokens (no padding)."""
    n = len(data.train["a"])
    per_rank = math.ceil(n / world)
    lengths = data.paper_lengths()
    # a pair store's rows repeat the target as their negative (n = p; SciJEPa, section_cl): read once
    triplet_tokens = lengths[data.train["a"]] + lengths[data.train["p"]] + \
        np.where(data.train["n"] != data.train["p"], lengths[data.train["n"]], 0)
    hit = np.zeros(n, bool)
    draws = tokens = 0
    for epoch in range(math.ceil(steps / epoch_steps)):
        rows_per_rank = min(min(steps - epoch * epoch_steps, epoch_steps) * cfg.grad_accum * cfg.batch_size, per_rank)
        for rank in range(world):
            rows = shard_order(n, cfg.seed, epoch, rank, world)[:rows_per_rank]
            hit[rows] = True
            draws += len(rows)
            tokens += int(triplet_tokens[rows].sum())
    papers = np.zeros(data.papers.num_rows, bool)
    for c in ("a", "p", "n"):
        papers[data.train[c][hit]] = True
    return {"triplets_seen": draws, "distinct_triplets_seen": int(hit.sum()), "papers_seen": int(papers.sum()),
            "tokens_seen": tokens}
