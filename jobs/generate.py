"""Write a synthetic corpus for scale tests:
    python jobs/generate.py --run runs/syn1m --mentions 1000000

Options: --help (generated from the stage's settings). Also `python -m jobs.generate` and `sciencemap generate`."""
import sys

from sciencemap.cli import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("generate"))
