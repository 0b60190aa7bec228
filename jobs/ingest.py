"""Ingest full-text papers into a run's tables:
    python jobs/ingest.py --run runs/x [--config cfg.toml] [--input PATH:FORMAT:SOURCE ...]

Options: --help (generated from the stage's settings). Also `python -m jobs.ingest` and `sciencemap ingest`."""
import sys

from sciencemap.cli import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("ingest"))
