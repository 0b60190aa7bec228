"""Embedding throughput: this system vs sentence-transformers' encode, same texts, same model.

    nice -n 10 .venv/bin/python bench/embed_throughput.py [--n 2000] [--rounds 2]

Texts: real PubMed records from sample/pubmed/*.csv.gz as "title [SEP] abstract", topped up
with titles alone (title-only cited papers are part of every real corpus) up to --n. Model: the
shipped MiniLM, max_length 128 for both. Each round times the reference
`SentenceTransformer(model_dir).encode(texts, batch_size=...)` and this system's embedding path
(encoders.embed.forward.embed_texts: one tokenizer call, token-length-sorted token-budget batches,
inference_mode) in float32 and in bf16 compute where the CPU has native bf16, each eager and
through torch.compile (encoders.embed.forward.CompiledForward, what an embedding job with >= 5M tokens
to embed uses on a CPU). The best round of each counts (rounds interleave, so machine load hits all).
Prints docs/s, the ratio to the reference, the compile warm-up (cold inductor cache) and after
how many documents it pays for itself, and the vector differences. No speed target; one check per
precision: the torch.compile forward compiled (a failed compile falls back to eager, and its rows
would time eager under the compiled name: they are left out then), with a verdict line (met or
MISSED); exit 1 when one is missed (--no-fail: 0).

On a GPU, bench/gpu_throughput.py measures the jobs (bare forward, embed job, training).
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
import time
from pathlib import Path

# A fresh inductor cache, set before torch loads: the compile warm-up printed is a first run's.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="sciencemap-bench-inductor-")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from encoders.embed.forward import CompiledForward, embed_texts  # noqa: E402
from encoders.model import load_encoder, resolve_model, resolve_precision  # noqa: E402
from sciencemap.text import paper_text  # noqa: E402
from verdicts import Verdicts  # noqa: E402  bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parents[1]


def load_texts(n: int) -> list[str]:
    frames = []
    for f in sorted((REPO / "sample" / "pubmed").glob("*.csv.gz")):
        with gzip.open(f, "rt") as fh:
            frames.append(pd.read_csv(fh, usecols=["Title", "abstractText"]))
    df = pd.concat(frames, ignore_index=True)
    texts = [paper_text(t, a, "[SEP]") for t, a in zip(df.Title, df.abstractText)]
    titles = [str(t) for t in df.Title if isinstance(t, str)]
    texts = [t for t in texts if t]
    while len(texts) < n:
        texts += titles[: n - len(texts)]
    return texts[:n]


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def cpu_section(args, verdicts: Verdicts) -> None:
    from sentence_transformers import SentenceTransformer

    texts = load_texts(args.n)
    model_dir = resolve_model("minilm")
    enc = load_encoder("minilm", "mean", args.max_length, "cpu")
    st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    st.max_seq_length = args.max_length
    auto = resolve_precision("auto", torch.device("cpu"))
    lengths = [len(x) for x in enc.token_ids(texts)]
    print(f"texts: {len(texts)} (PubMed title+abstract, topped up with titles), tokens: mean "
          f"{np.mean(lengths):.0f}, max {max(lengths)} (max_length {args.max_length}); "
          f"torch threads {torch.get_num_threads()}, CPU native bf16: {auto == 'bfloat16'}")
    print(f"load average before: {os.getloadavg()}")

    # torch.compile'd forwards (what a CPU job of >= COMPILE_MIN_TOKENS uses): their compile
    # is timed apart, from a cold inductor cache (set at the top of this file), as the first call.
    precisions = ["float32"] + (["bfloat16"] if auto == "bfloat16" else [])
    compiled, compile_s = {}, {}
    for prec in precisions:
        compiled[prec] = CompiledForward(enc.model, enc.pooling)
        t0 = time.perf_counter()
        embed_texts(enc, texts[:64], args.batch_size, args.max_tokens, prec, forward=compiled[prec])
        compile_s[prec] = time.perf_counter() - t0
        verdicts.check(f"{prec}: the torch.compile forward compiled", compiled[prec].failed is None,
                       compiled[prec].failed or "")
    precisions_compiled = [p for p in precisions if compiled[p].failed is None]
    print("compile warm-up (first call, cold cache): "
          + ", ".join(f"{p} {t:.1f}s" for p, t in compile_s.items()))

    def mine(prec, forward=None):
        return lambda: embed_texts(enc, texts, args.batch_size, args.max_tokens, prec, forward=forward)

    label = {"float32": "float32", "bfloat16": "bf16 compute (auto on this CPU)"}
    runs = {f"sentence-transformers encode (batch_size={args.st_batch_size})":
            lambda: st.encode(texts, batch_size=args.st_batch_size, convert_to_numpy=True)}
    for prec in precisions:
        runs[f"sciencemap embed, {label[prec]}, eager"] = mine(prec)
        if prec in precisions_compiled:
            runs[f"sciencemap embed, {label[prec]}, torch.compile"] = mine(prec, compiled[prec])
    # Warm-up (oneDNN kernels, allocator) for each eager system.
    st.encode(texts[:64], batch_size=args.st_batch_size)
    for prec in precisions:
        embed_texts(enc, texts[:64], args.batch_size, args.max_tokens, prec)

    best = {k: float("inf") for k in runs}
    vecs = {}
    for r in range(args.rounds):
        for name, f in runs.items():
            t0 = time.perf_counter()
            vecs[name] = f()
            dt = time.perf_counter() - t0
            best[name] = min(best[name], dt)
            print(f"  round {r + 1}: {name}: {len(texts) / dt:.1f} docs/s ({dt:.1f}s)", flush=True)
    print(f"load average after: {os.getloadavg()}")
    ref_name = next(iter(runs))
    ref_rate = len(texts) / best[ref_name]
    print("\nbest of rounds:")
    for name in runs:
        rate = len(texts) / best[name]
        print(f"  {name}: {rate:.1f} docs/s, ratio to reference {rate / ref_rate:.2f}")
    for prec in precisions_compiled:
        eager_s = best[f"sciencemap embed, {label[prec]}, eager"]
        comp_s = best[f"sciencemap embed, {label[prec]}, torch.compile"]
        saved_per_doc = (eager_s - comp_s) / len(texts)
        even = (f"{compile_s[prec] / saved_per_doc:,.0f} docs "
                f"({compile_s[prec] / saved_per_doc * np.mean(lengths):,.0f} tokens)") if saved_per_doc > 0 else "never"
        print(f"  {prec} torch.compile incl. its warm-up for these {len(texts)} docs: "
              f"{len(texts) / (comp_s + compile_s[prec]):.1f} docs/s; pays for itself after {even}")
    ref = unit(vecs[ref_name])
    for name in list(runs)[1:]:
        mine_v = unit(vecs[name])
        cos = (mine_v * ref).sum(1)
        print(f"  vectors {name} vs reference: max |diff| {np.abs(mine_v - ref).max():.2e}, "
              f"min cosine {cos.min():.6f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--st-batch-size", type=int, default=32, help="sentence-transformers' default is 32")
    ap.add_argument("--threads", type=int, default=0)
    Verdicts.add_arguments(ap)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    verdicts = Verdicts()
    cpu_section(args, verdicts)
    return verdicts.finish(args.no_fail)


if __name__ == "__main__":
    sys.exit(main())
