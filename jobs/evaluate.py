"""MeSH accuracy, network statistics and report.md of a run:
    python jobs/evaluate.py --run runs/x

Options: --help (generated from the stage's settings). Also `python -m jobs.evaluate` and `sciencemap evaluate`."""
import sys

from sciencemap.cli import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("evaluate"))
