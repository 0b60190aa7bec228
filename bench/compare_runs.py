"""Compare the headline figures of finished runs (the checks of a behaviour-preserving change):
Table 3 (entropy weights), triplet / pair / edge / paper counts, MeSH accuracy per resolution.

    .venv/bin/python bench/compare_runs.py RUN_BEFORE RUN_AFTER [...]

Prints each run's figures and, for every run after the first, a verdict line: identical to the
first's (met) or not (MISSED, naming the figures that differ); exits 1 on a difference (--no-fail: 0).
"""
import argparse
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path


def figures(run: Path) -> dict:
    metrics = json.loads((run / "metrics.json").read_text())
    weights = pq.read_table(run / "weights").to_pandas().sort_values("feature").reset_index(drop=True)
    counts = {t: pq.read_table(run / t, columns=[]).num_rows for t in ("papers", "pairs", "triplets", "edges")}
    mesh = [{k: r[k] for k in ("resolution", "clusters_total", "granularity", "accuracy")}
            for r in metrics["mesh_accuracy"]["resolutions"]]
    return {"table3": weights.round(12).to_dict("records"), "counts": counts, "mesh": mesh}


def show(run: Path, f: dict) -> None:
    print(f"== {run}")
    print("  Table 3: " + "; ".join(f"{r['feature']} w={r['weight']:.6f} (mean {r['mean']:.6f}, std {r['std']:.6f}, "
                                   f"entropy {r['entropy']:.6f})" for r in f["table3"]))
    print("  counts: " + ", ".join(f"{k} {v:,}" for k, v in f["counts"].items()))
    print("  MeSH accuracy: " + "; ".join(f"gamma {r['resolution']:g}: {r['accuracy']:.6f} ({r['clusters_total']} topics)"
                                         for r in f["mesh"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    Verdicts.add_arguments(ap)
    args = ap.parse_args()
    runs = args.runs
    ref = figures(runs[0])
    show(runs[0], ref)
    verdicts = Verdicts()
    for run in runs[1:]:
        f = figures(run)
        show(run, f)
        differ = [k for k in ref if f[k] != ref[k]]
        verdicts.check(f"{run}: headline figures identical to {runs[0]}'s", not differ,
                       f"different: {', '.join(differ)}" if differ else "")
    if len(runs) < 2:
        verdicts.not_checked("headline figures identical", "one run given: nothing to compare with")
    return verdicts.finish(args.no_fail)


if __name__ == "__main__":
    sys.exit(main())
