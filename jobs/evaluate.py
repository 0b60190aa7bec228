"""Evaluate a run: MeSH clustering accuracy per resolution, kNN network statistics, report.md.

    python jobs/evaluate.py --run runs/demo [--config demo.toml]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.contracts import RunLayout  # noqa: E402
from importance.runtime import config_from, load_toml, require_dir, run_cli  # noqa: E402
from mapping.evaluate import EvaluateConfig, run_evaluate  # noqa: E402


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="run directory")
    ap.add_argument("--config", help="TOML file; its [evaluate] section fills EvaluateConfig")
    ap.add_argument("--seed", dest="baseline_seed", type=int, help="seed of the random baseline")
    a = ap.parse_args(argv)
    cfg = config_from(EvaluateConfig, load_toml(a.config).get("evaluate"), baseline_seed=a.baseline_seed)
    print(json.dumps(run_evaluate(cfg, RunLayout(require_dir(a.run, "run directory"))), indent=2))


if __name__ == "__main__":
    sys.exit(run_cli(main))
