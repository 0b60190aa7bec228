"""Building blocks of the self-distillation objectives (METHODS.md §8.8): an EMA target and its decay
schedule (ema_head, SciJEPa), SciJEPa's residual predictor, and SIGReg, the sketched isotropic
Gaussian regulariser that keeps the online vectors from collapsing.

SIGReg of a batch Z (N x d, already standardised per dimension over the batch): M random unit
directions a_m (`slice_directions`, drawn from the run's seed and the step, so a resumed run draws
the same ones); each projection s = Z a_m is tested against N(0, 1) by the Epps–Pulley statistic

    EP(s) = N · ∫_{-T}^{T} |φ_s(t) − e^{−t²/2}|² · e^{−t²/2} dt,   φ_s(t) = (1/N) Σ_j e^{i t s_j}

(the empirical characteristic function against the standard normal's, Gaussian window), by the
trapezoid rule on POINTS points of [0, T] (the integrand is even: twice the half). SIGReg is the mean
of EP over the M directions: about 1 when the batch looks like an isotropic Gaussian, of order N when
it has collapsed to a point or a line.
"""
from __future__ import annotations

import math

import torch

SLICES = 512          # random directions per batch
T_MAX = 3.0           # the integral runs over [-T_MAX, T_MAX]
POINTS = 17           # trapezoid points on [0, T_MAX]


def slice_directions(dim: int, n: int, seed: int, step: int, device=None) -> torch.Tensor:
    """n unit vectors in R^dim (n x dim), the same for the same (seed, step): a resume draws them again."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) % (2 ** 63))
    a = torch.randn(n, dim, generator=g)
    return (a / a.norm(dim=1, keepdim=True)).to(device or "cpu")


def standardise(z: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Each dimension to mean 0, standard deviation 1 over the batch."""
    return (z - z.mean(dim=0)) / (z.std(dim=0) + eps)


def epps_pulley(s: torch.Tensor, t_max: float = T_MAX, points: int = POINTS) -> torch.Tensor:
    """EP statistic of each column of s (N x M projections) against N(0, 1): a tensor of M values."""
    n = s.shape[0]
    t = torch.linspace(0.0, t_max, points, device=s.device, dtype=s.dtype)
    ts = s[..., None] * t                                     # N x M x P
    re = torch.cos(ts).mean(dim=0) - torch.exp(-t ** 2 / 2)   # M x P
    im = torch.sin(ts).mean(dim=0)
    integrand = (re ** 2 + im ** 2) * torch.exp(-t ** 2 / 2)
    return 2 * n * torch.trapezoid(integrand, t, dim=-1)


def sigreg(z: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """Mean Epps–Pulley statistic of z's projections on the directions (z: N x d standardised, directions: M x d)."""
    return epps_pulley(z @ directions.T.to(z.dtype)).mean()


class Predictor(torch.nn.Module):
    """x + Linear(GELU(Linear(LayerNorm(x)))), d -> hidden -> d, the last layer zero-initialised: the
    identity at the start, so the online branch begins by matching the target as it is."""

    def __init__(self, dim: int, hidden: int = 2048):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.LayerNorm(dim), torch.nn.Linear(dim, hidden), torch.nn.GELU(),
                                       torch.nn.Linear(hidden, dim))
        torch.nn.init.zeros_(self.mlp[-1].weight)
        torch.nn.init.zeros_(self.mlp[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(x)


def ema_decay(step: int, total: int, lo: float, hi: float) -> float:
    """The EMA decay after `step` of `total` steps: from lo at the start to hi at the end on a half cosine."""
    return hi - (hi - lo) * (math.cos(math.pi * min(step, total) / max(total, 1)) + 1) / 2


@torch.no_grad()
def ema_update(target: torch.nn.Module, online: torch.nn.Module, decay: float) -> None:
    """target <- decay · target + (1 − decay) · online, parameter by parameter, outside autograd."""
    for t, o in zip(target.parameters(), online.parameters()):
        t.mul_(decay).add_(o.detach(), alpha=1 - decay)
