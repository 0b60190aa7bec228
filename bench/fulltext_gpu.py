"""GPU training speed of the full-text objectives (CoSAEmb, SciJEPa, section_cl) with a BERT-base-sized
encoder: optimizer steps/s, real tokens/s and peak GPU memory per objective, and SciJEPa at the largest
micro-batch of at most 512 pairs that fits.

    .venv/bin/python bench/fulltext_gpu.py              # on a CUDA machine; under 8 minutes on an H100
    .venv/bin/python bench/fulltext_gpu.py --dry-run    # on a CPU: a tiny model, checks the code, measures nothing

Without a usable CUDA device it stops with an error (exit 2) instead of running on the CPU. Texts: the
sample's PubMed titles and abstracts under distinct ids; each paper gets four sections (I, M, R, D), each
its abstract's sentences repeated to some max_length tokens, so chunks and method texts are full length
(speed does not depend on what the sentences say). CoSAEmb and section_cl run at 8 x 4 accumulation
(CoSAEmb: 3 texts a row, section_cl: 2), SciJEPa at 8 x 4 and then at the largest micro-batch that fits
(512, 256, ... tried in turn; a step that runs out of memory is caught and the next size tried). Steps
after --warmup are timed between two synchronisations (the last step is left out: validation follows it).
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

import pyarrow as pa
import torch

# the script's own folder is first on the import path: bench/gpu_throughput.py's helpers
from facet_gpu import step_tokens  # noqa: E402
from gpu_throughput import cuda_or_say_why, make_model, sync, texts_from_sample  # noqa: E402

from encoders.config import TrainConfig  # noqa: E402
from encoders.training.loop import run_train  # noqa: E402
from sciencemap.contracts import SCHEMAS  # noqa: E402
from sciencemap.layout import RunLayout  # noqa: E402
from sciencemap.storage import write_table_atomic  # noqa: E402
from sciencemap.text import split_sentences  # noqa: E402

SECTIONS = (("Introduction", "I"), ("Methods", "M"), ("Results", "R"), ("Discussion", "D"))
ROW_TEXTS = {"cosaemb": ("a", "p", "n"), "scijepa": ("a", "p"), "section_cl": ("a", "p")}


def make_run(root: Path, ids, titles, abstracts, section_words: int) -> RunLayout:
    """papers, seed triplets (anchor i -> i+1, negative i+2; the first 8 val) and sections of about
    `section_words` words each."""
    lay = RunLayout(root)
    n = len(ids)
    cols = {"paper_id": ids, "title": titles, "abstract": abstracts}
    write_table_atomic(pa.table({f.name: cols.get(f.name, [None] * n) for f in SCHEMAS["papers"]},
                                schema=SCHEMAS["papers"]), lay.table("papers"))
    m = n - 2
    write_table_atomic(pa.table({"anchor_id": ids[:m], "positive_id": ids[1:m + 1], "negative_id": ids[2:m + 2],
                                 "negative_kind": ["hard"] * m, "split": ["val" if i < 8 else "train" for i in range(m)],
                                 "facet": [None] * m}, schema=SCHEMAS["triplets"]), lay.table("triplets"))
    rows = []
    for pid, ab in sorted(zip(ids, abstracts)):      # the table's contract: paper_id order
        sents = split_sentences([ab]) or [ab]
        words = max(sum(len(s.split()) for s in sents), 1)
        body = sents * max(1, -(-section_words // words))
        rows += [(pid, pos, head, cls, "heading", body) for pos, (head, cls) in enumerate(SECTIONS)]
    write_table_atomic(pa.table(dict(zip(SCHEMAS["sections"].names, map(list, zip(*rows)))), schema=SCHEMAS["sections"]),
                       lay.table("sections"))
    return lay


def time_objective(lay, model_dir, objective: str, device: torch.device, steps: int, warm: int, max_length: int,
                   batch: int, accum: int) -> dict:
    marks = {}
    last = steps - 1

    def hook(step: int) -> None:
        if step in (warm, last):
            sync(device)
            marks[step] = time.perf_counter()

    shutil.rmtree(lay.model_dir, ignore_errors=True)
    cfg = TrainConfig(model=str(model_dir), objective=objective, batch_size=batch, grad_accum=accum, max_steps=steps,
                      log_every=steps, max_length=max_length, checkpoint_every=0, val_max=8, device=device.type,
                      resume=False)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    run_train(cfg, lay, after_step=hook)
    secs = marks[last] - marks[warm]
    tokens = step_tokens(lay, cfg, warm, last, ROW_TEXTS[objective])
    return {"objective": objective, "micro_batch": batch, "accumulation": accum, "steps_timed": last - warm,
            "steps_per_s": round((last - warm) / secs, 3), "real_tokens_per_s": round(tokens / secs),
            "seconds_total": round(time.perf_counter() - t0, 1),
            "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.type == "cuda" else None}


def largest_batch(lay, model_dir, device, sizes, steps, warm, max_length) -> dict:
    """SciJEPa at the first micro-batch of `sizes` (largest first) whose steps fit in memory."""
    tried = []
    for b in sizes:
        try:
            r = time_objective(lay, model_dir, "scijepa", device, steps, warm, max_length, b, 1)
            return {**r, "sizes_out_of_memory": tried}
        except torch.cuda.OutOfMemoryError:
            tried.append(b)
            torch.cuda.empty_cache()
    raise SystemExit(f"scijepa: no micro-batch of {sizes} fits")


def report(r: dict) -> None:
    peak = r["peak_gpu_memory_gib"] if r["peak_gpu_memory_gib"] is not None else "n/a"
    print(f"{r['objective']:<10} {r['micro_batch']:>4} x {r['accumulation']}  {r['steps_per_s']:>8} steps/s "
          f"{r['real_tokens_per_s']:>10,} real tokens/s  peak {peak} GiB  ({r['seconds_total']} s)"
          + (f"  out of memory at {r['sizes_out_of_memory']}" if r.get("sizes_out_of_memory") else ""), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU: checks the code, measures nothing")
    ap.add_argument("--model", default="", help="a local model directory (default: a BERT-base-sized random one)")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps per objective (default 20; dry run 3)")
    ap.add_argument("--warmup", type=int, default=0, help="untimed first steps (default 4; dry run 1)")
    ap.add_argument("--max-length", type=int, default=512, help="chunk and section tokens (default 512, the paper's)")
    ap.add_argument("--objectives", nargs="+", default=["cosaemb", "scijepa", "section_cl"], choices=list(ROW_TEXTS))
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if not a.dry_run:
        if not cuda_or_say_why():
            return 2
        device, name, layers, hidden, heads = torch.device("cuda"), torch.cuda.get_device_name(0), 12, 768, 12
        steps, warm, sizes, max_length = a.steps or 20, a.warmup or 4, (512, 384, 256, 192, 128, 64), a.max_length
    else:
        device, name, layers, hidden, heads = torch.device("cpu"), "CPU (dry run: a tiny model, not a measurement)", 2, 64, 2
        steps, warm, sizes, max_length = a.steps or 3, a.warmup or 1, (16, 8), min(a.max_length, 64)
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    tmp = Path(tempfile.mkdtemp(prefix="sciencemap-fulltext-gpu-"))
    try:
        model_dir = Path(a.model) if a.model else make_model(tmp / "model", layers, hidden, heads)
        # a run for the 8 x 4 steps, and a larger one (2 pairs a paper) for SciJEPa's largest micro-batch
        docs, big = 8 * 4 * steps + 64, sizes[0] * steps // 2 + 64
        ids, titles, abstracts = texts_from_sample(docs)
        lay = make_run(tmp / "run", ids, titles, abstracts, section_words=max_length)
        print(f"device {name}; torch {torch.__version__}; model {'given' if a.model else f'{layers} layers, hidden {hidden}'}; "
              f"max_length {max_length}; {docs} papers x {len(SECTIONS)} sections ({big} for the largest micro-batch); "
              f"{steps} steps, {warm} untimed", flush=True)
        rows = []
        for obj in a.objectives:
            r = time_objective(lay, model_dir, obj, device, steps, warm, max_length, 8, 4)
            rows.append(r)
            report(r)
        if "scijepa" in a.objectives:
            ids, titles, abstracts = texts_from_sample(big)
            lay = make_run(tmp / "big", ids, titles, abstracts, section_words=max_length)
            r = largest_batch(lay, model_dir, device, sizes, steps, warm, max_length)
            rows.append(r)
            report(r)
        if a.dry_run:
            print("dry run: no measurement (a tiny model on the CPU)")
        if a.json:
            a.json.write_text(json.dumps({"device": name, "dry_run": a.dry_run, "rows": rows}, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
