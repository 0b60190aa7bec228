"""A checkpoint's state comes back as saved, from a state.pt that torch reads with
weights_only=True (no pickled code) and a state.json with what is not a tensor."""
import json
import random

import numpy as np
import pytest
import torch

from encoders.training.checkpoints import (PLAIN, STATE, checkpoint_dirs, load_checkpoint, rng_state, save_checkpoint,
                                           set_rng_state)


def _draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_state_round_trips_and_the_rng_draws_resume(tmp_path):
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    sched.step()
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    np.random.randn()  # NumPy caches a Gaussian: its state has has_gauss = 1
    saved_rng = rng_state()
    expected = _draws()
    state = {"step": 7, "seconds": 12.5, "model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "rng": [saved_rng, rng_state()]}
    path = save_checkpoint(tmp_path, 7, state, {"fingerprint": "f"}, keep=2)
    assert [p for _, p in checkpoint_dirs(tmp_path)] == [path]
    torch.load(path / STATE, weights_only=True)                 # no pickled objects in it
    assert json.loads((path / PLAIN).read_text())["step"] == 7

    back = load_checkpoint(path)
    assert back["step"] == 7 and back["seconds"] == 12.5 and len(back["rng"]) == 2
    for k, v in model.state_dict().items():
        assert torch.equal(back["model"][k], v)
    assert back["optimizer"]["param_groups"][0]["lr"] == opt.state_dict()["param_groups"][0]["lr"]
    assert back["scheduler"]["last_epoch"] == 1
    set_rng_state(back["rng"][0])
    assert _draws() == expected                                 # the same draws after the resume
    opt2 = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt2.load_state_dict(back["optimizer"])                      # loads into a fresh optimizer


def test_a_checkpoint_without_its_json_is_not_complete(tmp_path):
    state = {"step": 1, "seconds": 0.0, "model": {}, "rng": [rng_state()]}
    path = save_checkpoint(tmp_path, 1, state, {}, keep=1)
    (path / PLAIN).unlink()
    assert checkpoint_dirs(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        load_checkpoint(path)
