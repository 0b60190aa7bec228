"""Ingest stage CLI: `python jobs/ingest.py --run runs/x [--config cfg.toml] [--input PATH:FORMAT:SOURCE ...]`
(also runs under spark-submit)."""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.contracts import RunLayout  # noqa: E402
from importance.ingest import IngestConfig, run_ingest  # noqa: E402
from importance.runtime import UserError, config_from, load_toml, run_cli  # noqa: E402


def parse_input(spec: str) -> dict:
    parts = spec.rsplit(":", 2)
    if len(parts) != 3:
        raise UserError(f"--input {spec!r} must read PATH:FORMAT:SOURCE, e.g. sample/elife:jats:elife")
    return {"path": parts[0], "format": parts[1], "source": parts[2]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True, help="run directory")
    ap.add_argument("--config", help="TOML file; its [ingest] section fills IngestConfig")
    ap.add_argument("--input", action="append", help="PATH:FORMAT:SOURCE (repeatable; replaces the inputs)")
    a = ap.parse_args(argv)
    inputs = [parse_input(s) for s in a.input] if a.input else None
    cfg = config_from(IngestConfig, load_toml(a.config).get("ingest"), inputs=inputs)
    s = run_ingest(cfg, RunLayout(Path(a.run)))
    print(json.dumps(s["per_source"], indent=1))
    print(f"ingest done in {s['seconds']} s; counts add up: {s['check_input_equals_papers_plus_rejects']}")


if __name__ == "__main__":
    sys.exit(run_cli(main))
