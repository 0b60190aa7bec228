"""Fine-tune the encoder on a run's triplets:
    python jobs/train.py --run runs/x [--objective triplet|in_batch]
    torchrun --nproc_per_node=N jobs/train.py --run-dir runs/x

Options: --help (generated from the stage's settings). Also `python -m jobs.train` and `sciencemap train`."""
import sys

from sciencemap.cli import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("train"))
