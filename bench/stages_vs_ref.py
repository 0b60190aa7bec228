"""The embed and train jobs against an earlier commit's, on the same run's tables (CPU).

    nice -n 5 .venv/bin/python bench/stages_vs_ref.py --run runs/demo [--ref 42e5fe5] [--rounds 2]
        [--stages embed train]

A git worktree of --ref (default: the commit before the issue-14 feeds, 42e5fe5) is made in a
temporary folder; each job of the reference and of this checkout runs as a child process on a fresh
run folder that links the run's tables (and, for embed, its model), with --config's settings.

embed: each round runs both jobs, interleaved (the first of a pair alternates), in float32 and in
the default precision. Prints each job's embed time (from its summary: the loop, without loading
the model) and wall time, the best-of-rounds ratio reference/this (>= 1: no slower) and that of
the rounds' means, and the vectors' agreement (same ids in the same order, min cosine, max |diff|).

train: both jobs train --train-steps steps (default 20) with a log line per step, same seed; prints
the step losses side by side, their largest difference, and each job's training time.

The times and the vector and loss differences are figures, not targets. Two checks get a verdict
line (met or MISSED): embed, per precision, the same ids in the same order; train, the same number
of logged steps. Exit 1 when one is missed (--no-fail: 0).
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
from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parents[1]


def fresh_run(root: Path, src: Path, names: tuple[str, ...]) -> Path:
    root.mkdir(parents=True)
    for name in names:
        (root / name).symlink_to((src / name).resolve())
    return root


def run_job(tree: Path, job: str, run: Path, config: Path, *options: str) -> tuple[dict, float]:
    """(the job's JSON summary, wall seconds) of tree's jobs/<job>.py."""
    env = dict(os.environ, PYTHONPATH=str(tree))   # imports from `tree`, ahead of the editable install
    cmd = [sys.executable, "-P", str(tree / "jobs" / f"{job}.py"), "--run", str(run), "--config", str(config),
           *options]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{tree}: {job} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout[p.stdout.index("{"):]), wall


def compare_embed(trees: dict, args, tmp: Path, verdicts: Verdicts) -> None:
    for prec in args.precisions:
        best, outs, means = {}, {}, {}
        for r in range(args.rounds):
            # alternate which job goes first: the second of a pair runs on a warmer machine
            for name, tree in (list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]):
                run = fresh_run(tmp / f"embed-{prec}-{r}-{name.split()[0]}", args.run, ("papers", "model"))
                summary, wall = run_job(tree, "embed", run, tree / args.config, "--precision", prec)
                res = {"wall": wall, "embed": summary["embed_seconds"], "papers": summary["papers"]}
                outs[name] = run
                print(f"  {prec} round {r + 1}: {name}: embed {res['embed']:.1f}s (wall {res['wall']:.1f}s), "
                      f"{res['papers']} papers", flush=True)
                b = best.get(name)
                best[name] = res if b is None or res["embed"] < b["embed"] else b
                means.setdefault(name, []).append(res["embed"])
        (ref_name, ref), (new_name, new) = ((n, best[n]) for n in trees)
        print(f"embed {prec}: best embed time reference {ref['embed']:.1f}s, this {new['embed']:.1f}s: "
              f"ratio reference/this {ref['embed'] / new['embed']:.2f} (wall {ref['wall'] / new['wall']:.2f}); "
              f"mean of rounds {np.mean(means[ref_name]):.1f}s vs {np.mean(means[new_name]):.1f}s: "
              f"{np.mean(means[ref_name]) / np.mean(means[new_name]):.2f}")
        ids_a, a = load_embeddings(outs[ref_name])
        ids_b, b = load_embeddings(outs[new_name])
        same = len(ids_a) == len(ids_b) and bool((ids_a == ids_b).all())
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        print(f"  vectors: same ids in the same order: {same} ({len(ids_b)}); min cosine {cos.min():.7f}, "
              f"max |diff| {np.abs(a - b).max():.2e}")
        verdicts.check(f"embed {prec}: the same ids in the same order as the reference", same,
                       f"{len(ids_a):,} reference, {len(ids_b):,} this checkout")


def compare_train(trees: dict, args, tmp: Path, verdicts: Verdicts) -> None:
    losses, secs = {}, {}
    for name, tree in trees.items():
        run = fresh_run(tmp / f"train-{name.split()[0]}", args.run, ("papers", "triplets"))
        summary, wall = run_job(tree, "train", run, tree / args.config, "--max-steps", str(args.train_steps),
                                "--log-every", "1", "--checkpoint-every", "0", "--device", "cpu")
        log = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
        losses[name] = [r["loss"] for r in log if r["kind"] == "train"]
        secs[name] = (summary["train_seconds"], wall)
        print(f"  train: {name}: {len(losses[name])} steps in {summary['train_seconds']:.1f}s (wall {wall:.1f}s)",
              flush=True)
    (ref_name, ref), (new_name, new) = losses.items()
    print(f"train: step losses, reference | this checkout ({args.train_steps} steps, float32 on the CPU):")
    for i, (x, y) in enumerate(zip(ref, new), 1):
        print(f"  step {i:3d}: {x:.7f} | {y:.7f}   diff {abs(x - y):.2e}")
    diff = max(abs(x - y) for x, y in zip(ref, new)) if ref and len(ref) == len(new) else float("nan")
    print(f"train: largest |loss difference| over the first {len(new)} steps: {diff:.2e} "
          f"(same number of steps: {len(ref) == len(new)}); training time reference/this "
          f"{secs[ref_name][0] / secs[new_name][0]:.2f}")
    verdicts.check("train: the same number of logged steps as the reference", len(ref) == len(new),
                   f"{len(ref)} reference, {len(new)} this checkout")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=REPO / "runs" / "demo", help="a finished run (papers + model)")
    ap.add_argument("--ref", default="42e5fe5")
    ap.add_argument("--config", default="configs/demo.toml", help="relative to each tree")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--precisions", nargs="+", default=["float32", "auto"])
    ap.add_argument("--stages", nargs="+", default=["embed", "train"], choices=["embed", "train"])
    ap.add_argument("--train-steps", type=int, default=20)
    Verdicts.add_arguments(ap)
    args = ap.parse_args()
    if not (args.run / "model").is_dir() or not (args.run / "triplets").is_dir():
        raise SystemExit(f"{args.run} has no model or triplets: run `make demo` first (or pass --run)")
    tmp = Path(tempfile.mkdtemp(prefix="sciencemap-stages-vs-ref-"))
    ref_tree = tmp / "ref"
    subprocess.run(["git", "worktree", "add", "--detach", str(ref_tree), args.ref], cwd=REPO, check=True,
                   capture_output=True)
    verdicts = Verdicts()
    try:
        trees = {"reference " + args.ref: ref_tree, "this checkout": REPO}
        print(f"run {args.run}, config {args.config}, load average {os.getloadavg()}")
        if "embed" in args.stages:
            compare_embed(trees, args, tmp, verdicts)
        if "train" in args.stages:
            compare_train(trees, args, tmp, verdicts)
        print(f"load average after {os.getloadavg()}")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(ref_tree)], cwd=REPO, capture_output=True)
    return verdicts.finish(args.no_fail)


if __name__ == "__main__":
    sys.exit(main())
