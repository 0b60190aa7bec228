"""The render stage (topics + layout + map) alone on a generated corpus: time and memory per step.

    python bench/render_scale.py --n 200000              # a quick look (~2 min on 2 cores)
    flock /tmp/bench.lock nice -n 5 python bench/render_scale.py --n 2000000 --reuse

Writes a generated run (bench/synthetic.py: vectors with topic structure, titles, years, fields),
converts it into the vector store (sciencemap.vectors), writes a clusters table by row for five
nested resolutions (the generator's topics split in 4, the topics, and topics merged by 4, 16 and
64 — the map uses the middle one), then runs `jobs/render.py` as its own process and prints its
wall time and peak RSS (os.wait4) and the stage's own per-step figures (time, RSS, peak RSS).
The corpus is prepared in a child process too: Linux carries a process's peak RSS across exec from
the forking parent, so a parent holding the generated corpus would inflate the stage's figure.
Reference in the same run: the raw float32 vectors (n × dim × 4 bytes), which the old stage held
in memory twice (read + normalised copy) before doing anything else. No GPU needed.
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

REPO = Path(__file__).resolve().parent.parent
LEVELS = (("split4", None), ("topics", 1), ("merge4", 4), ("merge16", 16), ("merge64", 64))


def write_clusters(layout, n: int, n_topics: int, seed: int = 0) -> dict[float, int]:
    """Five nested resolutions by row. The generator draws each row's topic as
    default_rng(seed + 1).integers(0, n_topics, n) (bench/synthetic.write_corpus); drawn again here
    so the clusters follow the vectors' structure."""
    import numpy as np
    import pyarrow as pa

    from sciencemap.contracts import SCHEMAS
    from sciencemap.storage import write_table_atomic

    topic = np.random.default_rng(seed + 1).integers(0, n_topics, n).astype(np.int64)
    rows = np.arange(n, dtype=np.int32)
    ids = pa.array([f"gen:{i}" for i in range(n)], pa.string())
    tables, counts = [], {}
    for k, (_, div) in enumerate(LEVELS):
        lab = topic * 4 + rows % 4 if div is None else topic // div
        _, lab = np.unique(lab, return_inverse=True)
        res = [1e-2, 3e-3, 1e-3, 3e-4, 1e-4][k]
        counts[res] = int(lab.max()) + 1
        tables.append(pa.table({"paper_id": ids, "row": pa.array(rows), "resolution": pa.array(np.full(n, res)),
                                "cluster": pa.array(lab.astype(np.int32))}))
    write_table_atomic(pa.concat_tables(tables), layout.table("clusters"), SCHEMAS["clusters"])
    return counts


def timed_job(stage: str, run: Path, *extra: str) -> tuple[dict, float, int]:
    """Run jobs/<stage>.py on `run` as its own process, stderr to <run>/<stage>_bench.log: (its JSON
    summary, wall seconds, peak RSS bytes by os.wait4). Exits with the log's path if it fails."""
    cmd = [sys.executable, "-P", str(REPO / "jobs" / f"{stage}.py"), "--run", str(run), *extra]
    log = run / f"{stage}_bench.log"
    t0 = time.perf_counter()
    with open(log, "w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{stage} failed; see {log}")
    # the summary is the last top-level JSON object on stdout
    text = out[out.rindex("\n{") + 1:] if "\n{" in out else out
    return (json.loads(text) if text.strip() else {}), wall, usage.ru_maxrss * 1024


def prepare(args) -> None:
    from synthetic import write_corpus  # bench/synthetic.py; a script's own folder is on its import path

    from sciencemap.layout import RunLayout
    from sciencemap.vectors import ensure_vectors

    run = args.run
    layout = RunLayout(run)
    stamp = run / "generated.json"
    want = {"n": args.n, "dim": args.dim}
    if not (args.reuse and stamp.is_file() and json.loads(stamp.read_text()).get("args") == want):
        shutil.rmtree(run, ignore_errors=True)
        t0 = time.perf_counter()
        info = write_corpus(run, args.n, args.dim)
        stamp.write_text(json.dumps({"args": want, "corpus": info}))
        print(f"generated {args.n:,} papers x {args.dim}-d in {time.perf_counter() - t0:.0f} s: {info}", flush=True)
    info = json.loads(stamp.read_text())["corpus"]
    t0 = time.perf_counter()
    ensure_vectors(layout, args.vector_dtype)
    counts = write_clusters(layout, args.n, info["topics"])
    print(f"vector store ({args.vector_dtype}) and clusters in {time.perf_counter() - t0:.0f} s; "
          f"topics per resolution: {counts}", flush=True)
    for t in ("topics", "map.png", "map.html"):
        p = run / t
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--vector-dtype", default="float32", choices=("float32", "float16"))
    ap.add_argument("--layout", default="umap", choices=("umap", "pca"))
    ap.add_argument("--run", type=Path, default=REPO / "runs" / "bench_render")
    ap.add_argument("--reuse", action="store_true", help="keep an existing generated corpus of the same size")
    ap.add_argument("--out", type=Path, help="also write the figures as JSON here")
    ap.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)   # the child that writes the run
    args = ap.parse_args()
    run = args.run
    if args.prepare:
        prepare(args)
        return
    # a lean parent: the child writes the corpus, the store and the clusters
    subprocess.run([sys.executable, __file__, "--prepare", *sys.argv[1:]], check=True)
    summary, wall, peak = timed_job("render", run, "--layout", args.layout)
    raw = args.n * args.dim * 4
    print(f"\npapers {args.n:,}, dim {args.dim}, store {args.vector_dtype}, layout {args.layout}, "
          f"map resolution {summary['map_resolution']} ({summary['topics_on_map']:,} topics), "
          f"{summary['topics_rows']:,} topic rows, {summary['title_words']:,} title words")
    print(f"{'step':14s} {'seconds':>8s} {'RSS after':>10s} {'peak so far':>12s}")
    for step, r in summary["steps"].items():
        print(f"{step:14s} {r['s']:8.1f} {r['rss_mb']:8.0f} MB {r['peak_rss_mb']:9.0f} MB")
    print(f"render: {wall:.1f} s wall, peak RSS {peak / 2**30:.2f} GiB = {peak / args.n:.0f} B/paper = "
          f"{peak / raw:.2f}x the raw float32 vectors ({raw / 2**30:.2f} GiB, the reference; the old stage held "
          f"{2 * raw / 2**30:.2f} GiB of vectors alone)")
    if args.out:
        args.out.write_text(json.dumps({"n": args.n, "dim": args.dim, "dtype": args.vector_dtype, "wall_s": wall,
                                        "peak_rss_bytes": peak, "raw_vector_bytes": raw, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
