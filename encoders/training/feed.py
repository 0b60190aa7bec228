"""The training feed: this rank's micro-batches of tokenized triplets (encoders.training.triplet_table),
collated ahead of the model by DataLoader workers.

    RankSampler   this rank's rows of an epoch: a seeded permutation padded cyclically to a multiple
                  of the world size and dealt out round-robin (torch's DistributedSampler's rule,
                  with numpy's permutation so that the order is the one this project has always used)
    collate       B triplets -> one TokenBatch: the 3B papers (anchors, positives, negatives) padded
                  to the longest of the micro-batch, as one forward pass takes them (or, with
                  bucket_tokens, sorted by length into several forwards with little padding)
    micro_batches the DataLoader over one epoch from a given micro-batch on (resume)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import islice
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler

from encoders.embed.feed import Batch, pad_batch, token_budget_batches
from encoders.model import pad_rows
from encoders.training.triplet_table import TripletTokens


def shard_order(n: int, seed: int, epoch: int, rank: int = 0, world: int = 1) -> np.ndarray:
    """This rank's triplet order in `epoch`: a seeded permutation, padded cyclically to a multiple
    of `world` (as torch's DistributedSampler does) and dealt out round-robin."""
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    per_rank = math.ceil(n / world)
    return np.resize(perm, per_rank * world)[rank::world]


class RankSampler(Sampler[int]):
    """Train rows of this rank for the epoch set with set_epoch (see shard_order)."""

    def __init__(self, n: int, seed: int, rank: int = 0, world: int = 1):
        self.n, self.seed, self.rank, self.world, self.epoch = n, seed, rank, world, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        return iter(shard_order(self.n, self.seed, self.epoch, self.rank, self.world).tolist())

    def __len__(self) -> int:
        return math.ceil(self.n / self.world)


@dataclass
class TokenBatch:
    """One micro-batch: B anchors, then B positives, then B negatives, padded to the longest; the
    papers' rows (same row = same paper: the in-batch objective masks repeats by them)."""

    input_ids: torch.Tensor        # int64 (3B, width)
    attention_mask: torch.Tensor   # int64 (3B, width)
    anchor_ids: list[int]
    positive_ids: list[int]
    negative_ids: list[int]
    tokens: int                    # real tokens
    # bucket_tokens > 0: the 3B papers as length-sorted forwards instead (input_ids is then empty)
    parts: list[Batch] | None = None

    def __len__(self) -> int:
        return len(self.anchor_ids)

    @property
    def padded_tokens(self) -> int:
        return sum(int(b.input_ids.numel()) for b in self.parts) if self.parts else int(self.input_ids.numel())

    def pin_memory(self) -> "TokenBatch":
        return TokenBatch(self.input_ids.pin_memory(), self.attention_mask.pin_memory(), self.anchor_ids,
                          self.positive_ids, self.negative_ids, self.tokens,
                          [b.pin_memory() for b in self.parts] if self.parts else None)

    def inputs(self, device: torch.device) -> dict[str, torch.Tensor]:
        nb = self.input_ids.is_pinned()
        return {"input_ids": self.input_ids.to(device, non_blocking=nb),
                "attention_mask": self.attention_mask.to(device, non_blocking=nb)}

    def pooled(self, enc) -> torch.Tensor:
        """The 3B pooled vectors in batch order (keeps the autograd graph): one forward, or one per part."""
        if not self.parts:
            return enc.forward(self.inputs(enc.device))
        outs, where = [], []
        for b in self.parts:
            t = b.to(enc.device)
            outs.append(enc.forward({"input_ids": t["input_ids"], "attention_mask": t["attention_mask"]}))
            where.append(t["positions"])
        vectors = torch.cat(outs)
        return torch.zeros_like(vectors).index_copy(0, torch.cat(where), vectors)


class _Rows(Dataset):
    """Train row i -> i (the collate function gathers the micro-batch's tokens in one take)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


BUCKET_PAD_LIMIT = 1.1


class Collate:
    def __init__(self, data: TripletTokens, pad_id: int, bucket_tokens: int = 0):
        self.data, self.pad_id, self.bucket_tokens = data, pad_id, bucket_tokens

    def __call__(self, rows: list[int]) -> TokenBatch:
        tr = self.data.train
        idx = np.asarray(rows, np.int64)
        a, p, n = tr["a"][idx], tr["p"][idx], tr["n"][idx]
        tokens = self.data.tokens(np.concatenate([a, p, n]))
        real = sum(len(t) for t in tokens)
        if self.bucket_tokens:
            # forwards of at most bucket_tokens, cut at 10% padding once they hold a quarter of it
            parts = [pad_batch(tokens, idx, self.pad_id) for idx in
                     token_budget_batches([len(t) for t in tokens], len(tokens), self.bucket_tokens,
                                          pad_limit=BUCKET_PAD_LIMIT, min_tokens=self.bucket_tokens // 4)]
            empty = torch.zeros((0, 0), dtype=torch.int64)
            return TokenBatch(empty, empty, a.tolist(), p.tolist(), n.tolist(), real, parts)
        ids, mask = pad_rows(tokens, self.pad_id)
        return TokenBatch(ids, mask, a.tolist(), p.tolist(), n.tolist(), real)


def micro_batches(data: TripletTokens, sampler: RankSampler, epoch: int, batch_size: int, start: int,
                  pad_id: int, workers: int, pin: bool, bucket_tokens: int = 0, collate=None) -> Iterator[TokenBatch]:
    """Micro-batches `start`, `start + 1`, ... of this rank's `epoch`, collated by `workers`
    processes (0: in this process) and pinned when `pin`; bucket_tokens > 0: each as length-sorted
    forwards of at most that many padded tokens. `collate`: an objective's own (rows -> batch)."""
    sampler.set_epoch(epoch)
    batches = list(islice(BatchSampler(sampler, batch_size, drop_last=False), start, None))
    loader = DataLoader(_Rows(len(data.train["a"])), batch_sampler=batches,
                        collate_fn=collate or Collate(data, pad_id, bucket_tokens),
                        num_workers=workers, pin_memory=pin, prefetch_factor=4 if workers else None,
                        multiprocessing_context="fork" if workers else None,
                        # its own generator: a loader draws a seed when it starts, and from the global
                        # RNG that draw would shift the dropout masks of the training that follows
                        generator=torch.Generator().manual_seed(epoch))
    return iter(loader)
