"""The evaluate stage's methods comparison at scale: time and peak memory per step.

    python bench/compare_scale.py --n 350000          # ~105k generated papers with MeSH -> the default cap, 100k
    python bench/compare_scale.py --n 70000           # a quick look (~21k)

Generates papers (bench/synthetic.py: titles of topic words, MeSH-like descriptors on 30% of them,
384-d vectors), builds the vector store, then runs mapping.evaluation.compare.compare on the MeSH criterion
with the stage's defaults (max_papers = 100,000: a larger corpus is sampled to that) in a child
process, and prints its wall time, peak RSS and each graph's edges and sweep time.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from synthetic import write_corpus  # bench/synthetic.py; a script's own folder is on its import path

CHILD = """
import json, sys, time, resource
from pathlib import Path
from mapping.evaluation.compare import compare
from mapping.evaluation.evaluate import EvaluateConfig
from sciencemap.layout import RunLayout
from sciencemap.vectors import ensure_vectors
layout = RunLayout(Path(sys.argv[1]))
ensure_vectors(layout)
t0 = time.perf_counter()
out = compare(layout, EvaluateConfig(criteria=["mesh"]))
e = out["mesh"]
print(json.dumps({"seconds": round(time.perf_counter() - t0, 1),
                  "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                  "papers": e.get("evaluated"), "skipped": e.get("skipped"),
                  "graphs": {g: {"edges": d["edges"], "sweep_s": d["sweep_s"],
                                 "relative_accuracy": round(d["relative_accuracy"]["mean"], 3)}
                             for g, d in e.get("graphs", {}).items()}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=350_000)
    ap.add_argument("--run", type=Path, default=Path("/tmp/compare_scale"))
    args = ap.parse_args()
    shutil.rmtree(args.run, ignore_errors=True)
    t0 = time.perf_counter()
    write_corpus(args.run, args.n)
    print(f"generated {args.n:,} papers in {time.perf_counter() - t0:.1f} s", flush=True)
    p = subprocess.run([sys.executable, "-c", CHILD, str(args.run)], capture_output=True, text=True)
    if p.returncode:
        sys.exit(p.stderr[-3000:])
    r = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"compare (MeSH criterion): {r['papers']:,} papers, {r['seconds']} s wall, peak RSS {r['peak_rss_gib']} GiB")
    for g, d in r["graphs"].items():
        print(f"  {g:>16}: {d['edges']:>10,} edges, sweep {d['sweep_s']:>7.1f} s, relative accuracy {d['relative_accuracy']}")


if __name__ == "__main__":
    main()
