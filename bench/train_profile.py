"""Where a training step's time goes on the GPU: torch.profiler over a short run of each objective
at the seed recipe (8 x 4 accumulation) with a BERT-base-sized encoder, and the share of a step
the GPU is busy.

    .venv/bin/python bench/train_profile.py                      # on a CUDA machine; a few minutes
    .venv/bin/python bench/train_profile.py --objectives triplet flew
    .venv/bin/python bench/train_profile.py --dry-run            # on a CPU: checks the code, measures nothing

Without a usable CUDA device it stops with an error (exit 2) instead of running on the CPU. Each
objective runs once untimed (allocator and cuDNN warm), then --steps under the profiler through
bench/facet_gpu.py's time_objective (the same texts and runs as that bench). Printed per objective:
steps/s of the timed steps; the CUDA time of the whole profiled call, less its host<->device copies
(the model's load and export), as an upper bound on the kernel time of its steps and validations;
the GPU's busy share of a step from it (an upper bound too); kernel launches; the profiler's tables
by CUDA time and by host CPU time (--rows each). A busy share far under 1 says the step is host-bound:
larger micro-batches or `[train] compile = true` are the levers, not faster kernels.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

# the script's own folder is first on the import path
from facet_gpu import make_run, time_objective  # noqa: E402
from gpu_throughput import cuda_or_say_why, make_model, texts_from_sample  # noqa: E402

COPIES = ("Memcpy DtoH", "Memcpy HtoD")


def summarise(prof, steps_timed: int, steps_per_s: float, steps_run: int) -> dict:
    """Kernel time (CUDA time less the load/export copies), busy share and launches of a profiled call."""
    # device-side events only (kernels, copies), as the profiler's own "Self CUDA time total" counts them
    events = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
    cuda_us = sum(e.self_device_time_total for e in events)
    copy_us = sum(e.self_device_time_total for e in events if e.key.startswith(COPIES))
    launches = sum(e.count for e in prof.key_averages() if e.key in ("cudaLaunchKernel", "cuLaunchKernelEx"))
    kernel_s = (cuda_us - copy_us) / 1e6
    step_s = 1 / steps_per_s
    return {"steps_timed": steps_timed, "seconds_a_step": round(step_s, 4),
            "cuda_s": round(cuda_us / 1e6, 3), "copies_s": round(copy_us / 1e6, 3),
            "kernel_s_a_step_at_most": round(kernel_s / steps_run, 4),
            "gpu_busy_share_at_most": round(kernel_s / steps_run / step_s, 3),
            "kernel_launches_a_step": round(launches / steps_run)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU: checks the code, measures nothing")
    ap.add_argument("--objectives", nargs="+", default=["triplet", "flew"], choices=["triplet", "flew", "unifar"])
    ap.add_argument("--steps", type=int, default=6, help="profiled optimizer steps per objective (the first is untimed)")
    ap.add_argument("--rows", type=int, default=15, help="rows of each profiler table")
    a = ap.parse_args()
    if not a.dry_run:
        if not cuda_or_say_why():
            return 2
        device, name, (layers, hidden, heads) = torch.device("cuda"), torch.cuda.get_device_name(0), (12, 768, 12)
        activities, sort = [ProfilerActivity.CPU, ProfilerActivity.CUDA], "cuda_time_total"
    else:
        device, name, (layers, hidden, heads) = torch.device("cpu"), "CPU (dry run: not a measurement)", (2, 64, 2)
        activities, sort = [ProfilerActivity.CPU], "cpu_time_total"
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    steps = max(a.steps, 3)
    tmp = Path(tempfile.mkdtemp(prefix="sciencemap-train-profile-"))
    try:
        model_dir = make_model(tmp / "model", layers, hidden, heads)
        ids, titles, abstracts = texts_from_sample(4 * steps * 32 + 64)
        lay = make_run(tmp / "run", ids, titles, abstracts, steps * 32 + 40)
        print(f"device {name}; torch {torch.__version__}; {layers} layers, hidden {hidden}; 8 x 4, max_length 256; "
              f"{steps} profiled steps, the first untimed")
        for obj in a.objectives:
            time_objective(lay, model_dir, obj, device, 3, 1, 256)   # warm: allocator, cuDNN plans
            with profile(activities=activities) as prof:
                r = time_objective(lay, model_dir, obj, device, steps, 1, 256)
            if a.dry_run:
                print(f"\n{obj}: {r['steps_per_s']} steps/s (dry run: no measurement)")
            else:
                s = summarise(prof, r["steps_timed"], r["steps_per_s"], steps)
                print(f"\n{obj}: {r['steps_per_s']} steps/s, {r['real_tokens_per_s']:,} real tokens/s; {s}")
            print(prof.key_averages().table(sort_by=sort, row_limit=a.rows, max_name_column_width=60))
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows, max_name_column_width=60))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
