"""The whole mapping chain on a generated corpus: wall time, peak memory and bytes per paper per stage.

    python bench/mapping_chain.py                  # 2M papers x 384-d (issue 13's size), ~1 h on 2 cores
    python bench/mapping_chain.py --n 200000       # a quick look

Writes a generated run (bench/synthetic.py: vectors with topic structure, titles, years, fields,
MeSH-like descriptors for 30% of papers) and runs knn → cluster → render (topics, layout, map) →
evaluate, each stage as its own `python jobs/<stage>.py` process, so every stage's peak RSS is its
own (os.wait4's rusage of that child; the corpus is generated in another child, so this
parent stays small and a child's ru_maxrss, which starts at its parent's RSS, is its own). Prints a table: seconds, peak RSS, peak bytes per paper, and
the bytes on disk per paper of what the stage wrote; the reference in the same run is the raw
float32 vectors (n × dim × 4 bytes) each peak is compared with. Needs no GPU.

Target (issue 13; --target-peak-gib changes it): the largest stage peak RSS <= 12 GiB, with a
verdict line (met or MISSED); exit 1 when it is missed (--no-fail: 0).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parent.parent


STAGES = ("knn", "cluster", "render", "evaluate")


def config_text(args) -> str:
    res = ", ".join(str(r) for r in args.resolutions)
    return f"""[knn]
k = {args.k}
vector_dtype = "{args.vector_dtype}"

[cluster]
resolutions = [{res}]
min_cluster_size = 5

[render]
map_resolution = 0.0
layout_method = "{args.layout}"

[evaluate]
path_sample = 100
"""


def du(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def run_stage(stage: str, run: Path, cfg: Path, log: Path) -> dict:
    cmd = [sys.executable, str(REPO / "jobs" / f"{stage}.py"), "--run", str(run), "--config", str(cfg)]
    t0 = time.perf_counter()
    with open(log, "a") as out:
        out.write(f"\n### {' '.join(cmd)}\n")
        out.flush()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        sys.exit(f"stage {stage} failed (exit {rc}); see {log}")
    return {"stage": stage, "seconds": wall, "peak_rss_bytes": usage.ru_maxrss * 1024}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--vector-dtype", default="float32", choices=("float32", "float16"))
    ap.add_argument("--resolutions", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3, 3e-3, 1e-2])
    ap.add_argument("--layout", default="umap", choices=("umap", "pca"), help="the render stage's topic layout")
    ap.add_argument("--run", type=Path, default=REPO / "runs" / "bench_chain")
    ap.add_argument("--reuse", action="store_true", help="keep an existing generated corpus of the same size")
    ap.add_argument("--generate-only", action="store_true", help="write the corpus and stop (use --reuse later)")
    ap.add_argument("--out", type=Path, help="also write the figures as JSON here")
    ap.add_argument("--target-peak-gib", type=float, default=12.0, help="the largest stage peak RSS, at most (GiB)")
    Verdicts.add_arguments(ap)
    args = ap.parse_args()

    run = args.run
    stamp = run / "generated.json"
    want = {"n": args.n, "dim": args.dim}
    if not (args.reuse and stamp.is_file() and json.loads(stamp.read_text()).get("args") == want):
        shutil.rmtree(run, ignore_errors=True)
        t0 = time.perf_counter()
        # In a child process: a stage's peak RSS is then not inflated by this process's size at fork.
        out = subprocess.run([sys.executable, str(REPO / "bench" / "synthetic.py"), str(run), "--n", str(args.n),
                              "--dim", str(args.dim)], check=True, capture_output=True, text=True).stdout
        info = json.loads(out.strip().splitlines()[-1])
        stamp.write_text(json.dumps({"args": want, "corpus": info}))
        print(f"generated {args.n:,} papers x {args.dim}-d in {time.perf_counter() - t0:.0f} s: {info}", flush=True)
    if args.generate_only:
        return 0
    for t in ("vectors", "knn_work", "edges", "clusters", "topics", "map.png", "map.html", "report.md",
              "metrics.json", "stages.json"):
        p = run / t
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    cfg = run / "bench.toml"
    cfg.write_text(config_text(args))
    log = run / "bench.log"
    log.write_text("")
    raw = args.n * args.dim * 4
    writes = {"knn": ["vectors", "edges"], "cluster": ["clusters"], "render": ["topics", "map.png", "map.html"],
              "evaluate": ["report.md", "metrics.json"]}
    rows = []
    for stage in STAGES:
        r = run_stage(stage, run, cfg, log)
        r["disk_bytes"] = sum(du(run / w) for w in writes[stage] if (run / w).exists())
        rows.append(r)
        print(f"{stage:9s} {r['seconds']:9.1f} s   peak RSS {r['peak_rss_bytes'] / 2**30:6.2f} GiB   "
              f"{r['peak_rss_bytes'] / args.n:7.0f} B/paper   {r['peak_rss_bytes'] / raw:5.2f}x raw vectors   "
              f"disk {r['disk_bytes'] / args.n:6.0f} B/paper", flush=True)
    edges_meta = {}
    try:
        import pyarrow.parquet as pq

        from sciencemap.contracts import EDGES_META_KEY

        meta = pq.read_schema(next((run / "edges").glob("*.parquet"))).metadata or {}
        edges_meta = json.loads(meta.get(EDGES_META_KEY, b"{}"))
    except (StopIteration, OSError, ValueError):
        pass
    metrics = json.loads((run / "metrics.json").read_text())
    acc = [(r["resolution"], r["granularity"], r["accuracy"], r["accuracy_random"])
           for r in metrics.get("mesh_accuracy", {}).get("resolutions", [])]
    peak = max(r["peak_rss_bytes"] for r in rows)
    print()
    print(f"papers {args.n:,}, dim {args.dim}, raw float32 vectors {raw / 2**30:.2f} GiB (the reference)")
    print(f"knn: index {edges_meta.get('index')}, recall@{edges_meta.get('k')} {edges_meta.get('recall_at_k')}, "
          f"edges {edges_meta.get('edges')}")
    for res, g, a, ar in acc:
        print(f"MeSH accuracy at resolution {res:g}: G {g:,.0f}  A {a:.4f}  (random {ar:.4f})")
    print(f"total {sum(r['seconds'] for r in rows):.0f} s")
    verdicts = Verdicts()
    verdicts.at_most("largest stage peak RSS, GiB", peak / 2**30, args.target_peak_gib, "{:.2f}")
    if args.out:
        args.out.write_text(json.dumps({"n": args.n, "dim": args.dim, "raw_vector_bytes": raw, "stages": rows,
                                        "knn": edges_meta, "mesh": acc, "verdicts": verdicts.as_json()}, indent=2))
    return verdicts.finish(args.no_fail)


if __name__ == "__main__":
    sys.exit(main())
