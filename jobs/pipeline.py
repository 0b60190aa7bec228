"""Run the whole pipeline (or a slice of it) into one run directory.

    python jobs/pipeline.py --config configs/demo.toml --run runs/demo [--from train] [--to knn] [--force]

Each stage reads the previous stage's tables and writes its own (importance/contracts.py). A stage
that finished with the same settings is skipped when the pipeline is started again, so an
interrupted run continues where it stopped; --force re-runs every selected stage.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.pipeline import STAGE_NAMES, PipelineOptions, run_pipeline  # noqa: E402
from importance.runtime import run_cli  # noqa: E402


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="run directory (created if missing)")
    ap.add_argument("--config", help="TOML file with one [section] per stage")
    ap.add_argument("--from", dest="first", choices=STAGE_NAMES, help="first stage to run")
    ap.add_argument("--to", dest="last", choices=STAGE_NAMES, help="last stage to run")
    ap.add_argument("--force", action="store_true", help="re-run stages that already finished")
    a = ap.parse_args(argv)
    run_pipeline(PipelineOptions(run=Path(a.run), config=a.config, first=a.first, last=a.last, force=a.force))


if __name__ == "__main__":
    sys.exit(run_cli(main))
