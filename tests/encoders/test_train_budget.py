"""Training bounded by a budget (encoders.training.budget): real MiniLM steps on real PubMed texts
(max_length 32); the expected step counts are computed from the tokenized data, not written down."""
from __future__ import annotations

import json
import math
import time

import numpy as np
import pandas as pd
import pytest
import torch

from encoders.config import TrainConfig
from encoders.training.triplet_table import open_tokens, sample_anchors
from encoders.training.loop import read_log, run_train
from encoders.training.budget import PLAN
from mapping.evaluation.evaluate import train_section
from sciencemap.contracts import MODEL_CARD
from sciencemap.runtime import UserError

L = 32
pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = dict(batch_size=2, grad_accum=1, max_length=L, lr=1e-4, log_every=1, checkpoint_every=0, device="cpu")


@pytest.fixture(scope="module")
def sixty_run(cyclic_run, records):
    """40 papers: anchors 0-29 train (2 triplets each: 60), 30-35 val."""
    return lambda root: cyclic_run(root, records, anchors=36, train_anchors=30, hard_step=7, easy_step=19)


def tokens_folder(layout):
    (folder,) = [p for p in layout.train_tokens_dir.iterdir() if p.is_dir()]
    return open_tokens(folder)


def card(layout) -> dict:
    return json.loads((layout.model_dir / MODEL_CARD).read_text())


def test_token_budget_plans_the_steps_on_a_sample(tmp_path, sixty_run):
    layout = sixty_run(tmp_path / "tok")
    cfg = TrainConfig(**SMALL, max_tokens=2000)
    summary = run_train(cfg, layout)
    data = tokens_folder(layout)
    per_step = cfg.batch_size * cfg.grad_accum * 3 * data.mean_paper_tokens()
    sampled = len(data.train["a"])
    assert 0 < sampled < 60 and sampled % 2 == 0   # a sample of whole anchors (2 triplets each)
    expected = min(2 * math.ceil(sampled / 2), int(cfg.max_tokens // per_step), math.ceil(sampled / 2))
    assert summary["steps"] == expected
    t = card(layout)["training"]
    assert t == summary["training"]
    assert (t["planned_steps"], t["planned_by"], t["steps_done"], t["budget_stopped"]) == (expected, "max_tokens",
                                                                                       expected, False)
    assert t["train_triplets_available"] == 60 and t["train_triplets"] == sampled >= t["sample_triplets"]
    assert t["triplets_seen"] == expected * cfg.batch_size == t["distinct_triplets_seen"] <= sampled
    assert t["papers_seen"] <= 3 * t["triplets_seen"] and t["tokens_seen"] <= cfg.max_tokens * 1.05
    lengths = data.paper_lengths()
    assert lengths.min() <= t["tokens_seen"] / (3 * t["triplets_seen"]) <= lengths.max()
    assert t["tokens_per_step"] == pytest.approx(per_step, abs=0.1)
    log = read_log(layout.train_log)
    assert log[0]["kind"] == "plan" and log[0]["planned_steps"] == expected and log[-1]["kind"] == "end"
    # the schedule is the one for the planned length: linear decay to lr / (steps - warm-up) at the last step
    lrs = [r["lr"] for r in log if r["kind"] == "train"]
    assert lrs[-1] == pytest.approx(cfg.lr / (expected - int(cfg.warmup_ratio * expected)))
    # ... and the report's training section says so
    lines, info = train_section(layout.train_log)
    assert info["steps_read"]["tokens_seen"] == t["tokens_seen"]
    assert f"- steps: {expected} planned by max_tokens; read {t['triplets_seen']} triplets" in "\n".join(lines)
    assert "a seeded sample of the 60 available" in "\n".join(lines)


def test_sample_is_seeded_whole_anchors_spread_over_the_table():
    anchors = [f"a{i:03d}" for i in range(200)]
    train = pd.DataFrame([(a, f"p{k}", f"n{k}") for a in anchors for k in range(3)],
                         columns=["anchor_id", "positive_id", "negative_id"])
    one = sample_anchors(train, seed=0, triplets=60)
    assert one.equals(sample_anchors(train, seed=0, triplets=60))
    assert set(one["anchor_id"]) != set(sample_anchors(train, seed=1, triplets=60)["anchor_id"])
    assert len(one) == 60 and (one.groupby("anchor_id").size() == 3).all()   # whole anchors
    picked = sorted(anchors.index(a) for a in set(one["anchor_id"]))
    assert picked != list(range(20)) and picked[-1] >= 100    # not a prefix: spread over the table
    assert set(one["anchor_id"]) <= set(sample_anchors(train, seed=0, triplets=120)["anchor_id"])  # nested


def test_max_hours_plans_from_a_measured_step_time(tmp_path, sixty_run):
    layout = sixty_run(tmp_path / "hours")
    cfg = TrainConfig(**SMALL, epochs=20, max_hours=0.001)
    summary = run_train(cfg, layout)
    t = summary["training"]
    assert t["seconds_per_step"] > 0
    assert t["steps_by"]["max_hours"] == int(cfg.max_hours * 3600 // t["seconds_per_step"])
    assert t["planned_steps"] == min(t["steps_by"].values()) and t["steps_by"]["epochs"] == 20 * 30
    assert t["planned_by"] == "max_hours"
    assert t["steps_done"] == summary["steps"] and (t["steps_done"] == t["planned_steps"]) != t["budget_stopped"]
    assert card(layout)["training"]["seconds_per_step"] == t["seconds_per_step"]
    assert json.loads((layout.train_tokens_dir / PLAN).read_text())["seconds_per_step"] == t["seconds_per_step"]
    assert not (layout.train_tokens_dir / "probe").exists()


def test_steps_slower_than_measured_meet_the_wall_clock_stop(tmp_path, sixty_run):
    """The hard stop behind max_hours: a run held up after its first step (a slower node) ends
    at the next check, validated and saved, and says so."""
    layout = sixty_run(tmp_path / "slow")
    cfg = TrainConfig(**SMALL, epochs=20, max_hours=0.002)
    hold_up = lambda step: time.sleep(cfg.max_hours * 3600 * 1.2) if step == 1 else None  # noqa: E731
    summary = run_train(cfg, layout, after_step=hold_up)
    t = card(layout)["training"]
    assert t["budget_stopped"] and t["steps_done"] == summary["steps"] == 2 < t["planned_steps"]
    assert t["triplets_seen"] == 2 * cfg.batch_size
    assert [r["step"] for r in read_log(layout.train_log) if r["kind"] == "val"] == [0, 2]
    assert summary["val_after"] is not None and (layout.model_dir / "model.safetensors").is_file()


def state(model_dir):
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def test_resume_with_a_budget(tmp_path, sixty_run, crash_at):
    cfg = TrainConfig(**{**SMALL, "checkpoint_every": 2}, max_tokens=1200)
    ref = sixty_run(tmp_path / "ref")
    ref_summary = run_train(cfg, ref)
    lay = sixty_run(tmp_path / "crash")
    with pytest.raises(crash_at.error):
        run_train(cfg, lay, after_step=crash_at(3))
    summary = run_train(cfg, lay)
    assert summary["resumed_from_step"] == 2 and summary["training"] == ref_summary["training"]
    a, b = state(ref.model_dir), state(lay.model_dir)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)

    # max_hours: the re-run takes the step time measured before the crash, so the same plan
    hours = TrainConfig(**{**SMALL, "checkpoint_every": 2}, epochs=20, max_hours=0.002)
    lay = sixty_run(tmp_path / "hours")
    with pytest.raises(crash_at.error):
        run_train(hours, lay, after_step=crash_at(3))
    plan = json.loads((lay.train_tokens_dir / PLAN).read_text())
    summary = run_train(hours, lay)
    assert summary["resumed_from_step"] == 2
    assert summary["training"]["seconds_per_step"] == plan["seconds_per_step"]
    assert summary["training"]["steps_by"]["max_hours"] == plan["steps_by_max_hours"]


def test_no_budget_is_the_epochs_plan(tmp_path, sixty_run):
    layout = sixty_run(tmp_path / "none")
    summary = run_train(TrainConfig(**{**SMALL, "batch_size": 8, "grad_accum": 4}, epochs=1), layout)
    t = summary["training"]
    assert summary["steps"] == t["planned_steps"] == math.ceil(math.ceil(60 / 8) / 4) == 2
    assert t["planned_by"] == "epochs" and t["steps_by"] == {"epochs": 2} and not t["budget_stopped"]
    assert t["train_triplets"] == 60 == t["distinct_triplets_seen"] and "sample_triplets" not in t
    assert t["papers_seen"] == len(np.unique(np.concatenate([tokens_folder(layout).train[c] for c in "apn"])))
    assert not (layout.train_tokens_dir / PLAN).exists()


@pytest.mark.parametrize("setting, message", [({"max_tokens": -1}, "max_tokens=-1 must be >= 0"),
                                              ({"max_hours": -0.5}, "max_hours=-0.5 must be >= 0"),
                                              ({"max_tokens": 10}, "max_tokens=10 is less than one optimizer step")])
def test_bad_budgets_are_user_errors(tmp_path, sixty_run, setting, message):
    with pytest.raises(UserError, match=message):
        run_train(TrainConfig(**SMALL, **setting), sixty_run(tmp_path / "bad"))
