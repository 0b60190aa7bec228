"""The batches objectives read."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


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
