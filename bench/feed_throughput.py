"""The feeds with a null model: how many tokens per second each CPU core prepares for the GPU, and
how much padding the batches carry.

    nice -n 5 .venv/bin/python bench/feed_throughput.py [--workers 2] [--max-length 256] [--elife-repeat 5]

Corpora (real text):
  sample   the demo's papers table (runs/demo/papers: the embedded sample as the pipeline ingests it,
           full papers and their cited references, many of those title-only); without a demo run,
           the sample's PubMed records and eLife articles (title + abstract)
  elife    the 1,979 eLife articles of ../shared/data/elife-articles, title + abstract, repeated
           --elife-repeat times under distinct ids (more volume for the timing)

Embed feed (encoders.embed.feed, what jobs/embed.py runs ahead of the model): read Parquet ->
tokenize -> bucket by length -> pad -> pin (pinning only where CUDA is present), with the CUDA shape
(encoders.embed.job.device_shape on CUDA: chunks of 8,192 rows, the first ones smaller, batches of
at most 65,536 tokens cut at 10% padding once they hold 8,192, widths not rounded) and --workers DataLoader
processes; the model is a null one (the batches are counted, not computed).
Training feed (encoders.objectives.triplet_table + encoders.train_feed): seeded random triplets
over the corpus, tokenized once into the run's Arrow files, then an epoch of micro-batches of 64
triplets collated by --workers processes.

Throughput per core = real (unpadded) tokens / CPU seconds of this process and its workers
(getrusage, workers reaped), so a busy shared machine does not distort it; wall tokens/s beside it.
The projection multiplies by 16 cores (one H100 node). Padding = padded tokens / real tokens: for
the embed feed without bucketing (input order), with the previous job's batches (sorted within a
10,000-row shard, <= 128 docs / 8,192 tokens) and with the CUDA shape; for the training feed at
micro-batches of 8 and 64 as the recipe pads them (one forward per micro-batch, the previous loop's
padding) and with length buckets (bucket_tokens 16,384).
"""
from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from encoders.embed.feed import feed_chunks, plan_input, prepare_chunk
from encoders.embed.job import CPU_BATCH, device_shape, feed_spec
from encoders.model import load_encoder
from encoders.objectives.triplet_table import open_tokens, prepare_tokens
from encoders.train_feed import RankSampler, micro_batches
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
CORES_PER_NODE = 16
TARGET_PER_CORE = 160_000
SHARD_ROWS = 10_000


def cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def write_papers(folder: Path, ids: list[str], titles: list, abstracts: list) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    n = len(ids)
    cols = {"paper_id": ids, "title": titles, "abstract": abstracts}
    table = pa.table({f.name: cols.get(f.name, [None] * n) for f in SCHEMAS["papers"]}, schema=SCHEMAS["papers"])
    pq.write_table(table, folder / "part-00000.parquet", row_group_size=8192)
    return folder


def jats_papers(files: list[tuple[str, bytes]]) -> tuple[list, list, list]:
    from importance.readers.jats import parse

    ids, titles, abstracts = [], [], []
    for name, data in files:
        try:
            recs = parse(name, data, "elife")
        except Exception:  # noqa: BLE001 - a bench: skip what the reader rejects
            continue
        for kind, rec in recs:
            if kind == "paper":
                ids.append(rec["paper_id"]), titles.append(rec.get("title")), abstracts.append(rec.get("abstract"))
    return ids, titles, abstracts


def sample_corpus(tmp: Path, demo: Path) -> tuple[str, Path]:
    if demo.is_dir():
        return f"sample ({demo})", demo
    frames = [pd.read_csv(f, usecols=["pmid", "Title", "abstractText"]) for f in sorted((REPO / "sample" / "pubmed").glob("*.csv.gz"))]
    df = pd.concat(frames)
    ids, titles, abstracts = [f"pmid:{x}" for x in df.pmid], list(df.Title), list(df.abstractText)
    files = [(str(f), f.read_bytes()) for f in sorted((REPO / "sample" / "elife").glob("*.xml.gz"))]
    i, t, a = jats_papers(files)
    return "sample (PubMed records + eLife articles)", write_papers(tmp / "sample", ids + i, titles + t, abstracts + a)


def elife_corpus(tmp: Path, repeat: int) -> tuple[str, Path] | None:
    tarball = SHARED / "elife-articles" / "elife-articles-6c97171-xml.tar.gz"
    if not tarball.is_file():
        print(f"eLife set not found at {tarball}: skipped")
        return None
    with tarfile.open(tarball) as tf:
        files = [(m.name, tf.extractfile(m).read()) for m in tf.getmembers() if m.isfile() and m.name.endswith(".xml")]
    ids, titles, abstracts = jats_papers(files)
    keep = [k for k, a in enumerate(abstracts) if a]
    ids, titles, abstracts = [ids[k] for k in keep], [titles[k] for k in keep], [abstracts[k] for k in keep]
    all_ids = [f"{x}#{r}" for r in range(repeat) for x in ids]
    return (f"eLife abstracts ({len(ids)} articles x {repeat})",
            write_papers(tmp / "elife", all_ids, titles * repeat, abstracts * repeat))


def embed_padding(enc, papers: Path) -> dict:
    """Padded / real tokens: in input order (no bucketing) and with the previous job's batches (the
    CPU shape, which keeps them: each 10,000-row shard sorted, <= 128 docs / 8,192 tokens)."""
    spec = feed_spec(plan_input(papers), enc, SHARD_ROWS, device_shape(False, SHARD_ROWS))
    real = sorted_padded = unsorted_padded = 0
    for it in spec.chunks(list(range(spec.plan.n_shards(SHARD_ROWS)))):
        chunk = prepare_chunk(spec, *it)
        lengths = np.zeros(len(chunk.ids), np.int64)
        for b in chunk.batches:
            lengths[b.positions.numpy()] = b.attention_mask.sum(1).numpy()
        real += chunk.tokens
        sorted_padded += chunk.padded_tokens
        unsorted_padded += sum(int(lengths[i:i + CPU_BATCH].max()) * len(lengths[i:i + CPU_BATCH])
                               for i in range(0, len(lengths), CPU_BATCH))
    return {"no bucketing (input order, 128 docs)": unsorted_padded / real,
            "previous job (sorted in 10,000-row shards, 128 docs / 8,192 tokens)": sorted_padded / real}


def embed_feed(enc, papers: Path, workers: int) -> dict:
    """The feed with the CUDA shape (its token budget at the cap) and `workers` processes, the model a null one."""
    shape = device_shape(True, SHARD_ROWS, cuda_workers=workers)
    spec = feed_spec(plan_input(papers), enc, SHARD_ROWS, shape)
    shards = list(range(spec.plan.n_shards(SHARD_ROWS)))
    prepare_chunk(spec, *spec.chunks(shards)[0])   # warm-up (tokenizer caches, imports)
    pin = torch.cuda.is_available()
    c0, t0 = cpu_seconds(), time.perf_counter()
    real = padded = docs = 0
    for chunk in feed_chunks(spec, shards, pin=pin):   # the null model: count what the GPU would get
        real += chunk.tokens
        padded += chunk.padded_tokens
        docs += len(chunk.ids)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return {"docs": docs, "real": real, "padded": padded, "wall": wall, "cpu": cpu, "pinned": pin, "shape": shape}


def training_feed(enc, papers: Path, workers: int, tmp: Path, n_triplets: int) -> dict:
    run = RunLayout(tmp / "train-run")
    if run.root.exists():
        shutil.rmtree(run.root)
    run.root.mkdir(parents=True)
    (run.root / "papers").symlink_to(papers.resolve())
    ids = pq.read_table(papers, columns=["paper_id"]).column("paper_id").to_pylist()
    rng = np.random.default_rng(0)
    a, p, n = (rng.integers(0, len(ids), n_triplets) for _ in range(3))
    trip = pa.table({"anchor_id": [ids[i] for i in a], "positive_id": [ids[i] for i in p],
                     "negative_id": [ids[i] for i in n], "negative_kind": ["hard"] * n_triplets,
                     "split": ["train"] * n_triplets}, schema=SCHEMAS["triplets"])
    (run.root / "triplets").mkdir()
    pq.write_table(trip, run.root / "triplets" / "part-00000.parquet")
    c0, t0 = cpu_seconds(), time.perf_counter()
    folder, _ = prepare_tokens(run, enc.path, enc.tokenizer, enc.max_length, enc.sep, val_max=0, seed=0)
    build_wall, build_cpu = time.perf_counter() - t0, cpu_seconds() - c0
    data = open_tokens(folder)
    cache_tokens = sum(len(t) for t in data.tokens(np.arange(data.papers.num_rows)))
    out = {"build": (cache_tokens, build_wall, build_cpu)}
    pad_id = enc.tokenizer.pad_token_id or 0
    for B in (64, 8):
        c0, t0 = cpu_seconds(), time.perf_counter()
        real = padded = 0
        for batch in micro_batches(data, RankSampler(len(data.train["a"]), 0), 0, B, 0, pad_id, workers,
                                   pin=torch.cuda.is_available()):
            real += batch.tokens
            padded += batch.padded_tokens
        out[B] = (real, padded, time.perf_counter() - t0, cpu_seconds() - c0)
        real_b = padded_b = 0
        for batch in micro_batches(data, RankSampler(len(data.train["a"]), 0), 0, B, 0, pad_id, 0, False,
                                   bucket_tokens=16384):
            real_b += batch.tokens
            padded_b += batch.padded_tokens
        out[f"{B} bucketed"] = padded_b / real_b
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--elife-repeat", type=int, default=5)
    ap.add_argument("--triplets", type=int, default=20_000)
    ap.add_argument("--sample", type=Path, default=REPO / "runs" / "demo" / "papers",
                    help="the sample's papers table as the pipeline writes it (make demo)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="sciencemap-feed-bench-"))
    enc = load_encoder("minilm", "mean", args.max_length, "cpu")
    print(f"workers {args.workers}, max_length {args.max_length}, tokenizer {enc.path.name}, cores here "
          f"{os.cpu_count()}, load average {os.getloadavg()}; pinning: "
          f"{'yes' if torch.cuda.is_available() else 'no (no CUDA here; the step is skipped, not timed)'}")
    corpora = [sample_corpus(tmp, args.sample)]
    el = elife_corpus(tmp, args.elife_repeat)
    if el:
        corpora.append(el)
    try:
        for name, papers in corpora:
            print(f"\n== {name}: {plan_input(papers).n_rows:,} rows")
            e = embed_feed(enc, papers, args.workers)
            per_core = e["real"] / e["cpu"]
            print(f"embed feed: {e['docs']:,} docs, {e['real']:,} real tokens (mean {e['real'] / e['docs']:.0f}) in "
                  f"{e['wall']:.1f}s wall / {e['cpu']:.1f} CPU-s: {per_core:,.0f} tokens/s per core "
                  f"({'>=' if per_core >= TARGET_PER_CORE else '<'} {TARGET_PER_CORE:,}), {e['real'] / e['wall']:,.0f} "
                  f"tokens/s wall; 16 cores: {per_core * CORES_PER_NODE / 1e6:.2f}M tokens/s")
            print("embed padding (padded / real tokens):")
            for label, v in embed_padding(enc, papers).items():
                print(f"  {label}: {v:.3f}")
            sh = e["shape"]
            print(f"  this feed, CUDA shape (chunks of {sh.chunk_rows:,} rows sorted by length, <= {sh.max_tokens:,} "
                  f"tokens, cut at {sh.pad_limit}x padding from {sh.min_batch_tokens:,} tokens, widths x{sh.pad_multiple}): "
                  f"{e['padded'] / e['real']:.3f}")
            t = training_feed(enc, papers, args.workers, tmp, args.triplets)
            tok, w, c = t["build"]
            print(f"training feed, tokenizing once into the run's Arrow files: {tok:,} tokens in {w:.1f}s wall / "
                  f"{c:.1f} CPU-s: {tok / c:,.0f} tokens/s per core")
            for B in (64, 8):
                real, padded, w, c = t[B]
                per_core = real / c
                print(f"training feed, an epoch of {args.triplets:,} triplets in micro-batches of {B}: {real:,} real "
                      f"tokens in {w:.1f}s wall / {c:.1f} CPU-s: {per_core:,.0f} tokens/s per core "
                      f"({'>=' if per_core >= TARGET_PER_CORE else '<'} {TARGET_PER_CORE:,}); 16 cores: "
                      f"{per_core * CORES_PER_NODE / 1e6:.2f}M tokens/s; padding one forward per micro-batch "
                      f"(the recipe, as before) {padded / real:.3f}, with length buckets of 16,384 tokens "
                      f"{t[f'{B} bucketed']:.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
