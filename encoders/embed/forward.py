"""The embed stage's forward: pre-tokenized texts through the model into pooled vectors.

Texts are ordered by token length and cut into batches of at most `batch_size` documents and
`max_tokens` padded tokens, so little compute goes to padding; the vectors come back in input
order. The model call is eager or torch.compile'd (CompiledForward), chosen by how many tokens
the pass has to embed.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from encoders.config import COMPILE_MODES
from encoders.model import pool, resolve_precision
from sciencemap.runtime import UserError, say

# compile "auto": on a CPU, compile when this process has at least this many tokens to embed
# (estimated from its first shard). On 2 cores the first compile takes 10-20 s and then saves
# enough to pay for itself after ~0.3M (float32) to ~1.6M (bf16, title-only) tokens
# (bench/embed_throughput.py; jobs/embed.py on eLife); a margin of 3x keeps auto on the safe side.
COMPILE_MIN_TOKENS = 5_000_000


def token_budget_batches(lengths: list[int], batch_size: int, max_tokens: int) -> list[list[int]]:
    """Indexes ordered longest first (ties by index), cut so that each batch has at most
    batch_size documents and at most max_tokens padded tokens (count x its longest); a single
    document longer than the budget still gets its own batch."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches, cur = [], []
    for i in order:
        width = lengths[cur[0]] if cur else lengths[i]   # the first is the longest
        if cur and (len(cur) >= batch_size or (max_tokens and (len(cur) + 1) * width > max_tokens)):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


class CompiledForward:
    """The encoder's inference forward through torch.compile (inductor, dynamic shapes, weights
    frozen as constants: freezing is what pays on a CPU — oneDNN pre-packed weights and fused
    element-wise ops; without it the gain is small). Same vectors as eager up to float rounding.

    Batches of one document run eager: dynamic shapes specialise a size-1 dimension, so the first
    single-document batch would cost a second compile. If compiling fails (e.g. no C++ compiler
    for inductor's CPU kernels), the job logs why once and goes on eager."""

    def __init__(self, model: torch.nn.Module):
        import torch._inductor.config as inductor_config

        inductor_config.freezing = True   # process-wide; embedding processes never train
        self.eager = model
        self.compiled = torch.compile(model, dynamic=True)
        self.failed: str | None = None

    def __call__(self, **batch):
        if self.failed is None and batch["input_ids"].shape[0] > 1:
            try:
                return self.compiled(**batch)
            except Exception as e:  # noqa: BLE001 - any compile failure: fall back, said once
                self.failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                say(f"embed: torch.compile failed ({self.failed}); embedding without it")
        return self.eager(**batch)


def check_compile_mode(compile_mode: str) -> None:
    if compile_mode not in COMPILE_MODES:
        raise UserError(f"embed compile {compile_mode!r} is unknown; use one of {', '.join(COMPILE_MODES)}")


def inference_forward(enc, compile_mode: str, n_tokens: int) -> Callable:
    """The forward an embedding pass of about n_tokens (unpadded) should use: enc.model, or a
    CompiledForward of it."""
    check_compile_mode(compile_mode)
    # auto stays eager on CUDA until the GPU gain is measured (bench/embed_throughput.py GPU section).
    use = compile_mode == "on" or (compile_mode == "auto" and enc.device.type == "cpu"
                                   and n_tokens >= COMPILE_MIN_TOKENS)
    return CompiledForward(enc.model) if use else enc.model


def compile_outcome(forward: Callable) -> dict:
    """For a job's summary: whether the compiled forward ran, and why not if it failed."""
    compiled = isinstance(forward, CompiledForward)
    return {"compiled": compiled and forward.failed is None,
            "compile_failed": forward.failed if compiled else None}


def embed_token_ids(enc, token_ids: list[list[int]], batch_size: int, max_tokens: int,
                    precision: str, on_batch: Callable[[int, int], None] | None = None,
                    forward: Callable | None = None) -> torch.Tensor:
    """Pooled float32 vectors (on the encoder's device) for pre-tokenized texts, in input order.
    `forward`: the model call to use (default enc.model; see inference_forward).
    `on_batch(docs, tokens)` runs after each batch (progress)."""
    out = torch.empty((len(token_ids), enc.dim), dtype=torch.float32, device=enc.device)
    lengths = [len(x) for x in token_ids]
    forward = forward or enc.model
    with torch.inference_mode(), enc.inference_autocast(precision):
        for idx in token_budget_batches(lengths, batch_size, max_tokens):
            batch = enc.pad([token_ids[i] for i in idx])
            hidden = forward(**batch).last_hidden_state
            out[torch.tensor(idx, device=enc.device)] = pool(hidden, batch["attention_mask"], enc.pooling)
            if on_batch is not None:
                on_batch(len(idx), sum(lengths[i] for i in idx))
    return out


def embed_texts(enc, texts: list[str], batch_size: int = 128, max_tokens: int = 8192,
                precision: str = "auto", forward: Callable | None = None) -> np.ndarray:
    """This system's in-memory embedding path (the benchmark uses it): float32 vectors, input order."""
    enc.model.eval()
    prec = resolve_precision(precision, enc.device)
    return embed_token_ids(enc, enc.token_ids(texts), batch_size, max_tokens, prec,
                           forward=forward).cpu().numpy()
