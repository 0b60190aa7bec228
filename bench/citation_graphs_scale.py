"""mapping.evaluation.citation_graphs at scale: wall time and peak RSS of each relatedness graph (dc, edc, bc, cc).

    python bench/citation_graphs_scale.py                       # 200k citing papers, 30 references each
    python bench/citation_graphs_scale.py --n 1000000 --max-cited-by 10000

Generates (numpy, seeded) a references table as a Parquet directory: --n citing papers with
--refs references each (Poisson), half to the corpus's own papers and half to a pool of 2n outside
papers, the cited paper drawn with probability proportional to a Pareto(--alpha) popularity (a
heavy tail: a few papers cited thousands of times); 3% of the cited ids null (unresolved). The
focal papers are a seeded --focal-share of the corpus, so the table also has non-focal citing
papers. Each kind then runs in its own child process (so each peak RSS is its own: ru_maxrss of
that process) and prints seconds, peak RSS, RSS after imports and the graph's figures.
"""
from __future__ import annotations

import argparse
import json
import logging
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ids_of(prefix: str, k: int) -> pa.Array:
    return pa.array(np.char.add(prefix, np.arange(k).astype(str)).tolist(), pa.string())


def make_table(root: Path, n: int, refs: int, alpha: float, seed: int, shard: int) -> Path:
    d = root / f"refs_n{n}_r{refs}_a{alpha}_s{seed}"
    done = root / f"{d.name}.json"                      # beside the table: a dataset reads every file in it
    if done.exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pool = 3 * n                                          # n corpus papers, then 2n outside ones
    names = pa.concat_arrays([ids_of("gen:", n), ids_of("ext:", 2 * n)])
    pop = rng.pareto(alpha, pool) + 1.0
    k = rng.poisson(refs, n)
    citing = np.repeat(np.arange(n), k)
    m = len(citing)
    inside = rng.random(m) < 0.5
    cited = np.empty(m, np.int64)
    for mask, lo, hi in ((inside, 0, n), (~inside, n, pool)):
        p = pop[lo:hi] / pop[lo:hi].sum()
        cited[mask] = lo + rng.choice(hi - lo, int(mask.sum()), p=p)
    unresolved = rng.random(m) < 0.03
    for i, s in enumerate(range(0, m, shard)):
        e = min(s + shard, m)
        ref = names.take(pa.array(cited[s:e]))
        ref = pa.compute.if_else(pa.array(unresolved[s:e]), pa.scalar(None, pa.string()), ref)
        pq.write_table(pa.table({"citing_id": names.take(pa.array(citing[s:e])), "cited_id": ref}),
                       d / f"part-{i:05d}.parquet")
    deg = np.bincount(cited[~unresolved], minlength=pool)
    done.write_text(json.dumps({"references": int(m), "max_cited": int(deg.max()),
                                        "sum_d2": float((deg.astype(float) ** 2).sum())}))
    return d


def child(args) -> None:
    import pyarrow.compute as pc

    from mapping.evaluation.citation_graphs import citation_graphs
    from sciencemap.progress import current_rss_mb
    from sciencemap.storage import dataset

    logging.basicConfig(level=logging.INFO, format="  %(message)s", stream=sys.stderr)
    refs = dataset(args.table)
    rng = np.random.default_rng(args.seed + 1)
    focal_rows = np.sort(rng.permutation(args.n)[:int(args.n * args.focal_share)])
    focal = ids_of("gen:", args.n).take(pa.array(focal_rows))
    base = current_rss_mb()
    t0 = time.perf_counter()
    g = citation_graphs(refs, focal, kinds=(args.kind,), max_neighbours=args.max_neighbours,
                        max_cited_by=args.max_cited_by or None, max_references=args.max_cited_by or None)[args.kind]
    dt = time.perf_counter() - t0
    info = {k: v for k, v in g.info.items() if k != "external_ids"}
    print(json.dumps({"kind": args.kind, "seconds": round(dt, 2), "peak_rss_mb": round(peak_mb()),
                      "rss_before_mb": round(base), "nodes": g.n, "edges": g.m,
                      "mean_a": float(pc.mean(pa.array(g.a)).as_py() or 0), **info}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000, help="citing papers in the corpus")
    ap.add_argument("--refs", type=int, default=30, help="mean references per paper")
    ap.add_argument("--alpha", type=float, default=2.0, help="Pareto shape of the cited papers' popularity")
    ap.add_argument("--focal-share", type=float, default=0.8)
    ap.add_argument("--max-neighbours", type=int, default=50)
    ap.add_argument("--max-cited-by", type=int, default=0, help="bc/cc hub cap (0 = none)")
    ap.add_argument("--kinds", default="dc,edc,bc,cc")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard", type=int, default=1_000_000, help="rows a Parquet file")
    ap.add_argument("--root", default="/tmp/citation_graphs_bench")
    ap.add_argument("--kind", help=argparse.SUPPRESS)
    ap.add_argument("--table", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.kind:
        return child(args)
    t0 = time.perf_counter()
    d = make_table(Path(args.root), args.n, args.refs, args.alpha, args.seed, args.shard)
    meta = json.loads((d.parent / f"{d.name}.json").read_text())
    print(f"table {d}: {meta['references']:,} references, most cited paper {meta['max_cited']:,} times, "
          f"Σ in-degree² {meta['sum_d2']:.3g} (generated/cached in {time.perf_counter() - t0:.1f} s)", flush=True)
    for kind in args.kinds.split(","):
        cmd = [sys.executable, __file__, "--kind", kind, "--table", str(d)] + sys.argv[1:]
        out = subprocess.run(cmd, capture_output=True, text=True)
        sys.stderr.write(out.stderr)
        if out.returncode:
            print(f"{kind}: failed (rc {out.returncode})")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        extra = {k: r[k] for k in ("external_nodes", "products", "max_column_degree",
                                   "partner_entries_dropped_by_cap", "hub_columns_dropped") if k in r}
        print(f"{kind:>3}: {r['seconds']:8.1f} s  peak RSS {r['peak_rss_mb']:6,} MB (before {r['rss_before_mb']:,} MB)  "
              f"nodes {r['nodes']:,}  edges {r['edges']:,}  {extra}", flush=True)


if __name__ == "__main__":
    main()
