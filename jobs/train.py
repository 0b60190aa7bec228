"""Fine-tune the encoder on a run's triplets: python jobs/train.py --run runs/x [--config f.toml].

Several processes (GPUs, or CPU with gloo): torchrun --nproc_per_node=N -- jobs/train.py --run runs/x
(the `--` keeps torchrun's own parser from reading `--run` as an abbreviation of its `--run-path`;
`--run-dir` is an alias that needs no `--`).
A re-run after a kill resumes from the newest checkpoint in runs/x/checkpoints (--restart: do not).
"""
import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.contracts import RunLayout  # noqa: E402
from importance.runtime import config_from, load_toml, require_dir, run_cli  # noqa: E402

CRASH_ENV = "SCIENCEMAP_TRAIN_CRASH_AFTER"  # test hook: fail right after this optimizer step


def _crash_hook():
    after = os.environ.get(CRASH_ENV)
    if not after:
        return None

    def hook(step: int) -> None:
        if step == int(after):
            raise RuntimeError(f"test hook {CRASH_ENV}: crash after step {step}")
    return hook


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", "--run-dir", dest="run", required=True, help="run directory (holds triplets/ and papers/)")
    ap.add_argument("--config", help="TOML file; its [train] section fills TrainConfig")
    ap.add_argument("--model", help="'minilm' (default) or a local Hugging Face model directory")
    ap.add_argument("--max-steps", type=int, help="optimizer steps (0 = full epochs)")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--batch-size", type=int, help="triplets per micro-batch and process")
    ap.add_argument("--grad-accum", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--margin", type=float, help="default: the triplets' own margin, else 1.0")
    ap.add_argument("--pooling", choices=["mean", "cls"])
    ap.add_argument("--max-length", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--val-max", type=int)
    ap.add_argument("--log-every", type=int)
    ap.add_argument("--eval-every", type=int, help="extra validation every N steps (0 = epoch ends)")
    ap.add_argument("--checkpoint-every", type=int, help="optimizer steps between checkpoints (0 = none)")
    ap.add_argument("--keep-final-checkpoint", action="store_true", default=None)
    ap.add_argument("--restart", action="store_true", help="ignore and delete existing checkpoints")
    ap.add_argument("--device", help="auto (default), cpu or cuda")
    args = ap.parse_args(argv)

    from encoders.train import TrainConfig, run_train

    cfg = config_from(TrainConfig, load_toml(args.config).get("train"), model=args.model,
                      max_steps=args.max_steps, epochs=args.epochs, batch_size=args.batch_size,
                      grad_accum=args.grad_accum, lr=args.lr, margin=args.margin,
                      pooling=args.pooling, max_length=args.max_length, seed=args.seed,
                      val_max=args.val_max, log_every=args.log_every, eval_every=args.eval_every,
                      checkpoint_every=args.checkpoint_every,
                      keep_final_checkpoint=args.keep_final_checkpoint,
                      resume=False if args.restart else None, device=args.device)
    layout = RunLayout(require_dir(args.run, "run directory"))
    summary = run_train(cfg, layout, after_step=_crash_hook())
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    sys.exit(run_cli(main))
