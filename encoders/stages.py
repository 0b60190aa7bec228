"""The encoders package's stages (train, embed), registered through the `sciencemap.stages` entry
points. torch is imported only when a stage runs, so option parsing and --help stay fast."""
from __future__ import annotations

import json
import os

from sciencemap.runtime import dist_env
from sciencemap.stages import Stage

from encoders.config import EmbedConfig, TrainConfig

TRAIN_CRASH_ENV = "SCIENCEMAP_TRAIN_CRASH_AFTER"  # test hook: fail right after this optimizer step


def _crash_hook():
    after = os.environ.get(TRAIN_CRASH_ENV)
    if not after:
        return None

    def hook(step: int) -> None:
        if step == int(after):
            raise RuntimeError(f"test hook {TRAIN_CRASH_ENV}: crash after step {step}")
    return hook


def _train(cfg, layout, ctx):
    from encoders.training.loop import run_train

    return run_train(cfg, layout, after_step=_crash_hook())


def _embed(cfg, layout, ctx):
    from encoders.embed import run_embed

    # in the pipeline, shards of other inputs (an earlier stage re-ran) are replaced, as training
    # replaces checkpoints of other data; the job of its own refuses them (--restart discards them)
    return run_embed(cfg, layout, replace_stale=ctx.pipeline)


def _rank0_json(s: dict) -> str:
    """Under torchrun only rank 0 prints the summary; the other ranks only log progress."""
    if dist_env()[1] != 0:
        return ""
    if "skipped_papers" in s:
        s = {**s, "skipped_papers": s["skipped_papers"][:10]}
    return json.dumps(s, indent=2, default=str)


TRAIN = Stage("train", 30, TrainConfig, _train, show=_rank0_json, ranks=True,
              summary="Fine-tune the encoder on the run's triplets with the configured objective "
                      "(several processes: --nproc-per-node N, or torchrun with --run spelt --run-dir). "
                      "A re-run after a kill resumes from the newest checkpoint.")
EMBED = Stage("embed", 40, EmbedConfig, _embed, show=_rank0_json, ranks=True,
              summary="Embed the run's papers into resumable Parquet shards (several processes: "
                      "--nproc-per-node N, or torchrun with --run spelt --run-dir; ranks take disjoint shards).")
