"""Importance stage CLI (reads the ingest tables of the run):
  .venv/bin/python jobs/importance.py --run runs/x                 (local[2])
  PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/spark-submit --master local[2] jobs/importance.py --run runs/x
  PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/spark-submit --master spark://HOST:7077 \
      jobs/importance.py --run /shared/path/runs/x --shuffle-partitions 64
(PYSPARK_PYTHON: the pip package's spark-submit finds SPARK_HOME with that interpreter.)"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.contracts import RunLayout  # noqa: E402
from importance.job import ImportanceConfig, run_importance  # noqa: E402
from importance.runtime import config_from, load_toml, run_cli  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True, help="run directory (holds papers/, references/, mentions/)")
    ap.add_argument("--config", help="TOML file; its [importance] section fills ImportanceConfig")
    ap.add_argument("--feature-set", help="default | all | no_I | no_M | no_R | no_D | no_S | 'I,R,D,S'")
    ap.add_argument("--weight-method", help="entropy | uniform")
    ap.add_argument("--K", type=int)
    ap.add_argument("--H", type=int, help="hard negatives per anchor (0 = SPECTER-style baseline)")
    ap.add_argument("--margin", type=float)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--scaled-score", action="store_true", default=None)
    ap.add_argument("--shuffle-partitions", type=int, help="Spark shuffle partitions (cluster: 3-4 x total cores)")
    ap.add_argument("--output-partitions", type=int, help="files per written table (0 = one per ~2M rows)")
    a = ap.parse_args(argv)
    cfg = config_from(ImportanceConfig, load_toml(a.config).get("importance"), feature_set=a.feature_set,
                      weight_method=a.weight_method, K=a.K, H=a.H, margin=a.margin, seed=a.seed,
                      scaled_score=a.scaled_score, shuffle_partitions=a.shuffle_partitions,
                      output_partitions=a.output_partitions)
    s = run_importance(cfg, RunLayout(Path(a.run)))
    print(json.dumps({k: s[k] for k in ("n_pairs", "n_triplets", "share_hard_negatives",
                                        "resolution_rate_per_source", "seconds")}, indent=1))


if __name__ == "__main__":
    sys.exit(run_cli(main))
