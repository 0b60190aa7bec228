"""Place new papers on the finished map of a run:
    python jobs/place.py --run runs/x --new runs/new_papers

Options: --help (generated from the stage's settings). Also `python -m jobs.place` and `sciencemap place`."""
import sys

from sciencemap.cli import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("place"))
