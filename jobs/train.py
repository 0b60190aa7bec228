"""Fine-tune the encoder on a run's triplets: python jobs/train.py --run runs/x [--config f.toml]."""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.contracts import RunLayout  # noqa: E402
from importance.runtime import config_from, load_toml, require_dir, run_cli  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True, help="run directory (holds triplets/ and papers/)")
    ap.add_argument("--config", help="TOML file; its [train] section fills TrainConfig")
    ap.add_argument("--model", help="'minilm' (default) or a local Hugging Face model directory")
    ap.add_argument("--max-steps", type=int, help="optimizer steps (0 = full epochs)")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--grad-accum", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--margin", type=float)
    ap.add_argument("--pooling", choices=["mean", "cls"])
    ap.add_argument("--max-length", type=int)
    ap.add_argument("--device", help="auto (default), cpu or cuda")
    args = ap.parse_args(argv)

    from encoders.train import TrainConfig, run_train

    cfg = config_from(TrainConfig, load_toml(args.config).get("train"), model=args.model,
                      max_steps=args.max_steps, epochs=args.epochs, batch_size=args.batch_size,
                      grad_accum=args.grad_accum, lr=args.lr, margin=args.margin,
                      pooling=args.pooling, max_length=args.max_length, device=args.device)
    layout = RunLayout(require_dir(args.run, "run directory"))
    print(json.dumps(run_train(cfg, layout), indent=2))


if __name__ == "__main__":
    sys.exit(run_cli(main))
