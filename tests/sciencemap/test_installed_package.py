"""The project as a built wheel (not the editable checkout) runs the importance job under
spark-submit from another working directory and writes the same tables as the checkout.

The full check (a fresh venv with every dependency, the whole sample) is bench/installed_package.sh;
this one is cheap enough for CI: the wheel goes into a `venv --without-pip` whose .pth line borrows
the test interpreter's site-packages for third-party packages only. A path line in a .pth does not
run the .pth files of that folder, so the editable finder is not installed there and the wheel's
copy is what imports (asserted).
"""
from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from importance.ingest.job import IngestConfig, run_ingest
from importance.job import read_triplets_meta
from sciencemap.layout import RunLayout
from sciencemap.storage import read_table

IMPORTANCE_TABLES = ("pairs", "weights", "triplets")
INGEST_TABLES = ("papers", "references", "mentions", "rejects")
ELIFE_FILES = 20


def _source_copy(repo: Path, dest: Path) -> Path:
    """The files a build needs (the packages setup.cfg names, the top-level files), without the
    checkout's build/ folder: setuptools would package stale modules left there."""
    cfg = configparser.ConfigParser()
    cfg.read(repo / "setup.cfg")
    top = {line.strip() for line in cfg["options.packages.find"]["include"].split() if "." not in line}
    for name in sorted(top):
        shutil.copytree(repo / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in repo.iterdir():
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    return dest


def _sorted_rows(t: pa.Table) -> pa.Table:
    keys = [(f.name, "ascending") for f in t.schema if not pa.types.is_nested(f.type)]
    return t.replace_schema_metadata(None).take(pc.sort_indices(t, sort_keys=keys))


def _spark_env(python: Path) -> dict:
    """A clean environment for spark-submit whose driver and workers run `python`
    (the test's own SparkSession set PYSPARK_* for itself)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_", "SPARK_HOME")) and k != "PYTHONPATH"}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python), SPARK_LOCAL_IP="127.0.0.1")
    return env


def _spark_submit(python: Path, script: Path, run: Path, cwd: Path) -> None:
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    p = subprocess.run([str(submit), "--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=4",
                        str(script), "--run", str(run)],
                       cwd=cwd, env=_spark_env(python), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"spark-submit {script} failed:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"


def test_wheel_runs_importance_under_spark_submit_like_the_checkout(spark, repo_root, sample_dir, tmp_path):
    if not (repo_root / "setup.cfg").exists():
        pytest.skip("not a checkout: no setup.cfg beside the tests")
    # 1. the wheel, built without network from a copy of the sources
    src = _source_copy(repo_root, tmp_path / "src")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(src)], check=True, capture_output=True, cwd=tmp_path)
    wheel = next(wheels.glob("sciencemap-*.whl"))

    # 2. a venv holding only the wheel; third-party packages through a path line in a .pth
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "borrowed-third-party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(py), "-c", "import importance, sciencemap, jobs.importance, pyspark; "
         "print(importance.__file__); print(sciencemap.__file__); print(jobs.importance.__file__); print(pyspark.__file__)"],
        cwd=elsewhere, check=True, capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}).stdout.split()  # a checkout on it would win
    assert all(Path(f).is_relative_to(site) for f in where[:3]), where
    assert not Path(where[3]).is_relative_to(site)  # pyspark is borrowed
    installed_job = site / "jobs" / "importance.py"
    assert installed_job.is_file()

    # 3. one ingest (the checkout's code, this process's SparkSession) of a slice of the eLife sample
    inputs = tmp_path / "elife"
    inputs.mkdir()
    for f in sorted((sample_dir / "elife").iterdir())[:ELIFE_FILES]:
        shutil.copy2(f, inputs / f.name)
    ingest_run = tmp_path / "ingest"
    run_ingest(IngestConfig(inputs=[{"path": str(inputs), "format": "jats", "source": "elife"}],
                            shuffle_partitions=4), RunLayout(ingest_run), spark=spark)
    runs = {}
    for name in ("installed", "checkout"):
        runs[name] = tmp_path / name
        for t in INGEST_TABLES:
            shutil.copytree(ingest_run / t, runs[name] / t)

    # 4. importance: the wheel's job from another folder, the checkout's job from the checkout
    _spark_submit(py, installed_job, runs["installed"], cwd=elsewhere)
    _spark_submit(Path(sys.executable), repo_root / "jobs" / "importance.py", runs["checkout"], cwd=repo_root)

    for t in IMPORTANCE_TABLES:
        a, b = read_table(runs["installed"] / t), read_table(runs["checkout"] / t)
        assert a.num_rows > 0, t
        assert a.schema.remove_metadata() == b.schema.remove_metadata(), t
        assert _sorted_rows(a).equals(_sorted_rows(b)), f"{t} differs between the wheel and the checkout"
    meta = read_triplets_meta(runs["installed"] / "triplets")
    assert meta and meta == read_triplets_meta(runs["checkout"] / "triplets")
