"""SparkSession creation with a Java check, and Arrow -> Spark schema conversion.

Executors import the pure-Python `importance` and `sciencemap` packages (readers, sections,
contracts). In local mode the workers run the driver's interpreter, which has them installed.
On a cluster (a non-local master, also under spark-submit --master spark://...) both packages are
zipped from wherever this interpreter imports them (a checkout with an editable install, or
site-packages after `pip install .`) and shipped with addPyFile; bench/spark_standalone.sh checks
that on a real standalone cluster.

spark-submit from the venv: the pip package's bin/find-spark-home runs `python3` from PATH (unless
PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON is set) to locate SPARK_HOME; a python3 without pyspark
fails with "Could not find valid SPARK_HOME". Set PYSPARK_PYTHON to the venv interpreter (which
also makes the driver and executors use it):
    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/spark-submit --master local[2] jobs/importance.py --run RUN

Settings (docs/spark.md): the Spark stages' configs inherit `SparkSettings`, whose fields default to
"auto". Before Spark starts, `plan_launch` derives the JVM-level settings (master, driver and
executor memory, executor cores) from the input size (bytes and files, counted by listing, no
reads) and this machine (cores and memory from the OS and cgroup); after it starts, `plan_runtime`
derives the per-stage ones (shuffle partitions, read partition size, ingest read / output
partitions) from the input size and the task slots. Order of precedence: an explicit value of the
stage config (TOML or option) > what spark-submit, PYSPARK_SUBMIT_ARGS or spark-defaults.conf
already set (never overridden by "auto") > the derived value. A launch setting cannot change once
the JVM runs (under spark-submit, or a session already made by an earlier stage): the running
value is recorded, with a warning when the config asked for another. `spark_for_stage` logs the
chosen values once per stage with the reason for each, and returns them for the stage summary.
"""
from __future__ import annotations

import argparse
import fnmatch
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from sciencemap.config import setting
from sciencemap.contracts import SCHEMAS
from sciencemap.runtime import UserError, say
from sciencemap.storage import atomic_dir

JAVA_MISSING = ("Java 17 is required for the Spark stages but was not found; install it "
                "(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME.")
# What the executors import: this package and the core it depends on (never encoders / mapping).
SHIPPED_PACKAGES = ("importance", "sciencemap")


def check_java() -> str:
    """Path of a working `java`, else UserError."""
    home = os.environ.get("JAVA_HOME")
    java = None
    if home and (Path(home) / "bin" / "java").is_file():
        java = str(Path(home) / "bin" / "java")
    else:
        java = shutil.which("java")
    if not java:
        raise UserError(JAVA_MISSING)
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        raise UserError(JAVA_MISSING) from None
    return java


def package_zip(dest_dir: Path, packages=SHIPPED_PACKAGES) -> Path:
    """One zip of the named packages' .py files and data/ folders (importance/ingest/data: the fields
    lookups), taken from where this interpreter imports them."""
    import importlib

    zpath = Path(dest_dir) / "sciencemap-packages.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        for name in packages:
            pkg_dir = Path(importlib.import_module(name).__file__).resolve().parent
            for f in sorted(pkg_dir.rglob("*")):
                rel = f.relative_to(pkg_dir)
                if f.is_file() and (f.suffix == ".py" or "data" in rel.parts[:-1]):
                    z.write(f, (Path(name) / rel).as_posix())
    return zpath


def _ship_packages(spark) -> None:
    spark.sparkContext.addPyFile(str(package_zip(Path(tempfile.mkdtemp(prefix="sciencemap-py-")))))


def get_spark(app: str = "sciencemap", master: str | None = None, driver_memory: str = "2g",
              shuffle_partitions: int = 8, conf: dict | None = None):
    """Return the active SparkSession or build one.

    With `conf` (the launch settings `plan_launch` chose, as Spark keys): exactly those, nothing
    else of the JVM's (spark.sql.shuffle.partitions is set per stage by `spark_for_stage`). Without
    it (tests, benches): local[2] unless spark-submit set a master, `driver_memory` and
    `shuffle_partitions` as given."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    check_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    b = SparkSession.builder.appName(app)
    if conf is not None:
        for key, value in conf.items():
            b = b.config(key, str(value))
    else:
        if master:
            b = b.master(master)
        elif not under_spark_submit():
            b = b.master("local[2]")
        if not under_spark_submit():
            b = b.config("spark.driver.memory", driver_memory)
        b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    b = (b.config("spark.ui.enabled", "false")
          .config("spark.ui.showConsoleProgress", "false")
          # many small input folders: list them on the driver instead of a Spark job per load
          .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")
          .config("spark.sql.session.timeZone", "UTC")
          .config("spark.sql.adaptive.enabled", "true"))
    try:
        spark = b.getOrCreate()
    except Exception as e:  # JVM failed to start: still one sentence for the user
        if "JAVA" in str(e).upper():
            raise UserError(JAVA_MISSING) from None
        raise
    spark.sparkContext.setLogLevel("ERROR")
    if not spark.sparkContext.master.startswith("local"):
        _ship_packages(spark)
    return spark


# ---------------------------------------------------------------- settings: fields, derivation, record

AUTO = "auto"
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
# The derivation's constants (docs/spark.md says why each).
SHUFFLE_PARTITION_BYTES = 128 * MiB   # input bytes per shuffle partition
PARTITIONS_PER_SLOT = 4               # at least this many shuffle partitions per task slot (8 on local[2])
MAX_SHUFFLE_PARTITIONS = 8192
READ_PARTITION_BYTES = 128 * MiB      # input bytes per read task: Spark's own default
READS_PER_SLOT = 2                    # ingest: parsed input coalesced to at least 2 partitions per slot
OUTPUT_BYTES_PER_FILE = 1 * GiB       # ingest: one output file per GiB of input, at least 2 files
MIN_OUTPUT_FILES = 2
MIN_HEAP = 2 * GiB
HEAP_PER_BUSY_SLOT = 1 * GiB          # working memory of one running task
HEAP_PER_FILE = 1 * KiB               # the driver's index of one listed input file (status + split)
HEAP_SHARE = 0.5                      # of this machine's memory, at most, for the driver heap
SPARK_DEFAULT_DRIVER_MEMORY = "1g"    # what a JVM started without spark.driver.memory has
EXECUTOR_CORES = 4
HEAP_PER_EXECUTOR_CORE = 2 * GiB

GZIP_EXPANSION = 4                    # a .gz file's text is ~4x its size (3.1-4.5x on sample/)
BIG_FILE_WARNING = 1 * GiB            # above this a read task holds a big file in one Python worker
_UNITS = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}


def auto_int(value) -> int | str:
    """'auto' or a whole number >= 1 (the option parser of the integer settings; also checks TOML values)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected 'auto' or a whole number, got {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected 'auto' or a whole number, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a whole number >= 1, got {value!r}")
    return n


def size_bytes(value, default_unit: str = "") -> int:
    """Bytes of a size: a number (in `default_unit`) or text like 128m, 2g, 512k, 2048mb."""
    if isinstance(value, int) and not isinstance(value, bool):
        n, unit = value, default_unit
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", str(value).lower())
        if not m:
            raise argparse.ArgumentTypeError(f"expected a size like 512m or 8g, got {value!r}")
        n, unit = int(m.group(1)), m.group(2) or default_unit
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a size > 0, got {value!r}")
    return n * _UNITS[unit]


def auto_size(value) -> int | str:
    """'auto' or a size in bytes (a number, or text like 128m): the option parser of max_partition_bytes."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    return size_bytes(value)


def memory_text(value) -> str:
    """'auto' or a JVM memory setting as Spark reads it (a bare number is MiB): normalised, e.g. '8g'."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    size_bytes(value, "m")  # checks it
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", str(value).lower())
    return m.group(1) + (m.group(2) or "m")


def _gib_text(n_bytes: float) -> str:
    return f"{max(1, int(n_bytes // GiB))}g"


def human(n_bytes: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{int(n_bytes)} B"


@dataclass
class SparkSettings:
    """The Spark settings of a Spark stage (IngestConfig and ImportanceConfig inherit them).
    "auto" = derived from the input size and this machine (docs/spark.md)."""

    master: str = setting(AUTO, "Spark master (local[N], spark://HOST:7077, yarn); auto = spark-submit's "
                                "--master, else local[<usable cores>]")
    driver_memory: str = setting(AUTO, "driver heap, spark.driver.memory (e.g. 8g); auto in local mode = 1g per "
                                       "busy core + the input bytes + 1k per input file, from 2g to half the "
                                       "machine memory; on a cluster 2g + 1k per input file. Under spark-submit "
                                       "its --driver-memory is used (the JVM already runs)")
    executor_memory: str = setting(AUTO, "executor heap on a cluster, spark.executor.memory; auto = 2g per "
                                         "executor core (unused in local mode)")
    executor_cores: int | str = setting(AUTO, "cores per executor on a cluster, spark.executor.cores; auto = 4 "
                                              "(unused in local mode)", parse=auto_int)
    shuffle_partitions: int | str = setting(AUTO, "spark.sql.shuffle.partitions; auto = one per 128 MB of input, "
                                                  "rounded up to a multiple of the task slots, at least 4 per "
                                                  "slot, at most 8192", parse=auto_int)
    max_partition_bytes: int | str = setting(AUTO, "input bytes per read task, spark.sql.files.maxPartitionBytes "
                                                   "(e.g. 128m); auto = 128m", parse=auto_size)
    local_dir: str = setting("", "folder(s) for shuffle files and spills, spark.local.dir (comma-separated, "
                                 "local disks); '' = Spark's default (/tmp, or SPARK_LOCAL_DIRS)")


@dataclass(frozen=True)
class Machine:
    cores: int
    memory: int  # bytes


@dataclass(frozen=True)
class InputSize:
    """What the settings are derived from. `bytes` estimates the uncompressed size (a .gz file
    counts GZIP_EXPANSION x its size); `disk_bytes` is what lies on disk; `largest` is the biggest
    file (a file of the ingest inputs is read whole, by one task)."""

    bytes: int
    files: int
    what: str = "input"
    disk_bytes: int = 0
    largest: int = 0
    largest_path: str = ""


@dataclass
class Choice:
    value: object
    source: str  # config | spark-submit | preset | auto | running session | not used
    why: str = ""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def this_machine() -> Machine:
    """Usable cores (affinity, cgroup CPU quota) and memory (MemTotal, or the cgroup limit when lower)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    quota = None
    v2 = _read("/sys/fs/cgroup/cpu.max")
    if v2 and not v2.startswith("max"):
        q, period = v2.split()[:2]
        quota = int(q) / int(period)
    else:
        q, period = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        if q and period and int(q) > 0:
            quota = int(q) / int(period)
    if quota:
        cores = min(cores, max(1, math.ceil(quota)))
    memory = 0
    meminfo = _read("/proc/meminfo") or ""
    m = re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    if m:
        memory = int(m.group(1)) * KiB
    else:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        limit = _read(path)
        if limit and limit.isdigit() and 0 < int(limit) < memory:
            memory = int(limit)
    return Machine(max(1, cores), memory)


class SizeTally:
    """Adds up files as a listing meets them: bytes (a .gz counted GZIP_EXPANSION x), bytes on disk,
    the number, the largest (measure_files; the ingest stage's one listing of its inputs)."""

    def __init__(self, what: str = "input"):
        self.what = what
        self.total = self.disk = self.files = self.largest = 0
        self.largest_path = ""

    def add(self, path: str, n: int) -> None:
        self.files += 1
        self.disk += n
        self.total += n * GZIP_EXPANSION if path.endswith(".gz") else n
        if n > self.largest:
            self.largest, self.largest_path = n, path

    def size(self) -> InputSize:
        return InputSize(self.total, self.files, self.what, self.disk, self.largest, self.largest_path)


def measure_files(path, patterns=("*",), what: str = "input") -> InputSize:
    """Bytes and number of the files under `path` (or the file `path`) whose names match one of
    `patterns`, by listing (os.walk + stat, nothing read). Names starting with '.' or '_' are
    skipped, as Spark's file sources skip them."""
    p = Path(path)
    tally = SizeTally(what)
    if p.is_file():
        entries = [(str(p.parent), [p.name])]
    else:
        entries = ((root, names) for root, _, names in os.walk(p))
    for root, names in entries:
        for name in names:
            if name[:1] in "._" or not any(fnmatch.fnmatch(name, q) for q in patterns):
                continue
            try:
                n = os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
            tally.add(os.path.join(root, name), n)
    return tally.size()


def total_size(sizes, what: str) -> InputSize:
    sizes = list(sizes)
    big = max(sizes, key=lambda s: s.largest, default=InputSize(0, 0))
    return InputSize(sum(s.bytes for s in sizes), sum(s.files for s in sizes), what,
                     sum(s.disk_bytes for s in sizes), big.largest, big.largest_path)


def tables_size(paths, what: str = "input tables") -> InputSize:
    """Parquet bytes of table directories (missing ones count 0)."""
    return total_size((measure_files(p, ("*.parquet",)) for p in paths if Path(p).exists()), what)


# ---------------------------------------------------------------- what is set outside the config

def under_spark_submit() -> bool:
    # spark-submit starts the JVM first and hands its gateway port to the Python driver.
    return "PYSPARK_GATEWAY_PORT" in os.environ


SUBMIT_FLAGS = {"--master": "spark.master", "--driver-memory": "spark.driver.memory",
                "--executor-memory": "spark.executor.memory", "--executor-cores": "spark.executor.cores",
                "--num-executors": "spark.executor.instances", "--total-executor-cores": "spark.cores.max"}


def parse_submit_args(text: str) -> dict[str, str]:
    """The Spark settings in spark-submit arguments (as in PYSPARK_SUBMIT_ARGS)."""
    out: dict[str, str] = {}
    words = shlex.split(text or "")
    i = 0
    while i < len(words):
        w = words[i]
        flag, eq, inline = w.partition("=")
        if flag in SUBMIT_FLAGS or flag == "--conf":
            value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
            i += 1 if eq else 2
            if flag == "--conf":
                k, _, v = value.partition("=")
                if k:
                    out[k.strip()] = v.strip()
            else:
                out[SUBMIT_FLAGS[flag]] = value
            continue
        i += 1
    return out


def parse_defaults_file(path) -> dict[str, str]:
    """spark-defaults.conf: `key value` (or key=value) lines, # comments."""
    out: dict[str, str] = {}
    text = _read(str(path))
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"(\S+?)\s*[=\s]\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def _spark_conf_dir() -> Path | None:
    if os.environ.get("SPARK_CONF_DIR"):
        return Path(os.environ["SPARK_CONF_DIR"])
    home = os.environ.get("SPARK_HOME")
    if not home:
        import importlib.util

        spec = importlib.util.find_spec("pyspark")
        home = spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None
    return Path(home) / "conf" if home else None


def preset_conf() -> dict[str, str]:
    """Spark settings given outside the stage config, which "auto" never overrides: under
    spark-submit everything its JVM holds (--master, --driver-memory, --conf, spark-defaults.conf);
    otherwise spark-defaults.conf and PYSPARK_SUBMIT_ARGS (what pyspark passes to the JVM it starts)."""
    if under_spark_submit():
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()
        return {k: v for k, v in SparkConf().getAll()}
    conf: dict[str, str] = {}
    d = _spark_conf_dir()
    if d is not None and (d / "spark-defaults.conf").is_file():
        conf.update(parse_defaults_file(d / "spark-defaults.conf"))
    conf.update(parse_submit_args(os.environ.get("PYSPARK_SUBMIT_ARGS", "")))
    return conf


# ---------------------------------------------------------------- derivation (pure: tests call these)

def _explicit(value) -> bool:
    return value not in (None, "", AUTO) and not (isinstance(value, str) and value.strip().lower() == AUTO)


def _check(parse, value, name: str):
    try:
        return parse(value)
    except argparse.ArgumentTypeError as e:
        raise UserError(f"Spark setting {name}: {e}") from None


def task_slots(master: str, machine: Machine, conf: dict) -> int | None:
    """Tasks that run at once: N of local[N] (local[*]: this machine's cores); on a cluster
    spark.cores.max, else executor instances x cores; None when only the running cluster knows."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?", master.strip())
    if m:
        return 1 if m.group(1) is None else machine.cores if m.group(1) == "*" else max(1, int(m.group(1)))
    m = re.fullmatch(r"local-cluster\[(\d+)\s*,\s*(\d+)\s*,\s*\d+\]", master.strip())
    if m:
        return int(m.group(1)) * int(m.group(2))
    if str(conf.get("spark.cores.max", "")).isdigit():
        return int(conf["spark.cores.max"])
    inst, cores = str(conf.get("spark.executor.instances", "")), str(conf.get("spark.executor.cores", ""))
    if inst.isdigit() and cores.isdigit():
        return int(inst) * int(cores)
    return None


LAUNCH_KEYS = {"master": "spark.master", "driver_memory": "spark.driver.memory",
               "executor_memory": "spark.executor.memory", "executor_cores": "spark.executor.cores",
               "local_dir": "spark.local.dir"}


def plan_launch(cfg, size: InputSize, machine: Machine, preset: dict | None = None,
                submitted: bool = False) -> dict[str, Choice]:
    """The JVM-level settings, before Spark starts: explicit config > preset (spark-submit,
    PYSPARK_SUBMIT_ARGS, spark-defaults.conf) > derived. Under spark-submit the driver JVM already
    runs, so its master and driver memory are the ones used whatever the config says."""
    preset = dict(preset or {})
    origin = "spark-submit" if submitted else "preset"
    outside = ("spark-submit" if submitted else
               "set outside the config (PYSPARK_SUBMIT_ARGS or spark-defaults.conf)")
    out: dict[str, Choice] = {}

    master = str(cfg.master).strip() if cfg.master is not None else AUTO
    if submitted:
        actual = preset.get("spark.master", "local[*]")
        why = "the driver was started by spark-submit"
        if _explicit(master) and master != actual:
            why += f"; config master {master} not applied (pass --master to spark-submit)"
        out["master"] = Choice(actual, "spark-submit", why)
    elif _explicit(master):
        out["master"] = Choice(master, "config")
    elif preset.get("spark.master"):
        out["master"] = Choice(preset["spark.master"], origin, outside)
    else:
        out["master"] = Choice(f"local[{machine.cores}]", AUTO, f"{machine.cores} usable cores on this machine")
    master = str(out["master"].value)
    local = master.startswith("local")

    # executor settings first: a cluster's task slots may follow from them
    for name, key, default in (("executor_cores", "spark.executor.cores", EXECUTOR_CORES),
                               ("executor_memory", "spark.executor.memory", None)):
        value = getattr(cfg, name)
        value = _check(auto_int if name == "executor_cores" else memory_text, value, name)
        if local:
            out[name] = Choice(None, "not used", "local mode: the tasks run in the driver")
        elif _explicit(value):
            out[name] = Choice(value, "config")
        elif preset.get(key):
            out[name] = Choice(preset[key], origin, outside)
        elif name == "executor_cores":
            out[name] = Choice(default, AUTO, "4 cores per executor: several executors per large node, "
                                              "each with a moderate heap")
        else:
            cores = int(out["executor_cores"].value)
            out[name] = Choice(_gib_text(HEAP_PER_EXECUTOR_CORE * cores), AUTO,
                               f"{human(HEAP_PER_EXECUTOR_CORE)} per executor core x {cores} cores")
    conf = dict(preset)
    if not local:
        conf["spark.executor.cores"] = out["executor_cores"].value
    slots = task_slots(master, machine, conf)

    drv = _check(memory_text, cfg.driver_memory, "driver_memory")
    busy = min(slots or machine.cores, max(1, math.ceil(size.bytes / READ_PARTITION_BYTES)))
    cap = max(MIN_HEAP, int(HEAP_SHARE * machine.memory))
    index = HEAP_PER_FILE * size.files
    ingest = hasattr(cfg, "inputs")
    # importance keeps its input's worth of cached tables; ingest's tasks read their files in Python
    # and hand the parsed records to Spark as Parquet files (importance.ingest.staged_records), so
    # the heap holds neither the files nor the records
    held = 0 if ingest else size.bytes
    if local:
        need = HEAP_PER_BUSY_SLOT * busy + held + index
        derived = _gib_text(min(cap, max(MIN_HEAP, need)))
        derived_why = (f"local mode: {human(HEAP_PER_BUSY_SLOT)} x {busy} busy cores"
                       + (f" + {human(size.bytes)} {size.what}" if held else "")
                       + f" + {human(HEAP_PER_FILE)} x {size.files} files = {human(need)}, "
                       f"kept within {human(MIN_HEAP)} .. half of {human(machine.memory)}")
    else:
        need = MIN_HEAP + index
        derived = _gib_text(min(cap, need))
        derived_why = (f"cluster: the driver holds aggregates and the file index: {human(MIN_HEAP)} + "
                       f"{human(HEAP_PER_FILE)} x {size.files} files")
    if submitted:
        actual = preset.get("spark.driver.memory")
        why = "the driver JVM was started by spark-submit" + (
            "" if actual else f" without --driver-memory (Spark's default {SPARK_DEFAULT_DRIVER_MEMORY})")
        actual = actual or SPARK_DEFAULT_DRIVER_MEMORY
        if _explicit(drv) and size_bytes(drv, "m") != size_bytes(actual, "m"):
            why += f"; config driver_memory {drv} not applied (pass --driver-memory {drv} to spark-submit)"
        elif size_bytes(derived, "m") > size_bytes(actual, "m"):
            why += f"; the derived value would be {derived} ({derived_why}): pass --driver-memory {derived}"
        out["driver_memory"] = Choice(actual, "spark-submit", why)
    elif _explicit(drv):
        out["driver_memory"] = Choice(drv, "config")
    elif preset.get("spark.driver.memory"):
        out["driver_memory"] = Choice(preset["spark.driver.memory"], origin, outside)
    else:
        out["driver_memory"] = Choice(derived, AUTO, derived_why)

    if cfg.local_dir:
        out["local_dir"] = Choice(str(cfg.local_dir), "config")
    elif preset.get("spark.local.dir"):
        out["local_dir"] = Choice(preset["spark.local.dir"], origin, outside)
    else:
        out["local_dir"] = Choice(None, AUTO, "Spark's default (SPARK_LOCAL_DIRS, else /tmp)")
    return out


def launch_conf(choices: dict[str, Choice], submitted: bool = False) -> dict[str, str]:
    """The Spark keys to start a session with (what spark-submit fixed is left to it)."""
    conf = {}
    for name, c in choices.items():
        if c.value is None or c.source in ("not used", "running session"):
            continue
        if submitted and name in ("master", "driver_memory"):
            continue
        conf[LAUNCH_KEYS[name]] = str(c.value)
    return conf


def plan_runtime(cfg, size: InputSize, slots: int, preset: dict | None = None, stage: str = "",
                 submitted: bool = False) -> dict[str, Choice]:
    """The per-stage settings, once the task slots are known (SQL settings a running session
    takes): shuffle partitions, read partition bytes; for ingest also how many partitions the
    parsed input is coalesced to and how many files each table is written as."""
    preset = dict(preset or {})
    origin = "spark-submit" if submitted else "preset"
    outside = ("spark-submit --conf (or its spark-defaults.conf)" if submitted else
               "set outside the config (PYSPARK_SUBMIT_ARGS or spark-defaults.conf)")
    slots = max(1, int(slots))
    out: dict[str, Choice] = {}

    sp = _check(auto_int, cfg.shuffle_partitions, "shuffle_partitions")
    if _explicit(sp):
        out["shuffle_partitions"] = Choice(sp, "config")
    elif preset.get("spark.sql.shuffle.partitions"):
        out["shuffle_partitions"] = Choice(_check(auto_int, preset["spark.sql.shuffle.partitions"],
                                                          "spark.sql.shuffle.partitions"), origin, outside)
    else:
        raw = math.ceil(size.bytes / SHUFFLE_PARTITION_BYTES)
        lo = PARTITIONS_PER_SLOT * slots
        hi = max(lo, MAX_SHUFFLE_PARTITIONS // slots * slots)
        n = min(hi, max(lo, -(-raw // slots) * slots))
        out["shuffle_partitions"] = Choice(n, AUTO, f"{human(size.bytes)} {size.what} / "
                                           f"{human(SHUFFLE_PARTITION_BYTES)} = {raw}, rounded up to a multiple "
                                           f"of {slots} task slots, within {lo} .. {hi}")

    mpb = _check(auto_size, cfg.max_partition_bytes, "max_partition_bytes")
    if _explicit(mpb):
        out["max_partition_bytes"] = Choice(mpb, "config")
    elif preset.get("spark.sql.files.maxPartitionBytes"):
        out["max_partition_bytes"] = Choice(_check(size_bytes, preset["spark.sql.files.maxPartitionBytes"],
                                                   "spark.sql.files.maxPartitionBytes"), origin, outside)
    else:
        out["max_partition_bytes"] = Choice(READ_PARTITION_BYTES, AUTO, "Spark's default; Spark already "
                                            "spreads an input smaller than cores x this over all cores")

    if stage == "ingest":
        rp = _check(auto_int, getattr(cfg, "read_partitions", AUTO), "read_partitions")
        if _explicit(rp):
            out["read_partitions"] = Choice(rp, "config")
        else:
            per = int(out["max_partition_bytes"].value)
            raw = math.ceil(size.bytes / per)
            out["read_partitions"] = Choice(max(READS_PER_SLOT * slots, raw), AUTO,
                                            f"{human(size.bytes)} / {human(per)} = {raw}, at least "
                                            f"{READS_PER_SLOT} per task slot ({READS_PER_SLOT * slots})")
        op = getattr(cfg, "output_partitions", 0)
        if op:
            out["output_partitions"] = Choice(_check(auto_int, op, "output_partitions"), "config")
        else:
            raw = math.ceil(size.bytes / OUTPUT_BYTES_PER_FILE)
            out["output_partitions"] = Choice(max(MIN_OUTPUT_FILES, raw), AUTO,
                                              f"one file per {human(OUTPUT_BYTES_PER_FILE)} of input ({raw}), "
                                              f"at least {MIN_OUTPUT_FILES}")
    return out


# ---------------------------------------------------------------- applying and recording

@dataclass
class SparkUsed:
    """The settings a stage ran with, why each, and what they were derived from."""

    stage: str
    size: InputSize
    machine: Machine
    slots: int
    choices: dict[str, Choice] = field(default_factory=dict)

    def value(self, name: str):
        return self.choices[name].value

    @property
    def shuffle_partitions(self) -> int:
        return int(self.value("shuffle_partitions"))

    def record(self) -> dict:
        return {"stage": self.stage,
                "input": {"what": self.size.what, "bytes": self.size.bytes, "files": self.size.files,
                          "disk_bytes": self.size.disk_bytes, "largest_file_bytes": self.size.largest},
                "machine": {"cores": self.machine.cores, "memory_gb": round(self.machine.memory / GiB, 1)},
                "task_slots": self.slots,
                "settings": {k: {"value": c.value, "source": c.source, "why": c.why} for k, c in self.choices.items()}}

    def describe(self) -> str:
        lines = [f"[spark] {self.stage} settings ({human(self.size.bytes)} {self.size.what} in {self.size.files} "
                 f"files, {human(self.size.disk_bytes)} on disk; {self.slots} task slots; machine "
                 f"{self.machine.cores} cores, {human(self.machine.memory)}):"]
        for k, c in self.choices.items():
            lines.append(f"[spark]   {k} = {c.value} ({c.source}{': ' + c.why if c.why else ''})")
        return "\n".join(lines)


# app id -> (stage, launch choices) of the sessions start_spark made in this process
_LAUNCHED: dict[str, tuple[str, dict[str, Choice]]] = {}


def start_spark(cfg, size: InputSize, stage: str, app: str = "sciencemap"):
    """A SparkSession started with the launch settings derived for this stage (or the active one)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    submitted = under_spark_submit()
    choices = plan_launch(cfg, size, this_machine(), preset_conf(), submitted)
    spark = get_spark(app=app, conf=launch_conf(choices, submitted))
    _LAUNCHED[spark.sparkContext.applicationId] = (stage, choices)
    return spark


def stop_spark(spark) -> None:
    """Stop the session and the JVM pyspark launched for it: SparkSession.stop leaves that process
    running, its heap held (up to the driver's memory), until Python exits, which in the pipeline
    is after every later stage. Under spark-submit the JVM is the parent, and stays."""
    import subprocess

    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    try:
        gateway.shutdown()
    except Exception:   # noqa: BLE001 -- the JVM may be gone already; its stdin's EOF ends it anyway
        pass
    if proc.stdin is not None:
        proc.stdin.close()    # the gateway JVM exits when its stdin closes
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    SparkContext._gateway = None   # a later session launches a JVM of its own
    SparkContext._jvm = None


def _same(name: str, a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if name in ("driver_memory", "executor_memory"):
        try:
            return size_bytes(str(a), "m") == size_bytes(str(b), "m")
        except argparse.ArgumentTypeError:
            pass
    return str(a) == str(b)


def _observed(spark, planned: dict[str, Choice], stage: str) -> dict[str, Choice]:
    """The launch settings the running session has. Where this stage started it and the JVM
    holds what was planned, the plan (with its reasons); otherwise the session's own values, with
    a warning where the config asked for something else."""
    sc = spark.sparkContext
    launched = _LAUNCHED.get(sc.applicationId)
    ours = launched is not None and launched[0] == stage
    base = launched[1] if launched else planned
    conf = sc.getConf()
    out = {}
    for name, key in LAUNCH_KEYS.items():
        if name in ("executor_memory", "executor_cores") and sc.master.startswith("local"):
            out[name] = Choice(None, "not used", "local mode: the tasks run in the driver")
            continue
        actual = sc.master if name == "master" else conf.get(key, None)
        if actual is None and name == "driver_memory":
            actual = SPARK_DEFAULT_DRIVER_MEMORY
        b = base[name]
        if ours and _same(name, b.value, actual):
            out[name] = b
            continue
        if ours:
            why = (f"the running JVM has it, not {b.value} ({b.source}): set by PYSPARK_SUBMIT_ARGS or "
                   f"spark-defaults.conf")
        elif launched:
            why = f"set when the session started for the {launched[0]} stage" + (
                f" ({b.source}: {b.why})" if _same(name, b.value, actual) and b.why else "")
        else:
            why = "set when the session started, before this stage"
        p = planned[name]
        if p.source == "config" and not _same(name, p.value, actual):
            why += f"; config {name} {p.value} not applied (a running JVM keeps it)"
            say(f"[spark] warning: {stage}: {name} = {p.value} from the config is not applied: the running "
                f"session has {actual}")
        out[name] = Choice(actual, "running session", why)
    return out


def spark_for_stage(cfg, size: InputSize, stage: str, spark=None):
    """The session for a Spark stage with its settings applied; returns (spark, SparkUsed) and logs
    the settings once. A session passed in, or already active, keeps its launch settings."""
    from pyspark.sql import SparkSession

    submitted = under_spark_submit()
    machine, preset = this_machine(), preset_conf()
    planned = plan_launch(cfg, size, machine, preset, submitted)  # checks the values before Spark starts
    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        spark = get_spark(conf=launch_conf(planned, submitted))
        _LAUNCHED[spark.sparkContext.applicationId] = (stage, planned)
    launch = _observed(spark, planned, stage)
    master = spark.sparkContext.master
    conf = dict(preset)
    if launch["executor_cores"].value is not None:
        conf["spark.executor.cores"] = launch["executor_cores"].value
    slots = task_slots(master, machine, conf) or spark.sparkContext.defaultParallelism
    runtime = plan_runtime(cfg, size, slots, preset, stage, submitted)
    spark.conf.set("spark.sql.shuffle.partitions", str(runtime["shuffle_partitions"].value))
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(runtime["max_partition_bytes"].value))
    used = SparkUsed(stage, size, machine, slots, {**launch, **runtime})
    say(used.describe())
    if stage == "ingest" and size.largest > BIG_FILE_WARNING:
        say(f"[spark] warning: input file {size.largest_path} is {human(size.largest)}: each file is read whole "
            f"by one task (one Python worker holds it); files of at most a few hundred MB spread the work")
    return spark, used


# Arrow scalar type -> name of the Spark type (pyspark.sql.types)
_SCALAR_TYPES = {pa.string(): "StringType", pa.large_string(): "StringType", pa.int64(): "LongType",
                 pa.int32(): "IntegerType", pa.int16(): "ShortType", pa.float64(): "DoubleType",
                 pa.float32(): "FloatType", pa.bool_(): "BooleanType"}


def arrow_to_spark_type(t: pa.DataType):
    from pyspark.sql import types as T

    if t in _SCALAR_TYPES:
        return getattr(T, _SCALAR_TYPES[t])()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return T.ArrayType(arrow_to_spark_type(t.value_type), True)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, arrow_to_spark_type(f.type), True) for f in t])
    raise TypeError(f"no Spark type for Arrow type {t}")


def to_spark_schema(arrow_schema: pa.Schema | str):
    """Spark StructType for an Arrow schema or a contract table name (contracts.SCHEMAS)."""
    from pyspark.sql import types as T

    if isinstance(arrow_schema, str):
        arrow_schema = SCHEMAS[arrow_schema]
    return T.StructType([T.StructField(f.name, arrow_to_spark_type(f.type), True) for f in arrow_schema])


def write_parquet(df, path, name: str | None = None, partitions: int | None = None, shuffle: bool = False,
                  options: dict | None = None) -> Path:
    """Write a DataFrame as the Parquet directory `path` (overwritten in place; see write_spark_table).

    With `name`, columns are selected and cast to the contract schema first. `partitions` sets the
    number of files: by coalesce (no shuffle, but the last stage then runs in that many tasks), or
    with shuffle=True by repartition (for a small output of an expensive last stage). `options` go
    to the Parquet writer (e.g. parquet.block.size, the row group size)."""
    from pyspark.sql import functions as F

    if name is not None:
        schema = to_spark_schema(name)
        df = df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])
    if partitions:
        df = df.repartition(partitions) if shuffle else df.coalesce(partitions)
    df.write.mode("overwrite").options(**(options or {})).parquet(str(path))
    return Path(path)


def write_spark_table(df, dest, name: str | None = None, partitions: int | None = None, shuffle: bool = False,
                      options: dict | None = None) -> Path:
    """write_parquet into a temporary directory that replaces `dest` when complete (atomic)."""
    with atomic_dir(dest) as tmp:
        write_parquet(df, tmp, name, partitions=partitions, shuffle=shuffle, options=options)
    return Path(dest)
