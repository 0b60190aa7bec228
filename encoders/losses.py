"""Training objectives. One interface: loss(anchor, positive, negative) -> scalar tensor.

Importance triplets (METHODS.md §4): max(||a - p||_2 - ||a - n||_2 + margin, 0), mean over the
batch, on the raw pooled vectors. Normalising first would put distances in [0, 2], where margin 1
asks for more than the geometry gives (METHODS.md §4 "Distances and margins"); `normalize=True`
is kept as an option for experiments.

Example:
    >>> import torch
    >>> loss = TripletLoss(margin=1.0)
    >>> a = torch.zeros(2, 3); p = torch.zeros(2, 3); n = torch.ones(2, 3) * 10
    >>> float(loss(a, p, n))
    0.0
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


class TripletLoss(torch.nn.Module):
    """Triplet margin loss on Euclidean distance (torch's TripletMarginLoss, p=2)."""

    def __init__(self, margin: float = 1.0, normalize: bool = False):
        super().__init__()
        self.margin = float(margin)
        self.normalize = normalize
        self._loss = torch.nn.TripletMarginLoss(margin=self.margin, p=2.0, reduction="mean")

    def forward(self, anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
        if self.normalize:
            anchor, positive, negative = (F.normalize(x, dim=-1) for x in (anchor, positive, negative))
        return self._loss(anchor, positive, negative)


def triplet_distances(anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor,
                      normalize: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """d(a, p) and d(a, n) per triplet (for validation accuracy: d(a,p) < d(a,n))."""
    if normalize:
        anchor, positive, negative = (F.normalize(x, dim=-1) for x in (anchor, positive, negative))
    return (anchor - positive).norm(dim=-1), (anchor - negative).norm(dim=-1)
