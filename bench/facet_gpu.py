"""GPU training speed of the facet objectives (FLeW, UniFAR) at the seed recipe's batch (8 triplets x 4
accumulation), with a BERT-base-sized encoder: optimizer steps/s, real tokens/s and peak GPU memory.

    .venv/bin/python bench/facet_gpu.py              # on a CUDA machine; under 8 minutes on an H100
    .venv/bin/python bench/facet_gpu.py --dry-run    # on a CPU: a tiny model, checks the code, measures nothing

Without a usable CUDA device it stops with an error (exit 2) instead of running on the CPU. Texts: the
sample's PubMed titles + abstracts, repeated under distinct ids; facet triplets drawn at random (a
facet each in turn) and abstracts split into facets by position (speed does not depend on the labels).
FLeW runs three encoders (its budget is three times the seed's per triplet seen by each); UniFAR one
encoder plus the aggregator, on title [SEP] sentences. Steps after --warmup are timed between two
synchronisations (the last step is left out: validation follows it inside the loop).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

# the script's own folder is first on the import path: bench/gpu_throughput.py's helpers
from gpu_throughput import cuda_or_say_why, make_model, sync, texts_from_sample  # noqa: E402

from encoders.config import TrainConfig  # noqa: E402
from encoders.training.feed import shard_order  # noqa: E402
from encoders.training.item_store import open_store  # noqa: E402
from encoders.training.loop import run_train  # noqa: E402
from sciencemap.contracts import FACETS, SCHEMAS  # noqa: E402
from sciencemap.layout import RunLayout  # noqa: E402
from sciencemap.storage import write_table_atomic  # noqa: E402
from sciencemap.text import split_sentences  # noqa: E402


def make_run(root: Path, ids, titles, abstracts, n_triplets: int) -> RunLayout:
    lay = RunLayout(root)
    n = len(ids)
    cols = {"paper_id": ids, "title": titles, "abstract": abstracts}
    write_table_atomic(pa.table({f.name: cols.get(f.name, [None] * n) for f in SCHEMAS["papers"]},
                                schema=SCHEMAS["papers"]), lay.table("papers"))
    rng = np.random.default_rng(0)
    a, p, q = (rng.integers(0, n, n_triplets) for _ in range(3))
    split = ["val" if i < 8 else "train" for i in range(n_triplets)]
    # the same rows as facet triplets (a facet each in turn) and as seed triplets (the triplet objective's)
    facet = [FACETS[i % 3] for i in range(n_triplets)] + [None] * n_triplets
    write_table_atomic(pa.table({"anchor_id": [ids[i] for i in a] * 2, "positive_id": [ids[i] for i in p] * 2,
                                 "negative_id": [ids[i] for i in q] * 2, "negative_kind": ["hard"] * 2 * n_triplets,
                                 "split": split * 2, "facet": facet}, schema=SCHEMAS["triplets"]), lay.table("triplets"))
    sents = {}
    for pid, ab in zip(ids, abstracts):
        key = pid.split("#")[0]
        if key not in sents:
            sents[key] = split_sentences([ab])
    S = [sents[pid.split("#")[0]] for pid in ids]
    F = [[FACETS[min(2, 3 * i // max(len(s), 1))] for i in range(len(s))] for s in S]
    write_table_atomic(pa.table({"paper_id": ids, "sentences": S, "facets": F}, schema=SCHEMAS["abstract_facets"]),
                       lay.table("abstract_facets"))
    return lay


def step_tokens(lay: RunLayout, cfg: TrainConfig, first: int, last: int, columns=("a", "p", "n")) -> int:
    """Real tokens the micro-batches of optimizer steps (first, last] read (epoch 0, one rank); `columns`:
    the texts a row reads (a pair store's: "a", "p")."""
    folder = next(p for p in lay.train_tokens_dir.iterdir() if p.is_dir())
    store = open_store(folder)
    lengths = store.lengths()
    split = store.rows.column("split").to_numpy(zero_copy_only=False)
    train = {c: store.rows.column(c).to_numpy()[split == "train"] for c in columns}
    order = shard_order(len(train[columns[0]]), cfg.seed, 0)
    per_step = cfg.batch_size * cfg.grad_accum
    rows = order[first * per_step:last * per_step]
    return int(sum(lengths[train[c][rows]].sum() for c in columns))


def time_objective(lay, model_dir, objective: str, device: torch.device, steps: int, warm: int, max_length: int) -> dict:
    marks = {}
    last = steps - 1

    def hook(step: int) -> None:
        if step in (warm, last):
            sync(device)
            marks[step] = time.perf_counter()

    shutil.rmtree(lay.model_dir, ignore_errors=True)
    shutil.rmtree(lay.train_tokens_dir, ignore_errors=True)
    cfg = TrainConfig(model=str(model_dir), objective=objective, batch_size=8, grad_accum=4, max_steps=steps,
                      log_every=steps, max_length=max_length, checkpoint_every=0, val_max=8, device=device.type,
                      margin=1.0, resume=False)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    run_train(cfg, lay, after_step=hook)
    secs = marks[last] - marks[warm]
    tokens = step_tokens(lay, cfg, warm, last)
    return {"objective": objective, "steps_timed": last - warm, "steps_per_s": round((last - warm) / secs, 3),
            "real_tokens_per_s": round(tokens / secs), "seconds_total": round(time.perf_counter() - t0, 1),
            "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.type == "cuda" else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU: checks the code, measures nothing")
    ap.add_argument("--model", default="", help="a local model directory (default: a BERT-base-sized random one)")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps per objective (default 30; dry run 3)")
    ap.add_argument("--warmup", type=int, default=0, help="untimed first steps (default 5; dry run 1)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--objectives", nargs="+", default=["flew", "unifar"], choices=["triplet", "flew", "unifar"])
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if not a.dry_run:
        if not cuda_or_say_why():
            return 2
        device, name, layers, hidden, heads = torch.device("cuda"), torch.cuda.get_device_name(0), 12, 768, 12
        steps, warm = a.steps or 30, a.warmup or 5
    else:
        device, name, layers, hidden, heads = torch.device("cpu"), "CPU (dry run: a tiny model, not a measurement)", 2, 64, 2
        steps, warm = a.steps or 3, a.warmup or 1
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    tmp = Path(tempfile.mkdtemp(prefix="sciencemap-facet-gpu-"))
    try:
        model_dir = Path(a.model) if a.model else make_model(tmp / "model", layers, hidden, heads)
        docs = 4 * steps * 8 * 4 + 64
        ids, titles, abstracts = texts_from_sample(docs)
        lay = make_run(tmp / "run", ids, titles, abstracts, steps * 32 + 40)
        print(f"device {name}; torch {torch.__version__}; model {'given' if a.model else f'{layers} layers, hidden {hidden}'}; "
              f"batch 8 x 4 accumulation, max_length {a.max_length}; {steps} steps, {warm} untimed")
        rows = []
        for obj in a.objectives:
            r = time_objective(lay, model_dir, obj, device, steps, warm, a.max_length)
            rows.append(r)
            print(f"{obj:<8} {r['steps_per_s']:>8} steps/s {r['real_tokens_per_s']:>10,} real tokens/s  peak "
                  f"{r['peak_gpu_memory_gib'] if r['peak_gpu_memory_gib'] is not None else 'n/a'} GiB  ({r['seconds_total']} s)")
        if a.dry_run:
            print("dry run: no measurement (a tiny model on the CPU)")
        if a.json:
            a.json.write_text(json.dumps({"device": name, "dry_run": a.dry_run, "rows": rows}, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
