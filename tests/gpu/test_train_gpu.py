"""The train job on CUDA (bf16 autocast, fused AdamW) follows the CPU's float32 run step by step on
the same triplets and weights (dropout off), and ends with a model whose vectors agree."""
from __future__ import annotations

import json

import numpy as np

from encoders.config import EmbedConfig, TrainConfig
from encoders.embed import run_embed
from encoders.training.loop import run_train
from sciencemap.embeddings import load_embeddings

STEPS = 6
# bf16 autocast against float32: per-step losses within 5% (relative), the trained models' vectors
# within centred cosine 0.98 (the measured figures are printed).
LOSS_RTOL = 0.05
MIN_COSINE = 0.98


def train_and_embed(layout, model, device):
    cfg = TrainConfig(model=str(model), device=device, batch_size=8, grad_accum=2, max_steps=STEPS, log_every=1,
                      max_length=96, checkpoint_every=0, val_max=16, loader_workers=0, lr=5e-5, resume=False)
    summary = run_train(cfg, layout)
    losses = [r["loss"] for r in map(json.loads, layout.train_log.read_text().splitlines()) if r["kind"] == "train"]
    run_embed(EmbedConfig(model=str(layout.model_dir), device="cpu", precision="float32", compile="off",
                          max_length=96), layout)
    return summary, np.array(losses), load_embeddings(layout)[1]


def test_train_on_cuda_follows_the_cpu(tmp_path, make_gpu_run, gpu_model, row_cosines):
    s_cpu, loss_cpu, vec_cpu = train_and_embed(make_gpu_run(tmp_path / "cpu", triplets=True), gpu_model, "cpu")
    s_gpu, loss_gpu, vec_gpu = train_and_embed(make_gpu_run(tmp_path / "gpu", triplets=True), gpu_model, "cuda")
    assert s_gpu["device"].startswith("cuda") and s_gpu["fused_adamw"] is True, s_gpu
    assert s_cpu["device"] == "cpu" and s_cpu["fused_adamw"] is False
    assert len(loss_cpu) == len(loss_gpu) == STEPS
    rel = np.abs(loss_gpu - loss_cpu) / np.abs(loss_cpu)
    cos = row_cosines(vec_cpu, vec_gpu)
    print(f"losses cpu {np.round(loss_cpu, 4)} gpu {np.round(loss_gpu, 4)}; max relative difference {rel.max():.4f}; "
          f"trained vectors centred cosine min {cos.min():.4f} mean {cos.mean():.4f}")
    assert rel.max() <= LOSS_RTOL
    # the steps moved the weights, and the two trained models agree more than either with the start
    base = make_gpu_run(tmp_path / "base")
    run_embed(EmbedConfig(model=str(gpu_model), device="cpu", precision="float32", compile="off", max_length=96), base)
    vec_base = load_embeddings(base)[1]
    moved = 1 - row_cosines(vec_base, vec_gpu)
    print(f"1 - cosine of the GPU-trained to the untrained vectors: mean {moved.mean():.2e}")
    assert (1 - cos).mean() < 0.5 * moved.mean()   # closer to each other than to where they started
    assert cos.min() >= MIN_COSINE
