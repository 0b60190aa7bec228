"""Where an ingest's CPU goes: by thread kind, and by Spark SQL execution (issue 27's largest CPU row).

    .venv/bin/python bench/ingest_profile.py --config my_ingest.toml --run /tmp/prof_run
    .venv/bin/python bench/ingest_profile.py --config my_ingest.toml --run /tmp/new --same-as /tmp/old
    .venv/bin/python bench/ingest_profile.py --config my_ingest.toml --run /tmp/new --same-as /tmp/old --compare-only

Runs `jobs/ingest.py --run RUN --config CONFIG` as its own process (scale_run.child: wall, CPU and
peak of the whole process tree) with Spark's event log on (a copy of the Spark conf dir with
spark.eventLog.* added; the settings given there stay), and meanwhile samples the CPU time of
every thread of that tree once a second (/proc/<pid>/task/<tid>/stat; a thread's last reading
counts). Prints:
- the CPU by thread kind: the Spark tasks (JVM executor threads), the JIT compiler, the garbage
  collector, the rest of the JVM, the Python readers (Spark's Python workers) and the driver's
  Python. The JIT compiles each stage's generated code once: a fixed cost that a fit over sizes
  puts in its constant term, whereas the tasks and the readers grow with the papers;
- each SQL execution (named by the table or stash it writes) and the readers' parse job: wall
  time, the executor threads' CPU, rows read and written. CPU outside the executor threads (JIT,
  GC, Python) is not attributed to executions.

Verdicts (exit 1 on a miss, --no-fail: 0): the thread sample accounts for at least --coverage
(0.9) of the tree's measured CPU (a sample that missed threads says nothing); with --same-as OTHER
(a run of the same input, e.g. at another commit): every ingested table equals OTHER's, sorted by
its keys, and the CPU ratio this / OTHER's is printed when OTHER was profiled by this script
(its profile.json).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from collections import Counter, defaultdict
from pathlib import Path

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parents[1]

TICK = os.sysconf("SC_CLK_TCK")
# the tables ingest writes and the keys that order their rows for the comparison
TABLE_KEYS = {"papers": ["paper_id"], "references": ["citing_id", "ref_key"],
              "mentions": ["citing_id", "ref_key", "section_class", "position", "context"],
              "rejects": ["source_file", "record_id", "stage", "reason"], "files": ["path"],
              "warnings": ["source_file", "record_id", "warning"]}


def thread_kind(name: str, python: bool, driver: bool) -> str:
    """A thread's kind from its process and its name (/proc comm, at most 15 characters)."""
    if python:
        return "Python: the driver" if driver else "Python: readers (Spark workers)"
    if name.startswith("Executor task"):
        return "JVM: Spark tasks"
    if "CompilerThre" in name:
        return "JVM: JIT compiler"
    if name.startswith(("GC Thread", "G1 ")) or name == "VM Thread":
        return "JVM: garbage collector"
    return "JVM: other threads"


class ThreadSampler:
    """Once a second, the CPU time of every thread of the processes descending from `root`."""

    def __init__(self, root: int, every: float = 1.0):
        self.root, self.every = root, every
        self.last: dict[tuple[int, int], tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> list[tuple[int, str]]:
        """(pid, comm) of root and its descendants."""
        children, comm = defaultdict(list), {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    s = open(f"/proc/{d}/stat").read()
                except OSError:
                    continue
                comm[int(d)] = s[s.index("(") + 1:s.rindex(")")]
                children[int(s[s.rindex(")") + 2:].split()[1])].append(int(d))
        out, todo = [], [self.root]
        while todo:
            p = todo.pop()
            out.append((p, comm.get(p, "")))
            todo += children.get(p, [])
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for pid, pcomm in self._tree():
                python = pcomm.startswith("python")
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    try:
                        s = open(f"/proc/{pid}/task/{tid}/stat").read()
                    except OSError:
                        continue
                    f = s[s.rindex(")") + 2:].split()
                    kind = thread_kind(s[s.index("(") + 1:s.rindex(")")], python, pid == self.root)
                    self.last[(pid, int(tid))] = (kind, (int(f[11]) + int(f[12])) / TICK)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def counts(self) -> Counter:
        """CPU seconds by thread kind, each thread at its last reading."""
        by_kind: Counter = Counter()
        for kind, cpu in self.last.values():
            by_kind[kind] += cpu
        return by_kind


def event_log_conf(events: Path) -> Path:
    """A Spark conf dir: the one in use (its files copied) with the event log on, written to `events`."""
    from importance.ingest.spark import _spark_conf_dir

    conf = Path(tempfile.mkdtemp(prefix="ingest_profile_conf_"))
    src = _spark_conf_dir()
    if src is not None and src.is_dir():
        for f in src.iterdir():
            if f.is_file():
                shutil.copy(f, conf / f.name)
    with open(conf / "spark-defaults.conf", "a") as f:
        f.write(f"\nspark.eventLog.enabled true\nspark.eventLog.dir {events.absolute().as_uri()}\n"
                "spark.eventLog.compress false\n")
    return conf


def executions(log: Path, run: Path) -> list[dict]:
    """Per SQL execution (and the jobs outside one: the readers' parse): what it writes, wall
    seconds, executor CPU and run time, rows read, shuffled and written, from Spark's event log."""
    rows: dict = defaultdict(lambda: {"what": "", "wall_s": 0.0, "cpu_s": 0.0, "run_s": 0.0, "read": 0,
                                      "shuffled": 0, "written": 0})
    job_exec, stage_exec = {}, {}
    for line in open(log):
        e = json.loads(line)
        ev = e["Event"]
        if ev.endswith("SQLExecutionStart"):
            plan = e.get("physicalPlanDescription", "")
            m = re.search(r"Execute InsertIntoHadoopFsRelationCommand\nInput: .*\nArguments: file:([^,]+),", plan)
            r = rows[e["executionId"]]
            r["what"] = ("write " + os.path.relpath(m.group(1), run)) if m else e["description"]
            r["t0"] = e["time"]
        elif ev.endswith("SQLExecutionEnd"):
            rows[e["executionId"]]["wall_s"] = (e["time"] - rows[e["executionId"]].get("t0", e["time"])) / 1e3
        elif ev == "SparkListenerJobStart":
            x = e.get("Properties", {}).get("spark.sql.execution.id")
            job_exec[e["Job ID"]] = int(x) if x is not None else "parse"
            for s in e["Stage IDs"]:
                stage_exec[s] = job_exec[e["Job ID"]]
        elif ev == "SparkListenerStageCompleted":
            si = e["Stage Info"]
            acc = {a["Name"]: int(a.get("Value") or 0) for a in si.get("Accumulables", [])
                   if str(a.get("Value", "")).lstrip("-").isdigit()}
            x = stage_exec.get(si["Stage ID"], "parse")
            r = rows[x]
            if x == "parse":
                r["what"] = "readers' parse (Python workers)"
                r["wall_s"] += (si.get("Completion Time", 0) - si.get("Submission Time", 0)) / 1e3
            r["cpu_s"] += acc.get("internal.metrics.executorCpuTime", 0) / 1e9
            r["run_s"] += acc.get("internal.metrics.executorRunTime", 0) / 1e3
            r["read"] += acc.get("internal.metrics.input.recordsRead", 0)
            r["shuffled"] += acc.get("internal.metrics.shuffle.write.recordsWritten", 0)
            r["written"] += acc.get("internal.metrics.output.recordsWritten", 0)
    return [{"execution": k, **{a: b for a, b in v.items() if a != "t0"}} for k, v in rows.items()]


# tables of more rows are compared by Spark: two 65.7M-row references tables (2M papers) read whole
# into Arrow and sorted ran this 24 GB machine out of memory
ARROW_ROWS = 5_000_000


def _rows(table: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in table.glob("*.parquet"))


def _same_rows_by_spark(a: Path, b: Path) -> bool:
    """The two tables hold the same rows, each as often (exceptAll both ways, in a local Spark)."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[*]").appName("ingest_profile compare")
             .config("spark.driver.memory", "4g").config("spark.ui.enabled", "false").getOrCreate())
    x = spark.read.parquet(str(a))
    y = spark.read.parquet(str(b)).select(x.columns)
    return x.exceptAll(y).isEmpty() and y.exceptAll(x).isEmpty()


def same_tables(run: Path, other: Path) -> list[str]:
    """The ingested tables that differ between two runs (rows sorted by TABLE_KEYS; past ARROW_ROWS
    rows, as multisets by Spark, the Parquet schemas compared apart)."""
    import pyarrow.parquet as pq

    differ = []
    for name, keys in TABLE_KEYS.items():
        a, b = run / name, other / name
        if not a.exists() and not b.exists():
            continue
        if not (a.exists() and b.exists()):
            differ.append(f"{name} (in one run only)")
            continue
        if max(_rows(a), _rows(b)) > ARROW_ROWS:
            sa, sb = (pq.read_schema(next(t.glob("*.parquet"))).remove_metadata() for t in (a, b))
            if sorted(sa.names) != sorted(sb.names):
                differ.append(f"{name} (columns)")
            elif not _same_rows_by_spark(a, b):
                differ.append(f"{name} (rows)")
            elif not all(sa.field(c).equals(sb.field(c)) for c in sa.names):
                differ.append(f"{name} (the schema only)")
            continue
        x, y = pq.read_table(a), pq.read_table(b)
        if sorted(x.column_names) != sorted(y.column_names):
            differ.append(f"{name} (columns)")
            continue
        cols = sorted(x.column_names)
        order = [(k, "ascending") for k in keys if k in cols] + [(c, "ascending") for c in cols if c not in keys
                                                                    and not str(x.schema.field(c).type).startswith(("list", "struct", "map"))]
        x, y = x.select(cols).sort_by(order), y.select(cols).sort_by(order)
        if not x.equals(y):   # the schemas count too (a column's nullability is a Parquet difference)
            same_rows = all(x[c].equals(y[c]) for c in cols)
            differ.append(f"{name} ({'the schema only' if same_rows else 'rows'})")
    return differ


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, required=True, help="a TOML with the [ingest] inputs")
    ap.add_argument("--run", type=Path, required=True, help="run directory (its tables are replaced)")
    ap.add_argument("--same-as", type=Path, help="a run of the same input whose tables must be equal")
    ap.add_argument("--coverage", type=float, default=0.9, help="least share of the measured CPU the thread "
                    "sample must see")
    ap.add_argument("--compare-only", action="store_true", help="no run: compare --run's tables (as profiled "
                    "before) with --same-as's")
    Verdicts.add_arguments(ap)
    args = ap.parse_args()
    v = Verdicts()
    if args.compare_only:
        if not args.same_as:
            ap.error("--compare-only needs --same-as")
        differ = same_tables(args.run, args.same_as)
        v.check(f"every table equals {args.same_as}'s", not differ, ", ".join(differ) or "all equal")
        r, o = (json.loads((d / "profile.json").read_text()) for d in (args.run, args.same_as))
        print(f"against {args.same_as}: CPU {r['cpu_s']:.1f} / {o['cpu_s']:.1f} s = {r['cpu_s'] / o['cpu_s']:.3f}, "
              f"wall {r['seconds']:.1f} / {o['seconds']:.1f} s = {r['seconds'] / o['seconds']:.3f}")
        return v.finish(args.no_fail)

    args.run.mkdir(parents=True, exist_ok=True)
    events = args.run / "profile_events"
    shutil.rmtree(events, ignore_errors=True)
    events.mkdir()
    conf = event_log_conf(events)
    env = dict(os.environ, SPARK_CONF_DIR=str(conf))
    cmd = [sys.executable, str(REPO / "jobs" / "ingest.py"), "--run", str(args.run), "--config", str(args.config)]
    from scale_run import child  # bench/scale_run.py: the process tree's wall, CPU and peak

    sampler: dict[str, ThreadSampler] = {}

    def watch(pid: int) -> ThreadSampler:
        sampler["threads"] = ThreadSampler(pid)
        return sampler["threads"]

    r = child(cmd, args.run / "profile.log", env=env, watch=watch)
    kinds = sampler["threads"].counts()
    shutil.rmtree(conf, ignore_errors=True)
    logs = sorted(p for p in events.rglob("*") if p.is_file() and not p.name.startswith("appstatus"))
    execs = executions(logs[-1], args.run.absolute()) if logs else []

    print(f"ingest: {r['seconds']:.1f} s wall, {r['cpu_s']:.1f} s CPU, peak {r['peak_rss_bytes'] / 2**30:.2f} GiB, "
          f"load {r['load'][0]} -> {r['load'][1]}")
    seen = sum(kinds.values())
    print(f"\nCPU by thread kind (sampled once a second: {seen:.1f} s seen of {r['cpu_s']:.1f} s):")
    for kind, cpu in kinds.most_common():
        print(f"  {kind:<34} {cpu:9.1f} s  {cpu / max(seen, 1e-9):6.1%}")
    print("\nSpark executions (executor threads' CPU only):")
    print(f"  {'':<44} {'wall':>8} {'CPU':>8} {'rows read':>12} {'shuffled':>12} {'written':>12}")
    for e in sorted(execs, key=lambda e: -e["cpu_s"]):
        if e["what"].startswith("write ") or e["wall_s"] >= 0.5 or e["cpu_s"] >= 0.5:   # every write, other jobs if not tiny
            print(f"  {e['what'][-44:]:<44} {e['wall_s']:7.1f}s {e['cpu_s']:7.1f}s {e['read']:>12,} "
                  f"{e['shuffled']:>12,} {e['written']:>12,}")
    profile = {"run": str(args.run), "config": str(args.config), **r, "threads": dict(kinds), "executions": execs}
    (args.run / "profile.json").write_text(json.dumps(profile, indent=1))

    v.check(f"the thread sample sees >= {args.coverage:.0%} of the measured CPU", seen >= args.coverage * r["cpu_s"],
            f"{seen:.1f} of {r['cpu_s']:.1f} s")
    if args.same_as:
        differ = same_tables(args.run, args.same_as)
        v.check(f"every table equals {args.same_as}'s", not differ, ", ".join(differ) or "all equal")
        other = args.same_as / "profile.json"
        if other.is_file():
            o = json.loads(other.read_text())
            print(f"\nagainst {args.same_as}: CPU {r['cpu_s']:.1f} / {o['cpu_s']:.1f} s = {r['cpu_s'] / o['cpu_s']:.3f}, "
                  f"wall {r['seconds']:.1f} / {o['seconds']:.1f} s = {r['seconds'] / o['seconds']:.3f}")
            for kind in sorted(set(kinds) | set(o["threads"])):
                print(f"  {kind:<34} {kinds.get(kind, 0):9.1f} s against {o['threads'].get(kind, 0):9.1f} s")
    return v.finish(args.no_fail)


if __name__ == "__main__":
    sys.exit(main())
