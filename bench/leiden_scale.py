"""Leiden at scale (issue 13): the cluster stage on a generated graph against a bare igraph call.

    flock /tmp/bench.lock nice -n 5 .venv/bin/python bench/leiden_scale.py                # 1M nodes / 20M edges
    nice -n 10 .venv/bin/python bench/leiden_scale.py --nodes 100000 --edges 2000000      # a quick look
    nice -n 10 .venv/bin/python bench/leiden_scale.py --demo runs/base                    # the demo's graph
    nice -n 5 .venv/bin/python bench/leiden_scale.py --warm                               # [cluster] warm_start
    nice -n 5 .venv/bin/python bench/leiden_scale.py --engines                            # [cluster] engine
    nice -n 5 .venv/bin/python bench/leiden_scale.py --merge                              # the small-cluster merge

Scale mode:
1. Generates a kNN-like directed graph with community structure (seeded, NumPy only): --nodes rows,
   --edges // --nodes out-links each; communities of log-normal sizes (median --community papers);
   a link stays inside the paper's community with probability --p-in and then has a higher
   similarity; --outliers of the papers link only at random (they end in small clusters, which the
   merge folds in). Written as a run directory: an edges table of int32 rows (with the knn summary
   in its metadata) and a 1-d vector store (only its row count and paper ids are read).
2. The cluster stage itself (mapping.cluster.run_cluster, one resolution, max_iterations = --iterations):
   reading the arrays, union + CWTS normalisation, igraph construction, Leiden, merge, relabel, write.
3. Reference in the same run: the same graph built again from the arrays (the construction is
   timed separately and left out of both sides), then one bare `igraph.Graph.community_leiden`
   call (CPM, same resolution, seed, beta, weights, n_iterations = the iterations the stage ran).
   Printed: stage time (without the igraph construction) / bare time, target <= 1.2; merge time /
   Leiden time, target <= 0.10; and the quality of both (a check: the same partition gives the
   same value).
4. Quality against iterations: Leiden one iteration at a time (as the stage does) until an
   iteration changes nothing, capped at --stable-cap iterations (said in the output when the cap
   is hit); CPM quality after 1, 2, 3, 5, 10 iterations against the last; target: the stage's
   iteration count within 0.5% of until-stable (not checked when the cap is hit before stable).
Each target and the check get a verdict line (met, MISSED, or not checked with the reason);
--target-ratio, --target-merge and --target-gap change the targets.

Demo mode (--demo RUN): on a run's kNN graph (int32 row edges, or the older string-id edges with
node order = first appearance), for each default resolution: igraph's until-stable call against the
stage's capped loop (identical?), how many iterations until stable, whether a fixed N = 1..5 gives
the same partition, and the quality gap after N iterations; a verdict line per resolution: the
stage's loop gives the until-stable partition.

Parallel mode (--parallel): on the generated graph, the stage with the default resolutions one
after another (workers 1) and with --workers (0 = cores) forked workers sharing the graph; the
sweeps' wall times and their ratio (target >= --target-parallel, 1.7 on 2 cores) and a check that
the two clusters tables are identical.

Warm mode (--warm): on the generated graph (or a copy of --graph-run RUN's kNN graph, real vectors),
the stage with the default resolutions as independent
runs one after another (workers 1) and with `[cluster] warm_start` (--workers, --polish); per
resolution the Leiden CPU of each (the warm one split into the refinement inside the coarser
clusters and the whole-graph polish) and the CPM quality of both partitions on the whole graph;
verdicts: the sweep's wall-time speed-up (target >= --target-warm, 2.0 on 2 cores) and the worst
resolution's quality short of the independent one (target <= --target-gap %; 0 when warm is as good
or better everywhere).

Engines mode (--engines): on the same graphs as --warm, the stage with the default engine (igraph,
--workers forked processes, resolutions in parallel) against `[cluster] engine = "networkit"`
(ParallelLeiden, --parallel-iterations) on 1 thread and on --workers threads (one resolution at a
time, `runs_at_once = 1`), and with the resolutions side by side (`runs_at_once` = --workers, one
thread each: printed against one at a time, and whether its partitions are the 1-thread sweep's); the sweeps' wall and
CPU, and each resolution's CPM quality of both engines' partitions, Leiden's own (before the
small clusters are merged) and the stage's (after); verdicts: networkit's sweep speed-up against
igraph (target >= --target-engine), its speed-up from its threads (>= --target-threads) and the
worst resolution's Leiden quality short of igraph's (<= --target-gap %).

Merge mode (--merge): the small-cluster merge alone, where it is largest: on the generated graph,
Leiden at a fine resolution (--resolution, default 3e-2 in this mode: most clusters below
--min-size), then the merge in a forked process, whose peak memory above what it started with is
the merge's own. Printed: the clusters before and after, the merge's CPU against Leiden's (target
<= --target-merge) and its peak memory against the bytes of the graph arrays and membership it
reads (target <= --target-merge-memory: at 33M papers the merge must fit in the ≈ 28 GB the node
has beside Leiden's ≈ 72 GB, ≈ 3.3 × the 8.4 GB of arrays of 525M edges).

The exit code is 1 when any target is missed or not checked (--no-fail: 0).
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.contracts import EDGES_META_KEY, SCHEMAS, VECTORS_IDS, VECTORS_MATRIX, VECTORS_META
from sciencemap.layout import RunLayout
from sciencemap.progress import current_rss_mb
from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def generate(n: int, m: int, community: float, p_in: float, outliers: float, seed: int):
    """Directed kNN-like lists: (src int32, dst int32, sim float32), k = m // n links per row."""
    rng = np.random.default_rng(seed)
    k = max(1, m // n)
    sizes = np.clip(rng.lognormal(np.log(community), 1.0, size=4 * n // int(community) + 10), 5, 50 * community)
    sizes = sizes.astype(np.int64)
    sizes = sizes[: np.searchsorted(np.cumsum(sizes), n) + 1]
    comm = np.repeat(np.arange(len(sizes)), sizes)[:n]
    comm = comm[rng.permutation(n)]                      # rows in no particular order of community
    order = np.argsort(comm, kind="stable")
    start = np.searchsorted(comm[order], np.arange(len(sizes)))
    size = np.bincount(comm, minlength=len(sizes))
    outlier = rng.random(n) < outliers
    src = np.repeat(np.arange(n, dtype=np.int32), k)
    c = comm[src]
    inside = (rng.random(len(src)) < p_in) & ~outlier[src]
    pick = start[c] + (rng.random(len(src)) * size[c]).astype(np.int64)
    dst = np.where(inside, order[pick], rng.integers(0, n, len(src))).astype(np.int32)
    del c, pick
    same = dst == src
    dst[same] = (dst[same] + 1) % n
    sim = np.where(inside, 0.55 + 0.4 * rng.random(len(src)), 0.25 + 0.35 * rng.random(len(src))).astype(np.float32)
    return src, dst, sim, int(len(sizes))


def write_run(root: Path, src, dst, sim, n: int, parts: int = 8) -> RunLayout:
    """An edges table (int32 rows, knn summary in the metadata) and a 1-d vector store."""
    layout = RunLayout(root)
    d = layout.table("edges")
    d.mkdir(parents=True)
    k = max(1, len(src) // n)
    schema = SCHEMAS["edges"].with_metadata({EDGES_META_KEY: json.dumps({"papers": n, "k": k, "index": "generated"}).encode()})
    rank = np.tile(np.arange(1, k + 1, dtype=np.int16), n)[: len(src)]
    for i, part in enumerate(np.array_split(np.arange(len(src)), parts)):
        s = slice(int(part[0]), int(part[-1]) + 1)
        pq.write_table(pa.table([pa.array(src[s]), pa.array(dst[s]), pa.array(sim[s]), pa.array(rank[s])], schema=schema),
                       d / f"part-{i:05d}.parquet")
    v = layout.vectors_dir
    v.mkdir(parents=True)
    X = np.lib.format.open_memmap(v / VECTORS_MATRIX, mode="w+", dtype=np.float16, shape=(n, 1))
    X[:] = 1
    X.flush()
    del X
    ids = pa.array(np.char.add("gen:", np.arange(n).astype(str)))
    pq.write_table(pa.table({"paper_id": ids}), v / VECTORS_IDS)
    (v / VECTORS_META).write_text(json.dumps({"format": 1, "rows": n, "dim": 1, "dtype": "float16", "normalised": True,
                                              "source": "generated", "source_dir": ""}))
    return layout


def bare_leiden(G, w, resolution: float, seed: int, n_iterations: int, beta: float = 0.01):
    import igraph as ig

    random.seed(seed)
    ig.set_random_number_generator(random)
    return G.community_leiden(objective_function="CPM", weights=w, resolution=resolution, beta=beta,
                              n_iterations=n_iterations)


def quality_curve(G, w, resolution: float, seed: int, cap: int, beta: float = 0.01):
    """One iteration per call (as the stage), until an iteration changes nothing or `cap` ran:
    [(iteration, quality, CPU seconds so far)], converged."""
    import igraph as ig

    random.seed(seed)
    ig.set_random_number_generator(random)
    prev, out, c0 = None, [], time.process_time()
    for it in range(1, cap + 1):
        p = G.community_leiden(objective_function="CPM", weights=w, resolution=resolution, beta=beta,
                               n_iterations=1, initial_membership=prev)
        out.append((it, float(p.quality), time.process_time() - c0))
        print(f"    iteration {it}: quality {p.quality:.6f}, {len(set(p.membership)):,} clusters, "
              f"{out[-1][2]:.1f} CPU s so far, RSS {current_rss_mb():,.0f} MB", flush=True)
        if p.membership == prev:
            return out, True
        prev = p.membership
    return out, False


def scale(args, verdicts: Verdicts) -> None:
    from mapping.cluster import ClusterConfig, load_graph, run_cluster

    root = Path(tempfile.mkdtemp(prefix="leiden_scale_", dir=args.tmp))
    try:
        t = time.perf_counter()
        src, dst, sim, ncomm = generate(args.nodes, args.edges, args.community, args.p_in, args.outliers, args.seed)
        layout = write_run(root / "run", src, dst, sim, args.nodes)
        del src, dst, sim
        print(f"generated {args.nodes:,} nodes, {args.edges:,} directed edges, {ncomm:,} planted communities "
              f"in {time.perf_counter() - t:.1f} s (written to {root})", flush=True)

        print(f"\n== the cluster stage (run_cluster: gamma {args.resolution:g}, max_iterations {args.iterations}, "
              f"min_cluster_size {args.min_size})", flush=True)
        cfg = ClusterConfig(resolutions=[args.resolution], min_cluster_size=args.min_size, seed=args.seed,
                            max_iterations=args.iterations)
        rss0 = current_rss_mb()
        s = run_cluster(cfg, layout)
        r = s["resolutions"][0]
        stage_s = s["total_s"] - s["graph_s"]
        stage_cpu = s["total_cpu_s"] - s["graph_cpu_s"]
        print(f"  wall: load + union + CWTS {s['load_s']:.1f} s | igraph from arrays {s['graph_s']:.1f} s | "
              f"Leiden {r['leiden_s']:.1f} s ({r['iterations']} iterations, quality {r['quality']:.6f}) | "
              f"merge {r['merge_s']:.2f} s | relabel {r['relabel_s']:.2f} s | write {r['write_s']:.2f} s | "
              f"total {s['total_s']:.1f} s", flush=True)
        print(f"  CPU: total {s['total_cpu_s']:.1f} s, of which igraph construction {s['graph_cpu_s']:.1f} s, "
              f"Leiden {r['leiden_cpu_s']:.1f} s, merge {r['merge_cpu_s']:.2f} s", flush=True)
        print(f"  {s['edges_undirected']:,} undirected edges; {r['clusters_leiden']:,} Leiden clusters -> {r['clusters']:,} "
              f"after merging (smallest {r['smallest']}, largest {r['largest']:,}, stranded {r['stranded_small']}); "
              f"RSS {rss0:,.0f} -> {r['rss_mb']:,} MB, peak {peak_mb():,.0f} MB", flush=True)

        print("\n== reference: the same graph from the arrays, one bare community_leiden call", flush=True)
        c = time.process_time()
        graph = load_graph(layout)
        c_load = time.process_time() - c
        rss1 = current_rss_mb()
        t, c = time.perf_counter(), time.process_time()
        G = graph.igraph()
        t_build, c_build = time.perf_counter() - t, time.process_time() - c
        print(f"  arrays (read + union + CWTS) {c_load:.1f} CPU s; igraph construction from arrays {c_build:.1f} CPU s "
              f"({t_build:.1f} s wall; {graph.m:,} edges, RSS {rss1:,.0f} -> {current_rss_mb():,.0f} MB)", flush=True)
        if args.old_construction:
            import igraph as ig

            c = time.process_time()
            G_old = ig.Graph(n=graph.n, edges=np.column_stack([graph.lo, graph.hi]).tolist(), directed=False)
            G_old.es["weight"] = graph.w.tolist()
            c_old = time.process_time() - c
            print(f"  the former construction (edge list and weights as Python lists) {c_old:.1f} CPU s "
                  f"= {c_old / c_build:.1f}x, peak RSS {peak_mb():,.0f} MB", flush=True)
            del G_old
        t, c = time.perf_counter(), time.process_time()
        bare = bare_leiden(G, graph.w, args.resolution, args.seed, r["iterations"])
        bare_s, bare_cpu = time.perf_counter() - t, time.process_time() - c
        print(f"  bare community_leiden, n_iterations={r['iterations']}: {bare_cpu:.1f} CPU s ({bare_s:.1f} s wall), "
              f"quality {bare.quality:.6f} (the stage's {r['quality']:.6f})", flush=True)

        print(f"\n== quality against iterations (until stable, capped at {args.stable_cap})", flush=True)
        curve, converged = quality_curve(G, graph.w, args.resolution, args.seed, args.stable_cap)
        last = curve[-1][1]
        print(f"  {'until stable' if converged else 'cap reached, NOT stable'} after {curve[-1][0]} iterations, "
              f"quality {last:.6f}, {curve[-1][2]:.1f} CPU s")
        for it, q, sec in curve:
            if it in (1, 2, 3, 5, 10) or it == r["iterations"]:
                print(f"  N={it:>2}: quality {q:.6f}, {100 * (last - q) / abs(last):.3f}% below the last, "
                      f"{sec:.1f} CPU s ({sec / curve[-1][2]:.0%} of the time to the last)")

        gap = next((100 * (last - q) / abs(last) for it, q, _ in curve if it == r["iterations"]), float("nan"))
        print("\n== figures (CPU seconds of this process: Leiden is single-threaded, and CPU time does not count "
              "the other jobs of a shared machine; wall in brackets)")
        print(f"  stage without igraph construction / bare Leiden: {stage_cpu:.1f} / {bare_cpu:.1f} CPU s = "
              f"{ratio(stage_cpu, bare_cpu):.2f} [wall {stage_s:.1f} / {bare_s:.1f} s = {ratio(stage_s, bare_s):.2f}]")
        print(f"  stage Leiden loop alone / bare Leiden: {r['leiden_cpu_s']:.1f} / {bare_cpu:.1f} CPU s = "
              f"{ratio(r['leiden_cpu_s'], bare_cpu):.2f}")
        print(f"  merge / Leiden: {r['merge_cpu_s']:.2f} / {r['leiden_cpu_s']:.1f} CPU s = "
              f"{ratio(r['merge_cpu_s'], r['leiden_cpu_s']):.4f} [wall {r['merge_s']:.2f} / {r['leiden_s']:.1f} s]")
        print(f"  quality at the stage's {r['iterations']} iterations: {gap:.3f}% below "
              f"{'until-stable' if converged else f'the {args.stable_cap}-iteration cap'}")
        print(f"  igraph construction from arrays: {s['graph_cpu_s']:.1f} CPU s in the stage, {c_build:.1f} here; "
              f"peak RSS {peak_mb():,.0f} MB")
        verdicts.check("bare Leiden gives the stage's partition quality", abs(bare.quality - r["quality"]) < 1e-12,
                       f"bare {bare.quality:.6f}, stage {r['quality']:.6f}")
        verdicts.at_most("stage without igraph construction / bare Leiden, CPU s", ratio(stage_cpu, bare_cpu),
                         args.target_ratio, "{:.2f}", reason="a CPU time of 0 s: the graph is too small to time")
        verdicts.at_most("merge / Leiden, CPU s", ratio(r["merge_cpu_s"], r["leiden_cpu_s"]), args.target_merge,
                         "{:.4f}", reason="a CPU time of 0 s: the graph is too small to time")
        gap_name = f"quality gap at the stage's {r['iterations']} iterations to until-stable, %"
        if converged:
            verdicts.at_most(gap_name, gap, args.target_gap, "{:.3f}",
                             reason=f"the curve has no point at iteration {r['iterations']}")
        else:
            verdicts.not_checked(gap_name, f"not stable within --stable-cap {args.stable_cap} iterations: raise it",
                                 f"<= {args.target_gap:.3f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def parallel(args, verdicts: Verdicts) -> None:
    """The cluster stage's resolution sweep one after another (workers 1) and in parallel (workers =
    cores, or --workers) on the same generated graph: wall time of the sweeps and identical tables."""
    import os

    from mapping.cluster import DEFAULT_RESOLUTIONS, ClusterConfig, run_cluster
    from sciencemap.storage import read_table

    root = Path(tempfile.mkdtemp(prefix="leiden_parallel_", dir=args.tmp))
    try:
        src, dst, sim, ncomm = generate(args.nodes, args.edges, args.community, args.p_in, args.outliers, args.seed)
        layout = write_run(root / "run", src, dst, sim, args.nodes)
        del src, dst, sim
        workers = args.workers or os.cpu_count() or 1
        print(f"generated {args.nodes:,} nodes, {args.edges:,} directed edges; resolutions {DEFAULT_RESOLUTIONS}, "
              f"{args.iterations} iterations at most; {os.cpu_count()} cores", flush=True)
        sweeps, tables = {}, {}
        for label, w in (("one after another", 1), (f"{workers} workers", workers)):
            s = run_cluster(ClusterConfig(resolutions=list(DEFAULT_RESOLUTIONS), min_cluster_size=args.min_size,
                                          seed=args.seed, max_iterations=args.iterations, workers=w), layout)
            sweeps[label] = s
            tables[label] = read_table(layout.table("clusters"))
            print(f"  {label}: sweep {s['sweep_s']:.1f} s wall, {s['total_cpu_s']:.1f} CPU s in all; clusters "
                  f"{[r['clusters'] for r in s['resolutions']]}; Leiden s a resolution "
                  f"{[r['leiden_s'] for r in s['resolutions']]}; peak RSS of this process {peak_mb():,.0f} MB",
                  flush=True)
        (a, sa), (b, sb) = sweeps.items()
        speedup = sa["sweep_s"] / sb["sweep_s"]
        print(f"  speed-up of the sweep: {sa['sweep_s']:.1f} / {sb['sweep_s']:.1f} s = {speedup:.2f}x", flush=True)
        verdicts.check("parallel resolutions give the sequential clusters table", tables[a].equals(tables[b]))
        verdicts.at_least(f"sweep speed-up, {b} / one after another", speedup, args.target_parallel, "{:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def graph_for_comparison(args, root: Path) -> tuple[RunLayout, str]:
    """A run directory under `root` holding the graph both sweeps cluster: a copy of --graph-run's
    kNN graph (its own clusters table is not touched), else the generated one."""
    if args.graph_run:
        from mapping.cluster import graph_size
        from sciencemap.storage import read_table

        edges = read_table(RunLayout(Path(args.graph_run)).table("edges"), columns=["src", "dst", "similarity"])
        src, dst, sim = (edges.column(c).to_numpy() for c in ("src", "dst", "similarity"))
        del edges
        n = graph_size(RunLayout(Path(args.graph_run)), int(max(src.max(), dst.max())))
        what = f"the kNN graph of {args.graph_run}: {n:,} nodes, {len(src):,} directed edges"
    else:
        src, dst, sim, _ = generate(args.nodes, args.edges, args.community, args.p_in, args.outliers, args.seed)
        n = args.nodes
        what = f"generated {n:,} nodes, {args.edges:,} directed edges"
    return write_run(root / "run", src, dst, sim, n), what


def sweep_and_read(layout: RunLayout, cfg, label: str) -> tuple[dict, dict]:
    """run_cluster with `cfg`; (its summary, {resolution: membership by row}), with one printed line."""
    import pyarrow.compute as pc

    from mapping.cluster import run_cluster
    from sciencemap.storage import read_table

    s = run_cluster(cfg, layout)
    t = read_table(layout.table("clusters"))
    members = {r: t.filter(pc.equal(t["resolution"], r)).sort_by("row")["cluster"].to_numpy()
               for r in cfg.resolutions}
    print(f"  {label}: sweep {s['sweep_s']:.1f} s wall, {s['total_cpu_s']:.1f} CPU s in all (graph "
          f"{s['graph_cpu_s']:.1f} CPU s, {s['graph_s']:.1f} s); Leiden CPU s a resolution "
          f"{[r['leiden_cpu_s'] for r in s['resolutions']]}; Leiden wall s {[r['leiden_s'] for r in s['resolutions']]}; "
          f"clusters {[r['clusters'] for r in s['resolutions']]}; peak RSS of this process {peak_mb():,.0f} MB",
          flush=True)
    return s, members


def quality_gaps(layout: RunLayout, res: list[float], ref: dict, other: dict, names: tuple[str, str]) -> float:
    """Each resolution's CPM quality of both partitions on the whole graph, printed; the worst
    relative gap of `other` below `ref` in percent (0 when it is as good or better everywhere)."""
    from mapping.cluster import cpm_quality, load_graph

    graph = load_graph(layout)
    worst = 0.0
    for r in res:
        qa = cpm_quality(ref[r], graph.lo, graph.hi, graph.w, r)
        qb = cpm_quality(other[r], graph.lo, graph.hi, graph.w, r)
        gap = 100 * (qb - qa) / abs(qa)
        worst = min(worst, gap)
        print(f"  γ = {r:g}: CPM quality {names[0]} {qa:.5f}, {names[1]} {qb:.5f} ({gap:+.2f} %)", flush=True)
    return max(0.0, -worst)


def warm(args, verdicts: Verdicts) -> None:
    """The cluster stage's sweep with independent resolutions (one after another) against
    `warm_start` (each finer resolution from the coarser one's clusters, refined inside them in
    --workers processes, then --polish whole-graph iterations) on the same generated graph: CPU
    and wall time of the sweeps, and each resolution's CPM quality on the whole graph."""
    import os

    from mapping.cluster import DEFAULT_RESOLUTIONS, ClusterConfig

    root = Path(tempfile.mkdtemp(prefix="leiden_warm_", dir=args.tmp))
    try:
        layout, what = graph_for_comparison(args, root)
        workers = args.workers or os.cpu_count() or 1
        res = sorted(DEFAULT_RESOLUTIONS)
        print(f"{what}; resolutions {res}, {args.iterations} iterations at most on graphs of "
              f"{args.stable_below:,} undirected edges or more; {os.cpu_count()} cores", flush=True)
        sweeps, members = {}, {}
        for label, extra in (("independent, one after another", dict(workers=1)),
                             (f"warm start, {workers} workers, {args.polish} polish", dict(
                                 workers=workers, warm_start=True, polish_iterations=args.polish))):
            cfg = ClusterConfig(resolutions=list(res), min_cluster_size=args.min_size, seed=args.seed,
                                max_iterations=args.iterations, stable_below=args.stable_below, **extra)
            sweeps[label], members[label] = sweep_and_read(layout, cfg, label)
        (a, sa), (b, sb) = sweeps.items()
        for ra, rb in zip(sa["resolutions"], sb["resolutions"]):
            inside = rb.get("refine_within")
            split = (f"refinement inside {inside['parents']:,} clusters {inside['cpu_s']:.1f} CPU s ({inside['wall_s']:.1f} s "
                     f"wall, {inside['edges_inside'] / max(1, sb['edges_undirected']):.1%} of the edges) + whole graph "
                     f"{rb['leiden_cpu_s'] - inside['cpu_s']:.1f} CPU s, {rb['iterations']} iteration(s)"
                     if inside else f"as independent: {rb['leiden_cpu_s']:.1f} CPU s")
            print(f"  γ = {ra['resolution']:g}: independent Leiden {ra['leiden_cpu_s']:.1f} CPU s, {ra['iterations']} "
                  f"iterations; warm: {split}", flush=True)
        short = quality_gaps(layout, res, members[a], members[b], ("independent", "warm"))
        print(f"  CPU of the sweep (graph construction left out): {sb['total_cpu_s'] - sb['graph_cpu_s']:.1f} / "
              f"{sa['total_cpu_s'] - sa['graph_cpu_s']:.1f} s; wall {sb['sweep_s']:.1f} / {sa['sweep_s']:.1f} s = "
              f"{sa['sweep_s'] / sb['sweep_s']:.2f}x faster", flush=True)
        verdicts.at_least("warm-start sweep speed-up (wall)", sa["sweep_s"] / sb["sweep_s"], args.target_warm, "{:.2f}x")
        verdicts.at_most("warm-start CPM quality short of independent, worst resolution", short,
                         args.target_gap, "{:.2f}%")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def engines(args, verdicts: Verdicts) -> None:
    """The cluster stage's sweep with igraph (the default engine: seeded, resolutions in --workers
    forked processes) against `engine = "networkit"` (ParallelLeiden on every thread, one resolution
    at a time, --parallel-iterations) on 1 thread and on --workers threads, same graph: wall and CPU
    of each sweep, networkit's speed-up from its threads, and each resolution's CPM quality."""
    import os

    from mapping.cluster import DEFAULT_RESOLUTIONS, ClusterConfig

    root = Path(tempfile.mkdtemp(prefix="leiden_engines_", dir=args.tmp))
    try:
        layout, what = graph_for_comparison(args, root)
        workers = args.workers or os.cpu_count() or 1
        res = sorted(DEFAULT_RESOLUTIONS)
        print(f"{what}; resolutions {res}; igraph: {args.iterations} iterations at most on graphs of "
              f"{args.stable_below:,} undirected edges or more; networkit: {args.parallel_iterations} iterations; "
              f"{os.cpu_count()} cores", flush=True)
        base = dict(resolutions=list(res), min_cluster_size=args.min_size, seed=args.seed,
                    max_iterations=args.iterations, stable_below=args.stable_below)
        nk = dict(engine="networkit", parallel_iterations=args.parallel_iterations)
        runs = [(f"igraph, {workers} workers", dict(workers=workers)),
                ("networkit, 1 thread", dict(nk, workers=1, runs_at_once=1))]
        side = f"networkit, {workers} threads, runs side by side"
        if workers > 1:
            runs.append((f"networkit, {workers} threads", dict(nk, workers=workers, runs_at_once=1)))
            runs.append((side, dict(nk, workers=workers, runs_at_once=workers)))
        sweeps, members = {}, {}
        for label, extra in runs:
            sweeps[label], members[label] = sweep_and_read(layout, ClusterConfig(**base, **extra), label)
        ig_label, one = list(sweeps)[0], "networkit, 1 thread"
        many = f"networkit, {workers} threads" if workers > 1 else one
        if side in sweeps:
            # as many runs at once as threads, one thread each, against one run at a time on every thread
            # (runs_at_once = 0 picks between them and the counts in between: networkit_runs)
            ss, st = sweeps[side], sweeps[many]
            same = ss["reproducible"] and all(np.array_equal(members[side][r], members[one][r]) for r in res)
            print(f"  networkit runs side by side ({ss['workers']} at once, threads "
                  f"{[r['threads'] for r in ss['resolutions']]}): sweep {ss['sweep_s']:.1f} s, CPU "
                  f"{ss['total_cpu_s'] - ss['graph_cpu_s']:.1f} s, against one at a time on {workers} threads "
                  f"{st['sweep_s']:.1f} s, CPU {st['total_cpu_s'] - st['graph_cpu_s']:.1f} s = "
                  f"{st['sweep_s'] / ss['sweep_s']:.2f}x; "
                  + ("the 1-thread sweep's partitions, bit for bit" if same else
                     "partitions not those of the 1-thread sweep" + ("" if ss["reproducible"] else
                                                                     " (more than one thread a run)")), flush=True)
        # the engines' own result: Leiden's CPM quality before the small clusters are merged (the
        # merge is the same for both, and at the finest resolutions it drives the quality near 0)
        short = 0.0
        for ri, rn in zip(sweeps[ig_label]["resolutions"], sweeps[many]["resolutions"]):
            gap = 100 * (rn["quality"] - ri["quality"]) / abs(ri["quality"])
            short = max(short, -gap)
            print(f"  γ = {ri['resolution']:g}: Leiden's CPM quality igraph {ri['quality']:.5f}, networkit "
                  f"{rn['quality']:.5f} ({gap:+.2f} %); clusters {ri['clusters_leiden']:,} / {rn['clusters_leiden']:,}",
                  flush=True)
        quality_gaps(layout, res, members[ig_label], members[many], ("igraph", "networkit"))
        si, s1, sn = sweeps[ig_label], sweeps[one], sweeps[many]
        leiden = {k: sum(r["leiden_s"] for r in s["resolutions"]) for k, s in sweeps.items()}
        print(f"  sweep wall: igraph {si['sweep_s']:.1f} s, networkit {sn['sweep_s']:.1f} s = "
              f"{si['sweep_s'] / sn['sweep_s']:.2f}x faster; networkit's Leiden wall on 1 / {workers} threads: "
              f"{leiden[one]:.1f} / {leiden[many]:.1f} s = {leiden[one] / leiden[many]:.2f}x; CPU of the sweeps "
              f"(graph left out): igraph {si['total_cpu_s'] - si['graph_cpu_s']:.1f}, networkit 1 thread "
              f"{s1['total_cpu_s'] - s1['graph_cpu_s']:.1f}, {workers} threads {sn['total_cpu_s'] - sn['graph_cpu_s']:.1f} s",
              flush=True)
        verdicts.at_least(f"networkit sweep speed-up (wall) against igraph with {workers} workers",
                          si["sweep_s"] / sn["sweep_s"], args.target_engine, "{:.2f}x")
        verdicts.at_least(f"networkit Leiden speed-up from {workers} threads", leiden[one] / leiden[many],
                          args.target_threads, "{:.2f}x")
        verdicts.at_most("networkit Leiden CPM quality short of igraph, worst resolution", short, args.target_gap,
                         "{:.2f}%")
    finally:
        shutil.rmtree(root, ignore_errors=True)


_MERGE_INPUT: tuple | None = None    # (membership, lo, hi, w, min_size) the forked merge reads


def _merge_in_child() -> dict:
    membership, lo, hi, w, min_size = _MERGE_INPUT
    from mapping.cluster import merge_small_clusters

    rss0, c = current_rss_mb(), time.process_time()
    out, stranded = merge_small_clusters(membership, lo, hi, w, min_size)
    return {"cpu_s": time.process_time() - c, "peak_mb": peak_mb() - rss0, "clusters": int(len(np.unique(out))),
            "stranded": int(stranded)}


def merge(args, verdicts: Verdicts) -> None:
    """--merge: the small-cluster merge alone, at a fine resolution (module docstring)."""
    global _MERGE_INPUT
    import multiprocessing

    from mapping.cluster import build_graph, leiden

    t = time.perf_counter()
    src, dst, sim, ncomm = generate(args.nodes, args.edges, args.community, args.p_in, args.outliers, args.seed)
    graph = build_graph(src, dst, sim, args.nodes)
    del src, dst, sim
    print(f"generated {args.nodes:,} nodes, {args.edges:,} directed edges, {ncomm:,} planted communities; "
          f"{graph.m:,} undirected edges in {time.perf_counter() - t:.1f} s", flush=True)
    c = time.process_time()
    mem, run = leiden(graph.igraph(), graph.w, args.resolution, args.seed, args.iterations)
    leiden_cpu = time.process_time() - c
    sizes = np.bincount(mem)
    small = int(((sizes > 0) & (sizes < args.min_size)).sum())
    print(f"Leiden (igraph, gamma {args.resolution:g}, {run['iterations']} iterations): {leiden_cpu:.1f} CPU s, "
          f"{len(sizes):,} clusters, {small:,} below {args.min_size}", flush=True)
    arrays_mb = (graph.lo.nbytes + graph.hi.nbytes + graph.w.nbytes + mem.nbytes) / 2**20
    _MERGE_INPUT = (mem, graph.lo, graph.hi, graph.w, args.min_size)
    try:
        with multiprocessing.get_context("fork").Pool(1) as pool:   # a fresh peak: the merge's own
            r = pool.apply(_merge_in_child)
    finally:
        _MERGE_INPUT = None
    print(f"merge: {r['clusters']:,} clusters after ({r['stranded']:,} small ones stranded); "
          f"{r['cpu_s']:.2f} CPU s; peak {r['peak_mb']:,.0f} MB above its start, "
          f"the arrays it reads {arrays_mb:,.0f} MB", flush=True)
    verdicts.at_most("merge / Leiden, CPU s", ratio(r["cpu_s"], leiden_cpu), args.target_merge, "{:.4f}",
                     reason="a CPU time of 0 s: the graph is too small to time")
    verdicts.at_most("merge peak memory / the graph arrays and membership", ratio(r["peak_mb"], arrays_mb),
                     args.target_merge_memory, "{:.2f}", reason="no arrays")


def ratio(a: float, b: float) -> float:
    """a / b; NaN when b is 0 (a tiny graph's CPU time can round to nothing)."""
    return a / b if b > 0 else float("nan")


def demo(args, verdicts: Verdicts) -> None:
    import pandas as pd

    from mapping.cluster import (DEFAULT_RESOLUTIONS, ClusterConfig, build_graph, iterations_for, leiden,
                                 load_graph)

    run = Path(args.demo)
    t = pq.read_table(run / "edges", columns=["src", "dst", "similarity"])
    if pa.types.is_integer(t.schema.field("src").type):
        graph = load_graph(RunLayout(run))
        how = "int32 rows"
    else:   # the older edges: paper ids, node order = first appearance in (src, dst)
        m = t.num_rows
        idx, ids = pd.factorize(np.concatenate([t.column("src").to_numpy(zero_copy_only=False),
                                                t.column("dst").to_numpy(zero_copy_only=False)]))
        graph = build_graph(idx[:m], idx[m:], t.column("similarity").to_numpy(), len(ids))
        how = "paper ids, nodes in order of first appearance"
    G = graph.igraph()
    cap = args.iterations if args.iterations_given else iterations_for(graph.m, ClusterConfig())   # the stage's
    print(f"{run}: {graph.n:,} nodes, {graph.m:,} undirected edges ({how}); seed {args.seed}, beta 0.01, "
          f"stage cap max_iterations={cap}")
    all_same = True
    for r in DEFAULT_RESOLUTIONS:
        t0 = time.perf_counter()
        stable = bare_leiden(G, graph.w, r, args.seed, -1)
        t_stable = time.perf_counter() - t0
        t0 = time.perf_counter()
        mem, info = leiden(G, graph.w, r, args.seed, cap)
        t_loop = time.perf_counter() - t0
        same = bool(np.array_equal(mem, stable.membership))
        all_same &= same
        verdicts.check(f"gamma {r:g}: the stage's loop gives the until-stable partition", same,
                       "" if info["converged"] else f"the stage's cap of {cap} iterations reached")
        fixed = {n: bare_leiden(G, graph.w, r, args.seed, n).membership == stable.membership for n in range(1, 6)}
        q = info["qualities"]
        gaps = ", ".join(f"N={n}: {100 * (stable.quality - q[n - 1]) / abs(stable.quality):.3f}%"
                         for n in (1, 2, 3, 5) if n <= len(q))
        print(f"gamma {r:g}: until stable after {info['iterations']} iterations "
              f"({'converged' if info['converged'] else 'CAP REACHED'}); stage loop == n_iterations=-1: "
              f"{'yes' if same else 'NO'}; time {t_loop:.2f} s vs {t_stable:.2f} s; fixed N == -1: "
              + " ".join(f"{n}:{'yes' if v else 'no'}" for n, v in fixed.items()))
        print(f"    quality gap to until-stable after N iterations: {gaps}")
    print(f"all resolutions identical to until-stable: {'yes' if all_same else 'NO'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--edges", type=int, default=20_000_000, help="directed kNN edges (edges // nodes per node)")
    ap.add_argument("--community", type=float, default=200.0, help="median planted community size")
    ap.add_argument("--p-in", type=float, default=0.8, help="share of a paper's links inside its community")
    ap.add_argument("--outliers", type=float, default=0.02, help="share of papers linking only at random")
    ap.add_argument("--resolution", type=float, default=None, help="default 3e-3 (--merge: 3e-2)")
    ap.add_argument("--iterations", type=int, default=None,
                    help="the stage's max_iterations (default 3; in --demo: the stage's cap for that graph's size)")
    ap.add_argument("--stable-cap", type=int, default=30, help="cap of the until-stable run for the quality curve")
    ap.add_argument("--min-size", type=int, default=5)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--old-construction", action="store_true",
                    help="also time the former construction (Python lists of edges and weights)")
    ap.add_argument("--tmp", default=None, help="directory for the generated run (default: the system's)")
    ap.add_argument("--demo", help="a run directory: compare the stage's capped loop with until-stable on its graph")
    ap.add_argument("--target-ratio", type=float, default=1.2,
                    help="stage (without the igraph construction) / bare Leiden CPU time, at most")
    ap.add_argument("--target-merge", type=float, default=0.10, help="merge / Leiden CPU time, at most")
    ap.add_argument("--merge", action="store_true", help="instead: the small-cluster merge alone at a fine resolution")
    ap.add_argument("--target-merge-memory", type=float, default=3.0,
                    help="--merge: the merge's peak memory / the bytes of the arrays it reads, at most (the node's "
                         "budget: ≈ 28 GB beside Leiden's 72 at 525M edges, whose arrays are 8.4 GB: 3.3)")
    ap.add_argument("--target-gap", type=float, default=0.5,
                    help="quality at the stage's iterations below until-stable, at most (percent)")
    ap.add_argument("--parallel", action="store_true",
                    help="instead: the default resolutions one after another and in parallel workers")
    ap.add_argument("--workers", type=int, default=0, help="--parallel: workers (0 = cores)")
    ap.add_argument("--target-parallel", type=float, default=1.7, help="--parallel: sweep speed-up, at least")
    ap.add_argument("--warm", action="store_true",
                    help="independent resolutions against [cluster] warm_start on the generated graph")
    ap.add_argument("--polish", type=int, default=1, help="--warm: polish_iterations")
    ap.add_argument("--graph-run", help="--warm: a run directory whose kNN graph (a copy) replaces the generated one")
    ap.add_argument("--stable-below", type=int, default=1_000_000,
                    help="--warm: [cluster] stable_below (1 = the large-graph regime of --iterations on any graph)")
    ap.add_argument("--target-warm", type=float, default=2.0, help="--warm: sweep speed-up (wall), at least")
    ap.add_argument("--engines", action="store_true",
                    help="igraph (--workers processes) against [cluster] engine = networkit (1 and --workers threads)")
    ap.add_argument("--parallel-iterations", type=int, default=None,
                    help="--engines: [cluster] parallel_iterations (default: the setting's default)")
    ap.add_argument("--target-engine", type=float, default=1.2,
                    help="--engines: networkit's sweep speed-up (wall) against igraph's, at least")
    ap.add_argument("--target-threads", type=float, default=1.7,
                    help="--engines: networkit's Leiden speed-up from --workers threads over 1, at least")
    Verdicts.add_arguments(ap)
    args = ap.parse_args()
    args.iterations_given = args.iterations is not None
    if args.iterations is None:
        args.iterations = 3
    if args.resolution is None:
        args.resolution = 0.03 if args.merge else 0.003
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    logging.getLogger("sciencemap.progress").setLevel(logging.INFO)
    verdicts = Verdicts()
    if args.demo:
        demo(args, verdicts)
    elif args.merge:
        merge(args, verdicts)
    elif args.parallel:
        parallel(args, verdicts)
    elif args.warm:
        warm(args, verdicts)
    elif args.engines:
        if args.parallel_iterations is None:
            from mapping.cluster import PARALLEL_ITERATIONS

            args.parallel_iterations = PARALLEL_ITERATIONS
        engines(args, verdicts)
    else:
        scale(args, verdicts)
    return verdicts.finish(args.no_fail)


if __name__ == "__main__":
    sys.exit(main())
