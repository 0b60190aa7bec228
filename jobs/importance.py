"""Importance and triplets from a run's ingest tables (Spark):
    spark-submit jobs/importance.py --run runs/x      (PYSPARK_PYTHON=<venv>/bin/python; see README)
    python jobs/importance.py --run runs/x            (local[2])

Options: --help (generated from the stage's settings). Also `python -m jobs.importance` and `sciencemap importance`."""
import sys

from sciencemap.cli import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("importance"))
