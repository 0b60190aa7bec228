"""CoSAEmb (METHODS.md §8.9): one encoder trained on section chunks and abstracts with triplets at
three levels and graded margins.

- Items (encoders.training.fulltext_table): a paper's abstract view "[TTL] title [SEP] [ABS] abstract"
  and its section chunks (encoders.fulltext.chunks: tagged by section class, whole sentences, the
  previous chunk's last sentence carried over). The tags are special tokens added to the tokenizer
  when training starts (the embeddings resized), saved with the model, read by the embed stage.
- Rows: local (chunk k, chunk k+1, another paper's chunk), global (a section's first chunk, its own
  abstract, another paper's abstract), inter-document (the seed triplets on abstracts).
- Loss per row: max(0, ||q - k+||² - ||q - k-||² + m), m by level ([train] cosaemb_margins: inter 1 <
  global 2 < local 3; 1,1,1 = equal margins), mean over the micro-batch, on the raw pooled vectors.
- Main vector: the abstract view (the map is made of papers); the embed stage also writes the view
  `chunks` (a vector per section chunk: encoders.embed.chunks) for the paragraph look-up.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from sciencemap.runtime import UserError

from encoders.fulltext.chunks import abstract_text
from encoders.objectives.base import Objective
from encoders.training.feed import Collate, TokenBatch
from encoders.training.fulltext_table import LEVELS, is_chunk, level_of_kind


def cosaemb_text(title, abstract, sep):
    """CoSAEmb's input view of a paper: "[TTL] title [SEP] [ABS] abstract"."""
    return abstract_text(title, abstract, sep)


def row_levels(anchor_ids, positive_ids) -> list[int]:
    """Each row's level from its item ids: chunk -> chunk local, chunk -> abstract global, else inter."""
    return [2 if is_chunk(a) and is_chunk(p) else 1 if is_chunk(a) else 0 for a, p in zip(anchor_ids, positive_ids)]


def graded_triplet_loss(anchor, positive, negative, margins: torch.Tensor) -> torch.Tensor:
    """mean over rows of max(0, ||a - p||² - ||a - n||² + m_row)."""
    d_pos = (anchor - positive).pow(2).sum(-1)
    d_neg = (anchor - negative).pow(2).sum(-1)
    return torch.clamp(d_pos - d_neg + margins.to(anchor.dtype), min=0).mean()


@dataclasses.dataclass
class LevelTokenBatch(TokenBatch):
    levels: list[int] | None = None     # each row's level (index into LEVELS)

    def pin_memory(self) -> "LevelTokenBatch":
        b = super().pin_memory()
        return LevelTokenBatch(**{f.name: getattr(b, f.name) for f in dataclasses.fields(TokenBatch)},
                               levels=self.levels)


class LevelCollate:
    """rows -> LevelTokenBatch: the triplets' padded batch plus each row's level."""

    def __init__(self, data, pad_id: int):
        self.inner = Collate(data, pad_id, 0)
        self.levels = np.asarray([level_of_kind(k) for k in data.train["kind"]], np.int64)

    def __call__(self, rows: list[int]) -> LevelTokenBatch:
        b = self.inner(rows)
        return LevelTokenBatch(**{f.name: getattr(b, f.name) for f in dataclasses.fields(TokenBatch)},
                               levels=self.levels[np.asarray(rows, np.int64)].tolist())


class CosaembObjective(Objective):
    name = "cosaemb"
    fields = ("cosaemb_margins", "cosaemb_shares")
    score_name = "-L2"
    input_text = staticmethod(cosaemb_text)
    writes_chunks = True

    def __init__(self, cfg):
        super().__init__(cfg)
        self.margins = torch.tensor(check_margins(cfg.cosaemb_margins), dtype=torch.float32)

    @classmethod
    def check(cls, cfg) -> None:
        check_margins(cfg.cosaemb_margins)
        s = list(cfg.cosaemb_shares or [])
        if s and (len(s) != len(LEVELS) or any(not (x >= 0 and math.isfinite(x)) for x in s) or sum(s) <= 0):
            raise UserError(f"cosaemb_shares {s} must be empty or {len(LEVELS)} numbers >= 0 (inter, global, local), "
                            "not all 0")
        if cfg.bucket_tokens:
            raise UserError("the cosaemb objective reads one padded batch per micro-batch: set bucket_tokens = 0")
        if cfg.max_tokens or cfg.max_hours:
            raise UserError("the cosaemb objective has no training budget yet: use max_steps or epochs")

    def build(self, enc):
        """No parts: the section tags join the tokenizer as special tokens, the embeddings resized (once)."""
        from encoders.fulltext.chunks import add_special_tokens

        add_special_tokens(enc.tokenizer, enc.model)
        return {}

    # -- data
    def prepare_data(self, layout, enc, sample_triplets: int = 0):
        from encoders.training.fulltext_table import COSAEMB_FORMAT, COSAEMB_KIND, build_cosaemb, prepare_fulltext

        shares = list(self.cfg.cosaemb_shares or [])
        return prepare_fulltext(self.name, COSAEMB_KIND, COSAEMB_FORMAT, layout, enc, self.cfg.val_max, self.cfg.seed,
                                {"shares": shares}, lambda *a: build_cosaemb(*a, shares=shares))

    def collate(self, data, pad_id: int, bucket_tokens: int):
        return LevelCollate(data, pad_id)

    # -- the loss
    def batch_loss(self, enc, batch) -> torch.Tensor:
        a, p, n = self.vectors(enc, batch)
        margins = self.margins.to(a.device)[torch.as_tensor(batch.levels, device=a.device)]
        return graded_triplet_loss(a, p, n, margins)

    def loss(self, anchor, positive, negative, batch=None) -> torch.Tensor:
        levels = row_levels(batch.anchor_ids, batch.positive_ids) if batch is not None else [0] * len(anchor)
        return graded_triplet_loss(anchor, positive, negative, self.margins[torch.as_tensor(levels)].to(anchor.device))

    def pair_scores(self, a, b):
        return -(a - b).norm(dim=-1)

    def score_matrix(self, queries, candidates):
        return -torch.cdist(queries, candidates)


def check_margins(margins) -> list[float]:
    m = [float(x) for x in (margins or [])]
    if len(m) != len(LEVELS) or any(not (x >= 0 and math.isfinite(x)) for x in m):
        raise UserError(f"cosaemb_margins {list(margins or [])} must be {len(LEVELS)} numbers >= 0 "
                        "(inter, global, local; the paper's 1,2,3)")
    return m


OBJECTIVE = CosaembObjective
