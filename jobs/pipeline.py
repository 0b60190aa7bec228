"""Run the whole pipeline (or a slice of it) into one run directory:
    python jobs/pipeline.py --config configs/demo.toml --run runs/demo [--from train] [--to knn] [--force]

Finished stages with unchanged settings are skipped, so an interrupted run continues where it
stopped. Also `python -m jobs.pipeline` and `sciencemap pipeline`."""
import sys

from sciencemap.cli import pipeline_main

if __name__ == "__main__":
    sys.exit(pipeline_main())
