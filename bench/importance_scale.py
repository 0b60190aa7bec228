"""Scale benchmark of the importance job on generated corpora (issue 3), local[2].

For each size (mentions): generate the corpus once (importance/generate.py, cached under --root),
then in a FRESH Python process with its own local[2] Spark session (so that peak memory is per size):
  1. warm-up: a tiny read of the mentions table (JVM/JIT start-up is not charged to either job);
  2. the bare reference job: read mentions, group by (citing, cited), join with the distinct
     (citing, cited) of references and with papers (cited side), write Parquet;
  3. the full importance job (jobs/importance.py's run_importance, default config).
A sampler thread records every 0.2 s the RSS of the Spark driver JVM (in local mode the driver and
executors share that JVM, so this is an upper bound of the driver's), the JVM's used heap (via
py4j, Runtime.totalMemory - freeMemory) and the Python driver's RSS; peaks are reported per job.
Prints per size: rows, wall time of both jobs, rows/s (mentions / s), the ratio full / reference,
peak memory. Heavy: run with `nice -n 10`; report the load (uptime) printed with the figures.

Targets (issue 3; --target-ratio, --ratio-from, --max-rss-growth change them): full / reference
<= 2 at every size of >= 10M mentions; the Python driver's peak RSS flat as the size grows (the
largest size's at most 1.10x the smallest's). A verdict line each (met, MISSED, or not checked with
the reason: no size that large, a single size); a size whose run failed is a MISSED line. Exit 1
when any is missed or not checked (--no-fail: 0).

    nice -n 10 .venv/bin/python bench/importance_scale.py --sizes 1000000 3000000 10000000 [30000000]

Extrapolation to 67M citations on a 16-core cluster (write-up method, not measured here):
- Both jobs are shuffle-bound and linear in rows (no step collects rows to the driver; the driver
  receives one aggregate row per source and a few counts), so time(n) ≈ a + b·n. Fit a and b on
  the measured sizes (local[2]); count in mentions, the unit of this benchmark: the full eLife set
  has 1.70 mentions per reference (164,583 / 96,866), so 67M citations ≈ 114M mentions (b·114M).
- Divide the per-row part by the core ratio with an efficiency factor: T_16 ≈ a + b·n·2/(16·e),
  e ≈ 0.6–0.8 for shuffle-heavy SQL on one rack (measure e with the standalone script at 1 and 2
  workers if possible); set spark.sql.shuffle.partitions ≈ 3–4 × cores (48–64) and
  output_partitions 0 (auto: one file per 2M rows).
- Memory: the Python driver's RSS must stay flat in n (nothing is collected but one aggregate row
  per source, the weights and a few counts; the triplet files' metadata is stamped by executors). In local mode the JVM heap figure also holds the
  executors' task memory, so it grows with the partition size for the bare reference job too.
  On a cluster, executor memory per task needs the largest shuffle partition and the build side
  of the shuffled hash joins (papers / partitions: 35M papers / 64 ≈ 0.55M rows ≈ 50 MB), far
  below a 4 GB executor.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _java_children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid and "java" in (p / "comm").read_text():
                out.append(int(p.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


class Sampler:
    """Peak JVM RSS, JVM used heap and Python RSS while a job runs."""

    def __init__(self, spark):
        self.jvm_pid = (_java_children(os.getpid()) or [0])[0]
        self.rt = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
        self.peak = {"jvm_rss_mb": 0.0, "jvm_heap_mb": 0.0, "py_rss_mb": 0.0}
        self._stop = threading.Event()

    def _sample(self):
        self.peak["jvm_rss_mb"] = max(self.peak["jvm_rss_mb"], _rss_kb(self.jvm_pid) / 1024)
        self.peak["py_rss_mb"] = max(self.peak["py_rss_mb"], _rss_kb(os.getpid()) / 1024)
        try:
            used = (self.rt.totalMemory() - self.rt.freeMemory()) / 2**20
            self.peak["jvm_heap_mb"] = max(self.peak["jvm_heap_mb"], used)
        except Exception:  # noqa: BLE001 - the gateway may be busy at shutdown
            pass

    def _loop(self):
        while not self._stop.is_set():
            self._sample()
            time.sleep(0.2)

    def __enter__(self):
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self._sample()
        self.peak = {k: round(v, 1) for k, v in self.peak.items()}


def reference_job(spark, run: Path, out: Path) -> None:
    from pyspark.sql import functions as F

    from importance.ingest.spark import write_spark_table

    m = spark.read.parquet(str(run / "mentions"))
    r = spark.read.parquet(str(run / "references")).select("citing_id", "cited_id").distinct()
    p = spark.read.parquet(str(run / "papers")).select(F.col("paper_id").alias("cited_id"), "has_fulltext")
    pairs = m.groupBy("citing_id", "cited_id").count().join(r, ["citing_id", "cited_id"]).join(p, "cited_id", "left")
    write_spark_table(pairs, out)


def one_size(run: Path, shuffle_partitions: int) -> dict:
    """Run warm-up, reference and full job in this process; return the figures."""
    import shutil

    import pyarrow.parquet as pq

    from sciencemap.layout import RunLayout
    from importance.job import ImportanceConfig, run_importance
    from importance.ingest.spark import get_spark

    spark = get_spark(app="importance-scale", master="local[2]", shuffle_partitions=shuffle_partitions)
    n_m = pq.ParquetDataset(run / "mentions").count_rows() if hasattr(pq.ParquetDataset, "count_rows") else \
        sum(pq.ParquetFile(f).metadata.num_rows for f in (run / "mentions").glob("*.parquet"))
    spark.read.parquet(str(run / "mentions")).limit(10).collect()  # warm-up
    res = {"mentions": n_m, "run": str(run)}
    with Sampler(spark) as s:
        t = time.time()
        reference_job(spark, run, run / "_bench_reference")
        res["reference_s"] = round(time.time() - t, 2)
    res["reference_peak"] = s.peak
    with Sampler(spark) as s:
        t = time.time()
        summ = run_importance(ImportanceConfig(shuffle_partitions=shuffle_partitions), RunLayout(run), spark=spark)
        res["full_s"] = round(time.time() - t, 2)
    res["full_peak"] = s.peak
    res["ratio_full_to_reference"] = round(res["full_s"] / res["reference_s"], 2)
    res["mentions_per_s_full"] = round(n_m / res["full_s"])
    res["mentions_per_s_reference"] = round(n_m / res["reference_s"])
    res["n_pairs"], res["n_triplets"], res["timings"] = summ["n_pairs"], summ["n_triplets"], summ["timings"]
    res["load_after"] = os.getloadavg()
    shutil.rmtree(run / "_bench_reference", ignore_errors=True)
    spark.stop()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    ap.add_argument("--root", default="/tmp/importance_scale")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shuffle-partitions", type=int, default=8)
    ap.add_argument("--target-ratio", type=float, default=2.0, help="full job / bare reference time, at most")
    ap.add_argument("--ratio-from", type=int, default=10_000_000,
                    help="the ratio target holds at sizes of at least this many mentions")
    ap.add_argument("--max-rss-growth", type=float, default=1.10,
                    help="the Python driver's peak RSS at the largest size / at the smallest, at most")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one generated run dir
    Verdicts.add_arguments(ap)
    a = ap.parse_args(argv)
    if a.one:
        print("RESULT " + json.dumps(one_size(Path(a.one), a.shuffle_partitions)), flush=True)
        return 0
    from sciencemap.layout import RunLayout
    from importance.generate import GenerateConfig, run_generate

    results = []
    verdicts = Verdicts()
    for n in a.sizes:
        run = Path(a.root) / f"syn_{n}"
        if not (run / "generate_summary.json").exists():
            t = time.time()
            g = run_generate(GenerateConfig(mentions=n, seed=a.seed), RunLayout(run))
            print(f"generated {run}: {g['mentions']} mentions, {g['references']} references, "
                  f"{g['papers']} papers in {time.time() - t:.1f}s", flush=True)
        print(f"size {n}: load before {os.getloadavg()}", flush=True)
        p = subprocess.run([sys.executable, __file__, "--one", str(run), "--shuffle-partitions",
                            str(a.shuffle_partitions)], capture_output=True, text=True)
        line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        if p.returncode or not line:
            print(p.stdout[-3000:], p.stderr[-3000:], flush=True)
            verdicts.check(f"{n:,} mentions: the measuring run finished", False,
                           f"exit code {p.returncode}, output above")
            continue
        r = json.loads(line[0][7:])
        results.append(r)
        print(json.dumps(r), flush=True)
    print(f"\n{'mentions':>10}{'ref s':>8}{'full s':>8}{'ratio':>7}{'full m/s':>10}{'JVM RSS':>9}{'JVM heap':>9}"
          f"{'py RSS':>8}   (peaks in MB, full job)")
    for r in results:
        pk = r["full_peak"]
        print(f"{r['mentions']:>10}{r['reference_s']:>8}{r['full_s']:>8}{r['ratio_full_to_reference']:>7}"
              f"{r['mentions_per_s_full']:>10}{pk['jvm_rss_mb']:>9}{pk['jvm_heap_mb']:>9}{pk['py_rss_mb']:>8}")
    large = [r for r in results if r["mentions"] >= a.ratio_from]
    for r in large:
        verdicts.at_most(f"{r['mentions']:,} mentions: full job / bare reference time", r["ratio_full_to_reference"],
                         a.target_ratio, "{:.2f}")
    if not large:
        verdicts.not_checked(f"full job / bare reference time at >= {a.ratio_from:,} mentions",
                             f"no size of >= {a.ratio_from:,} mentions was measured (--sizes, --ratio-from)",
                             f"<= {a.target_ratio:.2f}")
    rss_name = "Python driver peak RSS (full job), largest size / smallest"
    if len(results) >= 2:
        by_size = sorted(results, key=lambda r: r["mentions"])
        verdicts.at_most(rss_name, by_size[-1]["full_peak"]["py_rss_mb"] / by_size[0]["full_peak"]["py_rss_mb"],
                         a.max_rss_growth, "{:.3f}")
    else:
        verdicts.not_checked(rss_name, f"{len(results)} size(s) measured: flat memory needs two",
                             f"<= {a.max_rss_growth:.3f}")
    return verdicts.finish(a.no_fail)


if __name__ == "__main__":
    sys.exit(main())
