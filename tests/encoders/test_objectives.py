"""Training objectives (encoders/objectives): the in-batch-negatives loss by hand, real MiniLM steps
with it, selection from the config and from `jobs/train.py`, and the registry's error."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from encoders.config import TrainConfig
from encoders.model import load_encoder, paper_text
from encoders.objectives.registry import OBJECTIVES, get_objective
from encoders.objectives.batches import TripletBatch
from encoders.objectives.in_batch import InBatchObjective, false_negative_mask
from encoders.objectives.triplet import TripletObjective
from encoders.training.triplet_table import data_digest
from encoders.training.loop import TRAJECTORY_FIELDS, fingerprint, read_log, run_train
from sciencemap.contracts import MODEL_CARD
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError

L = 32


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def triplet_run(cyclic_run, records):
    """24 papers; anchors 0-15 train, 16-19 val; one positive and two negatives each."""
    return lambda root: cyclic_run(root, records[:24], anchors=20, train_anchors=16, hard_step=5, easy_step=11)


def by_hand(a, p, n, scale, masked=()) -> float:
    """Mean over anchors of -log softmax(scale * cos(a_i, c))_i over c = p_1..p_B, n_1..n_B, with
    the (row, column) pairs in `masked` left out of the denominator."""
    a, cands = a.tolist(), p.tolist() + n.tolist()

    def cos(u, v):
        return sum(x * y for x, y in zip(u, v)) / math.sqrt(sum(x * x for x in u) * sum(y * y for y in v))

    total = 0.0
    for i, ai in enumerate(a):
        logits = [scale * cos(ai, c) for c in cands]
        denom = sum(math.exp(z) for j, z in enumerate(logits) if (i, j) not in masked)
        total += -(logits[i] - math.log(denom))
    return total / len(a)


def test_in_batch_loss_equals_hand_computation_and_differs_from_triplet():
    a = torch.tensor([[1.0, 0.0, 0.5], [0.0, 2.0, 0.0], [0.3, 0.3, 1.0]], dtype=torch.float64)
    p = torch.tensor([[0.9, 0.2, 0.4], [0.1, 1.5, 0.3], [1.0, 0.0, 0.0]], dtype=torch.float64)
    n = torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.2, 0.4, 0.9]], dtype=torch.float64)
    for scale in (20.0, 1.0):
        loss = InBatchObjective(TrainConfig(in_batch_scale=scale)).loss(a, p, n)
        assert float(loss) == pytest.approx(by_hand(a, p, n, scale), rel=1e-9)
    in_batch = float(InBatchObjective(TrainConfig()).loss(a, p, n))
    triplet = float(TripletObjective(TrainConfig(margin=1.0)).loss(a, p, n))
    assert in_batch > 0 and triplet > 0 and abs(in_batch - triplet) > 0.1
    # Anchor 2's own negative is the nearest candidate after its positive: the loss sees it.
    assert float(InBatchObjective(TrainConfig()).loss(a, p, n[[0, 1, 0]])) != pytest.approx(in_batch)


def test_in_batch_masks_duplicates_of_the_target_and_the_anchor():
    # Rows 0 and 1 share anchor A and positive P; row 2's negative is paper A itself.
    batch = TripletBatch(["A", "A", "B"], ["P", "P", "Q"], ["N1", "N2", "A"], ["a"] * 3, ["p"] * 3, ["n"] * 3)
    mask = false_negative_mask(batch)
    # Columns: P, P, Q, N1, N2, A. For anchor A: the other copy of P and paper A are not negatives.
    assert mask.tolist() == [[False, True, False, False, False, True],
                             [True, False, False, False, False, True],
                             [False, False, False, False, False, False]]
    g = torch.Generator().manual_seed(0)
    a, p, n = (torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(3))
    got = float(InBatchObjective(TrainConfig()).loss(a, p, n, batch))
    assert got == pytest.approx(by_hand(a, p, n, 20.0, masked={(0, 1), (0, 5), (1, 0), (1, 5)}), rel=1e-9)
    assert got != pytest.approx(float(InBatchObjective(TrainConfig()).loss(a, p, n)))


def test_scores_rank_as_the_objective_trains():
    a = torch.tensor([[1.0, 0.0]])
    near_but_turned, far_but_aligned = torch.tensor([[0.5, 0.5]]), torch.tensor([[5.0, 0.1]])
    trip, inb = TripletObjective(TrainConfig(margin=1.0)), InBatchObjective(TrainConfig())
    assert trip.pair_scores(a, near_but_turned) > trip.pair_scores(a, far_but_aligned)  # L2
    assert inb.pair_scores(a, near_but_turned) < inb.pair_scores(a, far_but_aligned)    # cosine
    both = torch.cat([near_but_turned, far_but_aligned])
    assert trip.score_matrix(a, both).argmax() == 0 and inb.score_matrix(a, both).argmax() == 1


def test_in_batch_steps_lower_its_loss_on_a_fixed_batch(records, steps_on_fixed_batch):
    torch.manual_seed(0)
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    texts = [paper_text(x["title"], x["abstract"]) for x in records[:12]]
    batch = TripletBatch([f"a{i}" for i in range(4)], [f"p{i}" for i in range(4)], [f"n{i}" for i in range(4)],
                         texts[:4], texts[4:8], texts[8:12])
    objective = get_objective("in_batch")(TrainConfig(objective="in_batch"))
    before, after, reached = steps_on_fixed_batch(enc, objective, batch)
    assert reached and before > 0.05 and after < before * 0.7, (before, after)


def test_jobs_train_objective_in_batch_writes_a_model_card_naming_it(tmp_path, repo_root, triplet_run):
    layout = triplet_run(tmp_path / "r")
    cmd = [sys.executable, "jobs/train.py", "--run", str(layout.root), "--objective", "in_batch",
           "--in-batch-scale", "10", "--max-steps", "2", "--batch-size", "4", "--grad-accum", "1",
           "--max-length", str(L), "--log-every", "1", "--checkpoint-every", "0", "--device", "cpu"]
    p = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout[p.stdout.index("{"):])
    assert summary["objective"] == "in_batch" and summary["objective_settings"] == {"in_batch_scale": 10.0}
    card = json.loads((layout.model_dir / MODEL_CARD).read_text())
    assert card["objective"] == {"name": "in_batch", "settings": {"in_batch_scale": 10.0}, "score": "cosine"}
    assert card["config"]["objective"] == "in_batch"
    vals = [r for r in read_log(layout.train_log) if r["kind"] == "val"]
    assert [r["step"] for r in vals] == [0, 2]
    for r in vals:  # 8 val triplets = two micro-batches of 4; 4 anchors, 4 positives, 8 negatives
        assert r["val_n"] == 8 and r["val_pairs"] == 4 and r["val_candidates"] == 12
        assert 0 < r["val_loss"] < 10 and 0 <= r["val_accuracy"] <= 1 and 0 < r["val_mrr"] <= 1
    # Same data, same seed, the config way: the same first validation (nothing depends on the door).
    layout2 = triplet_run(tmp_path / "r2")
    s2 = run_train(TrainConfig(objective="in_batch", in_batch_scale=10.0, max_steps=1, batch_size=4, grad_accum=1,
                               max_length=L, checkpoint_every=0, device="cpu"), layout2)
    assert s2["val_before"]["loss"] == pytest.approx(vals[0]["val_loss"], rel=1e-5)
    assert s2["val_before"]["mrr"] == pytest.approx(vals[0]["val_mrr"])


def test_unknown_objective_is_one_clear_error(tmp_path, repo_root):
    with pytest.raises(UserError, match=r"training objective 'nope' is unknown; use one of triplet, in_batch, ema_head, flew, unifar"):
        run_train(TrainConfig(objective="nope"), RunLayout(tmp_path / "none"))
    p = subprocess.run([sys.executable, "jobs/train.py", "--run", str(tmp_path / "x"), "--objective", "nope"],
                       cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "invalid choice: 'nope'" in p.stderr and "Traceback" not in p.stderr
    assert OBJECTIVES[0] == "triplet" and TrainConfig().objective == "triplet"
    helptext = subprocess.run([sys.executable, "jobs/train.py", "--help"], cwd=repo_root, capture_output=True,
                              text=True, timeout=120).stdout
    assert "--objective {triplet,in_batch,ema_head,flew,unifar,cosaemb,scijepa,section_cl}" in helptext and "--in-batch-scale" in helptext


def test_fingerprint_names_the_objective_and_its_settings():
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    rows = data_digest({"ai": ["a"], "pi": ["p"], "ni": ["n"]})

    def fp(**kw):
        cfg = TrainConfig(**{"margin": 1.0, **kw})
        return fingerprint(cfg, get_objective(cfg.objective)(cfg), enc, 1, rows, steps=10)

    assert "objective" in TRAJECTORY_FIELDS
    assert len({fp(), fp(objective="in_batch"), fp(objective="in_batch", in_batch_scale=10.0), fp(margin=0.5)}) == 4
    assert fp(in_batch_scale=10.0) == fp()  # the triplet objective does not read the scale
