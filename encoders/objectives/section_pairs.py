"""What SciJEPa and its contrastive baseline section_cl share (METHODS.md §8.10): the within-paper pairs
(encoders.training.fulltext_table.build_pairs: title + abstract -> method, method -> conclusion),
micro-batches of the B contexts then the B targets (pairs have no negative), the encoder's own learning
rate, and validation: each validation context ranks every validation target by cosine (its own = the
relevant one), with the objective's loss and the geometry of the online vectors.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from sciencemap.runtime import UserError

from encoders.model import pad_rows
from encoders.objectives.base import Objective
from encoders.training.feed import TokenBatch


class PairCollate:
    """rows -> TokenBatch of 2B texts (contexts, then targets); negative_ids empty."""

    def __init__(self, data, pad_id: int):
        self.data, self.pad_id = data, pad_id

    def __call__(self, rows: list[int]) -> TokenBatch:
        tr = self.data.train
        idx = np.asarray(rows, np.int64)
        a, p = tr["a"][idx], tr["p"][idx]
        tokens = self.data.tokens(np.concatenate([a, p]))
        ids, mask = pad_rows(tokens, self.pad_id)
        return TokenBatch(ids, mask, a.tolist(), p.tolist(), [], sum(len(t) for t in tokens))


class SectionPairObjective(Objective):
    """Base of the objectives on section pairs; subclasses give `batch_loss`, `pair_loss` and
    `validation_vectors`."""

    score_name = "cosine"
    fields = ("jepa_rule", "jepa_lr")

    @classmethod
    def check(cls, cfg) -> None:
        if cfg.bucket_tokens:
            raise UserError(f"the {cls.name} objective reads one padded batch per micro-batch: set bucket_tokens = 0")
        if cfg.max_tokens or cfg.max_hours:
            raise UserError(f"the {cls.name} objective has no training budget yet: use max_steps or epochs")
        if not cfg.jepa_lr > 0:
            raise UserError(f"jepa_lr={cfg.jepa_lr} must be positive")

    def encoder_lr(self) -> float:
        return float(self.cfg.jepa_lr)

    def prepare_data(self, layout, enc, sample_triplets: int = 0):
        from encoders.training.fulltext_table import PAIRS_FORMAT, PAIRS_KIND, build_pairs, prepare_fulltext

        rule = self.cfg.jepa_rule
        return prepare_fulltext(self.name, PAIRS_KIND, PAIRS_FORMAT, layout, enc, self.cfg.val_max, self.cfg.seed,
                                {"rule": rule}, lambda *a: build_pairs(*a, rule=rule))

    def collate(self, data, pad_id: int, bucket_tokens: int):
        return PairCollate(data, pad_id)

    @staticmethod
    def halves(batch, device) -> tuple[dict, dict]:
        """The contexts' and the targets' rows of a pair batch."""
        k = len(batch)
        inputs = batch.inputs(device)
        return ({n: t[:k] for n, t in inputs.items()}, {n: t[k:2 * k] for n, t in inputs.items()})

    def pair_scores(self, a, b):
        return F.cosine_similarity(a, b, dim=-1)

    def score_matrix(self, queries, candidates):
        return F.normalize(queries, dim=-1) @ F.normalize(candidates, dim=-1).T

    # -- validation
    def validation_vectors(self, enc, contexts: torch.Tensor, target_tokens: list) -> tuple[torch.Tensor, torch.Tensor]:
        """(query vectors of the contexts, vectors of the targets) as the objective compares them."""
        raise NotImplementedError

    def pair_loss(self, queries: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @torch.inference_mode()
    def validate(self, enc, data: dict, batch_size: int = 32) -> dict:
        from encoders.objectives.validation import geometry_figures

        n = len(data["ai"])
        if n == 0:
            return {"n": 0, "loss": None, "accuracy": None}
        tok = data["tokens"]
        ctx = torch.from_numpy(enc.encode_ids([tok[i] for i in data["ai"]], batch_size))
        tgt_online = torch.from_numpy(enc.encode_ids([tok[i] for i in data["pi"]], batch_size))
        q, t = self.validation_vectors(enc, ctx.to(enc.device), [tok[i] for i in data["pi"]])
        q, t = q.float().cpu(), t.float().cpu()
        size = self.cfg.batch_size      # the loss as training sees it: micro-batches (in-batch negatives)
        loss = sum(float(self.pair_loss(q[s:s + size], t[s:s + size])) * len(q[s:s + size]) for s in range(0, n, size)) / n
        scores = self.score_matrix(q, t)                       # context x target; a target may repeat (same text)
        own = scores.diagonal()
        ranks = 1 + (scores > own[:, None]).sum(dim=1).numpy()
        out = {"n": n, "loss": loss, "accuracy": float((ranks <= 1).mean()), "mrr": float((1 / ranks).mean()),
               "recall@1": float((ranks <= 1).mean()), "recall@5": float((ranks <= 5).mean()),
               "predict_cosine": float(own.mean())}
        kinds = np.asarray(data["kind"])
        for kind in sorted(set(data["kind"])):
            out[f"accuracy_{kind}"] = float((ranks[kinds == kind] <= 1).mean())
        out.update(geometry_figures(torch.cat([ctx, tgt_online]).numpy(), ctx.numpy(), tgt_online.numpy()))
        return out
