"""A token or time budget for the facet objectives (FLeW, UniFAR): the budget's probe and sample are
the objective's own item store (facet triplets, facet text), and the step time is measured with its
parts. Real MiniLM steps on real PubMed texts (max_length 64)."""
from __future__ import annotations

import json

import pytest

from encoders.config import TrainConfig
from encoders.training.loop import read_log, run_train

pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(objective: str, **kw) -> TrainConfig:
    return TrainConfig(**{"objective": objective, "batch_size": 2, "grad_accum": 2, "max_length": 64, "lr": 1e-4,
                          "log_every": 1, "checkpoint_every": 0, "device": "cpu", "epochs": 2, **kw})


def _store(layout, kind: str) -> dict:
    (folder,) = [p for p in layout.train_tokens_dir.iterdir() if p.is_dir() and p.name.startswith(kind)]
    return json.loads((folder / "meta.json").read_text())


@pytest.mark.parametrize("objective", ["flew", "unifar"])
def test_a_token_budget_trains_on_a_sample_of_the_facet_triplets(tmp_path, facet_run, objective):
    layout = facet_run(tmp_path / objective)
    s = run_train(_cfg(objective, max_tokens=1000), layout)
    t = s["training"]
    meta = _store(layout, f"{objective}_tokens")
    # 9 facet train triplets (3 steps a pass): the budget allows fewer steps, so a sample of them
    assert t["planned_by"] == "max_tokens" and t["train_triplets_available"] == 9
    assert meta["inputs"]["sample_triplets"] == t["sample_triplets"] > 0
    assert meta["counts"]["train_triplets"] == t["train_triplets"] < 9 and meta["counts"]["train_triplets_available"] == 9
    assert sum(meta["counts"]["train_by_facet"].values()) == t["train_triplets"]
    assert t["steps_done"] == t["planned_steps"] == t["steps_by"]["max_tokens"] >= 1
    assert t["tokens_per_step"] * t["steps_done"] <= 1000
    assert [r["kind"] for r in read_log(layout.train_log)][0] == "plan"


def test_a_time_budget_times_flew_with_its_facet_encoders(tmp_path, facet_run):
    layout = facet_run(tmp_path / "r")
    s = run_train(_cfg("flew", max_hours=0.003), layout)
    t = s["training"]
    assert t["seconds_per_step"] > 0
    assert t["steps_by"]["max_hours"] == int(0.003 * 3600 // t["seconds_per_step"])
    assert t["steps_done"] == t["planned_steps"] == min(t["steps_by"].values())
