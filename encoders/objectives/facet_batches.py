"""Micro-batches of facet triplets (FLeW, UniFAR): the default padded batch of the 3B papers, plus each
triplet's facet and, for UniFAR, each paper's sentence facet labels."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from encoders.training.feed import Collate, TokenBatch


@dataclass
class FacetTokenBatch(TokenBatch):
    facets: list[int] | None = None            # each triplet's facet (index into sciencemap.contracts.FACETS)
    sentence_facets: list | None = None        # per paper (3B, batch order): its sentences' facet indices (-1 none)

    def pin_memory(self) -> "FacetTokenBatch":
        b = super().pin_memory()
        return FacetTokenBatch(**{f.name: getattr(b, f.name) for f in dataclasses.fields(TokenBatch)},
                               facets=self.facets, sentence_facets=self.sentence_facets)


class FacetCollate:
    """rows -> FacetTokenBatch: row_facets[i] is train row i's facet; item_labels (optional) maps a
    paper's item row to its sentences' facet indices."""

    def __init__(self, data, pad_id: int, row_facets: np.ndarray, item_labels=None):
        self.inner, self.row_facets, self.item_labels = Collate(data, pad_id, 0), row_facets, item_labels

    def __call__(self, rows: list[int]) -> FacetTokenBatch:
        b = self.inner(rows)
        idx = np.asarray(rows, np.int64)
        labels = None
        if self.item_labels is not None:
            items = b.anchor_ids + b.positive_ids + b.negative_ids
            labels = [self.item_labels(i) for i in items]
        return FacetTokenBatch(**{f.name: getattr(b, f.name) for f in dataclasses.fields(TokenBatch)},
                               facets=self.row_facets[idx].tolist(), sentence_facets=labels)
