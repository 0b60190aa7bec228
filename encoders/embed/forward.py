"""The embed stage's forward: padded batches (encoders.embed.feed) through the model into pooled
vectors that stay on the device until a whole chunk is done.

No host-device synchronisation inside the loop: each batch carries its documents' positions in the
chunk, copied with the batch (non-blocking from pinned memory), and the pooled vectors are placed
with index_copy_ on the device. The model call is eager or torch.compile'd (CompiledForward), the
pooling inside the call so that the compiler fuses it; which one is chosen by device and by how many
tokens the pass has to embed.
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import torch

from encoders.config import COMPILE_MODES
from encoders.embed.feed import Batch, pad_batch, token_budget_batches
from encoders.model import pool, resolve_precision, token_ids
from sciencemap.runtime import UserError, say

# compile "auto" on a CPU: compile when this process has at least this many tokens to embed
# (estimated from its first chunk). On 2 cores the first compile takes 10-20 s and then saves
# enough to pay for itself after ~0.3M (float32) to ~1.6M (bf16, title-only) tokens
# (bench/embed_throughput.py; jobs/embed.py on eLife); a margin of 3x keeps auto on the safe side.
COMPILE_MIN_TOKENS = 5_000_000
# On CUDA the compiled forward is the default (measured on an H100: 1.83M vs 1.59M tokens/s for
# BERT-base); only a pass too small to repay a compile of tens of seconds stays eager.
COMPILE_MIN_TOKENS_CUDA = 20_000_000


class PooledForward(torch.nn.Module):
    """(input_ids, attention_mask) -> pooled float32 vectors: the model and its pooling in one call."""

    def __init__(self, model: torch.nn.Module, pooling: str):
        super().__init__()
        self.model, self.pooling = model, pooling

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return pool(hidden, attention_mask, self.pooling)


def compile_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "torch.compile could not build this forward" (and only those): the
    backend failed (inductor, Triton missing or the GPU too old for it; InductorError is a kind of
    BackendCompilerFailed), inductor's C++ toolchain is missing or broken, or dynamo failed inside.
    Everything else raised by the compiled call is the model running (CUDA out of memory, a device
    fault, a bad input) and would fail eager as well: it propagates."""
    import torch._dynamo.exc as dynamo_exc
    import torch._inductor.exc as inductor_exc

    return (dynamo_exc.BackendCompilerFailed, dynamo_exc.InternalTorchDynamoError,
            inductor_exc.CppCompileError, inductor_exc.InvalidCxxCompiler)


class CompiledForward:
    """PooledForward through torch.compile (inductor, dynamic shapes, weights frozen as constants:
    freezing is what pays on a CPU — oneDNN pre-packed weights and fused element-wise ops; without
    it the gain is small). Same vectors as eager up to float rounding.

    Batches of one document run eager: dynamic shapes specialise a size-1 dimension, so the first
    single-document batch would cost a second compile. If compiling fails (compile_errors(): e.g.
    no C++ compiler for inductor's CPU kernels), the job logs why once and goes on eager; any other
    error propagates."""

    def __init__(self, model: torch.nn.Module, pooling: str):
        import torch._inductor.config as inductor_config

        inductor_config.freezing = True   # process-wide; embedding processes never train
        self.eager = PooledForward(model, pooling)
        self.compiled = torch.compile(self.eager, dynamic=True)
        self.failed: str | None = None
        self._compile_errors = compile_errors()

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.failed is None and input_ids.shape[0] > 1:
            try:
                return self.compiled(input_ids, attention_mask)
            except self._compile_errors as e:
                self.failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                say(f"embed: torch.compile failed ({self.failed}); embedding without it")
        return self.eager(input_ids, attention_mask)


def check_compile_mode(compile_mode: str) -> None:
    if compile_mode not in COMPILE_MODES:
        raise UserError(f"embed compile {compile_mode!r} is unknown; use one of {', '.join(COMPILE_MODES)}")


def inference_forward(enc, compile_mode: str, n_tokens: int) -> Callable:
    """The forward an embedding pass of about n_tokens (unpadded) should use: a PooledForward of
    enc.model, or a CompiledForward of it (compile "auto": on CUDA from COMPILE_MIN_TOKENS_CUDA
    tokens, on a CPU from COMPILE_MIN_TOKENS)."""
    check_compile_mode(compile_mode)
    least = COMPILE_MIN_TOKENS_CUDA if enc.device.type == "cuda" else COMPILE_MIN_TOKENS
    use = compile_mode == "on" or (compile_mode == "auto" and n_tokens >= least)
    return compiled_forward(enc.model, enc.pooling) if use else PooledForward(enc.model, enc.pooling)


def compiled_forward(model: torch.nn.Module, pooling: str) -> CompiledForward:
    """The model's CompiledForward, made once per model and pooling: a second pass in the same
    process (a benchmark, a notebook) reuses the compiled code instead of compiling again."""
    cache = model.__dict__.setdefault("_sciencemap_compiled", {})
    if pooling not in cache or cache[pooling].failed:
        cache[pooling] = CompiledForward(model, pooling)
    return cache[pooling]


def compile_outcome(forward: Callable) -> dict:
    """For a job's summary: whether the compiled forward ran, and why not if it failed."""
    compiled = isinstance(forward, CompiledForward)
    return {"compiled": compiled and forward.failed is None,
            "compile_failed": forward.failed if compiled else None}


def embed_batches(forward: Callable, batches: Iterable[Batch], n_docs: int, dim: int, device: torch.device,
                  on_batch: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """Pooled float32 vectors (n_docs x dim, on `device`) of a chunk's batches, placed by each
    batch's positions. Call under inference_mode and the precision's autocast. Nothing here waits
    for the device: the caller copies the result back when it needs it."""
    out = torch.empty((n_docs, dim), dtype=torch.float32, device=device)
    for b in batches:
        t = b.to(device)
        try:
            pooled = forward(t["input_ids"], t["attention_mask"])
        except RuntimeError as e:
            err = batch_error(e, t["input_ids"].shape, device)
            if err is e:
                raise
            raise err from e
        out.index_copy_(0, t["positions"], pooled)
        if on_batch is not None:
            on_batch(len(b.positions), b.tokens)
    return out


def batch_error(e: RuntimeError, shape: tuple[int, ...], device: torch.device) -> Exception:
    """What a failed forward raises: out of memory is a UserError naming the batch and the settings
    that make batches smaller; any other error stays itself, with a note naming the batch."""
    docs, width = shape
    if isinstance(e, torch.OutOfMemoryError) or "can't allocate memory" in str(e):
        return UserError(f"out of {'GPU' if device.type == 'cuda' else 'CPU'} memory embedding a batch of {docs} "
                         f"documents x {width} tokens on {device}; lower the embed settings max_tokens (tokens per "
                         "batch, padding included) or batch_size (--max-tokens, --batch-size)")
    e.add_note(f"(while embedding a batch of {docs} documents x {width} tokens on {device})")
    return e


def embed_token_ids(enc, token_ids: list[list[int]], batch_size: int, max_tokens: int,
                    precision: str, on_batch: Callable[[int, int], None] | None = None,
                    forward: Callable | None = None, pad_multiple: int = 1, width: int | None = None) -> torch.Tensor:
    """Pooled float32 vectors (on the encoder's device) for pre-tokenized texts, in input order,
    in token-budget batches sorted by length. `forward`: the call to use (default: eager,
    see inference_forward), `width` its row width when not the encoder's (views.ViewsForward's).
    `on_batch(docs, tokens)` runs after each batch (progress)."""
    forward = forward or PooledForward(enc.model, enc.pooling)
    pad_id = enc.tokenizer.pad_token_id or 0
    pin = enc.device.type == "cuda"
    lengths = [len(x) for x in token_ids]
    batches = (pad_batch(token_ids, idx, pad_id, pad_multiple)
               for idx in token_budget_batches(lengths, batch_size, max_tokens))
    batches = (b.pin_memory() if pin else b for b in batches)
    with torch.inference_mode(), enc.inference_autocast(precision):
        return embed_batches(forward, batches, len(token_ids), width or enc.dim, enc.device, on_batch)


def embed_texts(enc, texts: list[str], batch_size: int = 128, max_tokens: int = 8192,
                precision: str = "auto", forward: Callable | None = None, width: int | None = None) -> np.ndarray:
    """This system's in-memory embedding path (the benchmark uses it): float32 vectors, input order."""
    enc.model.eval()
    prec = resolve_precision(precision, enc.device)
    return embed_token_ids(enc, token_ids(enc.tokenizer, texts, enc.max_length), batch_size, max_tokens,
                           prec, forward=forward, width=width).cpu().numpy()
