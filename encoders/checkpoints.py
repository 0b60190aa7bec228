"""Training checkpoints: `<run>/checkpoints/step-NNNNNNNN/` (state.pt + meta.json), each written
whole or not at all (sciencemap.storage.atomic_dir).

A checkpoint holds model, optimizer, scheduler, every rank's RNG states and the step, which fixes
the data position (the order is a pure function of seed, epoch and rank: encoders.train_feed.shard_order).
meta.json carries the fingerprint of the settings, data and world size that wrote it; only a
checkpoint with the current fingerprint is resumed from.
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from sciencemap.storage import atomic_dir

STATE, META = "state.pt", "meta.json"


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def checkpoint_dirs(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of the complete checkpoints in `folder`, oldest first."""
    out = []
    for p in Path(folder).glob("step-*"):
        if (p / STATE).is_file() and (p / META).is_file() and p.name[5:].isdigit():
            out.append((int(p.name[5:]), p))
    return sorted(out)


def find_checkpoint(folder: Path, fingerprint: str) -> Path | None:
    """Newest complete checkpoint written with the same settings, data and world size."""
    for _, path in reversed(checkpoint_dirs(folder)):
        try:
            if json.loads((path / META).read_text()).get("fingerprint") == fingerprint:
                return path
        except (OSError, json.JSONDecodeError):
            continue
    return None


def save_checkpoint(folder: Path, step: int, state: dict, meta: dict, keep: int) -> Path:
    """Write `folder`/step-N atomically; keep the newest `keep`."""
    dest = Path(folder) / f"step-{step:08d}"
    with atomic_dir(dest) as tmp:
        torch.save(state, tmp / STATE)
        (tmp / META).write_text(json.dumps(meta, indent=2, default=str))
    for _, old in checkpoint_dirs(folder)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return dest


def load_checkpoint(path: Path) -> dict:
    # CPU first: RNG states must stay CPU tensors; load_state_dict copies weights to the device.
    return torch.load(Path(path) / STATE, map_location="cpu", weights_only=False)


def remove_checkpoints(folder: Path) -> None:
    if Path(folder).exists():
        shutil.rmtree(folder)
