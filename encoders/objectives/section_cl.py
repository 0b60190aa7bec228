"""section_cl (METHODS.md §8.10): SciJEPa's contrastive baseline on the same within-paper pairs. One
encoder reads context and target; InfoNCE over the micro-batch: for context i the B targets are the
candidates (its own the positive, the others in-batch negatives), softmax of scale · cos ([train]
in_batch_scale, 20), encoder at jepa_lr. No EMA, no predictor: the main vector is the encoder's.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from sciencemap.runtime import UserError

from encoders.objectives.section_pairs import SectionPairObjective


class SectionClObjective(SectionPairObjective):
    name = "section_cl"
    fields = ("jepa_rule", "jepa_lr", "in_batch_scale")

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        if not (cfg.in_batch_scale > 0 and math.isfinite(cfg.in_batch_scale)):
            raise UserError(f"train setting in_batch_scale={cfg.in_batch_scale} must be a positive number")

    def pair_loss(self, queries, targets):
        logits = self.cfg.in_batch_scale * self.score_matrix(queries, targets)
        return F.cross_entropy(logits, torch.arange(len(queries), device=logits.device))

    def batch_loss(self, enc, batch) -> torch.Tensor:
        vec = batch.pooled(enc)
        k = len(batch)
        return self.pair_loss(vec[:k], vec[k:2 * k])

    def validation_vectors(self, enc, contexts, target_tokens):
        return contexts, torch.from_numpy(enc.encode_ids(target_tokens))


OBJECTIVE = SectionClObjective
