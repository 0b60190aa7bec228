"""Training checkpoints: `<run>/checkpoints/step-NNNNNNNN/` (state.pt + state.json + meta.json),
each written whole or not at all (sciencemap.storage.atomic_dir).

state.pt holds only tensors in plain containers (model, optimizer, scheduler, torch's RNG states)
and is read with `torch.load(weights_only=True)`, which runs no pickled code; what is not a tensor
(the step, the seconds, NumPy's and Python's RNG states) is in state.json beside it.

A checkpoint holds model, optimizer, scheduler, every rank's RNG states and the step, which fixes
the data position (the order is a pure function of seed, epoch and rank: encoders.training.feed.shard_order).
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

STATE, PLAIN, META = "state.pt", "state.json", "meta.json"


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
        if all((p / f).is_file() for f in (STATE, PLAIN, META)) and p.name[5:].isdigit():
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


def _plain_rng(r: dict) -> dict:
    kind, keys, pos, has_gauss, gauss = r["numpy"]
    version, internal, gauss_next = r["python"]
    return {"numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)],
            "python": [version, list(internal), gauss_next]}


def _rng_from_plain(r: dict) -> dict:
    kind, keys, pos, has_gauss, gauss = r["numpy"]
    version, internal, gauss_next = r["python"]
    return {"numpy": (kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss),
            "python": (version, tuple(internal), gauss_next)}


def save_checkpoint(folder: Path, step: int, state: dict, meta: dict, keep: int) -> Path:
    """Write `folder`/step-N atomically; keep the newest `keep`. `state`: step, seconds, rng (a
    rng_state() per rank) and state dicts of tensors (model, optimizer, scheduler)."""
    dest = Path(folder) / f"step-{step:08d}"
    tensors = {k: v for k, v in state.items() if k not in ("step", "seconds", "rng")}
    tensors["rng"] = [{"torch": r["torch"], "cuda": r["cuda"]} for r in state["rng"]]
    plain = {"step": int(state["step"]), "seconds": float(state["seconds"]),
             "rng": [_plain_rng(r) for r in state["rng"]]}
    with atomic_dir(dest) as tmp:
        torch.save(tensors, tmp / STATE)
        (tmp / PLAIN).write_text(json.dumps(plain))
        (tmp / META).write_text(json.dumps(meta, indent=2, default=str))
    for _, old in checkpoint_dirs(folder)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return dest


def load_checkpoint(path: Path) -> dict:
    """The state save_checkpoint wrote, as it was given."""
    # CPU first: RNG states must stay CPU tensors; load_state_dict copies weights to the device.
    state = torch.load(Path(path) / STATE, map_location="cpu", weights_only=True)
    plain = json.loads((Path(path) / PLAIN).read_text())
    state["step"], state["seconds"] = plain["step"], plain["seconds"]
    state["rng"] = [{**r, **_rng_from_plain(p)} for r, p in zip(state["rng"], plain["rng"])]
    return state


def remove_checkpoints(folder: Path) -> None:
    if Path(folder).exists():
        shutil.rmtree(folder)
