"""Embed a run's papers into resumable shards: python jobs/embed.py --run runs/x [--model minilm].

Several processes / GPUs: torchrun --nproc_per_node=N jobs/embed.py --run-dir runs/x (ranks take
disjoint shards; gloo on CPU, nccl on CUDA). Under torchrun spell it --run-dir: torchrun's own
parser rejects --run as an ambiguous prefix of its --run-path."""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.contracts import RunLayout  # noqa: E402
from importance.runtime import config_from, load_toml, require_dir, run_cli  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", "--run-dir", dest="run", required=True,
                    help="run directory (holds papers/ and, by default, model/); --run-dir under torchrun")
    ap.add_argument("--config", help="TOML file; its [embed] section fills EmbedConfig")
    ap.add_argument("--model", help="default: the run's trained model; or 'minilm' or a local directory")
    ap.add_argument("--pooling", choices=["mean", "cls"])
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--max-tokens", type=int, help="most padded tokens per batch (0 = no token budget)")
    ap.add_argument("--max-length", type=int)
    ap.add_argument("--dtype", choices=["float32", "float16"])
    ap.add_argument("--precision", choices=["auto", "float32", "bfloat16"],
                    help="compute precision (auto: bf16 on CUDA and on CPUs with native bf16)")
    ap.add_argument("--shard-size", type=int)
    ap.add_argument("--threads", type=int, help="CPU threads per process (0 = default)")
    ap.add_argument("--device", help="auto (default), cpu or cuda")
    ap.add_argument("--compile", choices=["auto", "on", "off"],
                    help="torch.compile the forward (auto: on a CPU when >= 5M tokens to embed)")
    ap.add_argument("--restart", action="store_true", default=None,
                    help="discard existing shards instead of resuming")
    args = ap.parse_args(argv)

    from encoders.embed import EmbedConfig, run_embed

    cfg = config_from(EmbedConfig, load_toml(args.config).get("embed"), model=args.model,
                      pooling=args.pooling, batch_size=args.batch_size, max_tokens=args.max_tokens,
                      max_length=args.max_length, dtype=args.dtype, precision=args.precision,
                      shard_size=args.shard_size, threads=args.threads, device=args.device,
                      compile=args.compile, restart=args.restart)
    layout = RunLayout(require_dir(args.run, "run directory"))
    summary = run_embed(cfg, layout)
    summary["skipped_papers"] = summary["skipped_papers"][:10]
    if summary["rank"] == 0:  # under torchrun the other ranks only log progress
        print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    sys.exit(run_cli(main))
