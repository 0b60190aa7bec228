"""Build the kNN graph (FAISS) of a run's embeddings:
    python jobs/knn.py --run runs/x [--k 20] [--index auto|flat|ivf_sq8|ivf_pq|ivf_flat] [--no-resume]

Options: --help (generated from the stage's settings). Also `python -m jobs.knn` and `sciencemap knn`."""
import sys

from sciencemap.cli import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("knn"))
