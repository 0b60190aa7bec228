"""Write a synthetic corpus (papers, references, mentions, rejects) for scale tests:
`python jobs/generate_corpus.py --run runs/syn1m --mentions 1000000 [--seed 0]`
(importance/generate.py documents the model and where its parameters were measured)."""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.contracts import RunLayout  # noqa: E402
from importance.generate import GenerateConfig, run_generate  # noqa: E402
from importance.runtime import config_from, load_toml, run_cli  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True, help="run directory to write the tables into")
    ap.add_argument("--config", help="TOML file; its [generate] section fills GenerateConfig")
    ap.add_argument("--mentions", type=int, help="target number of mention rows")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--pool-factor", type=int, help="cited-paper pool size / citing papers (~1/resolution rate)")
    a = ap.parse_args(argv)
    cfg = config_from(GenerateConfig, load_toml(a.config).get("generate"), mentions=a.mentions, seed=a.seed,
                      pool_factor=a.pool_factor)
    print(json.dumps(run_generate(cfg, RunLayout(Path(a.run))), indent=1))


if __name__ == "__main__":
    sys.exit(run_cli(main))
