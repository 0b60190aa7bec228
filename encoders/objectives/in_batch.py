"""In-batch negatives: multiple-negatives ranking / InfoNCE over the triplets (METHODS.md §4.4).

For anchor i of a micro-batch of B triplets the candidates are the B positives and the B negatives
of the micro-batch (its own hard or easy negative included); the loss is the cross-entropy of
softmax(scale * cos(a_i, c_j)) over the 2B candidates with a_i's own positive as the target,
averaged over the anchors. Candidates that are the same paper as the target or as the anchor, or
another positive of the same anchor (the table holds several triplets per anchor), are masked out:
they are not negatives. scale = 20 by default (sentence-transformers' MultipleNegativesRankingLoss
uses the same; the formula here is our own code).

Under DDP (torchrun) each rank scores only its own micro-batch: candidates are per rank (2B per
anchor, not 2B x world); DistributedDataParallel averages the ranks' gradients as for any loss.
Gathering candidates across ranks would change the loss with the number of processes.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from sciencemap.runtime import UserError

from encoders.objectives.base import Objective
from encoders.objectives.batches import TripletBatch


def false_negative_mask(batch: TripletBatch) -> torch.Tensor:
    """B x 2B, True where candidate j must not count as a negative for anchor i: it is the
    anchor's paper, or a positive of the same anchor, other than the target column i itself."""
    cand = list(batch.positive_ids) + list(batch.negative_ids)
    positives: dict[str, set[str]] = {}
    for a, p in zip(batch.anchor_ids, batch.positive_ids):
        positives.setdefault(a, set()).add(p)
    mask = torch.zeros(len(batch), len(cand), dtype=torch.bool)
    for i, a in enumerate(batch.anchor_ids):
        same = positives[a] | {a}
        for j, c in enumerate(cand):
            mask[i, j] = j != i and c in same
    return mask


class InBatchObjective(Objective):
    name = "in_batch"
    fields = ("in_batch_scale",)
    score_name = "cosine"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.scale = float(cfg.in_batch_scale)

    @classmethod
    def check(cls, cfg) -> None:
        if not (cfg.in_batch_scale > 0 and math.isfinite(cfg.in_batch_scale)):
            raise UserError(f"train setting in_batch_scale={cfg.in_batch_scale} must be a positive number")

    def loss(self, anchor, positive, negative, batch: TripletBatch | None = None) -> torch.Tensor:
        logits = self.scale * self.score_matrix(anchor, torch.cat([positive, negative]))
        if batch is not None:
            mask = false_negative_mask(batch)
            if logits.is_cuda:   # pinned and non-blocking: no wait for the GPU in the training step
                mask = mask.pin_memory().to(logits.device, non_blocking=True)
            logits = logits.masked_fill(mask, float("-inf"))
        target = torch.arange(len(anchor), device=logits.device)
        return F.cross_entropy(logits, target)

    def validation_loss(self, anchor, positive, negative, batch: TripletBatch) -> float:
        """The training loss as training sees it: consecutive micro-batches of batch_size
        triplets (the candidate count sets the loss's scale), averaged weighted by size."""
        size, total, n = self.cfg.batch_size, 0.0, len(anchor)
        for s in range(0, n, size):
            part = TripletBatch(*(x[s:s + size] for x in (batch.anchor_ids, batch.positive_ids, batch.negative_ids,
                                                          batch.anchors, batch.positives, batch.negatives)))
            total += float(self.loss(anchor[s:s + size], positive[s:s + size], negative[s:s + size], part)) * len(part)
        return total / n

    def pair_scores(self, a, b):
        return F.cosine_similarity(a, b, dim=-1)

    def score_matrix(self, queries, candidates):
        return F.normalize(queries, dim=-1) @ F.normalize(candidates, dim=-1).T


OBJECTIVE = InBatchObjective
