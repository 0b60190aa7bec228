"""GPU throughput of the encoder jobs, in one run on the same texts: the bare compiled forward, the
embed job end to end, and training steps at the seed recipe and at micro-batches of 64.

    .venv/bin/python bench/gpu_throughput.py                 # on a CUDA machine (make install first)
    .venv/bin/python bench/gpu_throughput.py --dry-run       # on a CPU: a tiny model, to check the code

Without a usable CUDA device it stops with an error (exit 2) instead of running on the CPU; only
--dry-run runs on the CPU, and its figures are labelled as no measurement: its speed targets are
"not checked", so it exits 1 unless --no-fail (a dry run can never pass for a measurement).

Texts: the sample's PubMed titles + abstracts, repeated under distinct ids up to --docs papers, cut
at --max-length (256) tokens; with --titles-only their titles alone (25.7 tokens a paper), as a
map's cited-only papers are embedded: the rate bench/scale_run.py's TITLE_ONLY_TOKENS assumes
(the titles + abstracts rate per padded token) is measured so. Model: a BERT-base-sized encoder (12 layers, hidden 768, random
weights, the shipped MiniLM's BERT vocabulary) written as a local model directory, or --model PATH
(e.g. SciBERT). Everything in bf16 (autocast).

  bare forward   the embed job's batches (its CUDA batch shape), already padded and on the device,
                 through the compiled forward (encoders.embed.forward.CompiledForward, pooling
                 included); one synchronisation at the end. A first pass compiles and warms up
                 (timed apart), the second is measured.
  embed job      encoders.embed.run_embed on a run holding the papers (Parquet in, shards out), with
                 the job's defaults on CUDA and compile "on"; the compiled forward is the one already
                 built (a long job compiles once); its loop time is from its summary (feed start-up
                 and first forward included), its wall time beside it, and the loop's rate after its
                 first batch (summary: tokens_per_second_after_first_batch), the steady state that a
                 long job runs at (on an H200 the first batch came 24 s into a 41 s loop at 150,000
                 papers, 28 s into 35 s at 60,000: most likely a second compile, since the bare
                 forward's batches were then copied to the device outside inference_mode, a guard
                 failure reproduced on a CPU). The summary's
                 "compiled" says whether the compiled forward ran: a check of its own (a job that fell
                 back to eager measured something else); and a check that the job compiled no graph
                 of its own (dynamo's count of compiled graphs before and after it).
  training       encoders.training.loop.run_train on seeded random triplets of these papers: the seed recipe
                 (8 x 4 accumulation) and micro-batches of 64 (eager, and with --train-compile also
                 compiled); the steps after --warmup-steps are timed between two synchronisations
                 (after_step hook; the last step is left out: validation follows it inside the loop).

Prints real (unpadded) tokens/s, the ratio to the bare forward, model FLOP utilisation against the
GPU's dense bf16 peak (forward 2 x non-embedding parameters + attention per token; training 3x that),
and the hours 33M papers would take, a projection (basis: 33M papers x 256 tokens / the row's
measured real tokens/s; JSON "projected_hours_33M" with "projection_basis"). Targets (issue 14,
H100; --target-embed-vs-bare, --target-embed-rate, --target-mfu change them): embed job >= 0.90 of
the bare forward and >= 2M real tokens/s; training at batch 64 >= 35% of bf16 peak; and the check
that the embed job ran compiled. A verdict line each (met, MISSED, or not checked with the reason);
exit 1 when any is missed or not checked (--no-fail: 0).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from encoders.config import EmbedConfig, TrainConfig
from encoders.embed import run_embed
from encoders.embed.feed import plan_input, prepare_chunk
from encoders.embed.forward import compiled_forward
from encoders.embed.job import feed_shape, feed_spec
from encoders.model import load_encoder, resolve_model
from encoders.training.triplet_table import open_tokens
from encoders.training.loop import run_train
from encoders.training.feed import shard_order
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.runtime import Dist
from sciencemap.text import paper_text
from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parents[1]
# Dense bf16 tensor-core peaks (TFLOP/s) by device name; the first match wins.
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.0), ("H200", 989.0), ("H800", 989.0), ("GH200", 989.0),
                    ("A100", 312.0), ("A800", 312.0), ("L40S", 362.0), ("L4", 121.0), ("A10", 125.0))
PAPERS_AT_SCALE = 33e6
TOKENS_PER_PAPER_AT_SCALE = 256
PROJECTION_BASIS = (f"{PAPERS_AT_SCALE / 1e6:.0f}M papers x {TOKENS_PER_PAPER_AT_SCALE} tokens each / the row's "
                    "measured real tokens/s")


def peak_tflops(name: str, given: float) -> float | None:
    return given or next((v for k, v in PEAK_BF16_TFLOPS if k in name), None)


def texts_from_sample(n: int) -> tuple[list[str], list[str | None], list[str | None]]:
    frames = [pd.read_csv(f, usecols=["pmid", "Title", "abstractText"])
              for f in sorted((REPO / "sample" / "pubmed").glob("*.csv.gz"))]
    df = pd.concat(frames, ignore_index=True)
    df = df[[bool(paper_text(t, a)) for t, a in zip(df.Title, df.abstractText)]]
    reps = -(-n // len(df))
    ids = [f"pmid:{p}#{r}" for r in range(reps) for p in df.pmid][:n]
    return ids, (list(df.Title) * reps)[:n], (list(df.abstractText) * reps)[:n]


def bench_texts(n: int, titles_only: bool) -> tuple[list[str], list, list, str]:
    """(ids, titles, abstracts, what they are): the sample's papers, or their titles alone."""
    ids, titles, abstracts = texts_from_sample(n)
    if titles_only:
        return ids, titles, [None] * len(ids), "titles only"
    return ids, titles, abstracts, "titles + abstracts"


def make_run(root: Path, ids, titles, abstracts, n_triplets: int) -> RunLayout:
    lay = RunLayout(root)
    n = len(ids)
    cols = {"paper_id": ids, "title": titles, "abstract": abstracts}
    papers = pa.table({f.name: cols.get(f.name, [None] * n) for f in SCHEMAS["papers"]}, schema=SCHEMAS["papers"])
    lay.table("papers").mkdir(parents=True)
    pq.write_table(papers, lay.table("papers") / "part-00000.parquet", row_group_size=16384)
    rng = np.random.default_rng(0)
    a, p, q = (rng.integers(0, n, n_triplets) for _ in range(3))
    split = ["train"] * n_triplets
    split[:8] = ["val"] * 8
    trip = pa.table({"anchor_id": [ids[i] for i in a], "positive_id": [ids[i] for i in p],
                     "negative_id": [ids[i] for i in q], "negative_kind": ["hard"] * n_triplets, "split": split,
                     "facet": [None] * n_triplets}, schema=SCHEMAS["triplets"])
    lay.table("triplets").mkdir(parents=True)
    pq.write_table(trip, lay.table("triplets") / "part-00000.parquet")
    return lay


def make_model(dest: Path, layers: int, hidden: int, heads: int) -> Path:
    """A BERT encoder with random weights and the shipped MiniLM's (BERT uncased) tokenizer."""
    from transformers import AutoModel, AutoTokenizer, BertConfig

    conf = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      intermediate_size=4 * hidden, max_position_embeddings=512)
    torch.manual_seed(0)
    AutoModel.from_config(conf).save_pretrained(dest)
    AutoTokenizer.from_pretrained(resolve_model("minilm"), local_files_only=True).save_pretrained(dest)
    return dest


def flops_per_token(model: torch.nn.Module, seq: int) -> float:
    """Forward FLOPs per token: 2 x non-embedding parameters (matmuls) + QK^T and AV over `seq`."""
    conf = model.config
    params = sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n and "pooler" not in n)
    return 2 * params + 4 * conf.num_hidden_layers * seq * conf.hidden_size


class Report:
    def __init__(self, peak: float | None, dry: bool, fpt: float):
        self.peak, self.dry, self.fpt, self.bare, self.rows = peak, dry, fpt, None, []

    def line(self, name: str, tokens: int, seconds: float, train: bool = False, extra: str = "") -> float:
        rate = tokens / seconds
        flops = rate * self.fpt * (3 if train else 1)
        mfu = f"{flops / (self.peak * 1e12):.1%} of {self.peak:.0f} TFLOP/s" if self.peak and not self.dry else "n/a"
        ratio = f"{rate / self.bare:.2f}" if self.bare and not train else "-"
        hours = PAPERS_AT_SCALE * TOKENS_PER_PAPER_AT_SCALE / rate / 3600
        print(f"{name:<44} {rate:>14,.0f} {ratio:>8} {flops / 1e12:>9.1f} {mfu:>22} {hours:>11.2f}  {extra}",
              flush=True)
        self.rows.append({"name": name, "tokens_per_s": rate,
                          "ratio_to_bare": rate / self.bare if self.bare and not train else None,
                          "tflops": flops / 1e12, "projected_hours_33M": hours, "projection_basis": PROJECTION_BASIS})
        return rate


def cuda_or_say_why() -> bool:
    """True where torch sees a CUDA device; else prints why a GPU bench stops (it never falls back to the CPU)."""
    if torch.cuda.is_available():
        return True
    print("error: no usable CUDA device (torch.cuda.is_available() is False; torch "
          f"{torch.__version__}, CUDA build {torch.version.cuda}). This benchmark measures the GPU and "
          "does not fall back to the CPU; use --dry-run to check the code on a CPU.", file=sys.stderr)
    return False


def compiled_graphs() -> int:
    """Graphs torch.compile (dynamo) has compiled in this process so far, recompiles included."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_forward(enc, lay: RunLayout, shard_size: int, shape) -> tuple[int, float, float]:
    """(real tokens, seconds, compile seconds) of the compiled forward over the embed job's own
    batches (the same feed spec and chunks), prepared beforehand and already on the device."""
    spec = feed_spec(plan_input(lay.table("papers")), enc, shard_size, shape)
    batches, tokens = [], 0
    for it in spec.chunks(list(range(spec.plan.n_shards(shard_size)))):
        chunk = prepare_chunk(spec, *it)
        tokens += chunk.tokens
        # copied to the device under inference_mode, as embed_batches copies the job's: inference
        # tensors lack autograd's dispatch keys and the compiled forward guards on them, so after a
        # warm-up on tensors copied outside it the job compiled again (on a CPU: "dispatch key set
        # mismatch"; most likely the H200 job's 28 s first batch, 2026-12-04)
        with torch.inference_mode():
            batches += [(t["input_ids"], t["attention_mask"]) for t in (b.to(enc.device) for b in chunk.batches)]
    forward = compiled_forward(enc.model, enc.pooling)
    with torch.inference_mode(), enc.inference_autocast("bfloat16"):
        t0 = time.perf_counter()
        for x, m in batches:   # compile (dynamic shapes: any recompiles happen here too), warm the allocator
            forward(x, m)
        sync(enc.device)
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for x, m in batches:
            forward(x, m)
        sync(enc.device)
        seconds = time.perf_counter() - t0
    if forward.failed:
        raise SystemExit(f"the compiled forward failed: {forward.failed}")
    return tokens, seconds, compile_s


def train_tokens(lay: RunLayout, cfg: TrainConfig, first_step: int, last_step: int) -> int:
    """Real tokens of the micro-batches of optimizer steps (first_step, last_step] (epoch 0, one rank)."""
    data = open_tokens(next(p for p in lay.train_tokens_dir.iterdir() if p.is_dir()))
    lengths = np.array([len(t) for t in data.tokens(np.arange(data.papers.num_rows))])
    order = shard_order(len(data.train["a"]), cfg.seed, 0)
    rows = order[first_step * cfg.batch_size * cfg.grad_accum:last_step * cfg.batch_size * cfg.grad_accum]
    return int(sum(lengths[data.train[c][rows]].sum() for c in ("a", "p", "n")))


def time_training(lay: RunLayout, model_dir: Path, device: str, batch: int, accum: int, steps: int, warm: int,
                  max_length: int, compile_model: bool) -> tuple[int, float]:
    marks = {}
    last = steps - 1   # the last step is followed by validation, inside the loop: not timed

    def hook(step: int) -> None:
        if step in (warm, last):
            sync(torch.device(device))
            marks[step] = time.perf_counter()

    shutil.rmtree(lay.model_dir, ignore_errors=True)
    cfg = TrainConfig(model=str(model_dir), batch_size=batch, grad_accum=accum, max_steps=steps, log_every=steps,
                      max_length=max_length, checkpoint_every=0, val_max=8, device=device, margin=1.0,
                      compile=compile_model, resume=False)
    run_train(cfg, lay, after_step=hook)
    return train_tokens(lay, cfg, warm, last), marks[last] - marks[warm]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU: checks the code, measures nothing")
    ap.add_argument("--model", default="", help="a local model directory (default: a BERT-base-sized random one)")
    ap.add_argument("--docs", type=int, default=0, help="papers (default 300,000; dry run 96)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--titles-only", action="store_true", help="embed and train on the titles alone (short "
                    "documents, as a map's cited-only papers are embedded)")
    ap.add_argument("--train-steps", type=int, default=0, help="optimizer steps per training variant (default 40; dry run 3)")
    ap.add_argument("--warmup-steps", type=int, default=0, help="untimed first steps (default 10; dry run 1)")
    ap.add_argument("--train-compile", action="store_true", help="also time batch 64 with the compiled model")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="the GPU's dense bf16 peak, if not in the table")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--target-embed-vs-bare", type=float, default=0.90,
                    help="embed job (loop) / bare compiled forward, real tokens/s, at least")
    ap.add_argument("--target-embed-rate", type=float, default=2e6, help="embed job (loop) real tokens/s, at least")
    ap.add_argument("--target-mfu", type=float, default=0.35, help="training at batch 64, share of bf16 peak, at least")
    Verdicts.add_arguments(ap)
    args = ap.parse_args()

    dry = args.dry_run
    if not dry:
        if not cuda_or_say_why():
            sys.exit(2)
        device, name = torch.device("cuda"), torch.cuda.get_device_name(0)
        docs, steps, warm = args.docs or 300_000, args.train_steps or 40, args.warmup_steps or 10
        layers, hidden, heads = 12, 768, 12
    else:
        device, name = torch.device("cpu"), "CPU (dry run: a tiny model, not a measurement)"
        docs, steps, warm = args.docs or 96, args.train_steps or 4, args.warmup_steps or 1
        layers, hidden, heads = 2, 64, 2
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    peak = peak_tflops(name, args.peak_tflops)
    tmp = Path(tempfile.mkdtemp(prefix="sciencemap-gpu-bench-"))
    try:
        model_dir = Path(args.model) if args.model else make_model(tmp / "model", layers, hidden, heads)
        ids, titles, abstracts, texts = bench_texts(docs, args.titles_only)
        n_trip = max(steps * 64 * 1 + 64, steps * 32 + 32) + 8
        lay = make_run(tmp / "run", ids, titles, abstracts, n_trip)
        enc = load_encoder(str(model_dir), "mean", args.max_length, device.type)
        shape = feed_shape(EmbedConfig(), enc, Dist())   # the embed job's defaults on this device
        fpt = flops_per_token(enc.model, args.max_length)
        print(f"device {name}; torch {torch.__version__}; model {model_dir.name if args.model else ('a tiny BERT' if dry else 'BERT-base-sized')} "
              f"({layers if not args.model else enc.model.config.num_hidden_layers} layers, hidden {enc.dim}); "
              f"{docs:,} papers ({texts}), max_length {enc.max_length}; bf16; embed batches <= {shape.batch_size} docs / "
              f"{shape.max_tokens:,} tokens, chunks of {shape.chunk_rows}, {shape.workers} feed workers; "
              f"peak {peak or 'unknown'} TFLOP/s")
        rep = Report(peak, dry, fpt)
        print(f"\n{'':<44} {'real tokens/s':>14} {'/ bare':>8} {'TFLOP/s':>9} {'MFU':>22} {'h @ 33M (*)':>11}")

        # the job's batches as the bare forward had them: the budget fixed (free memory changes as we go)
        cfg = EmbedConfig(model=str(model_dir), max_length=args.max_length, device=device.type, compile="on",
                          precision="bfloat16", max_tokens=shape.max_tokens)
        tokens, seconds, compile_s = bare_forward(enc, lay, cfg.shard_size, shape)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        rep.bare = rep.line("bare compiled forward", tokens, seconds, extra=f"(compile + warm-up pass {compile_s:.1f}s)")

        graphs = compiled_graphs()
        t0 = time.perf_counter()
        s = run_embed(cfg, lay, encoder=enc)
        wall = time.perf_counter() - t0
        recompiled = compiled_graphs() - graphs   # the job should run the graphs the bare forward compiled
        embed_rate = rep.line("embed job (loop: feed + forward + writes)", s["tokens_embedded"],
                              s["embed_seconds"], extra=f"(whole job {wall:.1f}s; padding {s['padding']}x; "
                                                        f"{s['papers']:,} papers; {recompiled} graph(s) "
                                                        "compiled in the job)")
        rep.line("embed job (whole call)", s["tokens_embedded"], wall)
        if s.get("tokens_per_second_after_first_batch"):   # the loop without its start (feed workers, first forward)
            rate = s["tokens_per_second_after_first_batch"]
            rep.line("embed job after its first batch", rate, 1.0,   # a rate: tokens over one second
                     extra=f"(first batch at {s['first_batch_seconds']:.1f}s of the loop)")

        del enc
        if device.type == "cuda":
            torch.cuda.empty_cache()
        variants = [("training, seed recipe 8 x 4", 8, 4, False), ("training, batch 64", 64, 1, False)]
        if args.train_compile:
            variants.append(("training, batch 64, compiled", 64, 1, True))
        train_rates = {}
        for label, b, a, comp in variants:
            tok, sec = time_training(lay, model_dir, device.type, b, a, steps, warm, args.max_length, comp)
            trip_s = (steps - 1 - warm) * b * a / sec
            train_rates[label] = rep.line(label, tok, sec, train=True, extra=f"({trip_s:,.0f} triplets/s)")

        print(f"(*) projected (basis: {PROJECTION_BASIS}), not measured")

        verdicts = Verdicts()   # the targets are for an H100, BERT-base, 256 tokens, bf16
        verdicts.check("embed job ran the compiled forward (compile on)", bool(s.get("compiled")),
                       f"compile_failed: {s.get('compile_failed')}" if not s.get("compiled") else "")
        verdicts.check("embed job reused the bare forward's compiled graphs (none compiled again)", recompiled == 0,
                       f"{recompiled} compiled in the job: its loop time holds a compile (TORCH_LOGS=recompiles "
                       "says which guard failed)" if recompiled else "")
        mfu64 = train_rates["training, batch 64"] * fpt * 3 / (peak * 1e12) if peak else None
        targets = [("embed job / bare compiled forward, real tokens/s", embed_rate / rep.bare,
                    args.target_embed_vs_bare, "{:.2f}", ""),
                   ("embed job, real tokens/s", embed_rate, args.target_embed_rate, "{:,.0f}", ""),
                   ("training at batch 64, share of bf16 peak", mfu64, args.target_mfu, "{:.1%}",
                    f"the bf16 peak of {name!r} is unknown: give --peak-tflops")]
        for label, value, target, fmt, why in targets:
            if dry:
                verdicts.not_checked(label, "dry run: a tiny model on the CPU, not a measurement",
                                     ">= " + fmt.format(target))
            else:
                verdicts.at_least(label, value, target, fmt, reason=why)
        if args.json:
            args.json.write_text(json.dumps({"device": name, "dry_run": dry, "texts": texts, "rows": rep.rows,
                                             "embed_summary": {k: s.get(k) for k in ("compiled", "compile_failed",
                                                                                     "first_batch_seconds")},
                                             "graphs_compiled_in_the_embed_job": recompiled,
                                             "verdicts": verdicts.as_json()}, indent=2))
        return verdicts.finish(args.no_fail)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
