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
how many documents it pays for itself, and the vector differences.

GPU section (only when CUDA is present): tokens/s and model FLOP utilisation of a BERT-base-sized
model (random weights; 12 layers, hidden 768) at 256 tokens in bf16 through the same embedding
path, eager and through torch.compile, and the projected hours for 33 M papers.
--simulate-gpu-section runs that code path on the CPU with a 2-layer model, to check the code,
not to measure anything.
"""
from __future__ import annotations

import argparse
import gzip
import os
import tempfile
import time
from pathlib import Path

# A fresh inductor cache, set before torch loads: the compile warm-up printed is a first run's.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="sciencemap-bench-inductor-")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from encoders.embed.forward import CompiledForward, embed_texts, embed_token_ids  # noqa: E402
from encoders.model import Encoder, load_encoder, resolve_model, resolve_precision  # noqa: E402
from sciencemap.text import paper_text  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "A100": 312.0, "A800": 312.0,
                    "L40S": 362.0, "L4": 121.0, "A10": 125.0}   # dense bf16 tensor-core peaks


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


def cpu_section(args) -> None:
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
        assert compiled[prec].failed is None, compiled[prec].failed
    print("compile warm-up (first call, cold cache): "
          + ", ".join(f"{p} {t:.1f}s" for p, t in compile_s.items()))

    def mine(prec, forward=None):
        return lambda: embed_texts(enc, texts, args.batch_size, args.max_tokens, prec, forward=forward)

    label = {"float32": "float32", "bfloat16": "bf16 compute (auto on this CPU)"}
    runs = {f"sentence-transformers encode (batch_size={args.st_batch_size})":
            lambda: st.encode(texts, batch_size=args.st_batch_size, convert_to_numpy=True)}
    for prec in precisions:
        runs[f"sciencemap embed, {label[prec]}, eager"] = mine(prec)
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
    for prec in precisions:
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


def gpu_section(args, simulate: bool = False) -> None:
    from transformers import AutoModel, AutoTokenizer, BertConfig

    if simulate:
        dev, layers, n_docs, name = torch.device("cpu"), 2, 64, "CPU (simulated, not a measurement)"
    else:
        dev, layers, n_docs, name = torch.device("cuda"), 12, args.gpu_docs, torch.cuda.get_device_name(0)
    seq, hidden = 256, 768
    conf = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=12,
                      intermediate_size=4 * hidden, max_position_embeddings=512)
    torch.manual_seed(0)
    model = AutoModel.from_config(conf, attn_implementation="sdpa").to(dev).eval()
    tok = AutoTokenizer.from_pretrained(resolve_model("minilm"), local_files_only=True)
    enc = Encoder(model=model, tokenizer=tok, pooling="mean", max_length=seq, device=dev, path=Path("."))
    rng = np.random.default_rng(0)
    docs = rng.integers(1000, 30000, size=(n_docs, seq)).tolist()
    params = sum(p.numel() for n_, p in model.named_parameters() if "embeddings" not in n_)
    flops_per_token = 2 * params + 4 * layers * seq * hidden   # matmuls + QK^T and AV
    bs = args.gpu_batch_size
    peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    eager_rate = None
    for mode, forward in (("eager", None), ("torch.compile", CompiledForward(model, "mean"))):
        def once():
            embed_token_ids(enc, docs, bs, bs * seq, "bfloat16", forward=forward)
            if dev.type == "cuda":
                torch.cuda.synchronize()

        t0 = time.perf_counter()
        once()  # warm-up (and the compile)
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        reps = 1 if simulate else 3
        for _ in range(reps):
            once()
        dt = (time.perf_counter() - t0) / reps
        tok_s = n_docs * seq / dt
        achieved = tok_s * flops_per_token
        print(f"\nGPU section on {name}, {mode}: BERT-base-sized ({layers} layers, {params / 1e6:.1f}M "
              f"non-embedding params), {seq} tokens/doc, bf16, batch {bs}: {tok_s:,.0f} tokens/s, "
              f"{n_docs / dt:,.0f} docs/s, {achieved / 1e12:.1f} TFLOP/s (first call {warm:.1f}s)")
        if eager_rate:
            print(f"  torch.compile / eager: {tok_s / eager_rate:.2f}")
        eager_rate = eager_rate or tok_s
        if peak and not simulate:
            print(f"  model FLOP utilisation: {achieved / (peak * 1e12):.1%} of {peak:.0f} TFLOP/s bf16 peak")
        elif not simulate:
            print("  model FLOP utilisation: unknown GPU peak; pass --peak-tflops")
        print(f"  projected for 33M papers at {seq} tokens each on this one device: "
              f"{33e6 * seq / tok_s / 3600:.2f} hours")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--st-batch-size", type=int, default=32, help="sentence-transformers' default is 32")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--gpu-docs", type=int, default=4096)
    ap.add_argument("--gpu-batch-size", type=int, default=256)
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--simulate-gpu-section", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.skip_cpu:
        cpu_section(args)
    if torch.cuda.is_available():
        gpu_section(args)
    else:
        print("\nGPU section: no CUDA GPU present; skipped")
        if args.simulate_gpu_section:
            gpu_section(args, simulate=True)


if __name__ == "__main__":
    main()
