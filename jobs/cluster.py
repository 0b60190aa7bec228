"""Cluster the kNN graph with Leiden (CPM) at one or more resolutions: writes the `clusters` table.

    python jobs/cluster.py --run runs/demo [--config demo.toml] [--resolutions 0.003,0.01] [--target-topics 300]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.contracts import RunLayout  # noqa: E402
from importance.runtime import UserError, config_from, load_toml, require_dir, run_cli  # noqa: E402
from mapping.cluster import ClusterConfig, run_cluster  # noqa: E402


def _floats(text: str | None):
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--resolutions must be comma-separated numbers, got {text!r}") from None


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="run directory")
    ap.add_argument("--config", help="TOML file; its [cluster] section fills ClusterConfig")
    ap.add_argument("--resolutions", help="comma-separated CPM resolutions, e.g. 0.003,0.01,0.03")
    ap.add_argument("--min-cluster-size", type=int)
    ap.add_argument("--target-topics", type=int, help="also find the resolution giving about this many topics")
    ap.add_argument("--seed", type=int)
    a = ap.parse_args(argv)
    cfg = config_from(ClusterConfig, load_toml(a.config).get("cluster"), resolutions=_floats(a.resolutions),
                      min_cluster_size=a.min_cluster_size, target_topics=a.target_topics, seed=a.seed)
    print(json.dumps(run_cluster(cfg, RunLayout(require_dir(a.run, "run directory"))), indent=2))


if __name__ == "__main__":
    sys.exit(run_cli(main))
