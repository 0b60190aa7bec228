"""Leiden (CPM) topics of a run's kNN graph:
    python jobs/cluster.py --run runs/x [--resolutions 0.003,0.01]

Options: --help (generated from the stage's settings). Also `python -m jobs.cluster` and `sciencemap cluster`."""
import sys

from sciencemap.cli import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("cluster"))
