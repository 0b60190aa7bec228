"""Lay out and render the map of a run:
    python jobs/render.py --run runs/x [--map-resolution 0.01]

Options: --help (generated from the stage's settings). Also `python -m jobs.render` and `sciencemap render`."""
import sys

from sciencemap.cli import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("render"))
