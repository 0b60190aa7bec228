"""The embed job against an earlier commit's, on the same run's papers and model (CPU).

    nice -n 5 .venv/bin/python bench/embed_vs_ref.py --run runs/demo [--ref 42e5fe5] [--rounds 2]

A git worktree of --ref (default: the commit before the issue-14 feed, 42e5fe5) is made in a temporary
folder; each round runs `jobs/embed.py` of the reference and of this checkout, interleaved, as child
processes on fresh run folders that link the run's `papers` table and `model` (the demo's [embed]
settings from --config), in float32 and in the default precision. Prints each job's embed time (from
its summary: the loop, without loading the model) and wall time, the best-of-rounds ratio
reference/this (>= 1: no slower), the papers written, and the vectors' agreement (same ids in the
same order, min cosine, max |diff|).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sciencemap.embeddings import load_embeddings

REPO = Path(__file__).resolve().parents[1]


def fresh_run(root: Path, src: Path) -> Path:
    root.mkdir(parents=True)
    for name in ("papers", "model"):
        (root / name).symlink_to((src / name).resolve())
    return root


def run_job(tree: Path, run: Path, config: Path, precision: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))   # imports from `tree`, ahead of the editable install
    cmd = [sys.executable, "-P", str(tree / "jobs" / "embed.py"), "--run", str(run), "--config", str(config),
           "--precision", precision]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{tree}: embed failed:\n{p.stderr[-3000:]}")
    summary = json.loads(p.stdout[p.stdout.index("{"):])
    return {"wall": wall, "embed": summary["embed_seconds"], "papers": summary["papers"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=REPO / "runs" / "demo", help="a finished run (papers + model)")
    ap.add_argument("--ref", default="42e5fe5")
    ap.add_argument("--config", default="configs/demo.toml", help="relative to each tree")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--precisions", nargs="+", default=["float32", "auto"])
    args = ap.parse_args()
    if not (args.run / "model").is_dir():
        raise SystemExit(f"{args.run} has no model: run `make demo` first (or pass --run)")
    tmp = Path(tempfile.mkdtemp(prefix="sciencemap-embed-vs-ref-"))
    ref_tree = tmp / "ref"
    subprocess.run(["git", "worktree", "add", "--detach", str(ref_tree), args.ref], cwd=REPO, check=True,
                   capture_output=True)
    try:
        trees = {"reference " + args.ref: ref_tree, "this checkout": REPO}
        print(f"run {args.run}, config {args.config}, load average {os.getloadavg()}")
        for prec in args.precisions:
            best = {}
            outs = {}
            for r in range(args.rounds):
                for name, tree in trees.items():
                    run = fresh_run(tmp / f"{prec}-{r}-{name.split()[0]}", args.run)
                    res = run_job(tree, run, tree / args.config, prec)
                    outs[name] = run
                    print(f"  {prec} round {r + 1}: {name}: embed {res['embed']:.1f}s (wall {res['wall']:.1f}s), "
                          f"{res['papers']} papers", flush=True)
                    b = best.get(name)
                    best[name] = res if b is None or res["embed"] < b["embed"] else b
            (ref_name, ref), (new_name, new) = best.items()
            print(f"{prec}: best embed time reference {ref['embed']:.1f}s, this {new['embed']:.1f}s: "
                  f"ratio reference/this {ref['embed'] / new['embed']:.2f} (wall {ref['wall'] / new['wall']:.2f})")
            ids_a, a = load_embeddings(outs[ref_name])
            ids_b, b = load_embeddings(outs[new_name])
            same = len(ids_a) == len(ids_b) and bool((ids_a == ids_b).all())
            cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
            print(f"  vectors: same ids in the same order: {same} ({len(ids_b)}); min cosine {cos.min():.7f}, "
                  f"max |diff| {np.abs(a - b).max():.2e}")
        print(f"load average after {os.getloadavg()}")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(ref_tree)], cwd=REPO, capture_output=True)


if __name__ == "__main__":
    main()
