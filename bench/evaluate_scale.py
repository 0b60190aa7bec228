"""The evaluate stage at scale: time and peak memory against the previous code.

    python bench/evaluate_scale.py                          # MeSH accuracy: 2M generated papers, all with MeSH
    python bench/evaluate_scale.py --n 200000 --ref-n 100000   # a quick look
    python bench/evaluate_scale.py --network --n 250000     # the citation and network part, beside --ref's code

--network (issue 27): generates (bench/synthetic.py: corpus_topics, write_references) n papers'
references (lognormal list lengths of mean 30, preferential citing within the topic, 30% cited
outside the corpus, 3% unresolved), a kNN-like edges table (each paper's --k neighbours drawn in
its topic, 5% in any topic) and the vector store's ids; then runs, each in its own child process, the stage's
citation and network part: --criteria focal sets of --focal papers (sorted ids, seeded) get the
citation graphs of the methods comparison (all kinds), then the network statistics of the kNN,
direct-citation and random graphs (mapping.evaluation.evaluate.networks, the stage's defaults). "new" is this
checkout (the references read once, shared; samples by n; parallel searches); "previous" is a git
worktree of --ref (default 1ee1b99, the commit before) in a temporary folder, imported through its
own PYTHONPATH. Prints each one's seconds (citation graphs, networks, total), peak RSS (VmHWM of
the process; the forked search workers share its pages, their largest RSS is printed apart) and
the verdicts: the same citation graphs (edges and weights, bit for bit) and the same network
figures (the clustering coefficient within 4 standard errors where the new code samples it).

Generates (bench/synthetic.py) papers with MeSH-like descriptors (3-6 a paper, with tree numbers
and a major flag), the vector store's ids and a clusters table (paper_id, row, resolution,
cluster; three resolutions), then runs, each in its own child process so that each peak RSS is
its own:
- new:       mapping.evaluation.evaluate.mesh_evaluation (Arrow batches, compact assignment arrays, labels by row)
- reference: the previous implementation (the papers' MeSH lists as pandas objects, one Python loop
             per paper, labels by a pandas reindex of the whole clusters table, the accuracy's
             lookups scanning unsorted rows), on a --ref-n-paper corpus where the new code runs too.
Prints seconds, peak RSS (and the RSS after imports), bytes per paper, the ratios new/reference
at --ref-n, and a verdict line (met or MISSED) on the check that both give the same figures (they
must: bit for bit); exit 1 when they differ (--no-fail: 0).
"""
from __future__ import annotations

import argparse
import bisect
import importlib
import inspect
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from synthetic import corpus_topics, write_corpus, write_references  # bench/synthetic.py (the script's folder)
from verdicts import Verdicts

RESOLUTIONS = ((0.001, 50), (0.01, 500), (0.1, 5000))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- data

def make_run(root: Path, n: int, shard: int) -> Path:
    """papers/ + clusters/ for n generated papers (cached in root)."""
    from sciencemap.contracts import SCHEMAS

    run = root / f"mesh_{n}"
    ids = pa.array([f"gen:{i}" for i in range(n)], pa.string())      # write_corpus's ids, in row order
    if not (run / "done").exists():
        write_corpus(run, n, dim=4, shard=shard, mesh_share=1.0)
        rng = np.random.default_rng(0)
        (run / "clusters").mkdir(exist_ok=True)
        for k, (r, C) in enumerate(RESOLUTIONS):
            order = rng.permutation(n)                      # any row order: labels are gathered by row
            pq.write_table(pa.table({"paper_id": ids.take(pa.array(order)), "row": pa.array(order, pa.int32()),
                                     "resolution": pa.array(np.full(n, r)),
                                     "cluster": pa.array(rng.integers(0, C, n), pa.int32())},
                                    schema=SCHEMAS["clusters"]),
                           run / "clusters" / f"part-{k:05d}.parquet")
        (run / "done").write_text("")
    if not (run / "ids.parquet").exists():
        pq.write_table(pa.table({"paper_id": ids}), run / "ids.parquet")   # the vector store's side table
    return run


def vector_ids(run: Path) -> pa.Array:
    return pq.read_table(run / "ids.parquet").column("paper_id").combine_chunks()


# ---------------------------------------------------------------- the previous implementation

def _ref_ic(records, major_weight, drop_names, drop_uis):
    f, trees = Counter(), {}
    for terms in records:
        for t in terms:
            if t.get("name") in drop_names or t.get("ui") in drop_uis:
                continue
            k = t.get("ui") or t.get("name")
            if not k:
                continue
            f[k] += major_weight if t.get("major") else 1.0
            trees.setdefault(k, set()).update(() if t.get("tree_numbers") is None else t.get("tree_numbers"))
    tn_list = sorted((tn, k) for k, tns in trees.items() for tn in tns)
    tns_sorted = [tn for tn, _ in tn_list]
    F = {}
    for k in f:
        desc = set()
        for tn in trees.get(k, ()):
            i = bisect.bisect_left(tns_sorted, tn + ".")
            while i < len(tns_sorted) and tns_sorted[i].startswith(tn + "."):
                desc.add(tn_list[i][1])
                i += 1
        desc.discard(k)
        F[k] = f[k] + sum(f[d] for d in desc)
    total = sum(F.values())
    return {k: -math.log(v / total) for k, v in F.items()}


def _ref_vectors(records, major_weight, drop_names, drop_uis):
    import scipy.sparse as sp

    ic = _ref_ic(records, major_weight, drop_names, drop_uis)
    keys = sorted(ic)
    col = {k: i for i, k in enumerate(keys)}
    rows, indptr, indices, data = [], [0], [], []
    for r, terms in enumerate(records):
        comp = {}
        for t in terms:
            if t.get("name") in drop_names or t.get("ui") in drop_uis:
                continue
            k = t.get("ui") or t.get("name")
            if k not in col or ic[k] <= 0:
                continue
            val = ic[k] * (major_weight if t.get("major") else 1.0)
            comp[col[k]] = max(comp.get(col[k], 0.0), val)
        if not comp:
            continue
        rows.append(r)
        for c in sorted(comp):
            indices.append(c)
            data.append(comp[c])
        indptr.append(len(indices))
    V = sp.csr_matrix((np.asarray(data, float), np.asarray(indices, np.int64), np.asarray(indptr, np.int64)),
                      shape=(len(rows), len(keys)))
    norms = np.sqrt(np.asarray(V.multiply(V).sum(axis=1)).ravel())
    return np.asarray(rows, np.int64), (sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ V).tocsr(), keys


def _ref_accuracy(V, labels):
    """The previous closed form, as it was: the cluster sums' rows unsorted, so each lookup scans a row."""
    import scipy.sparse as sp

    N = V.shape[0]
    _, lab = np.unique(np.asarray(labels), return_inverse=True)
    M = sp.csr_matrix((np.ones(N), (lab, np.arange(N))), shape=(lab.max() + 1, N))
    S = (M @ V).tocsr()
    T = np.asarray(V.sum(axis=0)).ravel()
    Vc = V.tocoo()
    s_vals = np.asarray(S[lab[Vc.row], Vc.col]).ravel()
    num = np.bincount(Vc.row, weights=Vc.data * s_vals, minlength=N) - 1.0
    den = np.bincount(Vc.row, weights=Vc.data * T[Vc.col], minlength=N) - 1.0
    ok = den > 1e-12
    per = np.zeros(N)
    per[ok] = np.clip(num[ok], 0, None) / den[ok]
    return float(per.sum() / N), int((~ok).sum())


def reference_evaluation(run: Path) -> dict:
    from sciencemap.storage import read_table

    from mapping.evaluation.mesh_accuracy import CHECK_TAG_UIS, CHECK_TAGS, granularity

    accuracy = _ref_accuracy

    clusters = read_table(run / "clusters").to_pandas()
    papers = read_table(run / "papers", columns=["paper_id", "mesh"]).to_pandas()
    has_mesh = papers["mesh"].map(lambda m: m is not None and len(m) > 0)
    pm = papers[has_mesh].drop_duplicates("paper_id")
    pm = pm[pm["paper_id"].isin(set(clusters["paper_id"].unique()))].reset_index(drop=True)
    rows, V, keys = _ref_vectors([list(m) for m in pm["mesh"]], 2.0, CHECK_TAGS, CHECK_TAG_UIS)
    ev_ids = pm["paper_id"].to_numpy(dtype=object)[rows]
    out = {"papers_with_mesh": int(has_mesh.sum()), "evaluated": int(len(ev_ids)), "descriptors": len(keys),
           "resolutions": []}
    for r in sorted(clusters["resolution"].unique()):
        lab = clusters[clusters["resolution"] == r].set_index("paper_id")["cluster"].reindex(ev_ids).to_numpy()
        a, unrelated = accuracy(V, lab)
        a_rand, _ = accuracy(V, np.random.default_rng(0).permutation(lab))
        out["resolutions"].append({
            "resolution": float(r), "clusters_total": int(clusters.loc[clusters["resolution"] == r, "cluster"].nunique()),
            "clusters_evaluated": int(len(np.unique(lab))), "granularity": granularity(lab),
            "accuracy": a, "accuracy_random": a_rand, "unrelated": unrelated})
    return out


def new_evaluation(run: Path, ids: pa.Array) -> dict:
    from sciencemap.storage import dataset

    from mapping.evaluation.evaluate import EvaluateConfig, mesh_evaluation

    return mesh_evaluation(dataset(run / "papers"), dataset(run / "clusters"), ids, EvaluateConfig())


# ---------------------------------------------------------------- the citation and network part

REPO = Path(__file__).resolve().parents[1]


def make_network_run(root: Path, n: int, k: int, shard: int) -> Path:
    """references/ + edges/ + ids.parquet for n generated papers (cached in root)."""
    from sciencemap.contracts import EDGES_META_KEY, SCHEMAS

    run = root / f"network_{n}_k{k}"
    if (run / "done.json").exists():
        return run
    topic_of = corpus_topics(n)
    info = write_references(run, topic_of, shard=shard)
    rng = np.random.default_rng(1)
    by_topic = np.argsort(topic_of, kind="stable")
    start = np.searchsorted(topic_of[by_topic], topic_of)              # each row's topic block
    size = np.bincount(topic_of)[topic_of]
    own = np.empty(n, np.int64)                                        # each row's position in by_topic
    own[by_topic] = np.arange(n)
    schema = SCHEMAS["edges"].with_metadata({EDGES_META_KEY: json.dumps({"papers": n}).encode()})
    (run / "edges").mkdir(exist_ok=True)
    for part, lo in enumerate(range(0, n, shard)):
        rows = np.arange(lo, min(n, lo + shard))
        src = np.repeat(rows, k)
        # a neighbour in the same topic other than itself: the row's position plus 1..size-1, cyclic
        pos = start[src] + (own[src] - start[src] + rng.integers(1, np.maximum(size[src], 2))) % size[src]
        dst = by_topic[pos]
        across = rng.random(len(src)) < 0.05                           # a few links between topics
        dst[across] = rng.integers(0, n, int(across.sum()))
        pq.write_table(pa.table({"src": pa.array(src, pa.int32()), "dst": pa.array(dst, pa.int32()),
                                 "similarity": pa.array(rng.uniform(0.5, 1.0, len(src)).astype(np.float32)),
                                 "rank": pa.array(np.tile(np.arange(1, k + 1), len(rows)), pa.int16())},
                                schema=schema), run / "edges" / f"part-{part:05d}.parquet")
    pq.write_table(pa.table({"paper_id": pa.array([f"gen:{i}" for i in range(n)], pa.string())}), run / "ids.parquet")
    (run / "done.json").write_text(json.dumps(info))
    return run


def _digest(*arrays) -> str:
    import hashlib

    h = hashlib.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def network_child(args) -> None:
    from sciencemap.layout import RunLayout
    from sciencemap.runtime import rss_mb
    from sciencemap.storage import dataset

    from mapping.evaluation import evaluate
    from mapping.evaluation.citation_graphs import citation_graphs

    run = Path(args.run)
    layout = RunLayout(run)
    ids = vector_ids(run)
    sorted_ids = ids.take(pa.compute.sort_indices(ids))
    rng = np.random.default_rng(0)
    focal_sets = [sorted_ids.take(pa.array(np.sort(rng.choice(len(ids), min(args.focal, len(ids)), replace=False))))
                  for _ in range(args.criteria)]
    shared = hasattr(evaluate, "read_citations")        # this checkout: the references read once
    base = rss_mb()
    t0 = time.perf_counter()
    refs = dataset(layout.table("references"))
    if shared:
        citations = evaluate.read_citations(refs, ids)
        source = citations
    else:
        source = refs
    digests = []
    for focal in focal_sets:
        gs = citation_graphs(source, focal)
        digests.append({k: [g.m, g.n, _digest(g.lo, g.hi, g.a)] for k, g in gs.items()})
        del gs
    t_cite = time.perf_counter() - t0
    cfg = evaluate.EvaluateConfig(**({"path_sample": args.path_sample} if args.path_sample is not None else {}))
    # this checkout's networks() takes the number of rows, earlier ones the ids
    rows = ids if "vector_ids" in inspect.signature(evaluate.networks).parameters else len(ids)
    t1 = time.perf_counter()
    if shared:
        citation = evaluate.citation_graph(citations)
        del citations, source
        net = evaluate.networks(layout, rows, cfg, citation)
    else:
        net = evaluate.networks(layout, rows, cfg)
    t_net = time.perf_counter() - t1
    own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    workers_mb = workers.ru_maxrss / 1024
    print(json.dumps({"cpu_s": own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime, "cite_s": t_cite, "network_s": t_net, "seconds": time.perf_counter() - t0,
                      "peak_mb": rss_mb(), "base_mb": base, "workers_peak_mb": workers_mb,
                      "graphs": digests, "network": net}, default=float))


def make_reference_tree(ref: str) -> Path:
    import tempfile

    tree = Path(tempfile.mkdtemp(prefix="sciencemap-evaluate-ref-")) / "ref"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=REPO, check=True, capture_output=True)
    return tree


def measure_network(kind: str, run: Path, args, tree: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", "network", "--run", str(run), "--focal", str(args.focal),
           "--criteria", str(args.criteria)] + ([] if args.path_sample is None else ["--path-sample", str(args.path_sample)])
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(f"{kind}: {' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"  {kind:9s}: citation graphs {r['cite_s']:7.1f} s, networks {r['network_s']:7.1f} s, total "
          f"{r['seconds']:7.1f} s ({r['cpu_s']:,.0f} CPU s); peak RSS {r['peak_mb']:7,.0f} MB (after imports {r['base_mb']:,.0f} MB; "
          f"largest search worker {r['workers_peak_mb']:,.0f} MB, pages shared)", flush=True)
    return r


def same_network(new: dict, old: dict) -> tuple[bool, str]:
    """The network figures agree: exactly, except the clustering coefficient where the new code
    sampled it (within 4 of its standard errors, at most 0.5 / sqrt(sample))."""
    diffs = []
    for name, a in old["graphs"].items():
        b = new["graphs"].get(name, {})
        for key, va in a.items():
            vb = b.get(key)
            if key == "average_clustering" and "clustering_sample" in b:
                if abs(vb - va) > 4 * 0.5 / math.sqrt(b["clustering_sample"]):
                    diffs.append(f"{name}.{key}: {va:.5f} vs {vb:.5f} (sampled)")
            elif va != vb and not (isinstance(va, float) and math.isnan(va) and math.isnan(vb)):
                diffs.append(f"{name}.{key}: {va} vs {vb}")
    if old["overlap"] != new["overlap"]:
        diffs.append("edge overlap")
    return not diffs, "; ".join(diffs[:6])


def network_main(args) -> int:
    t = time.perf_counter()
    run = make_network_run(args.work, args.n, args.k, 100_000)
    info = json.loads((run / "done.json").read_text())
    print(f"citation and network part of the evaluate stage: n={args.n:,} papers, {info['references']:,} references "
          f"({info['corpus_internal']:,} to corpus papers, the most cited {info['most_cited']:,} times), kNN k={args.k}; "
          f"{args.criteria} criteria of {args.focal:,} focal papers; {os.cpu_count()} cores "
          f"(data {time.perf_counter() - t:.0f} s, {run})", flush=True)
    print(f"  load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    tree = make_reference_tree(args.ref)
    try:
        old = measure_network(f"previous ({args.ref})", run, args, tree)
        new = measure_network("new", run, args, REPO)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True)
        shutil.rmtree(tree.parent, ignore_errors=True)
    print(f"  load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    print(f"  new/previous: time {new['seconds'] / old['seconds']:.2f} (citation graphs "
          f"{new['cite_s'] / old['cite_s']:.2f}, networks {new['network_s'] / old['network_s']:.2f}), peak RSS "
          f"{new['peak_mb'] / old['peak_mb']:.2f}", flush=True)
    for name, g in new["network"]["graphs"].items():
        print(f"  {name:16s} edges {g['edges']:>12,}  clustering {g['average_clustering']:.4f}"
              f"{' (sample ' + format(g['clustering_sample'], ',') + ')' if 'clustering_sample' in g else ''}  "
              f"path {g.get('average_shortest_path', float('nan')):.3f} ± {g.get('shortest_path_se', float('nan')):.3f}",
              flush=True)
    verdicts = Verdicts()
    verdicts.check("the same citation graphs as the previous code (edges and weights, bit for bit)",
                   new["graphs"] == old["graphs"])
    ok, detail = same_network(new["network"], old["network"])
    verdicts.check("the same network figures (clustering within 4 standard errors where sampled)", ok, detail)
    return verdicts.finish(args.no_fail)


# ---------------------------------------------------------------- driver

def child(args) -> None:
    importlib.import_module("mapping.evaluation.evaluate")   # imported before the RSS after imports is read
    if args.child == "network":
        return network_child(args)

    run = Path(args.run)
    base = peak_mb()
    t0 = time.perf_counter()
    out = new_evaluation(run, vector_ids(run)) if args.child == "new" else reference_evaluation(run)
    print(json.dumps({"seconds": time.perf_counter() - t0, "peak_mb": peak_mb(), "base_mb": base, "result": out}))


def measure(kind: str, run: Path, n: int) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--run", str(run)]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    papers = sum(pq.ParquetFile(f).metadata.num_rows for f in (run / "papers").glob("*.parquet"))
    print(f"  {kind:9s} n={n:>9,}: {r['seconds']:8.1f} s, peak RSS {r['peak_mb']:8,.0f} MB "
          f"(after imports {r['base_mb']:,.0f} MB; {(r['peak_mb'] - r['base_mb']) * 2**20 / papers:,.0f} B/paper), "
          f"evaluated {r['result']['evaluated']:,}, descriptors {r['result']['descriptors']:,}", flush=True)
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2_000_000, help="papers of the full-size run (new code only)")
    ap.add_argument("--ref-n", type=int, default=200_000, help="papers where the reference runs too")
    ap.add_argument("--work", type=Path, default=Path("/tmp/sciencemap_evaluate_scale"))
    ap.add_argument("--network", action="store_true", help="the citation and network part, beside --ref's code")
    ap.add_argument("--ref", default="1ee1b99", help="--network: the previous code's commit")
    ap.add_argument("--k", type=int, default=20, help="--network: kNN neighbours a paper")
    ap.add_argument("--focal", type=int, default=20_000, help="--network: papers a criterion")
    ap.add_argument("--criteria", type=int, default=3, help="--network: focal sets (criteria)")
    ap.add_argument("--path-sample", type=int, help="--network: path-length sources in both runs (default: the stage's)")
    ap.add_argument("--child", choices=("new", "reference", "network"), help=argparse.SUPPRESS)
    ap.add_argument("--run", help=argparse.SUPPRESS)
    Verdicts.add_arguments(ap)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    if args.network:
        return network_main(args)
    shard = 100_000
    print(f"MeSH accuracy of the evaluate stage (papers all with MeSH, {len(RESOLUTIONS)} resolutions)", flush=True)
    t = time.perf_counter()
    small = make_run(args.work, args.ref_n, shard)
    big = make_run(args.work, args.n, shard) if args.n != args.ref_n else small
    print(f"  data: {time.perf_counter() - t:.0f} s ({args.work})", flush=True)
    ref = measure("reference", small, args.ref_n)
    new = measure("new", small, args.ref_n)
    same = ref["result"] == new["result"]
    print(f"  at n={args.ref_n:,}: new/reference time {new['seconds'] / ref['seconds']:.2f}, "
          f"peak RSS above imports {(new['peak_mb'] - new['base_mb']) / max(ref['peak_mb'] - ref['base_mb'], 1):.2f}; "
          f"same figures: {'yes' if same else 'NO'}", flush=True)
    if big is not small:
        measure("new", big, args.n)
    verdicts = Verdicts()
    verdicts.check(f"at n={args.ref_n:,}: the new code's figures equal the reference's, bit for bit", same)
    return verdicts.finish(args.no_fail)


if __name__ == "__main__":
    sys.exit(main())
