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
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pyarrow as pa

from sciencemap.contracts import SCHEMAS
from sciencemap.runtime import UserError
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


def _under_spark_submit() -> bool:
    # spark-submit starts the JVM first and hands its gateway port to the Python driver.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def package_zip(dest_dir: Path, packages=SHIPPED_PACKAGES) -> Path:
    """One zip of the named packages' .py files, taken from where this interpreter imports them."""
    import importlib

    zpath = Path(dest_dir) / "sciencemap-packages.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        for name in packages:
            pkg_dir = Path(importlib.import_module(name).__file__).resolve().parent
            for f in sorted(pkg_dir.rglob("*.py")):
                z.write(f, (Path(name) / f.relative_to(pkg_dir)).as_posix())
    return zpath


def _ship_packages(spark) -> None:
    spark.sparkContext.addPyFile(str(package_zip(Path(tempfile.mkdtemp(prefix="sciencemap-py-")))))


def get_spark(app: str = "sciencemap", master: str | None = None, driver_memory: str = "2g",
              shuffle_partitions: int = 8):
    """Return the active SparkSession or build one (local[2] unless spark-submit set a master)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    check_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    b = SparkSession.builder.appName(app)
    if master:
        b = b.master(master)
    elif not _under_spark_submit():
        b = b.master("local[2]")
    if not _under_spark_submit():
        b = b.config("spark.driver.memory", driver_memory)
    b = (b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
          .config("spark.ui.enabled", "false")
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
