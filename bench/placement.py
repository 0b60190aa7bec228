"""Placing new papers on a finished map: quality on held-out papers, and speed at 1M.

    python bench/placement.py holdout --run runs/demo          # ~2 min: 10% of the demo's papers
    flock /tmp/bench.lock nice -n 5 python bench/placement.py scale --n 1000000 --reuse

holdout: copies a finished run's papers and embeddings, holds back a seeded 10% of the corpus's own
papers (those with a record of their own), builds the map on the rest with the run's own knn,
cluster and render settings (its config.toml), embeddings of the held-back papers in a second run,
then `jobs/place.py`. Prints the share of held-back papers placed in the topic that holds the
majority of their 20 nearest map papers (exact search over the map's vector store; only
neighbours in a map topic count), and how often their placed topic is the one their nearest map
paper is in.

scale: a generated map of --n papers (bench/render_scale.py's corpus, clusters and render stage),
--new-papers (default --n) new papers drawn from the same mixture (bench/synthetic.py, another
draw), then `jobs/place.py` twice as its own process: the first call on a map whose knn stage
kept no index (it builds the index and keeps it in <map>/knn_index/), the second as every later
call (it loads it). Each: wall time and peak RSS (os.wait4), placed count, and the share placed in
the map topic their generating topic belongs to. Embedding is not part of it (the vectors are
generated). Few new papers on a large map show what the kept index saves (the build dominates).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent

from render_scale import timed_job  # noqa: E402  bench/render_scale.py: a script's own folder is on its import path


def holdout(args) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sciencemap.layout import RunLayout
    from sciencemap.storage import read_table, write_table_atomic
    from sciencemap.vectors import open_vectors, read_rows
    from mapping.knn import ExactSearch, KnnConfig, make_plan
    from mapping.place import load_map, majority_topic

    src = RunLayout(args.run)
    papers = read_table(src.table("papers"))
    corpus = np.asarray(papers.column("paper_id").filter(papers.column("source_file").is_valid()).to_pylist(), object)
    rng = np.random.default_rng(args.seed)
    held = set(rng.choice(corpus, int(round(args.share * len(corpus))), replace=False).tolist())
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    rest, new = RunLayout(work / "rest"), RunLayout(work / "new")
    for lay in (rest, new):
        lay.embeddings_dir.mkdir(parents=True)
    write_table_atomic(papers, rest.table("papers"))
    if src.table("references").exists():
        shutil.copytree(src.table("references"), rest.table("references"))
    n_rest = n_new = 0
    for k, f in enumerate(sorted(src.embeddings_dir.glob("*.parquet"))):
        t = pq.read_table(f)
        is_held = np.isin(t.column("paper_id").to_numpy(zero_copy_only=False), list(held))
        pq.write_table(t.filter(pa.array(~is_held)), rest.embeddings_dir / f.name)
        pq.write_table(t.filter(pa.array(is_held)), new.embeddings_dir / f.name)
        n_rest, n_new = n_rest + int((~is_held).sum()), n_new + int(is_held.sum())
    for name in ("manifest.json",):
        if (src.embeddings_dir / name).exists():
            shutil.copy(src.embeddings_dir / name, rest.embeddings_dir / name)
    cfg = src.root / "config.toml"
    extra = ["--config", str(cfg)] if cfg.is_file() else []
    t0 = time.perf_counter()
    for stage in ("knn", "cluster", "render"):
        timed_job(stage, rest.root, *extra)
    build_s = time.perf_counter() - t0
    s, place_s, _ = timed_job("place", rest.root, "--new", str(new.root), "--k", "20")

    # the topic holding the majority of each held-back paper's 20 nearest map papers
    vec = open_vectors(rest)
    state = load_map(rest, vec.n)
    newvec = open_vectors(new)
    plan = make_plan(KnnConfig(k=20), vec.n, vec.dim)
    D, I = ExactSearch(vec.X, plan, 1 << 30).search(read_rows(newvec.X, 0, newvec.n), 20)
    majority = majority_topic(np.asarray(I, np.int64), state.topic_of_row)
    nearest = state.topic_of_row[np.asarray(I[:, 0], np.int64)]
    placed = read_table(rest.table("placed")).to_pandas().set_index("paper_id").loc[newvec.ids()]
    d = {int(c): i for i, c in enumerate(state.clusters)}
    got = np.array([d.get(int(c), -1) for c in placed["cluster"]])
    ok = got >= 0
    print(f"run {args.run}: {len(corpus):,} corpus papers, {n_new:,} held back ({args.share:.0%}, seed {args.seed}), "
          f"map built on {n_rest:,} embedded papers in {build_s:.0f} s (knn, cluster, render); "
          f"place: {s['placed']:,} placed, {s['unplaced']:,} unplaced in {place_s:.1f} s")
    print(f"placed in the topic holding the majority of their 20 nearest map papers: "
          f"{(got[ok] == majority[ok]).mean():.3f} ({int((got[ok] == majority[ok]).sum())}/{int(ok.sum())})")
    print(f"placed in the topic of their nearest map paper: {(got[ok] == nearest[ok]).mean():.3f}; "
          f"median vote share {s['median_vote_share']:.2f}")


def scale(args) -> None:
    from synthetic import write_corpus  # bench/synthetic.py: a script's own folder is on its import path

    map_run = args.run / "map"
    new_run = args.run / "new"
    cmd = [sys.executable, str(REPO / "bench" / "render_scale.py"), "--n", str(args.n), "--run", str(map_run),
           "--layout", args.layout] + (["--reuse"] if args.reuse else [])
    subprocess.run(cmd, check=True)                          # the map: corpus, store, clusters, render
    info = json.loads((map_run / "generated.json").read_text())["corpus"]
    n_new = args.new_papers or args.n
    stamp = new_run / "generated.json"
    want = {"n": n_new, "dim": info["dim"], "map": str(map_run)}
    if not (args.reuse and stamp.is_file() and json.loads(stamp.read_text()) == want):
        shutil.rmtree(new_run, ignore_errors=True)
        write_corpus(new_run, n_new, info["dim"], info["topics"], with_papers=False, draw_seed=12345, id_prefix="new")
        stamp.write_text(json.dumps(want))
    for p in ("vectors", "placed"):
        shutil.rmtree(new_run / p, ignore_errors=True)
    # two calls: the first on a map whose knn stage kept no index (it builds the index and keeps it),
    # the second as every later call (it loads the kept index)
    shutil.rmtree(map_run / "knn_index", ignore_errors=True)
    calls = [timed_job("place", map_run, "--new", str(new_run), "--k", "20") for _ in range(2)]
    (s, wall, peak), (s2, wall2, peak2) = calls

    # the map level the render stage drew is the generator's topics merged by 4 (render_scale LEVELS)
    from sciencemap.storage import read_table

    topic_new = np.random.default_rng(12345).integers(0, info["topics"], n_new)
    topic_map = np.random.default_rng(1).integers(0, info["topics"], info["papers"])
    level = {0.001: 4, 0.003: 1}.get(s["map_resolution"])
    placed = read_table(map_run / "placed", columns=["cluster"]).column(0).to_numpy()
    line = ""
    if level:
        groups = np.unique(topic_map // level)                 # cluster id = rank among the map's groups
        want_c = np.searchsorted(groups, topic_new // level)
        line = f"; placed in their generating topic's map topic: {(placed == want_c).mean():.3f}"
    print(f"\nplace {n_new:,} new papers on a {info['papers']:,}-paper map ({info['dim']}-d, {s['index']}, "
          f"index built in {s['index_build_s']:.0f} s, {s.get('index_from', 'not kept')}): {wall:.0f} s wall = "
          f"{wall / 60:.1f} min, peak RSS {peak / 2**30:.2f} GiB; placed {s['placed']:,}, unplaced {s['unplaced']:,}{line}")
    if "index_from" in s2:   # an approximate index (exact search below exact_below keeps none)
        print(f"the second call, the kept index {s2['index_from'].split(' ', 1)[0]} in {s2['index_build_s']:.1f} s: "
              f"{wall2:.0f} s wall = {wall2 / 60:.1f} min ({wall2 / wall:.2f}× the first), "
              f"peak RSS {peak2 / 2**30:.2f} GiB; placed {s2['placed']:,} (the first call: {s['placed']:,})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    h = sub.add_parser("holdout")
    h.add_argument("--run", type=Path, default=REPO / "runs" / "demo")
    h.add_argument("--share", type=float, default=0.10)
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--work", type=Path, default=REPO / "runs" / "bench_place_holdout")
    s = sub.add_parser("scale")
    s.add_argument("--n", type=int, default=1_000_000, help="papers on the map")
    s.add_argument("--new-papers", type=int, default=0, help="papers to place (0: --n)")
    s.add_argument("--layout", default="umap", choices=("umap", "pca"))
    s.add_argument("--run", type=Path, default=REPO / "runs" / "bench_place")
    s.add_argument("--reuse", action="store_true", help="keep generated corpora of the same size")
    args = ap.parse_args()
    (holdout if args.mode == "holdout" else scale)(args)


if __name__ == "__main__":
    main()
