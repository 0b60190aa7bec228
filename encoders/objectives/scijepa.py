"""SciJEPa (METHODS.md §8.10): within-paper prediction with an EMA target and SIGReg; no citations.

- Pairs (encoders.training.fulltext_table.build_pairs): title [SEP] abstract -> method, method ->
  conclusion, one task per example ([train] jepa_rule: by section class, or the paper's positional rule).
- Online encoder f (the run's model, at jepa_lr, 5e-6); target encoder g, an EMA copy of f that is
  never trained: after each optimizer step g <- m·g + (1 - m)·f, m from 0.996 to 0.999 on a half cosine
  of the steps; in eval mode, no gradient; predictor h (encoders.objectives.jepa.Predictor: x +
  Linear(GELU(Linear(LayerNorm(x)))), the last layer zero, so the identity at the start; at
  jepa_predictor_lr, 1e-4).
- Loss: mean(1 - cos(h(f(context)), sg(g(target)))) + λ·SIGReg(standardise(unit(f(context)))), λ =
  jepa_lambda (0.0025); SIGReg's 512 directions drawn from the seed and the optimizer step.
- Embedding ([embed] branch): online f(x) (default), predictor h(f(x)), or target g(x).
"""
from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn.functional as F

from sciencemap.runtime import UserError

from encoders.objectives.base import Part
from encoders.objectives.jepa import SLICES, Predictor, ema_decay, ema_update, sigreg, slice_directions, standardise
from encoders.objectives.section_pairs import SectionPairObjective

EMA_DECAY = (0.996, 0.999)
BRANCHES = ("online", "predictor", "target")


class ScijepaObjective(SectionPairObjective):
    name = "scijepa"
    fields = ("jepa_rule", "jepa_lr", "jepa_lambda", "jepa_predictor_lr")
    branches = BRANCHES

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        if not cfg.jepa_lambda >= 0:
            raise UserError(f"jepa_lambda={cfg.jepa_lambda} must be >= 0")
        if not cfg.jepa_predictor_lr > 0:
            raise UserError(f"jepa_predictor_lr={cfg.jepa_predictor_lr} must be positive")

    def build(self, enc):
        target = copy.deepcopy(enc.model).eval()
        return {"predictor": Part(Predictor(enc.dim), lr=float(self.cfg.jepa_predictor_lr)),
                "target": Part(target, trainable=False)}

    def target_encoder(self, enc, training: bool = True):
        return dataclasses.replace(enc, model=self.part("target") if training else self.parts["target"].module)

    def decay(self, step: int, total: int) -> float:
        return ema_decay(step, total, *EMA_DECAY)

    def after_step(self, enc, step: int, total: int) -> None:
        ema_update(self.parts["target"].module, enc.model, self.decay(step, total))

    # -- the loss
    def sigreg(self, online: torch.Tensor) -> torch.Tensor:
        z = standardise(F.normalize(online.float(), dim=-1))
        key = (self.step_now, z.shape[1], str(z.device))
        if getattr(self, "_dirs_key", None) != key:   # drawn once a step, shared by its micro-batches
            self._dirs_key, self._dirs = key, slice_directions(z.shape[1], SLICES, self.cfg.seed, self.step_now, z.device)
        return sigreg(z, self._dirs)

    def batch_loss(self, enc, batch) -> torch.Tensor:
        contexts, targets = self.halves(batch, enc.device)
        online = enc.forward(contexts)
        with torch.no_grad():
            target = self.target_encoder(enc).forward(targets)
        predict = (1 - F.cosine_similarity(self.part("predictor")(online), target, dim=-1)).mean()
        if self.cfg.jepa_lambda > 0 and len(online) > 1:
            return predict + self.cfg.jepa_lambda * self.sigreg(online)
        return predict

    def pair_loss(self, queries, targets):
        return (1 - F.cosine_similarity(queries, targets, dim=-1)).mean()

    def validation_vectors(self, enc, contexts, target_tokens):
        predictor = self.parts["predictor"].module
        was = predictor.training
        predictor.eval()
        queries = predictor(contexts)
        predictor.train(was)
        targets = torch.from_numpy(self.target_encoder(enc, training=False).encode_ids(target_tokens))
        return queries, targets

    # -- embedding
    def branch(self) -> str:
        return getattr(self.embed_settings, "branch", "online") or "online"

    def check_embed(self, embed_cfg) -> None:
        if embed_cfg.branch not in BRANCHES:
            raise UserError(f"branch {embed_cfg.branch!r} is unknown; use one of {', '.join(BRANCHES)}")

    def embed_model(self, model):
        return self.parts["target"].module if self.branch() == "target" else model

    def main_vector(self, pooled, views) -> torch.Tensor:
        return self.part("predictor")(pooled) if self.branch() == "predictor" else pooled

    def main_vector_note(self) -> dict:
        return {"from": f"the {self.branch()} branch", "branch": self.branch()}

    def branch_vectors(self, enc, token_lists, branch: str, batch_size: int = 64):
        """Vectors of pre-tokenized texts from a branch, as the embed stage makes them (tests, experiments)."""
        if branch == "target":
            return self.target_encoder(enc, training=False).encode_ids(token_lists, batch_size)
        vec = enc.encode_ids(token_lists, batch_size)
        if branch == "online":
            return vec
        predictor = self.parts["predictor"].module
        with torch.inference_mode():
            return predictor.eval()(torch.from_numpy(vec).to(enc.device)).float().cpu().numpy()


OBJECTIVE = ScijepaObjective
