"""Baselines on the 1,250 PubMed records (issue 16's reference table): TF-IDF, BM25, base MiniLM,
random 20-regular and the MeSH ceiling, A at G = 20 / 50 / 100 (mean ± std over 3 Leiden seeds),
beside an independent implementation's figures, and relative accuracy.

    .venv/bin/python bench/pubmed_baselines.py [--data ../shared/data/pubmed-multilabel-mesh-sample] [--model PATH]

Reads the CSVs with the project's own reader (importance.ingest.readers.pubmed_csv), builds every graph
with mapping.evaluation.text_graphs and the curves with mapping.evaluation.curves, exactly as the evaluate stage does.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from importance.ingest.readers import pubmed_csv
from mapping.evaluation.curves import Criterion, accuracy_at, relative_accuracies, sweep
from mapping.evaluation.mesh_accuracy import publication_vectors
from mapping.evaluation.relatedness import hybrid
from mapping.evaluation.text_graphs import bm25_graph, criterion_graph, random_regular_graph, tfidf_graph, vector_graph

REPO = Path(__file__).resolve().parents[1]
REFERENCE = {"tfidf": (0.261, 0.162, 0.109), "bm25": (0.255, 0.150, 0.098), "minilm": (0.246, 0.154, 0.105),
             "random": (0.049, 0.019, 0.010), "mesh": (0.430, 0.328, 0.265)}
TARGETS = (20.0, 50.0, 100.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "pubmed-multilabel-mesh-sample")
    ap.add_argument("--model", default=None, help="encoder directory (default: the packaged MiniLM)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--points", type=int, default=16)
    args = ap.parse_args()
    t0 = time.perf_counter()
    recs = {}
    for f in sorted(args.data.glob("*.csv")):
        for _, r in pubmed_csv.parse(str(f), f.read_bytes(), "pubmed"):
            if "paper_id" in r:
                recs.setdefault(r["paper_id"], r)
    recs = [recs[k] for k in sorted(recs)]
    mv = publication_vectors([r["mesh"] for r in recs])
    crit = Criterion("mesh", mv.V, mv.rows)
    texts = [f"{r['title'] or ''} {r['abstract'] or ''}".strip() for r in recs]
    print(f"{len(recs):,} records, {len(mv.rows):,} with MeSH vectors, {len(mv.descriptors):,} descriptors")

    from encoders.embed import embed_texts
    from encoders.model import load_encoder
    enc = load_encoder(args.model, None, 128, "cpu")
    X = embed_texts(enc, enc.texts([r["title"] for r in recs], [r["abstract"] for r in recs]), batch_size=64,
                    precision="float32")
    n = len(recs)
    graphs = {"tfidf": tfidf_graph(texts), "bm25": bm25_graph(texts), "minilm": vector_graph(X, name="minilm"),
              "random": random_regular_graph(n), "mesh": criterion_graph(mv.V, mv.rows, n, name="mesh")}
    graphs["minilm + bm25"] = hybrid("minilm + bm25", [(graphs["minilm"], 0.5), (graphs["bm25"], 0.5)])
    curves = {k: sweep(g, crit, (TARGETS[0] / 2, TARGETS[-1] * 2), args.points, tuple(args.seeds))
              for k, g in graphs.items()}
    rel = relative_accuracies(curves, reference=[k for k in curves if k not in ("random", "mesh")])
    print(f"\n| graph | edges | A at G = 20 | A at G = 50 | A at G = 100 | reference | largest difference | relative accuracy |")
    print("|---|---|---|---|---|---|---|---|")
    for k, c in curves.items():
        at = accuracy_at(c, list(TARGETS))
        ours = [at[t]["mean"] for t in TARGETS]
        ref = REFERENCE.get(k)
        diff = max(abs(a - b) for a, b in zip(ours, ref)) if ref else float("nan")
        print(f"| {k} | {graphs[k].m:,} | " + " | ".join(f"{at[t]['mean']:.3f} ± {at[t]['std']:.3f}" for t in TARGETS)
              + f" | {'/'.join(f'{x:.3f}' for x in ref) if ref else '-'} | {diff:.3f} | "
              f"{rel[k]['mean']:.3f} ± {rel[k]['std']:.3f} |")
    print(f"\nLeiden seeds {args.seeds}, {args.points} resolutions per graph; relative accuracy against the mean "
          f"of the methods (not random, not mesh). Wall time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
