"""Triplet margin loss on raw L2 distance, the seed recipe (METHODS.md §4.2):
max(||a - p||_2 - ||a - n||_2 + margin, 0), mean over the batch, on the raw pooled vectors.
Normalising first would put distances in [0, 2], where margin 1 asks for more than the geometry
gives (METHODS.md §4.3); `normalize=True` is kept for experiments.

Example:
    >>> import torch
    >>> from encoders.config import TrainConfig
    >>> loss = TripletObjective(TrainConfig(margin=1.0)).loss
    >>> a = torch.zeros(2, 3); p = torch.zeros(2, 3); n = torch.ones(2, 3) * 10
    >>> float(loss(a, p, n))
    0.0
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from sciencemap.contracts import TRIPLETS_META_KEY
from sciencemap.runtime import UserError
from sciencemap.storage import read_json_metadata

from encoders.objectives.base import Objective
from encoders.objectives.batches import TripletBatch

DEFAULT_MARGIN = 1.0  # when neither the setting nor the triplets' metadata gives one


class TripletObjective(Objective):
    name = "triplet"
    fields = ("margin", "normalize")
    score_name = "-L2"  # validation ranks by L2 distance, nearest first

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.margin is None:
            raise ValueError("margin must be resolved first (TripletObjective.resolve)")
        self.margin = float(cfg.margin)
        self.normalize = bool(cfg.normalize)
        self._loss = torch.nn.TripletMarginLoss(margin=self.margin, p=2.0, reduction="mean")

    @classmethod
    def resolve(cls, cfg, layout):
        """margin None = the margin the importance stage recorded with the triplets, else 1.0."""
        if cfg.margin is not None:
            return cfg
        found = read_json_metadata(layout.table("triplets"), TRIPLETS_META_KEY).get("margin")
        return dataclasses.replace(cfg, margin=float(found) if found is not None else DEFAULT_MARGIN)

    @classmethod
    def check(cls, cfg) -> None:
        if cfg.margin is not None and cfg.margin < 0:
            raise UserError(f"train setting margin={cfg.margin} must be >= 0")

    def _maybe_normalize(self, *xs: torch.Tensor):
        return tuple(F.normalize(x, dim=-1) for x in xs) if self.normalize else xs

    def loss(self, anchor, positive, negative, batch: TripletBatch | None = None) -> torch.Tensor:
        return self._loss(*self._maybe_normalize(anchor, positive, negative))

    def pair_scores(self, a, b):
        a, b = self._maybe_normalize(a, b)
        return -(a - b).norm(dim=-1)

    def score_matrix(self, queries, candidates):
        queries, candidates = self._maybe_normalize(queries, candidates)
        return -torch.cdist(queries, candidates)


OBJECTIVE = TripletObjective
