"""Embed a run's papers into resumable shards:
    python jobs/embed.py --run runs/x [--model minilm]
    torchrun --nproc_per_node=N jobs/embed.py --run-dir runs/x

Options: --help (generated from the stage's settings). Also `python -m jobs.embed` and `sciencemap embed`."""
import sys

from sciencemap.cli import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("embed"))
