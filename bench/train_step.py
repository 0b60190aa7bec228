"""Training speed: seconds per optimizer step of encoders.training.loop's inner step with a training
objective (encoders/objectives; micro-batch of B triplets, accumulation A, max_length L) on real PubMed texts, against a reference measured in the
same run: the same forward/backward written directly against transformers + torch (no Encoder
wrapper). Prints s/micro-batch, s/step, triplets/s, tokens/s and ratio reference/ours (>= 1:
no overhead from the wrapper), and the steps a training budget would plan from these figures
(encoders.training.budget: --max-hours over the measured s/step, --max-tokens over tokens per step).

    nice -n 10 .venv/bin/python bench/train_step.py [--model minilm] [--batch 8] [--accum 4] [--max-length 256]
        [--objective triplet|in_batch] [--max-hours 2] [--max-tokens N]
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from encoders.config import TrainConfig
from encoders.model import load_encoder, paper_text
from encoders.objectives.registry import OBJECTIVES, get_objective
from encoders.objectives.batches import TripletBatch
from encoders.training.budget import hours_steps, token_steps

SAMPLE = Path(__file__).resolve().parents[1] / "sample"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--accum", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2, help="timed optimizer steps per variant (after 1 warm-up micro-batch)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--objective", default="triplet", choices=OBJECTIVES)
    ap.add_argument("--max-hours", type=float, default=2.0, help="the time budget to plan steps for")
    ap.add_argument("--max-tokens", type=int, default=0, help="a token budget to plan steps for (0: none)")
    args = ap.parse_args()

    df = pd.read_csv(SAMPLE / "pubmed" / "train-data-small.csv.gz", usecols=["Title", "abstractText"])
    texts = [paper_text(t, a) for t, a in zip(df.Title, df.abstractText)]
    enc = load_encoder(args.model, "mean", args.max_length, args.device)
    B, A = args.batch, args.accum
    need = 3 * B * A * args.steps
    texts = (texts * (need // len(texts) + 1))[:need]
    tokens = sum(min(len(x), enc.max_length) for x in enc.token_ids(texts)) if hasattr(enc, "token_ids") else None
    cfg = TrainConfig(objective=args.objective, margin=1.0)
    objective = get_objective(cfg.objective)(cfg)
    opt = torch.optim.AdamW([p for p in enc.model.parameters() if p.requires_grad], lr=2e-5)
    enc.model.train()

    def micro(i, ours: bool):
        chunk = texts[3 * B * i:3 * B * (i + 1)]
        a, p, n = chunk[:B], chunk[B:2 * B], chunk[2 * B:]
        if ours:
            loss = objective.batch_loss(enc, TripletBatch(a, p, n, a, p, n))
        else:  # reference: the same computation without the Encoder wrapper
            batch = enc.tokenizer(a + p + n, padding="longest", truncation=True, max_length=enc.max_length,
                                  return_tensors="pt").to(enc.device)
            with enc.autocast():
                h = enc.model(**batch).last_hidden_state.float()
            m = batch["attention_mask"].unsqueeze(-1).float()
            v = (h * m).sum(1) / m.sum(1)
            if args.objective == "triplet":
                loss = F.triplet_margin_loss(v[:B], v[B:2 * B], v[2 * B:], margin=1.0)
            else:  # in-batch negatives (the texts of a micro-batch are distinct: no duplicate to mask)
                u = F.normalize(v, dim=-1)
                loss = F.cross_entropy(cfg.in_batch_scale * u[:B] @ u[B:].T, torch.arange(B, device=v.device))
        (loss / A).backward()

    def timed(ours: bool) -> float:
        micro(0, ours)  # warm-up
        opt.zero_grad(set_to_none=True)
        if enc.device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for s in range(args.steps):
            for k in range(A):
                micro(s * A + k, ours)
            opt.step()
            opt.zero_grad(set_to_none=True)
        if enc.device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t) / args.steps

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"objective {args.objective}, model {enc.path.name} dim {enc.dim} on {enc.device}, threads {torch.get_num_threads()}, "
          f"batch {B} x accum {A}, max_length {enc.max_length}, load(1 min) {load:.2f}")
    ref = timed(False)
    ours = timed(True)
    per_step_triplets = B * A
    print(f"reference (plain transformers loop): {ref:.2f} s/step, {ref / A:.2f} s/micro-batch")
    print(f"encoders.training.loop step:                 {ours:.2f} s/step, {ours / A:.2f} s/micro-batch, "
          f"{per_step_triplets / ours:.2f} triplets/s")
    if tokens:
        print(f"tokens/s (ours): {tokens / args.steps / ours:.0f}")
    print(f"ratio reference/ours: {ref / ours:.2f}")
    budget = TrainConfig(batch_size=B, grad_accum=A, max_hours=args.max_hours, max_tokens=args.max_tokens)
    steps = hours_steps(budget, ours)
    print(f"max_hours={args.max_hours}: {steps} steps planned ({steps * per_step_triplets} triplets) "
          f"at {ours:.2f} s/step")
    if tokens and args.max_tokens:
        steps = token_steps(budget, 1, tokens / len(texts))
        print(f"max_tokens={args.max_tokens}: {steps} steps planned ({steps * per_step_triplets} triplets) at "
              f"{tokens / len(texts):.1f} tokens per paper")


if __name__ == "__main__":
    main()
