"""Build the kNN graph (FAISS) from the embeddings of a run: writes the `edges` table.

    python jobs/knn.py --run runs/demo [--config demo.toml] [--k 20] [--index auto|flat|ivf]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.contracts import RunLayout  # noqa: E402
from importance.runtime import config_from, load_toml, require_dir, run_cli  # noqa: E402
from mapping.knn import KnnConfig, run_knn  # noqa: E402


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="run directory")
    ap.add_argument("--config", help="TOML file; its [knn] section fills KnnConfig")
    ap.add_argument("--k", type=int)
    ap.add_argument("--index", choices=["auto", "flat", "ivf"])
    ap.add_argument("--nprobe", type=int)
    a = ap.parse_args(argv)
    cfg = config_from(KnnConfig, load_toml(a.config).get("knn"), k=a.k, index=a.index, nprobe=a.nprobe)
    print(json.dumps(run_knn(cfg, RunLayout(require_dir(a.run, "run directory"))), indent=2))


if __name__ == "__main__":
    sys.exit(run_cli(main))
