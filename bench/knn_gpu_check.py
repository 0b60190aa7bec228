"""GPU kNN check (issue 13): the knn stage on the GPU gives the CPU's neighbours on a demo-sized input.

    make install-gpu                                  # once, on a CUDA 12 machine (faiss-gpu-cu12)
    .venv/bin/python bench/knn_gpu_check.py           # 20,000 generated clustered 384-d vectors
    .venv/bin/python bench/knn_gpu_check.py --run runs/demo   # the demo's embeddings (copied, run untouched)

Runs mapping.knn.run_knn twice on the same vectors with exact search (index flat, as auto picks at
the demo size): gpu = never (CPU) and gpu = require (FAISS GPU indexes), and compares the edges
row by row: every neighbour list must be the same (same rows in the same order); a swap between
neighbours whose CPU similarities are within --tie of each other is reported as a tie and
accepted (GPU and CPU BLAS round differently in the last bits). Then the GPU IVF path (ivf_sq8:
k-means on the GPU, codes on the GPU, exact re-ranking on the CPU) is run and its recall@k checked.

A verdict line per check (met, MISSED, or not checked with the reason): FAISS sees a GPU, both
runs on the devices asked for, the exact neighbour lists the same, the IVF recall >= --target-recall.
Exit code 0 when all hold. On a machine where FAISS sees no GPU (faiss-cpu, no CUDA device or
driver) it FAILS (exit 1): that check is MISSED and the others not checked, with the reason; it
never falls back to the CPU. --no-fail prints the same lines and exits 0.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from knn_scale import generate  # bench/knn_scale.py; a script's own folder is on its import path
from verdicts import Verdicts

SEES_GPU = "FAISS sees a GPU"
DEVICES = "the CPU run on the CPU, the GPU run on the GPU"
SAME = "exact search: the GPU's neighbour lists are the CPU's (tie swaps accepted)"


def edges_lists(layout, n: int):
    """(src-sorted) per-row neighbour arrays and similarities, from the edges table."""
    from sciencemap.storage import read_table

    t = read_table(layout.table("edges"))
    src, dst, sim = (t.column(c).to_numpy() for c in ("src", "dst", "similarity"))
    order = np.lexsort((t.column("rank").to_numpy(), src))
    src, dst, sim = src[order], dst[order], sim[order]
    cuts = np.searchsorted(src, np.arange(1, n))
    return np.split(dst, cuts), np.split(sim, cuts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, help="a run directory with embeddings (default: generated vectors)")
    ap.add_argument("--n", type=int, default=20_000, help="generated vectors (without --run)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--tie", type=float, default=1e-5, help="similarity gap under which a swap is a tie")
    ap.add_argument("--target-recall", "--min-recall", dest="min_recall", type=float, default=0.95,
                    help="GPU ivf_sq8 recall@k must reach this")
    Verdicts.add_arguments(ap)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)

    import faiss

    from sciencemap.layout import RunLayout
    from sciencemap.runtime import UserError
    from mapping.knn import KnnConfig, gpu_count, run_knn

    print(f"faiss {faiss.__version__}; GPU build: {hasattr(faiss, 'StandardGpuResources')}; "
          f"GPUs seen: {gpu_count()}", flush=True)
    verdicts = Verdicts()
    recall_name = "GPU ivf_sq8 recall@k"
    if gpu_count() == 0:
        verdicts.check(SEES_GPU, False, "this is a faiss-cpu build: run `make install-gpu` on a CUDA 12 machine"
                       if not hasattr(faiss, "StandardGpuResources") else "a GPU build, but no CUDA device or driver")
        for name in (DEVICES, SAME):
            verdicts.not_checked(name, "FAISS sees no GPU: nothing was compared")
        verdicts.not_checked(recall_name, "FAISS sees no GPU: nothing was compared", f">= {a.min_recall:.4f}")
        return verdicts.finish(a.no_fail)
    verdicts.check(SEES_GPU, True, f"{gpu_count()} GPU(s)")

    tmp = Path(tempfile.mkdtemp(prefix="knn_gpu_check_"))
    try:
        layout = RunLayout(tmp / "run")
        if a.run:
            shutil.copytree(a.run / "embeddings", layout.embeddings_dir)
        else:
            generate(layout.root, a.n, a.dim, 20, 200, 48, 0.6, 0.35, seed=0, shard=10_000)
        try:
            cpu = run_knn(KnnConfig(k=a.k, index="flat", gpu="never"), layout)
            cpu_dst, cpu_sim = edges_lists(layout, cpu["papers"])
            gpu = run_knn(KnnConfig(k=a.k, index="flat", gpu="require"), layout)
            gpu_dst, gpu_sim = edges_lists(layout, gpu["papers"])
        except UserError as e:
            verdicts.check(DEVICES, False, f"run_knn refused: {e}")
            verdicts.not_checked(SAME, "the GPU run did not finish")
            verdicts.not_checked(recall_name, "the GPU run did not finish", f">= {a.min_recall:.4f}")
            return verdicts.finish(a.no_fail)
        n = cpu["papers"]
        verdicts.check(DEVICES, gpu["gpu"] and not cpu["gpu"], f"cpu run gpu={cpu['gpu']}, gpu run gpu={gpu['gpu']}")
        same = ties = 0
        bad = []
        max_diff = 0.0
        for i in range(n):
            a_d, b_d = cpu_dst[i], gpu_dst[i]
            if len(a_d) == len(b_d) and np.array_equal(a_d, b_d):
                same += 1
                max_diff = max(max_diff, float(np.abs(cpu_sim[i] - gpu_sim[i]).max(initial=0)))
                continue
            # a difference is a tie when every position that differs holds CPU similarities within `tie`
            # of the neighbour the GPU put there (same length, same similarity profile)
            if len(a_d) == len(b_d) and np.abs(cpu_sim[i] - gpu_sim[i]).max() <= a.tie:
                ties += 1
            else:
                bad.append(i)
        print(f"exact search, {n:,} rows, k = {cpu['k']}: identical lists {same:,}, tie swaps {ties:,}, "
              f"different {len(bad):,}; edges cpu {cpu['edges']:,} gpu {gpu['edges']:,}; "
              f"max |similarity difference| on identical lists {max_diff:.2e}", flush=True)
        i = bad[0] if bad else 0
        verdicts.check(SAME, not bad and cpu["edges"] == gpu["edges"],
                       f"{same:,} identical, {ties:,} tie swaps" if not bad else
                       f"{len(bad):,} lists differ beyond ties; first row {i}: cpu {cpu_dst[i][:5]}... "
                       f"gpu {gpu_dst[i][:5]}...")
        ivf = run_knn(KnnConfig(k=a.k, index="ivf_sq8", gpu="require"), layout)
        print(f"GPU ivf_sq8 (nlist {ivf['nlist']}, nprobe {ivf['nprobe']}): recall@{ivf['k']} {ivf['recall_at_k']} "
              f"on {ivf['recall_queries']} queries, build {ivf['build_s']} s, search {ivf['search_s']} s", flush=True)
        verdicts.at_least(recall_name, ivf["recall_at_k"], a.min_recall, "{:.4f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return verdicts.finish(a.no_fail)


if __name__ == "__main__":
    sys.exit(main())
