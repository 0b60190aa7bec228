"""The feeds with a null model: how many tokens per second each CPU core prepares for the GPU, against
references measured in the same run on the same texts, and how much padding the batches carry.

    nice -n 5 .venv/bin/python bench/feed_throughput.py [--workers 2] [--max-length 256] [--elife-repeat 5]

Corpora (real text):
  sample   the demo's papers table (runs/demo/papers: the embedded sample as the pipeline ingests it,
           full papers and their cited references, many of those title-only); without a demo run,
           the sample's PubMed records and eLife articles (title + abstract)
  elife    the 1,979 eLife articles of ../shared/data/elife-articles, title + abstract, repeated
           --elife-repeat times under distinct ids (more volume for the timing); --elife-repeat 0
           leaves it out (said in the output)
  titles   title-only papers, as a map's cited-only papers are embedded (about half of the nodes of
           the generated corpora): the demo run's cited-only papers (real reference titles), else
           the sample's PubMed titles, repeated --titles-repeat times; the embed feed only (such
           papers are not trained on); --titles-repeat 0 leaves it out

References, per corpus, on the texts the embed feed tokenizes (title [SEP] abstract of each row
with text), timed the same way:
  tokenizer   the tokenizer's own batch call, tokenizer(texts, truncation=True, max_length=...), in
              this process (a fast tokenizer spreads it over its own threads: CPU seconds count them)
  DataLoader  a plain torch DataLoader over the texts, --workers processes, batches of 128 texts
              tokenized in a collate_fn (padded to the longest, as tensors)

Embed feed (encoders.embed.feed, what jobs/embed.py runs ahead of the model): read Parquet ->
tokenize -> bucket by length -> pad -> pin (pinning only where CUDA is present), with the CUDA shape
(encoders.embed.job.device_shape on CUDA: chunks of 8,192 rows, the first ones smaller, batches of
at most 65,536 tokens cut at 10% padding once they hold 8,192, widths not rounded) and --workers DataLoader
processes; the model is a null one (the batches are counted, not computed).
Training feed (encoders.training.triplet_table + encoders.training.feed): seeded random triplets
over the corpus, tokenized once into the run's Arrow files, then an epoch of micro-batches of 64
(and one of 8) triplets collated by --workers processes.

Throughput per core = real (unpadded) tokens / CPU seconds of this process and its workers
(getrusage, workers reaped), so a busy shared machine does not distort it; wall tokens/s beside it.
Each feed's per-core figure is printed as a ratio to each reference. Targets, per corpus
(--target-vs-tokenizer, --target-vs-dataloader, --target-train-vs-tokenizer change them): the
embed feed >= 0.5x the tokenizer's batch call (its own work, reading, bucketing, padding and
passing chunks between processes, costs no more than the tokenizing) and >= 1.0x the plain
DataLoader (no slower than the plain way); an epoch of the training feed at micro-batches of 64
and of 8 >= 1.0x the tokenizer's batch call (it collates token ids tokenized once: no slower than
tokenizing). A verdict line each (met, MISSED, or not checked with the reason); exit 1 when any is
missed or not checked (--no-fail: 0). The tokens/s of a 16-core node is printed as a projection
(basis: per-core tokens/s measured here x 16 cores; JSON "projected_tokens_per_s_16_cores" with
"projection_basis"), not a measurement.

Padding = padded tokens / real tokens: for the embed feed without bucketing (input order), with
the previous job's batches (sorted within a 10,000-row shard, <= 128 docs / 8,192 tokens) and with
the CUDA shape; for the training feed at micro-batches of 8 and 64 as the recipe pads them (one
forward per micro-batch, the previous loop's padding) and with length buckets (bucket_tokens 16,384).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from encoders.embed.feed import feed_chunks, plan_input, prepare_chunk
from encoders.embed.job import CPU_BATCH, device_shape, feed_spec
from encoders.model import load_encoder
from encoders.training.triplet_table import open_tokens, prepare_tokens
from encoders.training.feed import RankSampler, micro_batches
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.text import paper_text
from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
CORES_PER_NODE = 16
PROJECTION_BASIS = f"per-core tokens/s measured here x {CORES_PER_NODE} cores"
SHARD_ROWS = 10_000
LOADER_BATCH = 128   # texts per batch of the plain DataLoader reference


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
    from importance.ingest.readers.jats import parse

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


def titles_corpus(tmp: Path, demo: Path, repeat: int) -> tuple[str, Path]:
    """Title-only papers, as the cited-only papers of a map are embedded: the demo run's cited-only
    papers (real reference titles: no record file of their own), else the sample's PubMed titles."""
    if demo.is_dir():
        t = pq.read_table(demo, columns=["paper_id", "title", "abstract", "source_file"])
        t = t.filter(pc.and_(pc.is_null(t["source_file"]), pc.is_valid(t["title"])))
        ids, titles, what = t["paper_id"].to_pylist(), t["title"].to_pylist(), f"the cited-only papers of {demo}"
    else:
        frames = [pd.read_csv(f, usecols=["pmid", "Title"]) for f in sorted((REPO / "sample" / "pubmed").glob("*.csv.gz"))]
        df = pd.concat(frames)
        ids, titles, what = [f"pmid:{x}" for x in df.pmid], list(df.Title), "the sample's PubMed titles"
    all_ids = [f"{x}#{r}" for r in range(repeat) for x in ids]
    return (f"titles only ({what}, {len(ids):,} x {repeat})",
            write_papers(tmp / "titles", all_ids, titles * repeat, [None] * len(all_ids)))


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


def feed_texts(enc, papers: Path) -> list[str]:
    """The texts the embed feed tokenizes: title [SEP] abstract of each row with an id and text."""
    t = pq.read_table(papers, columns=["paper_id", "title", "abstract"])
    rows = zip(*(t.column(c).to_pylist() for c in ("paper_id", "title", "abstract")))
    return [x for x in (paper_text(ti, ab, enc.sep) if pid is not None else "" for pid, ti, ab in rows) if x]


def timed(run) -> dict:
    """{"real": tokens run() returns, "wall": seconds, "cpu": CPU seconds of this process and its reaped workers}."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    real = run()
    return {"real": real, "wall": time.perf_counter() - t0, "cpu": cpu_seconds() - c0}


def tokenizer_reference(enc, texts: list[str]) -> dict:
    """The tokenizer's own batch call on all the texts at once."""
    enc.tokenizer(texts[:64], truncation=True, max_length=enc.max_length)   # warm-up
    return timed(lambda: sum(len(x) for x in enc.tokenizer(texts, truncation=True,
                                                          max_length=enc.max_length)["input_ids"]))


def loader_reference(enc, texts: list[str], workers: int) -> dict:
    """A plain DataLoader over the texts: batches of LOADER_BATCH tokenized in a collate_fn, `workers` processes."""
    tok, max_length = enc.tokenizer, enc.max_length

    def collate(batch: list[str]):
        return tok(batch, truncation=True, max_length=max_length, padding="longest", return_tensors="pt")

    def run() -> int:
        loader = torch.utils.data.DataLoader(texts, batch_size=LOADER_BATCH, collate_fn=collate, num_workers=workers)
        return sum(int(b["attention_mask"].sum()) for b in loader)

    return timed(run)


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
                     "split": ["train"] * n_triplets, "facet": [None] * n_triplets}, schema=SCHEMAS["triplets"])
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


def per_core(figures: dict) -> float:
    return figures["real"] / figures["cpu"] if figures["cpu"] > 0 else float("nan")


def projected(rate_per_core: float) -> str:
    return (f"{rate_per_core * CORES_PER_NODE / 1e6:.2f}M tokens/s on {CORES_PER_NODE} cores, projected "
            f"(basis: {PROJECTION_BASIS})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--elife-repeat", type=int, default=5, help="0 leaves the eLife corpus out")
    ap.add_argument("--titles-repeat", type=int, default=20, help="the title-only corpus (how the cited-only "
                    "papers of a map are embedded) repeated this many times; 0 leaves it out")
    ap.add_argument("--triplets", type=int, default=20_000)
    ap.add_argument("--sample", type=Path, default=REPO / "runs" / "demo" / "papers",
                    help="the sample's papers table as the pipeline writes it (make demo)")
    ap.add_argument("--target-vs-tokenizer", type=float, default=0.5,
                    help="embed feed / the tokenizer's batch call, tokens per CPU second, at least")
    ap.add_argument("--target-vs-dataloader", type=float, default=1.0,
                    help="embed feed / a plain DataLoader, tokens per CPU second, at least")
    ap.add_argument("--target-train-vs-tokenizer", type=float, default=1.0,
                    help="training feed epoch / the tokenizer's batch call, tokens per CPU second, at least")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    Verdicts.add_arguments(ap)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="sciencemap-feed-bench-"))
    enc = load_encoder("minilm", "mean", args.max_length, "cpu")
    print(f"workers {args.workers}, max_length {args.max_length}, tokenizer {enc.path.name}, cores here "
          f"{os.cpu_count()}, load average {os.getloadavg()}; pinning: "
          f"{'yes' if torch.cuda.is_available() else 'no (no CUDA here; the step is skipped, not timed)'}")
    corpora = [(*sample_corpus(tmp, args.sample), True)]   # (name, papers, with the training feed)
    el = elife_corpus(tmp, args.elife_repeat) if args.elife_repeat > 0 else None
    if args.elife_repeat <= 0:
        print("eLife corpus left out (--elife-repeat 0)")
    if el:
        corpora.append((*el, True))
    if args.titles_repeat > 0:   # title-only papers are embedded, not trained on
        corpora.append((*titles_corpus(tmp, args.sample, args.titles_repeat), False))
    else:
        print("title-only corpus left out (--titles-repeat 0)")
    verdicts = Verdicts()
    figures = {}
    try:
        for name, papers, with_training in corpora:
            short = name.split(" (")[0]
            print(f"\n== {name}: {plan_input(papers).n_rows:,} rows")
            texts = feed_texts(enc, papers)
            tok_ref = tokenizer_reference(enc, texts)
            loader_ref = loader_reference(enc, texts, args.workers)
            loader_label = f"a plain DataLoader ({args.workers} workers, {LOADER_BATCH} texts a batch)"
            for label, r in (("the tokenizer's batch call", tok_ref), (loader_label, loader_ref)):
                print(f"reference, {label}: {r['real']:,} real tokens of {len(texts):,} texts in {r['wall']:.1f}s "
                      f"wall / {r['cpu']:.1f} CPU-s: {per_core(r):,.0f} tokens/s per core")
            tok_rate, loader_rate = per_core(tok_ref), per_core(loader_ref)
            e = embed_feed(enc, papers, args.workers)
            rate = per_core(e)
            print(f"embed feed: {e['docs']:,} docs, {e['real']:,} real tokens (mean {e['real'] / e['docs']:.0f}) in "
                  f"{e['wall']:.1f}s wall / {e['cpu']:.1f} CPU-s: {rate:,.0f} tokens/s per core = "
                  f"{rate / tok_rate:.2f}x the tokenizer's batch call, {rate / loader_rate:.2f}x the plain DataLoader; "
                  f"{e['real'] / e['wall']:,.0f} tokens/s wall; {projected(rate)}")
            if e["real"] != tok_ref["real"]:
                print(f"  (the references tokenized {tok_ref['real']:,} real tokens: not the feed's texts exactly)")
            verdicts.at_least(f"{short}: embed feed / the tokenizer's batch call, tokens per CPU-s", rate / tok_rate,
                              args.target_vs_tokenizer, "{:.2f}x")
            verdicts.at_least(f"{short}: embed feed / a plain DataLoader, tokens per CPU-s", rate / loader_rate,
                              args.target_vs_dataloader, "{:.2f}x")
            fig = figures[short] = {"texts": len(texts), "tokenizer_per_core": tok_rate,
                                    "dataloader_per_core": loader_rate, "embed_feed_per_core": rate,
                                    "embed_feed_vs_tokenizer": rate / tok_rate,
                                    "embed_feed_vs_dataloader": rate / loader_rate,
                                    "projected_tokens_per_s_16_cores": {"embed feed": rate * CORES_PER_NODE},
                                    "projection_basis": PROJECTION_BASIS}
            print("embed padding (padded / real tokens):")
            for label, v in embed_padding(enc, papers).items():
                print(f"  {label}: {v:.3f}")
            sh = e["shape"]
            print(f"  this feed, CUDA shape (chunks of {sh.chunk_rows:,} rows sorted by length, <= {sh.max_tokens:,} "
                  f"tokens, cut at {sh.pad_limit}x padding from {sh.min_batch_tokens:,} tokens, widths x{sh.pad_multiple}): "
                  f"{e['padded'] / e['real']:.3f}")
            if not with_training:
                continue
            t = training_feed(enc, papers, args.workers, tmp, args.triplets)
            tok, w, c = t["build"]
            print(f"training feed, tokenizing once into the run's Arrow files: {tok:,} tokens in {w:.1f}s wall / "
                  f"{c:.1f} CPU-s: {tok / c:,.0f} tokens/s per core = {tok / c / tok_rate:.2f}x the tokenizer's "
                  "batch call")
            for B in (64, 8):
                real, padded, w, c = t[B]
                rate = real / c
                print(f"training feed, an epoch of {args.triplets:,} triplets in micro-batches of {B}: {real:,} real "
                      f"tokens in {w:.1f}s wall / {c:.1f} CPU-s: {rate:,.0f} tokens/s per core = "
                      f"{rate / tok_rate:.2f}x the tokenizer's batch call; {projected(rate)}; padding one forward "
                      f"per micro-batch (the recipe, as before) {padded / real:.3f}, with length buckets of 16,384 "
                      f"tokens {t[f'{B} bucketed']:.3f}")
                verdicts.at_least(f"{short}: training feed epoch at micro-batches of {B} / the tokenizer's batch call, "
                                  "tokens per CPU-s", rate / tok_rate, args.target_train_vs_tokenizer, "{:.2f}x")
                fig[f"training_feed_{B}_per_core"] = rate
                fig["projected_tokens_per_s_16_cores"][f"training feed, micro-batches of {B}"] = rate * CORES_PER_NODE
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average after {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps({"workers": args.workers, "max_length": args.max_length, "corpora": figures,
                                         "verdicts": verdicts.as_json()}, indent=2))
    return verdicts.finish(args.no_fail)


if __name__ == "__main__":
    sys.exit(main())
