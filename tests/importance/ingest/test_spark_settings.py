"""Spark settings: derived from the input size and the machine, explicit config values win, what
spark-submit set is never overridden, the chosen values are recorded; and the tables do not
depend on the partition settings (the demo's results cannot move with them)."""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from importance.ingest.job import IngestConfig, input_size, run_ingest
from importance.job import ImportanceConfig, run_importance
from importance.ingest.spark import (GiB, MiB, InputSize, Machine, launch_conf, measure_files, parse_defaults_file,
                                     parse_submit_args, plan_launch, plan_runtime, spark_for_stage, task_slots,
                                     this_machine)
from sciencemap.config import add_options, config_from, config_from_args
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError

LAPTOP = Machine(cores=2, memory=24 * GiB)       # this machine's size: the demo's
NODE = Machine(cores=16, memory=128 * GiB)       # the 33M-paper node of docs/spark.md


def _values(choices: dict) -> dict:
    return {k: c.value for k, c in choices.items()}


def _sources(choices: dict) -> dict:
    return {k: c.source for k, c in choices.items()}


# ---------------------------------------------------------------- derivation (pure)

def test_demo_sized_input_gets_the_demo_values():
    # the demo's inputs: 13.8 MB of sample files (753), 6.4 MB of ingested tables
    launch = plan_launch(IngestConfig(), InputSize(13_800_926, 753), LAPTOP)
    assert _values(launch) == {"master": "local[2]", "executor_cores": None, "executor_memory": None,
                               "driver_memory": "2g", "local_dir": None}
    assert _sources(launch)["driver_memory"] == "auto" and "2 usable cores" in launch["master"].why
    ingest = plan_runtime(IngestConfig(), InputSize(13_800_926, 753), 2, stage="ingest")
    assert _values(ingest) == {"shuffle_partitions": 8, "max_partition_bytes": 128 * MiB,
                               "read_partitions": 4, "output_partitions": 2}
    imp = plan_runtime(ImportanceConfig(), InputSize(6_371_446, 6), 2, stage="importance")
    assert _values(imp) == {"shuffle_partitions": 8, "max_partition_bytes": 128 * MiB}


def test_33m_paper_node_settings():
    # ingest: 1.3 TB of full text in 1M files; importance: 240 GB of Parquet in 2,000 files
    raw, tables = InputSize(1300 * GiB, 1_000_000), InputSize(240 * GiB, 2000)
    launch = plan_launch(IngestConfig(), raw, NODE)
    assert launch["master"].value == "local[16]"
    assert launch["driver_memory"].value == "16g"  # 16 busy x 1g + 1M files x 1 KiB: no parsed records held
    ingest = plan_runtime(IngestConfig(), raw, 16, stage="ingest")
    assert ingest["shuffle_partitions"].value == 8192  # 10,400 capped
    assert ingest["read_partitions"].value == 10400 and ingest["output_partitions"].value == 1300
    imp = plan_runtime(ImportanceConfig(), tables, 16, stage="importance")
    assert imp["shuffle_partitions"].value == 1920 == math.ceil(240 * GiB / (128 * MiB))
    # a size between: rounded up to a multiple of the slots, driver memory from the input
    mid = InputSize(10 * GiB, 100)
    assert plan_runtime(ImportanceConfig(), mid, 16)["shuffle_partitions"].value == 80
    assert plan_runtime(ImportanceConfig(), InputSize(10 * GiB + 1, 100), 16)["shuffle_partitions"].value == 96
    assert plan_launch(ImportanceConfig(), mid, NODE)["driver_memory"].value == "26g"  # 16 x 1g + 10g + 100k


def test_driver_memory_grows_with_the_files_the_driver_lists():
    few, many = InputSize(GiB, 10), InputSize(GiB, 20_000_000)
    assert plan_launch(IngestConfig(), few, NODE)["driver_memory"].value == "8g"    # 8 busy x 1g
    assert plan_launch(IngestConfig(), many, NODE)["driver_memory"].value == "27g"  # + 19 GB of file index


def test_ingest_heap_does_not_grow_with_the_input_bytes():
    """Ingest's parsed records reach Spark as Parquet files, not held in the heap: 4 and 40 GiB of
    input (every slot busy either way) get the same heap; importance keeps its input's worth."""
    ing = [plan_launch(IngestConfig(), InputSize(b * GiB, 10), NODE)["driver_memory"].value for b in (4, 40)]
    imp = [plan_launch(ImportanceConfig(), InputSize(b * GiB, 10), NODE)["driver_memory"].value for b in (4, 40)]
    assert ing[0] == ing[1] == "16g" and imp == ["20g", "56g"]


def test_explicit_values_win_over_preset_and_auto():
    cfg = ImportanceConfig(master="local[1]", driver_memory="6G", shuffle_partitions=12,
                           max_partition_bytes="64m", local_dir="/scratch/a,/scratch/b")
    preset = {"spark.master": "local[2]", "spark.driver.memory": "3g", "spark.sql.shuffle.partitions": "7",
              "spark.sql.files.maxPartitionBytes": "32m", "spark.local.dir": "/tmp/x"}
    launch = plan_launch(cfg, InputSize(GiB, 10), LAPTOP, preset)
    runtime = plan_runtime(cfg, InputSize(GiB, 10), 1, preset)
    assert _values(launch) | _values(runtime) == {
        "master": "local[1]", "driver_memory": "6g", "executor_cores": None, "executor_memory": None,
        "local_dir": "/scratch/a,/scratch/b", "shuffle_partitions": 12, "max_partition_bytes": 64 * MiB}
    assert {_sources(launch)[k] for k in ("master", "driver_memory", "local_dir")} == {"config"}
    assert set(_sources(runtime).values()) == {"config"}
    assert launch_conf(launch) == {"spark.master": "local[1]", "spark.driver.memory": "6g",
                                   "spark.local.dir": "/scratch/a,/scratch/b"}
    ing = plan_runtime(IngestConfig(read_partitions=3, output_partitions=5), InputSize(GiB, 10), 2, stage="ingest")
    assert (ing["read_partitions"].value, ing["output_partitions"].value) == (3, 5)


def test_preset_values_are_not_overridden_by_auto():
    preset = {"spark.driver.memory": "3g", "spark.sql.shuffle.partitions": "7",
              "spark.sql.files.maxPartitionBytes": "32m"}
    launch = plan_launch(ImportanceConfig(), InputSize(GiB, 10), NODE, preset)
    runtime = plan_runtime(ImportanceConfig(), InputSize(GiB, 10), 16, preset)
    assert (launch["driver_memory"].value, launch["driver_memory"].source) == ("3g", "preset")
    assert (runtime["shuffle_partitions"].value, runtime["shuffle_partitions"].source) == (7, "preset")
    assert runtime["max_partition_bytes"].value == 32 * MiB
    assert "spark.driver.memory" in launch_conf(launch)  # passed on unchanged to the JVM pyspark starts


def test_under_spark_submit_its_master_and_driver_memory_stay():
    preset = {"spark.master": "spark://h:7077", "spark.cores.max": "64"}
    cfg = ImportanceConfig(master="local[4]", executor_memory="12g")
    launch = plan_launch(cfg, InputSize(240 * GiB, 2000), NODE, preset, submitted=True)
    assert launch["master"].value == "spark://h:7077" and "local[4] not applied" in launch["master"].why
    # no --driver-memory: Spark's default, and the log says what to pass
    assert launch["driver_memory"].value == "1g" and "--driver-memory 2g" in launch["driver_memory"].why
    assert launch["executor_memory"].value == "12g" and launch["executor_memory"].source == "config"
    assert launch["executor_cores"].value == 4 and launch["executor_cores"].source == "auto"
    conf = launch_conf(launch, submitted=True)
    assert conf == {"spark.executor.memory": "12g", "spark.executor.cores": "4"}  # no master / driver memory
    runtime = plan_runtime(cfg, InputSize(240 * GiB, 2000), 64, preset, submitted=True)
    assert runtime["shuffle_partitions"].value == 1920 and runtime["shuffle_partitions"].value % 64 == 0
    assert plan_runtime(cfg, InputSize(GiB, 1), 64)["shuffle_partitions"].value == 256  # 4 per slot
    # executors auto on a cluster: 4 cores, 2g each
    auto = plan_launch(ImportanceConfig(), InputSize(GiB, 1), NODE, {"spark.master": "yarn"}, submitted=True)
    assert (auto["executor_cores"].value, auto["executor_memory"].value) == (4, "8g")


def test_bad_values_are_one_sentence():
    for cfg in (ImportanceConfig(shuffle_partitions="lots"), ImportanceConfig(shuffle_partitions=0),
                ImportanceConfig(shuffle_partitions=2.5), ImportanceConfig(max_partition_bytes="big")):
        with pytest.raises(UserError, match="shuffle_partitions|max_partition_bytes"):
            plan_runtime(cfg, InputSize(1, 1), 2)
    for cfg in (ImportanceConfig(driver_memory="2x"), ImportanceConfig(master="spark://h:7077", executor_cores="x")):
        with pytest.raises(UserError, match="driver_memory|executor_cores"):
            plan_launch(cfg, InputSize(1, 1), LAPTOP)


def test_options_and_toml_accept_auto_or_numbers():
    ap = argparse.ArgumentParser()
    add_options(ap, ImportanceConfig)
    cfg = config_from_args(ImportanceConfig, {"driver_memory": "8g"},
                           ap.parse_args(["--shuffle-partitions", "64", "--max-partition-bytes", "64m"]))
    assert (cfg.shuffle_partitions, cfg.max_partition_bytes, cfg.driver_memory) == (64, 64 * MiB, "8g")
    assert config_from_args(ImportanceConfig, {}, ap.parse_args(["--shuffle-partitions", "auto"])).shuffle_partitions == "auto"
    with pytest.raises(SystemExit):
        ap.parse_args(["--shuffle-partitions", "many"])
    ing = config_from(IngestConfig, {"shuffle_partitions": 16, "read_partitions": "auto"})
    assert plan_runtime(ing, InputSize(1, 1), 2, stage="ingest")["shuffle_partitions"].value == 16


def test_slots_and_what_spark_submit_and_defaults_set(tmp_path):
    assert [task_slots(m, NODE, {}) for m in ("local", "local[*]", "local[3]", "local[3,2]", "local-cluster[2,3,1024]")] \
        == [1, 16, 3, 3, 6]
    assert task_slots("yarn", NODE, {"spark.executor.instances": "10", "spark.executor.cores": "4"}) == 40
    assert task_slots("spark://h:7077", NODE, {}) is None  # the running cluster tells
    assert parse_submit_args("--master 'local[3]' --driver-memory 5g --conf spark.sql.shuffle.partitions=9 "
                             "--conf=spark.local.dir=/d --total-executor-cores 32 pyspark-shell") == {
        "spark.master": "local[3]", "spark.driver.memory": "5g", "spark.sql.shuffle.partitions": "9",
        "spark.local.dir": "/d", "spark.cores.max": "32"}
    f = tmp_path / "spark-defaults.conf"
    f.write_text("# comment\nspark.driver.memory   6g\nspark.sql.shuffle.partitions=11\n\n")
    assert parse_defaults_file(f) == {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "11"}


def test_input_size_by_listing(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "p1.xml").write_bytes(b"x" * 1000)
    (tmp_path / "a" / "p2.nxml").write_bytes(b"x" * 500)
    (tmp_path / "a" / "notes.txt").write_bytes(b"x" * 300)      # not a JATS name
    (tmp_path / "a" / ".hidden.xml").write_bytes(b"x" * 700)    # Spark skips it, so do we
    (tmp_path / "a" / "p3.xml.gz").write_bytes(b"z" * 100)      # counted as 4x: text is ~4x its gzip
    (tmp_path / "one.csv").write_bytes(b"y" * 42)
    size = input_size([{"path": str(tmp_path / "a"), "format": "jats", "source": "s"},
                       {"path": str(tmp_path / "one.csv"), "format": "pubmed_csv", "source": "p"}])
    assert (size.bytes, size.disk_bytes, size.files) == (1942, 1642, 4)
    assert (size.largest, Path(size.largest_path).name) == (1000, "p1.xml")
    assert measure_files(tmp_path, ("*",)) == InputSize(2242, 5, "input", 1942, 1000, str(tmp_path / "a" / "p1.xml"))


def test_a_file_over_2_gib_is_read_with_a_warning(spark, capsys):
    """binaryFile could not hand a file over 2 GiB to Python, so such files were refused; the tasks
    read their files themselves now, and a big file gets the warning that one worker holds it."""
    huge = InputSize(3 * GiB, 1, "input files", 3 * GiB, 3 * GiB, "/data/shard-000.jsonl")
    before = {k: spark.conf.get(k) for k in ("spark.sql.shuffle.partitions", "spark.sql.files.maxPartitionBytes")}
    try:
        spark_for_stage(IngestConfig(), huge, "ingest", spark)
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    err = capsys.readouterr().err
    assert "warning: input file /data/shard-000.jsonl is 3.0 GiB: each file is read whole by one task" in err


def test_this_machine_reads_the_os():
    m = this_machine()
    assert 1 <= m.cores <= os.cpu_count()
    total_kb = int(next(line for line in Path("/proc/meminfo").read_text().splitlines()
                        if line.startswith("MemTotal")).split()[1])
    assert 0 < m.memory <= total_kb * 1024


# ---------------------------------------------------------------- with Spark

@pytest.fixture(scope="module")
def two_runs(spark, tmp_path_factory, repo_root):
    """The same small corpus through ingest + importance twice: partition settings far apart."""
    tmp = tmp_path_factory.mktemp("partitions")
    el, sc = tmp / "elife", tmp / "scisummnet"
    el.mkdir()
    for f in sorted((repo_root / "sample/elife").glob("*.xml.gz"))[:4]:
        shutil.copy(f, el / f.name)
    for d in sorted((repo_root / "sample/scisummnet").iterdir())[:10]:
        shutil.copytree(d, sc / d.name)
    inputs = [{"path": str(el), "format": "jats", "source": "elife"},
              {"path": str(sc), "format": "scisummnet", "source": "scisummnet"}]
    out = {}
    for name, ing_cfg, imp_cfg in (
            ("auto", IngestConfig(inputs=inputs), ImportanceConfig()),
            ("odd", IngestConfig(inputs=inputs, shuffle_partitions=3, read_partitions=1, output_partitions=3,
                                 max_partition_bytes="1m"),
             ImportanceConfig(shuffle_partitions=13, output_partitions=2))):
        layout = RunLayout(tmp / name)
        ing = run_ingest(ing_cfg, layout, spark=spark)
        imp = run_importance(imp_cfg, layout, spark=spark)
        out[name] = (layout, ing, imp, spark.conf.get("spark.sql.shuffle.partitions"))
    return out


def _sorted(path):
    t = pq.read_table(path)
    return t.sort_by([(c, "ascending") for c in t.column_names
                      if not str(t.schema.field(c).type).startswith(("list", "struct", "large_list"))])


def test_tables_do_not_depend_on_partitions(two_runs):
    (a, ia, sa, _), (b, ib, sb, _) = two_runs["auto"], two_runs["odd"]
    for t in ("papers", "references", "mentions", "rejects", "pairs", "triplets"):
        x, y = _sorted(a.table(t)), _sorted(b.table(t))
        assert x.num_rows > 0 or t == "rejects", t
        assert x.equals(y), f"{t} differs between partition settings"
    # papers come in paper_id order whatever the partitions: the vector rows (and so the kNN graph
    # and Leiden's node numbers) do not follow Spark's partitioning
    ids = [pq.read_table(r.table("papers"), columns=["paper_id"]).column(0).to_pylist() for r in (a, b)]
    assert ids[0] == ids[1] == sorted(ids[0])
    assert ia["per_source"] == ib["per_source"]
    assert (sa["n_pairs"], sa["n_triplets"]) == (sb["n_pairs"], sb["n_triplets"]) and sa["n_triplets"] > 0
    for ra, rb in zip(sa["table3"], sb["table3"]):
        assert ra["feature"] == rb["feature"]
        for k in ("mean", "std", "entropy", "weight"):
            assert ra[k] == pytest.approx(rb[k], rel=1e-12, abs=1e-15), (ra["feature"], k)


def test_settings_applied_and_recorded(two_runs):
    (a, ia, sa, conf_a), (b, ib, sb, conf_b) = two_runs["auto"], two_runs["odd"]
    auto_ing, odd_ing = ia["spark"]["settings"], ib["spark"]["settings"]
    assert ia["spark"]["task_slots"] == 2 and ia["spark"]["input"]["files"] == 4 + 10 * 2
    assert ia["spark"]["input"]["bytes"] == input_size(ia["config"]["inputs"]).bytes > 0
    # the tests' session (local[2], started by the fixture) keeps its launch settings
    assert (auto_ing["master"]["value"], auto_ing["master"]["source"]) == ("local[2]", "running session")
    assert auto_ing["master"]["why"].startswith("set when the session started")
    assert auto_ing["driver_memory"]["value"] == "2g"
    assert {k: auto_ing[k]["value"] for k in ("shuffle_partitions", "read_partitions", "output_partitions")} == \
        {"shuffle_partitions": 8, "read_partitions": 4, "output_partitions": 2}
    assert {k: (odd_ing[k]["value"], odd_ing[k]["source"]) for k in ("shuffle_partitions", "read_partitions",
                                                                     "output_partitions", "max_partition_bytes")} \
        == {"shuffle_partitions": (3, "config"), "read_partitions": (1, "config"),
            "output_partitions": (3, "config"), "max_partition_bytes": (MiB, "config")}
    assert len(list(b.table("papers").glob("*.parquet"))) == 3  # output_partitions applied
    assert len(list(a.table("papers").glob("*.parquet"))) == 2
    # importance: derived from the ingested tables, recorded, and set on the session
    ins = sa["spark"]
    assert ins["stage"] == "importance" and ins["input"]["what"] == "ingested tables"
    assert ins["input"]["bytes"] == sum(f.stat().st_size for t in ("papers", "references", "mentions")
                                        for f in a.table(t).glob("*.parquet"))
    assert ins["settings"]["shuffle_partitions"]["value"] == 8 and conf_a == "8"
    assert sb["spark"]["settings"]["shuffle_partitions"] == {"value": 13, "source": "config", "why": ""}
    assert conf_b == "13"
    json.dumps(ia["spark"]), json.dumps(sa["spark"])  # JSON-able as written to the summaries
    assert json.loads(a.importance_summary.read_text())["spark"] == sa["spark"]


def test_spark_for_stage_logs_once(spark, capsys):
    cfg = ImportanceConfig(shuffle_partitions=5, driver_memory="6g")
    _, used = spark_for_stage(cfg, InputSize(3 * MiB, 2, "tables"), "importance", spark)
    err = capsys.readouterr().err
    assert err.count("[spark] importance settings") == 1
    assert "shuffle_partitions = 5 (config)" in err and "master = local[2] (running session" in err
    assert used.shuffle_partitions == 5 and spark.conf.get("spark.sql.shuffle.partitions") == "5"
    # a launch setting the running JVM cannot take: its value is recorded, with a warning
    assert used.value("driver_memory") == "2g" and "6g not applied" in used.choices["driver_memory"].why
    assert "warning: importance: driver_memory = 6g from the config is not applied" in err


SUBMITTED = textwrap.dedent("""
    import json
    from importance.job import ImportanceConfig
    from importance.ingest.spark import InputSize, spark_for_stage
    spark, used = spark_for_stage(ImportanceConfig(master="local[2]"), InputSize(10 << 20, 3, "tables"), "importance")
    print("RESULT " + json.dumps({"record": used.record(), "conf": spark.conf.get("spark.sql.shuffle.partitions"),
        "maxpb": spark.conf.get("spark.sql.files.maxPartitionBytes"), "master": spark.sparkContext.master}))
    spark.stop()
""")


def test_spark_submit_settings_are_kept(tmp_path):
    import pyspark

    script = tmp_path / "submitted.py"
    script.write_text(SUBMITTED)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    env.pop("PYSPARK_GATEWAY_PORT", None)
    p = subprocess.run([str(submit), "--master", "local[1]", "--driver-memory", "1g",
                        "--conf", "spark.sql.shuffle.partitions=7", "--conf", "spark.ui.enabled=false",
                        str(script)], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    assert p.returncode == 0 and line, p.stdout[-2000:] + p.stderr[-4000:]
    r = json.loads(line[0][7:])
    s = r["record"]["settings"]
    assert r["master"] == "local[1]" and s["master"]["value"] == "local[1]"
    assert s["master"]["source"] == "spark-submit" and "local[2] not applied" in s["master"]["why"]
    assert (s["driver_memory"]["value"], s["driver_memory"]["source"]) == ("1g", "spark-submit")
    assert (s["shuffle_partitions"]["value"], s["shuffle_partitions"]["source"]) == (7, "spark-submit")
    assert r["conf"] == "7" and r["record"]["task_slots"] == 1
    assert s["max_partition_bytes"]["source"] == "auto" and r["maxpb"] == str(128 * MiB)


def test_the_ingest_heap_does_not_grow_with_the_largest_file():
    """The ingest's tasks read their files in Python (binaryFile only lists them), so the driver
    heap is 1 GiB a busy core + the file index, whatever the largest file; importance's heap holds
    its input (cached tables), not any file."""
    from importance.ingest.spark import size_bytes

    small = InputSize(2 * GiB, 26, largest=10 * MiB)
    big = InputSize(2 * GiB, 26, largest=1900 * MiB)
    busy = math.ceil(2 * GiB / (128 * MiB))  # 16 read partitions, all 16 of NODE's slots busy
    for cfg in (IngestConfig(), ImportanceConfig()):
        assert plan_launch(cfg, small, NODE)["driver_memory"].value == plan_launch(cfg, big, NODE)["driver_memory"].value
    heap = size_bytes(plan_launch(IngestConfig(), big, NODE)["driver_memory"].value, "m")
    assert busy * GiB <= heap < busy * GiB + 2 * GiB      # 16 GiB + the index, rounded up to whole GiB
    assert size_bytes(plan_launch(ImportanceConfig(), big, NODE)["driver_memory"].value, "m") >= heap + 2 * GiB - GiB
