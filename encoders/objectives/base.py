"""The objective protocol: what the training loop asks of a training objective.

An objective reads the `triplets` table (joined to paper text, encoders.objectives.triplet_table),
turns rows into micro-batches, computes its loss on the pooled vectors, validates, and says what
goes into the model card. The loop owns everything else: optimizer, schedule, processes,
checkpoints, export. Torch is imported by the concrete objectives, not here (the registry's names
are read by encoders.config, which must import without torch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch

    from encoders.config import TrainConfig
    from encoders.model import Encoder
    from sciencemap.layout import RunLayout


@dataclass(frozen=True)
class TripletBatch:
    """One micro-batch of triplets: paper ids (for masking duplicates) and texts (or their token
    ids, in validation), in row order."""

    anchor_ids: Sequence[str]
    positive_ids: Sequence[str]
    negative_ids: Sequence[str]
    anchors: Sequence[str]
    positives: Sequence[str]
    negatives: Sequence[str]

    def __len__(self) -> int:
        return len(self.anchors)


class Objective:
    """Base class of training objectives. Subclasses set `name`, `fields` and `score_name`, and
    implement `loss`, `pair_scores` and `score_matrix`; the rest has defaults that fit any
    objective training on (anchor, positive, negative) triplets."""

    name: str = ""
    # TrainConfig fields this objective reads: part of the checkpoint fingerprint and the model card.
    fields: tuple[str, ...] = ()
    # What `pair_scores` / `score_matrix` compute (validation ranks candidates by it; higher = closer).
    score_name: str = ""

    def __init__(self, cfg: "TrainConfig"):
        self.cfg = cfg

    # -- settings
    @classmethod
    def resolve(cls, cfg: "TrainConfig", layout: "RunLayout") -> "TrainConfig":
        """Fill settings that default to something the input table records (None = 'from the data')."""
        return cfg

    @classmethod
    def check(cls, cfg: "TrainConfig") -> None:
        """Raise sciencemap.runtime.UserError for a setting this objective cannot use."""

    def settings(self) -> dict:
        return {f: getattr(self.cfg, f) for f in self.fields}

    def card(self) -> dict:
        """The model card's "objective" entry (sciencemap.contracts.MODEL_CARD)."""
        return {"name": self.name, "settings": self.settings(), "score": self.score_name}

    # -- the forward
    def vectors(self, enc: "Encoder", batch):
        """Anchor, positive and negative vectors from one forward pass (one padded batch): a
        pre-tokenized encoders.train_feed.TokenBatch (training), or a TripletBatch of texts."""
        if hasattr(batch, "pooled"):
            vec = batch.pooled(enc)
        else:
            vec = enc.embed_texts(list(batch.anchors) + list(batch.positives) + list(batch.negatives))
        k = len(batch)
        return vec[:k], vec[k:2 * k], vec[2 * k:]

    def batch_loss(self, enc: "Encoder", batch) -> "torch.Tensor":
        """The training step's loss on one micro-batch (keeps the autograd graph)."""
        return self.loss(*self.vectors(enc, batch), batch)

    # -- the loss and the score
    def loss(self, anchor: "torch.Tensor", positive: "torch.Tensor", negative: "torch.Tensor",
             batch: TripletBatch | None = None) -> "torch.Tensor":
        raise NotImplementedError

    def pair_scores(self, a: "torch.Tensor", b: "torch.Tensor") -> "torch.Tensor":
        """Score of each row of `a` with the same row of `b` (higher = closer)."""
        raise NotImplementedError

    def score_matrix(self, queries: "torch.Tensor", candidates: "torch.Tensor") -> "torch.Tensor":
        """queries x candidates scores (higher = closer)."""
        raise NotImplementedError

    # -- validation
    def validation_loss(self, anchor, positive, negative, batch: TripletBatch) -> float:
        """The loss on the validation triplets (by default: all of them as one batch)."""
        return float(self.loss(anchor, positive, negative, batch))

    def validate(self, enc: "Encoder", data: dict, batch_size: int = 32) -> dict:
        """Validation figures (the training log's val_* keys): loss, triplet accuracy and retrieval."""
        from encoders.objectives.validation import evaluate

        return evaluate(self, enc, data, batch_size)
