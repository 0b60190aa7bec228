#!/usr/bin/env bash
# Standalone Spark cluster on this machine (master + 2 workers, 127.0.0.1 only): run ingest and
# importance with spark-submit in local mode and against the cluster, and check that the outputs
# are equal (sorted rows of papers, references, mentions, pairs, weights, triplets). The cluster
# run's executors get the `importance` and `sciencemap` packages only from the zip the driver ships
# (addPyFile, importance/ingest/spark.py package_zip): nothing points their PYTHONPATH at this checkout.
#
#   bash bench/spark_standalone.sh [INPUT_DIR (JATS files, default sample/elife)] [WORK_DIR]
#
# The pip pyspark package has no sbin/start-master.sh; sbin/spark-daemon.sh starts the Master and
# Worker classes (start-master.sh does the same). Everything is stopped on exit.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
INPUT="${1:-sample/elife}"
WORK="${2:-/tmp/spark_standalone_check}"
PY="$REPO/.venv/bin/python"
export SPARK_HOME="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export PYSPARK_PYTHON="$PY"            # driver + executors use the venv (also fixes find-spark-home)
export SPARK_LOCAL_IP=127.0.0.1 SPARK_MASTER_HOST=127.0.0.1
export SPARK_LOG_DIR="$WORK/logs" SPARK_PID_DIR="$WORK/pids" SPARK_WORKER_DIR="$WORK/worker"
MASTER_PORT="${MASTER_PORT:-7077}"
MASTER="spark://127.0.0.1:$MASTER_PORT"
SUBMIT="$REPO/.venv/bin/spark-submit"
rm -rf "$WORK"; mkdir -p "$SPARK_LOG_DIR" "$SPARK_PID_DIR" "$SPARK_WORKER_DIR"

stop_all() {
  "$SPARK_HOME/sbin/spark-daemon.sh" stop org.apache.spark.deploy.worker.Worker 1 >/dev/null 2>&1 || true
  "$SPARK_HOME/sbin/spark-daemon.sh" stop org.apache.spark.deploy.worker.Worker 2 >/dev/null 2>&1 || true
  "$SPARK_HOME/sbin/spark-daemon.sh" stop org.apache.spark.deploy.master.Master 1 >/dev/null 2>&1 || true
  echo "master and workers stopped"
}
trap stop_all EXIT

t0=$(date +%s)
echo "== local mode (spark-submit --master local[2]) =="
"$SUBMIT" --master 'local[2]' jobs/ingest.py --run "$WORK/local" --input "$INPUT:jats:elife" 2>"$WORK/local_ingest.err" | tail -2
"$SUBMIT" --master 'local[2]' jobs/importance.py --run "$WORK/local" 2>"$WORK/local_importance.err" | tail -4
t1=$(date +%s)

echo "== standalone cluster ($MASTER, 2 workers x 1 core) =="
"$SPARK_HOME/sbin/spark-daemon.sh" start org.apache.spark.deploy.master.Master 1 \
  --host 127.0.0.1 --port "$MASTER_PORT" --webui-port 18080
for i in 1 2; do
  "$SPARK_HOME/sbin/spark-daemon.sh" start org.apache.spark.deploy.worker.Worker "$i" \
    --host 127.0.0.1 --webui-port $((18080 + i)) --cores 1 --memory 2g "$MASTER"
done
for _ in $(seq 60); do  # wait until both workers registered
  n=$( (grep -h "Registering worker" "$SPARK_LOG_DIR"/*Master*.out 2>/dev/null || true) | wc -l)
  [ "$n" -ge 2 ] && break; sleep 1
done
echo "workers registered: $n"
CL="--master $MASTER --total-executor-cores 2 --executor-cores 1 --executor-memory 1g"
"$SUBMIT" $CL jobs/ingest.py --run "$WORK/cluster" --input "$INPUT:jats:elife" 2>"$WORK/cluster_ingest.err" | tail -2
"$SUBMIT" $CL jobs/importance.py --run "$WORK/cluster" 2>"$WORK/cluster_importance.err" | tail -4
t2=$(date +%s)
# proof that executors ran Python from the shipped zip (the ingest readers run on executors)
ZIP=sciencemap-packages.zip
echo "shipped packages fetched by executors: $(find "$SPARK_WORKER_DIR" -name $ZIP | wc -l) copies" \
  "($(find "$SPARK_WORKER_DIR" -name $ZIP | head -2 | tr '\n' ' '))"
echo "wall: local $((t1 - t0))s, cluster (incl. start-up) $((t2 - t1))s"

"$PY" - "$WORK/local" "$WORK/cluster" <<'EOF'
import sys
import pyarrow.parquet as pq

a, b = sys.argv[1:3]
ok = True
for t in ("papers", "references", "mentions", "rejects", "pairs", "weights", "triplets"):
    x, y = pq.read_table(f"{a}/{t}").to_pandas(), pq.read_table(f"{b}/{t}").to_pandas()
    cols = list(x.columns)
    for c in cols:  # floats: compare to 1e-9 relative (sums over partitions in another order)
        if x[c].dtype.kind == "f":
            x[c], y[c] = x[c].round(9), y[c].round(9)
    key = lambda d: sorted(map(repr, d[cols].astype(str).itertuples(index=False)))  # noqa: E731
    same = len(x) == len(y) and key(x) == key(y)
    ok &= same
    print(f"{t:<11} local {len(x):>7} rows, cluster {len(y):>7} rows: {'EQUAL' if same else 'DIFFERENT'}")
from importance.job import read_triplets_meta  # noqa: E402

meta = [read_triplets_meta(f"{d}/triplets") for d in (a, b)]
ok &= meta[0] == meta[1] and meta[0].get("H") is not None
print(f"triplets metadata (stamped by the executors): {'EQUAL' if meta[0] == meta[1] else 'DIFFERENT'} {meta[1]}")
print("RESULT standalone output equals local output:", ok)
sys.exit(0 if ok else 1)
EOF
