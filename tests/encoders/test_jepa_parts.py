"""The self-distillation building blocks (encoders.objectives.jepa, METHODS.md §8.8): SIGReg tells a
Gaussian batch from a collapsed one, its slices are reproducible, the predictor starts as the
identity, and the EMA target follows its formula without gradients."""
from __future__ import annotations

import math

import pytest
import torch

from encoders.objectives.jepa import (Predictor, ema_decay, ema_update, epps_pulley, sigreg, slice_directions,
                                      standardise)


def _sigreg(z: torch.Tensor, seed: int = 0) -> float:
    return float(sigreg(standardise(z), slice_directions(z.shape[1], 512, seed, step=0)))


def test_sigreg_is_small_for_gaussian_samples_and_large_for_collapsed_or_rank_one():
    g = torch.Generator().manual_seed(0)
    n, d = 512, 64
    low = _sigreg(torch.randn(n, d, generator=g))
    assert low < 2.0                                   # EP of N(0, 1) samples is of order 1
    rank_one = torch.randn(n, 1, generator=g) * torch.randn(1, d, generator=g)           # a line through 0
    collapsed = torch.randn(1, d, generator=g).expand(n, d).clone()                      # one point
    near_line = torch.randn(n, 1, generator=g).expand(n, d) + 0.1 * torch.randn(n, d, generator=g)
    for z in (rank_one, collapsed, near_line):
        assert _sigreg(z) > 20 * low
    # standardising per dimension does not hide a point: it stays one point, each projection a constant
    z = standardise(collapsed)
    assert torch.equal(z, z[:1].expand(n, d))
    # a single projection: the statistic against a hand computation
    s = torch.randn(256, 1, generator=g, dtype=torch.float64)
    t = torch.linspace(0, 3, 17, dtype=torch.float64)
    phi = torch.stack([torch.exp(1j * x * s[:, 0]).mean() for x in t])
    hand = 2 * 256 * torch.trapezoid((phi - torch.exp(-t ** 2 / 2)).abs() ** 2 * torch.exp(-t ** 2 / 2), t)
    assert float(epps_pulley(s)[0]) == pytest.approx(float(hand), rel=1e-9)


def test_slices_are_unit_and_the_same_for_the_same_seed_and_step():
    a = slice_directions(384, 512, seed=3, step=17)
    assert a.shape == (512, 384) and torch.allclose(a.norm(dim=1), torch.ones(512), atol=1e-5)
    assert torch.equal(a, slice_directions(384, 512, seed=3, step=17))
    assert not torch.equal(a, slice_directions(384, 512, seed=3, step=18))
    assert not torch.equal(a, slice_directions(384, 512, seed=4, step=17))


def test_predictor_starts_as_the_identity_and_learns_away_from_it():
    torch.manual_seed(0)
    p = Predictor(32, hidden=64)
    x = torch.randn(8, 32)
    assert torch.equal(p(x), x)
    target = torch.randn(8, 32)
    opt = torch.optim.SGD(p.parameters(), lr=0.1)
    with torch.no_grad():
        loss0 = float(((p(x) - target) ** 2).mean())
    for _ in range(5):
        opt.zero_grad()
        ((p(x) - target) ** 2).mean().backward()
        opt.step()
    with torch.no_grad():
        assert float(((p(x) - target) ** 2).mean()) < loss0 and not torch.allclose(p(x), x)


def test_ema_decay_schedule_and_update_follow_the_formula_without_gradients():
    lo, hi = 0.996, 0.999
    assert ema_decay(0, 100, lo, hi) == pytest.approx(lo)
    assert ema_decay(100, 100, lo, hi) == pytest.approx(hi)
    assert ema_decay(50, 100, lo, hi) == pytest.approx((lo + hi) / 2)
    assert ema_decay(25, 100, lo, hi) == pytest.approx(hi - (hi - lo) * (math.cos(math.pi / 4) + 1) / 2)
    assert ema_decay(500, 100, lo, hi) == pytest.approx(hi)   # past the end: held
    torch.manual_seed(0)
    online, target = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    for p in target.parameters():
        p.requires_grad_(False)
    before = [p.clone() for p in target.parameters()]
    out = online(torch.randn(2, 4)).sum()        # a graph on the online weights: the update must not join it
    ema_update(target, online, 0.9)
    for b, t, o in zip(before, target.parameters(), online.parameters()):
        assert torch.allclose(t, 0.9 * b + 0.1 * o.detach()) and t.grad_fn is None
    out.backward()
    assert all(p.grad is None for p in target.parameters())
