"""More encoders beside a finished run's own, on the evaluate stage's curves (issue 16).

    .venv/bin/python bench/compare_encoders.py --run runs/x --model base= --model h2=/path/to/model [--criteria subjects]

Embeds the run's papers that have a criterion (title + abstract, this project's embedding path;
`name=` with no path = the packaged MiniLM) into `<run>/relatedness/vectors_<name>.parquet`, then
runs the evaluate stage with every one of them as `--extra-vectors`, so report.md, metrics.json and
the plots compare them with the run's encoder, TF-IDF, BM25, the citation graphs, the floor and
the ceiling. Prints the comparison table of each criterion and the evaluate stage's time.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.storage import dataset


def focal_texts(run: Path, criteria: list[str]) -> pa.Table:
    from mapping.evaluation.compare import focal_papers

    papers = dataset(run / "papers")
    parts = [t.select(["paper_id", "title", "abstract"]) for c in criteria
             if (t := focal_papers(papers, c, 0, 0)) is not None]
    t = pa.concat_tables(parts)
    _, first = np.unique(t.column("paper_id").to_numpy(zero_copy_only=False), return_index=True)
    return t.take(pa.array(np.sort(first)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--model", action="append", default=[], help="name=model directory (empty: packaged MiniLM)")
    ap.add_argument("--criteria", default="mesh,subjects,arxiv,keywords")
    ap.add_argument("--max-length", type=int, default=128)
    args = ap.parse_args()
    from encoders.embed import embed_texts
    from encoders.model import load_encoder
    from sciencemap.cli import run_stage

    criteria = [c for c in args.criteria.split(",") if c]
    t = focal_texts(args.run, criteria)
    extra = []
    for spec in args.model:
        name, _, path = spec.partition("=")
        dest = args.run / "relatedness" / f"vectors_{name}.parquet"
        t0 = time.perf_counter()
        enc = load_encoder(path or None, None, args.max_length, "cpu")
        X = embed_texts(enc, enc.texts(t.column("title").to_pylist(), t.column("abstract").to_pylist()),
                        batch_size=64, precision="float32")
        dest.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"paper_id": t.column("paper_id"),
                                 "vector": pa.array(list(X), pa.list_(pa.float32()))}), dest)
        print(f"{name}: {len(X):,} papers embedded in {time.perf_counter() - t0:.1f} s -> {dest}", flush=True)
        extra += ["--extra-vectors", f"{name}={dest}"]
    t0 = time.perf_counter()
    run_stage("evaluate", ["--run", str(args.run), "--criteria", ",".join(criteria), *extra])
    print(f"evaluate stage: {time.perf_counter() - t0:.1f} s")
    report = (args.run / "report.md").read_text()
    print(report[report.index("## Methods compared"):report.index("## Network statistics")])


if __name__ == "__main__":
    main()
