"""The worked example of an objective with parts (encoders.objectives.base.Part): the seed's
triplet margin loss on the encoder, plus a trainable prediction head that maps the anchor's vector
to an EMA target encoder's vector of the positive (the self-distillation pattern of BYOL and of
JEPA-style objectives such as SciJEPa, METHODS.md §8).

- head: Linear(d, d) - GELU - Linear(d, d), trained at HEAD_LR (its own learning rate, on the
  run's schedule), in the optimizer, the clipping, DDP, the checkpoints and the export;
- target: a copy of the encoder, never trained: after every optimizer step it moves towards the
  encoder by an exponential moving average whose decay rises from EMA_DECAY[0] to EMA_DECAY[1] on a
  cosine of step / total steps; in eval mode (no dropout), without gradients;
- loss: triplet(a, p, n) + PREDICT_WEIGHT * (1 - cos(head(a), target(p))).

The encoder is what the run exports as its model and embeds; head and target are exported beside
it (encoders.training.export.PARTS_FILE), and the embed stage writes the head's output as the view
"head" (one key, "head", per paper: encoders.embed.views). It has no settings of its own (its constants are fixed),
so it adds none to TrainConfig.
"""
from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn.functional as F

from encoders.objectives.base import Part, ViewSpec
from encoders.objectives.jepa import ema_decay, ema_update
from encoders.objectives.triplet import TripletObjective

EMA_DECAY = (0.99, 1.0)
HEAD_LR = 1e-3
PREDICT_WEIGHT = 1.0


class EmaHeadObjective(TripletObjective):
    name = "ema_head"

    def build(self, enc) -> dict[str, Part]:
        d = enc.dim
        head = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.GELU(), torch.nn.Linear(d, d))
        target = copy.deepcopy(enc.model).eval()
        return {"head": Part(head, lr=HEAD_LR), "target": Part(target, trainable=False)}

    def decay(self, step: int, total: int) -> float:
        return ema_decay(step, total, *EMA_DECAY)

    def batch_loss(self, enc, batch) -> torch.Tensor:
        a, p, n = self.vectors(enc, batch)
        k = len(batch)
        with torch.no_grad():
            target_enc = dataclasses.replace(enc, model=self.part("target"))
            if hasattr(batch, "pooled") and not batch.parts:   # one padded batch: its positives' rows only
                rows = {name: t[k:2 * k] for name, t in batch.inputs(enc.device).items()}
                target_p = target_enc.forward(rows)
            elif hasattr(batch, "pooled"):   # length buckets: the 3k papers as the encoder read them
                target_p = batch.pooled(target_enc)[k:2 * k]
            else:
                target_p = target_enc.embed_texts(list(batch.positives))
        predicted = self.part("head")(a)
        predict = 1 - F.cosine_similarity(predicted, target_p, dim=-1).mean()
        return self.loss(a, p, n, batch) + PREDICT_WEIGHT * predict

    def validate(self, enc, data: dict, batch_size: int = 32) -> dict:
        """The triplet figures, and the head's own: the mean cosine of head(anchor) with the
        target's vector of the positive over the validation triplets (`predict_cosine`; 1 = perfect)."""
        out = super().validate(enc, data, batch_size)
        if not data["ai"] or not self.parts:
            return out
        tok = data["tokens"]
        target_enc = dataclasses.replace(enc, model=self.parts["target"].module)
        anchors = torch.from_numpy(enc.encode_ids([tok[i] for i in data["ai"]], batch_size)).to(enc.device)
        positives = torch.from_numpy(target_enc.encode_ids([tok[i] for i in data["pi"]], batch_size)).to(enc.device)
        head = self.parts["head"].module
        was_training = head.training
        head.eval()
        with torch.no_grad():
            out["predict_cosine"] = float(F.cosine_similarity(head(anchors), positives, dim=-1).mean())
        head.train(was_training)
        return out

    def view_specs(self, enc) -> dict:
        return {"head": ViewSpec(keys=("head",), dim=enc.dim)}

    def view_vectors(self, name, input_ids, attention_mask, hidden, pooled) -> torch.Tensor:
        return self.part("head")(pooled)[:, None, :]

    def after_step(self, enc, step: int, total: int) -> None:
        ema_update(self.parts["target"].module, enc.model, self.decay(step, total))


OBJECTIVE = EmaHeadObjective
