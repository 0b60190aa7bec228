"""GPU kNN check (issue 13): the knn stage on the GPU gives the CPU's neighbours on a demo-sized input.

    make install-gpu                                  # once, on a CUDA 12 machine (faiss-gpu)
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
Then the scale part (--scale-n generated --scale-dim vectors, default 2,000,000 x 768; 0 = skip): the
exact search with the database resident on the GPU(s) (a check: not streamed) and the GPU IVF with
its tuned nprobe, each with queries/s and the time 33M papers would take, printed as a projection
with its basis (exact: queries x database rows, so the measured time x (33M / n)^2; IVF at the same
nprobe: queries x codes scanned, codes per query growing as sqrt(n), so x (33M / n)^1.5). Figures
also in --json. --scale-indexes ivf_sq8 leaves the exact one out (its verdict then not checked).

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


RESIDENT = "exact search at scale: the database resident on the GPU(s), not streamed"
AT_SCALE = 33e6


def scale(a, tmp: Path, verdicts: Verdicts) -> None:
    """Exact (resident) and IVF searches on the GPU at --scale-n vectors: queries/s and projections."""
    import json

    from sciencemap.layout import RunLayout
    from mapping.knn import KnnConfig, run_knn

    layout = RunLayout(tmp / "scale")
    generate(layout.root, a.scale_n, a.scale_dim, 20, 2000, 48, 0.6, 0.35, seed=1, shard=100_000)
    n, figures = a.scale_n, {}
    parts = (("exact (flat, resident)", KnnConfig(k=a.k, index="flat", gpu="require"), 2.0,
              "exact search costs queries x database rows: measured search s x (33M / n)^2"),
             ("ivf_sq8 (tuned nprobe)", KnnConfig(k=a.k, index="ivf_sq8", gpu="require", exact_below=0), 1.5,
              "queries x codes scanned at the same nprobe, codes a query growing as sqrt(n): measured search s "
              "x (33M / n)^1.5; the tuned nprobe at 33M may differ"))
    for name, cfg, growth, basis in (part for part in parts if part[1].index in a.scale_indexes):
        s = run_knn(cfg, layout)
        qps = n / s["search_s"]
        projected_h = s["search_s"] * (AT_SCALE / n) ** growth / 3600
        extra = (f"storage {s.get('gpu_storage')}" if cfg.index == "flat" else
                 f"nlist {s['nlist']}, nprobe {s['nprobe']}, recall@{s['k']} {s['recall_at_k']}")
        print(f"{name}, {n:,} x {a.scale_dim}: build {s['build_s']} s, search {s['search_s']} s, "
              f"{qps:,.0f} queries/s ({extra}); 33M papers: {projected_h:.2f} h, projected (basis: {basis})", flush=True)
        figures[name] = {"summary": s, "queries_per_s": qps, "projected_hours_33M": projected_h,
                         "projection_basis": basis}
        if cfg.index == "flat":
            verdicts.check(RESIDENT, s.get("gpu_storage") in ("float32", "float16"), f"storage {s.get('gpu_storage')}")
    if "flat" not in a.scale_indexes:
        verdicts.not_checked(RESIDENT, "--scale-indexes without flat: the exact search at scale was skipped")
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2, default=str))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, help="a run directory with embeddings (default: generated vectors)")
    ap.add_argument("--n", type=int, default=20_000, help="generated vectors (without --run)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--tie", type=float, default=1e-5, help="similarity gap under which a swap is a tie")
    ap.add_argument("--target-recall", "--min-recall", dest="min_recall", type=float, default=0.95,
                    help="GPU ivf_sq8 recall@k must reach this")
    ap.add_argument("--scale-n", type=int, default=2_000_000, help="vectors of the scale part (0: skip it)")
    ap.add_argument("--scale-dim", type=int, default=768)
    ap.add_argument("--scale-indexes", nargs="+", choices=("flat", "ivf_sq8"), default=["flat", "ivf_sq8"],
                    help="the scale part's searches (exact search at 2M x 768 takes ~2.5 min on an H200)")
    ap.add_argument("--json", type=Path, help="also write the scale figures here")
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
        verdicts.not_checked(RESIDENT, "FAISS sees no GPU: nothing was searched")
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
            verdicts.not_checked(RESIDENT, "the GPU run did not finish")
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
        if a.scale_n:
            scale(a, tmp, verdicts)
        else:
            verdicts.not_checked(RESIDENT, "--scale-n 0: the scale part was skipped")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return verdicts.finish(a.no_fail)


if __name__ == "__main__":
    sys.exit(main())
