"""kNN at scale (issue 13): the knn stage on N generated, clustered vectors against exact FAISS search.

    flock /tmp/bench.lock nice -n 5 .venv/bin/python bench/knn_scale.py          # 1M x 384-d (~1 h, 2 cores)
    nice -n 10 .venv/bin/python bench/knn_scale.py --n 100000 --queries 500      # a quick look

1. Generates N unit-normalisable 384-d vectors with cluster structure (seeded): --fields super-centres,
   --centres topic centres around them, each paper = its centre + a spread inside a shared
   --rank-dimensional subspace + isotropic noise, so neighbours are meaningful (intrinsic dimension
   well below 384, like text embeddings), written as embedding shards into a run directory; the
   vector store (sciencemap.vectors) is converted once in its own process (time and peak printed,
   not counted below: the exact reference also starts from vectors in hand).
   Peak RSS of a child is its own VmHWM (os.wait4's figure would include this parent's RSS at fork).
2. Reference, measured in the same run: exact faiss.IndexFlatIP over all N vectors, queries/s on
   --queries sampled queries, before and after the stage (the mean is used); the exact time for the
   whole graph is a projection, N / (queries/s), printed and written (JSON "projected_exact_s" with
   its "projection_basis") as one — a full exact run is not made.
3. The knn stage itself (index auto → on a CPU hnsw_sq8 with re-ranking at this size, ef_search tuned to
   the recall target; --index ivf_sq8 for IVF: mapping.knn.run_knn
   with the [knn] settings written to knn.toml) in a child process: wall time, peak RSS (the child's
   VmHWM), recall@k from the edges metadata (the stage measures it against exact tiled products over the same vectors).
4. Kill and resume: the stage again in a child, SIGKILLed once a random number of query blocks is
   checkpointed in knn_work, then resumed; its edges must equal the uninterrupted run's exactly.

Targets (issue 13; --target-recall, --target-speed, --target-peak change them): recall@20 >= 0.95,
>= 5x the exact speed (the projected exact time / the stage's measured time), peak RSS <= 1.5x the
raw float32 vectors (N x dim x 4 bytes), the resumed graph identical. Each gets a verdict line (met,
MISSED, or not checked with the reason: e.g. kill/resume needs >= 3 query blocks, or
--no-resume-check); the exit code is 1 when any is missed or not checked (--no-fail: 0). Settings
of the stage can be overridden (--nlist, --nprobe, --rerank-factor, --index, --block-size,
--vector-dtype) to tune.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parent.parent

# Every child writes its own peak RSS (VmHWM of /proc/self/status, KiB) to the file named by its last
# argument when it exits. (os.wait4's ru_maxrss is no good here: a child's maximum starts at the RSS of
# the parent it was forked from, and this parent holds gigabytes of exact index and mapped vectors.)
PEAK = ("import atexit, re, sys; atexit.register(lambda: open(sys.argv[-1], 'w').write("
        "re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))); ")
# the stage (mapping.knn.run_knn with the [knn] section of a TOML file) in a child, progress lines on stderr
CHILD = PEAK + ("import logging, sys, tomllib; from pathlib import Path; "
                "logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s', stream=sys.stderr); "
                "from sciencemap.config import config_from; from sciencemap.layout import RunLayout; "
                "from mapping.knn import KnnConfig, run_knn; "
                "cfg = config_from(KnnConfig, tomllib.loads(Path(sys.argv[2]).read_text())['knn']); "
                "run_knn(cfg, RunLayout(Path(sys.argv[1])))")
CONVERT = PEAK + ("import sys; from pathlib import Path; from sciencemap.layout import RunLayout; "
                  "from sciencemap.vectors import ensure_vectors; ensure_vectors(RunLayout(Path(sys.argv[1])), sys.argv[2])")


def vm_hwm(pid: int) -> int:
    """Peak RSS (bytes) of a running process so far; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def generate(run: Path, n: int, dim: int, fields: int, centres: int, rank: int, spread: float, noise: float,
             seed: int, shard: int = 50_000) -> None:
    """Embedding shards part-NNNNN.parquet (paper_id, vector) of n clustered vectors, shard by shard."""
    from sciencemap.contracts import embeddings_schema

    rng = np.random.default_rng(seed)
    sup = rng.normal(size=(fields, dim)).astype(np.float32)
    sup /= np.linalg.norm(sup, axis=1, keepdims=True)
    field_of = rng.integers(0, fields, centres)
    C = sup[field_of] + 0.7 * rng.normal(size=(centres, dim)).astype(np.float32) / np.sqrt(dim)
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    B = np.linalg.qr(rng.normal(size=(dim, rank)))[0].T.astype(np.float32)     # rank x dim, orthonormal rows
    sizes = rng.zipf(1.6, centres).astype(np.float64)                           # uneven topic sizes
    p = np.minimum(sizes, np.quantile(sizes, 0.99)) / np.minimum(sizes, np.quantile(sizes, 0.99)).sum()
    d = run / "embeddings"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    schema = embeddings_schema(dim)
    for i, lo in enumerate(range(0, n, shard)):
        hi = min(n, lo + shard)
        lab = rng.choice(centres, hi - lo, p=p)
        z = rng.normal(size=(hi - lo, rank)).astype(np.float32) * (spread / np.sqrt(rank))
        X = C[lab] + z @ B + rng.normal(size=(hi - lo, dim)).astype(np.float32) * (noise / np.sqrt(dim))
        ids = pa.array(np.char.add("g:", np.arange(lo, hi).astype(str)), pa.string())
        vec = pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).ravel()), dim)
        pq.write_table(pa.table([ids, vec], schema=schema), d / f"part-{i:05d}.parquet")


def child(args: list[str], log: Path, kill_at_blocks: int | None = None, work: Path | None = None) -> dict:
    """Run a child python; its wall time and peak RSS (its own VmHWM: reported at exit, polled while it
    runs, so a killed child has one too). With kill_at_blocks, SIGKILL it once that many block files
    exist in work/blocks."""
    peak_file = log.parent / f".peak-{time.monotonic_ns()}"
    t0 = time.perf_counter()
    peak = 0
    with open(log, "a") as out:
        out.write(f"\n### {' '.join(args)}\n")
        out.flush()
        p = subprocess.Popen([sys.executable, *args, str(peak_file)], stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        killed = False
        while p.poll() is None:
            peak = max(peak, vm_hwm(p.pid))
            blocks = work / "blocks" if work else None
            if kill_at_blocks is not None and blocks.is_dir() and \
                    sum(1 for _ in blocks.glob("*.npz")) >= kill_at_blocks:
                peak = max(peak, vm_hwm(p.pid))
                os.kill(p.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.05)
        rc = p.wait()
    if peak_file.is_file():
        peak = max(peak, int(peak_file.read_text()) * 1024)
        peak_file.unlink()
    if rc != 0 and not killed:
        sys.exit(f"child failed (exit {rc}): {' '.join(args)}; see {log}")
    return {"seconds": time.perf_counter() - t0, "peak": peak, "rc": rc, "killed": killed}


def exact_qps(vectors_dir: Path, queries: int, k: int, seed: int) -> float:
    """Queries/s of exact faiss.IndexFlatIP over all vectors, on a seeded sample of queries."""
    import faiss

    from sciencemap.vectors import open_vectors

    vec = open_vectors(vectors_dir)
    index = faiss.IndexFlatIP(vec.dim)
    for lo in range(0, vec.n, 100_000):
        index.add(vec.block(lo, min(vec.n, lo + 100_000)))
    rows = np.sort(np.random.default_rng(seed).choice(vec.n, min(queries, vec.n), replace=False))
    Q = np.ascontiguousarray(vec.X[rows], dtype=np.float32)
    t0 = time.perf_counter()
    index.search(Q, k + 1)
    dt = time.perf_counter() - t0
    del index
    return len(rows) / dt


def edges_equal(a: Path, b: Path) -> tuple[bool, int]:
    from sciencemap.storage import table_files

    fa, fb = table_files(a), table_files(b)
    if [f.name for f in fa] != [f.name for f in fb]:
        return False, 0
    n = 0
    for x, y in zip(fa, fb):
        tx, ty = pq.read_table(x), pq.read_table(y)
        if not tx.equals(ty):   # columns and values; the metadata (timings) may differ
            return False, n
        n += len(tx)
    return True, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--fields", type=int, default=50, help="super-centres")
    ap.add_argument("--centres", type=int, default=3000, help="topic centres")
    ap.add_argument("--rank", type=int, default=48, help="dimension of the within-topic spread")
    ap.add_argument("--spread", type=float, default=0.6)
    ap.add_argument("--noise", type=float, default=0.35)
    ap.add_argument("--queries", type=int, default=2000, help="exact reference: sampled queries (each time)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run", type=Path, default=REPO / "runs" / "bench_knn")
    ap.add_argument("--reuse", action="store_true", help="keep a generated run of the same parameters")
    ap.add_argument("--no-resume-check", action="store_true", help="skip the kill-and-resume part")
    ap.add_argument("--out", type=Path, help="also write the figures as JSON here")
    ap.add_argument("--target-recall", type=float, default=0.95, help="recall@k the stage must reach")
    ap.add_argument("--target-speed", type=float, default=5.0,
                    help="how many times faster than the (projected) exact search the stage must be")
    ap.add_argument("--target-peak", type=float, default=1.5,
                    help="the stage's peak RSS at most this many times the raw float32 vectors")
    Verdicts.add_arguments(ap)
    for opt in ("index", "nlist", "nprobe", "rerank-factor", "block-size", "vector-dtype", "train-per-list",
                "kmeans-iter"):
        ap.add_argument(f"--{opt}", help="knn stage setting")
    a = ap.parse_args()

    run = a.run
    gen = {key: getattr(a, key) for key in ("n", "dim", "fields", "centres", "rank", "spread", "noise", "seed")}
    stamp = run / "generated.json"
    log = run / "bench.log"
    if not (a.reuse and stamp.is_file() and json.loads(stamp.read_text()) == gen):
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(parents=True)
        t0 = time.perf_counter()
        generate(run, a.n, a.dim, a.fields, a.centres, a.rank, a.spread, a.noise, a.seed)
        stamp.write_text(json.dumps(gen))
        print(f"generated {a.n:,} x {a.dim}-d clustered vectors ({a.fields} fields, {a.centres} topics, "
              f"spread rank {a.rank}) in {time.perf_counter() - t0:.0f} s", flush=True)
    for t in ("knn_work", "edges", "edges_uninterrupted"):
        shutil.rmtree(run / t, ignore_errors=True)
    dtype = a.vector_dtype or "float32"
    conv = child(["-c", CONVERT, str(run), dtype], log)
    print(f"vector store ({dtype}): converted in {conv['seconds']:.0f} s, peak RSS {conv['peak'] / 2**30:.2f} GiB "
          "(its own process; not counted below)", flush=True)

    cfg = run / "knn.toml"
    lines = ["[knn]", f"k = {a.k}"]
    for opt in ("index", "nlist", "nprobe", "rerank_factor", "block_size", "vector_dtype", "train_per_list",
                "kmeans_iter"):
        v = getattr(a, opt)
        if v is not None:
            lines.append(f"{opt} = {v}" if v.lstrip("-").isdigit() else f'{opt} = "{v}"')
    cfg.write_text("\n".join(lines) + "\n")
    stage = ["-c", CHILD, str(run), str(cfg)]
    raw = a.n * a.dim * 4

    q1 = exact_qps(run / "vectors", a.queries, a.k, a.seed + 7)
    print(f"exact IndexFlatIP (before): {q1:,.1f} queries/s on {min(a.queries, a.n):,} queries", flush=True)
    r = child(stage, log)
    from sciencemap.contracts import EDGES_META_KEY
    from sciencemap.storage import read_json_metadata

    meta = read_json_metadata(run / "edges", EDGES_META_KEY)
    q2 = exact_qps(run / "vectors", a.queries, a.k, a.seed + 8)
    print(f"exact IndexFlatIP (after):  {q2:,.1f} queries/s", flush=True)
    qps = (q1 + q2) / 2
    exact_s = a.n / qps
    basis = (f"{a.n:,} queries / {qps:,.1f} queries/s, the mean of two timings of exact IndexFlatIP "
             f"on {min(a.queries, a.n):,} sampled queries")
    speed = exact_s / r["seconds"]
    recall = meta.get("recall_at_k")
    ratio = r["peak"] / raw
    print()
    print(f"vectors: {a.n:,} x {a.dim}, raw float32 {raw / 2**30:.2f} GiB; k = {a.k}")
    print(f"reference: exact search of all {a.n:,} queries {exact_s:,.0f} s, projected (basis: {basis})")
    param = (meta.get("tuning") or {}).get("param")
    setting = f"{param} {meta.get(param)}" + (f" of nlist {meta.get('nlist')}" if meta.get("nlist") else "")
    print(f"knn stage: index {meta.get('index')} ({setting}, "
          f"rerank x{meta.get('rerank_factor')}, store {meta.get('vector_dtype')}), "
          f"{r['seconds']:,.0f} s wall (build {meta.get('build_s')} s, tune {meta.get('tune_s')} s, "
          f"search {meta.get('search_s')} s, "
          f"recall check {meta.get('recall_s')} s), edges {meta.get('edges'):,}")
    print(f"  peak RSS {r['peak'] / 2**30:.2f} GiB = {ratio:.2f}x raw float32 vectors; recall@{meta.get('k')} measured "
          f"on {meta.get('recall_queries')} queries", flush=True)
    verdicts = Verdicts()
    verdicts.at_least("speed vs exact search (projected exact time / measured stage time)", speed, a.target_speed,
                      "{:.1f}x")
    verdicts.at_least(f"recall@{meta.get('k')}", recall, a.target_recall, "{:.4f}",
                      reason=f"the edges metadata holds no recall figure (index {meta.get('index')})")
    verdicts.at_most("peak RSS / raw float32 vectors", ratio, a.target_peak, "{:.2f}x")
    out = {"n": a.n, "dim": a.dim, "k": a.k, "raw_bytes": raw, "exact_qps": [q1, q2],
           "projected_exact_s": exact_s, "projection_basis": basis,
           "stage_s": r["seconds"], "stage_peak_bytes": r["peak"], "speed_vs_exact": speed, "recall": recall,
           "peak_vs_raw": ratio, "meta": meta, "convert_s": conv["seconds"], "convert_peak_bytes": conv["peak"]}

    resume = "kill/resume: edges identical to the uninterrupted run's"
    blocks = meta.get("blocks", 1)
    if a.no_resume_check:
        verdicts.not_checked(resume, "--no-resume-check")
    elif blocks < 3:
        verdicts.not_checked(resume, f"{blocks} query block(s), the check needs >= 3: use a larger --n or a smaller "
                              "--block-size")
    else:
        (run / "edges").rename(run / "edges_uninterrupted")
        at = int(np.random.default_rng(a.seed + 99).integers(1, blocks - 1))
        k1 = child(stage, log, kill_at_blocks=at, work=run / "knn_work")
        if not k1["killed"]:
            verdicts.not_checked(resume, "the stage finished before it could be killed")
        else:
            found = sum(1 for _ in (run / "knn_work" / "blocks").glob("*.npz"))
            r2 = child(stage, log)
            meta2 = read_json_metadata(run / "edges", EDGES_META_KEY)
            same, n_edges = edges_equal(run / "edges_uninterrupted", run / "edges")
            print(f"kill/resume: SIGKILL after {found} of {blocks} query blocks ({k1['seconds']:.0f} s, peak "
                  f"{k1['peak'] / 2**30:.2f} GiB); resumed {meta2.get('resumed_blocks')} blocks in "
                  f"{r2['seconds']:.0f} s (peak {r2['peak'] / 2**30:.2f} GiB)")
            verdicts.check(resume, same, f"{n_edges:,} edges compared")
            out["resume"] = {"killed_after_blocks": found, "blocks": blocks, "kill_s": k1["seconds"],
                             "resume_s": r2["seconds"], "resume_peak_bytes": r2["peak"],
                             "resumed_blocks": meta2.get("resumed_blocks"), "identical": same}
        shutil.rmtree(run / "edges_uninterrupted", ignore_errors=True)
    out["verdicts"] = verdicts.as_json()
    if a.out:
        a.out.write_text(json.dumps(out, indent=2))
    return verdicts.finish(a.no_fail)


if __name__ == "__main__":
    sys.exit(main())
