"""The whole pipeline, ingest to evaluate, on generated corpora of increasing size (issue 27):
each stage's wall time, CPU time and peak memory per size, the fitted growth of each stage, and
the projected run at 33M papers on one node (16 cores, 128 GB, 1 H100).

    nice -n 5 .venv/bin/python bench/scale_run.py --sizes 250000 500000 1000000 2000000
    .venv/bin/python bench/scale_run.py --sizes 5000 10000 --no-fail     # a look at the machinery
    .venv/bin/python bench/scale_run.py --sizes 2000000 --sizes-from earlier.json   # add a size to earlier ones
    .venv/bin/python bench/scale_run.py --sizes 2000000 --json r.json --resume  # go on after an interruption

Per size, in its own run directory under --root (inputs cached between calls):
1. inputs: bench/synthetic.py write_input_corpus, S2ORC JSON Lines with references (lognormal
   counts, mean ~35; CitationModel: preferential, 70% in the topic, 30% cited-only), a seeded
   --fulltext-share with full-text bodies (the training corpus, role train) and the rest title,
   abstract, fields and bibliography (the map corpus, role map);
2. ingest, importance: the Spark jobs (local mode, every core), as `python jobs/<stage>.py`;
3. train, embed: GPU stages, not run on a CPU: their 33M time comes from the GPU figures of
   bench/gpu_throughput.py (--gpu-json: the embed job's rate after its first batch, plus that
   batch's start; else the figures measured there on an H200 on 2026-12-04, named below) and the
   training budget; the vectors the next stages read are written by
   synthetic.write_input_vectors (the topic mixture of each paper: stand-ins, marked as such);
4. knn, cluster, render (topics, layout, PNG, HTML), evaluate (with the citation links): the jobs;
   knn with --ef-search fixed at the real-vector value (the stand-ins' near-ties would make the
   recall tuning, not the search, the thing measured);
5. with --ingest-by-role: the map corpus and the training corpus each ingested alone (one input,
   its own run under by_role/), which splits the projected ingest row between the two corpora.
Every stage is its own child process; its peak memory is the peak of the summed PSS of it and
every process under it (sampled from /proc every 0.5 s: the Spark JVM and Python workers of
ingest and importance included), at least os.wait4's ru_maxrss, and beside it the same sum without
file-backed pages ("anon": the page cache of files read through mmap, such as the vector store, is
the kernel's to take back); its CPU time theirs in all.
The load average is printed before and after each stage: figures from a loaded machine are not
the stage's. --json is rewritten after every stage (marked "complete": false until the end), so an
interrupted run keeps what it measured; --resume reads it back and, for a size whose inputs and
settings are unchanged, keeps its run directory and runs only the stages not yet measured (each
row names the commit it was measured at).

Projection to --project-papers (33M) on the node: per stage, the work (CPU seconds) = a + b n^e
fitted over the sizes (a: the fixed cost, start-up and imports; e: the stage's model, 1 for
linear stages, 1.05 for n log n ones, or the log-log slope seen between the two largest sizes
where that is steeper by more than 0.15), at N divided by the parallelism seen at the largest size
(p = CPU s / wall s there) and by the node's speed-up over this machine (Amdahl's serial share
s = (c/p - 1)/(c - 1) on c cores here, --efficiency per added core). The work, not the wall time,
is fitted: a loaded machine or another number of worker processes (the cluster stage's
memory_gb) moves one size's wall time and not another's.
Memory: the same fit of each stage's peak with e = 1, at N (without file-backed pages where every
size has that figure). Render and evaluate are measured one after the other, each a job of its
own, and projected side by side, as the pipeline runs them ([evaluate] beside_render): the longer
of the two, or their CPU work over the node's cores where that is longer, and their peaks summed.

The cluster stage runs its Leiden resolutions in as many worker processes as fit in
--stage-memory-gib (its [cluster] memory_gb, by default the peak target below): a stage that keeps
to a budget on a shared machine, which the measured peak then checks. --engine networkit runs each
resolution on every core instead ([cluster] engine; docs/scale.md).

Targets (--target-…): every stage's peak at the largest size <= 12 GiB when that size is >= 2M;
the projected total <= 4 h and every projected peak <= 100 GB. A verdict line each; exit 1 on a
miss or an unchecked target (--no-fail: 0).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parent.parent
CPU_STAGES = ("ingest", "importance", "knn", "cluster", "render", "evaluate")
ROLES = ("map", "train")   # the generated inputs' two corpora; --ingest-by-role ingests each alone
NODE_STAGES = ("knn", "cluster", "render", "evaluate")   # their work is on the map's nodes (the embed row too)
# The growth model of each stage (the exponent of n its time follows at least) and why.
MODEL = {"ingest": (1.0, "linear in papers and references (a pass over the files, a shuffle)"),
         "importance": (1.0, "linear in mentions and pairs (Spark shuffles)"),
         "knn": (1.05, "n log n (HNSW: log n a query; ef tuned per size)"),
         "cluster": (1.0, "linear in edges a Leiden iteration, fixed iterations at scale"),
         "render": (1.0, "linear in papers (topics, layout of the topics, datashader)"),
         "evaluate": (1.0, "linear in links (citation graphs, sampled paths)")}
# bench/gpu_throughput.py --docs 60000 on an H200, 2026-12-04 (random BERT-base-sized weights, bf16,
# max_length 256): used when --gpu-json is not given. A long job runs at its rate after the first
# batch; the whole loop's rate (402,664) was mostly that batch's start, which a 33M job pays once.
GPU_EMBED_TOKENS_PER_S = 2_136_100       # the embed job after its first batch (bare compiled forward: 2,192,666)
GPU_EMBED_START_S = 28.2                 # its first batch, that far into the loop
TOKENS_PER_PAPER = 232                   # real tokens per PubMed title + abstract at max_length 256, same run
# A title-only paper (a cited-only paper of the map: no abstract) in those tokens' GPU work: the
# sample's PubMed titles, 25.7 real tokens (the demo's 12,704 cited-only papers, real reference
# titles: 21.3), x 1.088 / 1.011 for the CUDA shape's padding of such batches against that of
# titles + abstracts (bench/feed_throughput.py's feed; the forward's work is the padded tokens).
# Derived: the H200's rate was measured on titles + abstracts only (bench/gpu_throughput.py --titles-only).
TITLE_ONLY_TOKENS = 28
NODE_CORES, NODE_MEMORY_GB = 16, 128


def embed_tokens(big: dict, nodes_ratio: float) -> tuple[float, str]:
    """(GPU tokens a corpus paper, what they are): the map's nodes a paper, the papers with an
    abstract at TOKENS_PER_PAPER and the title-only ones (cited-only papers; the share of the
    largest size's run, all of them beyond its corpus share where a rule keeps fewer) at
    TITLE_ONLY_TOKENS. A size measured before the title-only papers were counted: every node at
    TOKENS_PER_PAPER."""
    if big.get("title_only") is None:
        return nodes_ratio * TOKENS_PER_PAPER, f"{nodes_ratio:.2f} nodes a paper x {TOKENS_PER_PAPER} tokens"
    full = (big["nodes"] - big["title_only"]) / big["papers"]
    titles = max(0.0, nodes_ratio - full)
    return (full * TOKENS_PER_PAPER + titles * TITLE_ONLY_TOKENS,
            f"a paper's {full:.2f} nodes with an abstract x {TOKENS_PER_PAPER} tokens + {titles:.2f} title-only "
            f"nodes x {TITLE_ONLY_TOKENS} (derived: see TITLE_ONLY_TOKENS)")


def gpu_embed_figures(path: Path | None) -> tuple[float, float, str]:
    """(real tokens/s, start seconds, basis) of the embed job on a GPU: from bench/gpu_throughput.py's
    --json output when given (its row "embed job after its first batch" and that batch's time; the
    loop's rate with no start from a file written before that row existed), else the H200 figures
    above."""
    if path is None:
        return (GPU_EMBED_TOKENS_PER_S, GPU_EMBED_START_S, "bench/gpu_throughput.py on an H200, 2026-12-04: the "
                "embed job after its first batch, and that batch's start")
    figures = json.loads(path.read_text())
    rows = {r["name"]: r for r in figures["rows"]}
    start = (figures.get("embed_summary") or {}).get("first_batch_seconds")
    if "embed job after its first batch" in rows and start is not None:
        return rows["embed job after its first batch"]["tokens_per_s"], float(start), \
            f"{path}: the embed job after its first batch, and that batch's start"
    row = next(r for name, r in rows.items() if name.startswith("embed job (loop"))
    return row["tokens_per_s"], 0.0, f"{path}: {row['name']}, its start included"


def input_lines(inputs: Path, roles=("train", "map")) -> str:
    return "".join(f'  {{ path = "{inputs / role}", format = "s2orc", source = "syn_{role}", role = "{role}" }},\n'
                   for role in roles)


def config_text(inputs: Path, args) -> str:
    res = ", ".join(str(r) for r in args.resolutions)
    return f"""[ingest]
inputs = [
{input_lines(inputs)}]

[importance]
seed = 0

[knn]
k = 20
ef_search = {args.ef_search}

[cluster]
resolutions = [{res}]
min_cluster_size = 5
memory_gb = {args.stage_memory_gib if args.stage_memory_gib is not None else args.target_peak_gib}
warm_start = {"true" if args.warm_start else "false"}
{'engine = "networkit"' + chr(10) if args.engine == "networkit" else ""}
[render]
map_resolution = 0.0

[evaluate]
"""


class TreeSampler:
    """Every `every` seconds, the processes descending from `root` (/proc): the peak of their summed
    proportional set size and each one's last CPU time, so a stage's Spark JVM and Python workers, which its driver
    does not wait for, are counted with it."""

    # 0.5 s: a pass over /proc with smaps_rollup of a multi-GB JVM took ~11 % of a core at 0.25 s,
    # time the measured stage lost on a 2-core machine
    def __init__(self, root: int, every: float = 0.5):
        import threading

        self.root, self.every, self.peak, self.peak_anon, self.cpu = root, every, 0, 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _stats() -> dict:
        out = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                out[int(d)] = (int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[21]) * PAGE)
        return out

    @staticmethod
    def _pss(pid: int, rss: int) -> tuple[int, int]:
        """Proportional set size, all of it and without file-backed pages (Pss_Anon + Pss_Shmem):
        pages shared with the other processes (forked Leiden workers, the parent's copy-on-write
        pages) counted once in the sum. The file-backed part is mapped files' page cache (the
        vector store read through mmap), which the kernel takes back under pressure. The RSS where
        smaps_rollup cannot be read."""
        pss = anon = None
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    key, _, rest = line.partition(":")
                    if key == "Pss":
                        pss = int(rest.split()[0]) * 1024
                    elif key in ("Pss_Anon", "Pss_Shmem"):
                        anon = (anon or 0) + int(rest.split()[0]) * 1024
        except OSError:
            pass
        pss = rss if pss is None else pss
        return pss, pss if anon is None else anon

    def _run(self):
        while not self._stop.is_set():
            stats = self._stats()
            tree, grew = {self.root}, True
            while grew:
                more = {p for p, (ppid, _, _) in stats.items() if ppid in tree} - tree
                grew, tree = bool(more), tree | more
            both = [self._pss(p, stats[p][2]) for p in tree if p in stats]
            self.peak = max(self.peak, sum(b[0] for b in both))
            self.peak_anon = max(self.peak_anon, sum(b[1] for b in both))
            for p in tree:
                if p in stats:
                    self.cpu[p] = stats[p][1] / TICKS
            self._stop.wait(self.every)

    def stop(self) -> tuple[int, int, float]:
        self._stop.set()
        self._thread.join()
        return self.peak, self.peak_anon, sum(self.cpu.values())


PAGE, TICKS = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")


def child(cmd: list[str], log: Path, env: dict | None = None, watch=None) -> dict:
    """Run a child process: wall time, CPU time and peak memory of it and every process under it.
    `watch(pid)`, when given, starts another sampler of the child's tree; its stop() is called when
    the child ends (bench/ingest_profile.py's per-thread CPU)."""
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(log, "a") as out:
        out.write(f"\n### {' '.join(cmd)}\n")
        out.flush()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        sampler = TreeSampler(p.pid)
        other = watch(p.pid) if watch else None
        _, status, usage = os.wait4(p.pid, 0)
        peak, peak_anon, cpu = sampler.stop()
        if other is not None:
            other.stop()
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed (exit {rc}); see {log}")
    # wait4 has the exact figures of the child and what it waited for; the sampler sees the rest
    return {"seconds": time.perf_counter() - t0, "cpu_s": max(cpu, usage.ru_utime + usage.ru_stime),
            "peak_rss_bytes": max(peak, usage.ru_maxrss * 1024), "peak_anon_bytes": peak_anon,
            "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def synthetic(*call: str) -> list[str]:
    """A child running one function of bench/synthetic.py and printing its JSON."""
    code = ("import json; from bench import synthetic; "  # run from the checkout (child's cwd)
            f"print(json.dumps(synthetic.{call[0]}({', '.join(call[1:])})))")
    return [sys.executable, "-c", code]


def stage_line(n: int, stage: str, r: dict) -> str:
    return (f"  {n:>10,} {stage:<11} {r['seconds']:>9.1f} s  CPU {r['cpu_s']:>9.1f} s  "
            f"peak {r['peak_rss_bytes'] / 2**30:6.2f} GiB"
            + (f" (anon {r['peak_anon_bytes'] / 2**30:.2f})" if r.get("peak_anon_bytes") else "")
            + f"  load {r['load'][0]:.1f} -> {r['load'][1]:.1f}")


def earlier_line(n: int, stage: str, r: dict) -> str:
    """A row kept from --json under --resume, with the commit it was measured at."""
    return stage_line(n, stage, r) + f"  (measured earlier, at {r.get('commit', '?')})"


def one_size(n: int, args, log: Path, earlier: dict | None, save) -> dict:
    """Run the stages of one size; earlier: this size's partial entry to go on from (--resume)."""
    root = args.root / f"n{n}"
    inputs, run = root / "inputs", root / "run"
    stamp = inputs / "generated.json"
    want = {"n": n, "fulltext_share": args.fulltext_share, "seed": args.seed}
    if not (stamp.is_file() and json.loads(stamp.read_text()).get("args") == want):
        subprocess.run(["rm", "-rf", str(inputs)], check=True)
        inputs.mkdir(parents=True)
        r = child(synthetic("write_input_corpus", repr(str(inputs)), str(n), f"fulltext_share={args.fulltext_share}",
                            f"seed={args.seed}"), log)
        info = json.loads(log.read_text().strip().splitlines()[-1])
        stamp.write_text(json.dumps({"args": want, "corpus": info, "seconds": r["seconds"]}))
    corpus = json.loads(stamp.read_text())["corpus"]
    cfg = root / "scale.toml"
    settings = config_text(inputs, args)
    rows = {}
    if earlier is not None:
        if earlier.get("corpus") != corpus or earlier.get("settings") != settings or not run.is_dir():
            sys.exit(f"--resume: {n:,} papers were measured with other inputs or settings, or {run} is gone; "
                     f"run this size again without --resume")
        rows = dict(earlier["stages"])
    else:
        subprocess.run(["rm", "-rf", str(run)], check=True)
        run.mkdir(parents=True)
    cfg.write_text(settings)
    entry = {"papers": n, "corpus": corpus, "settings": settings, "nodes": None, "stages": rows}
    for stage in CPU_STAGES:
        if stage in rows:
            print(earlier_line(n, stage, rows[stage]), flush=True)
            continue
        if stage == "knn":  # the embed stage's stand-in: generated vectors for every paper
            child(synthetic("write_input_vectors", repr(str(run)), str(n), f"seed={args.seed}",
                            f"dim={args.dim}"), log)
        rows[stage] = child([sys.executable, f"jobs/{stage}.py", "--run", str(run), "--config", str(cfg)], log)
        rows[stage]["commit"] = commit()
        print(stage_line(n, stage, rows[stage]), flush=True)
        save(entry)
    if args.ingest_by_role:
        entry["by_role"] = dict(earlier.get("by_role", {})) if earlier else {}
        ingest_by_role(n, root, inputs, log, entry["by_role"], lambda: save(entry))
    entry["nodes"] = ingest_count(run, "papers_corpus", "papers_title_only")
    entry["title_only"] = ingest_count(run, "papers_title_only")
    return entry


def ingest_count(run: Path, *counts: str) -> int:
    """The sum over the ingest summary's sources of the named per-source counts."""
    summary = json.loads((run / "ingest_summary.json").read_text())
    return sum(d.get(c, 0) for d in summary["per_source"].values() for c in counts)


def ingest_by_role(n: int, root: Path, inputs: Path, log: Path, rows: dict, save) -> None:
    """Each corpus ingested alone (its input the only one, into <root>/n<N>/by_role/<role>): the map
    corpus (title, abstract, bibliography: no bodies read) and the training corpus (full text,
    sections, mentions) apart, so the ingest row can be split between them. Each role's papers end
    up in its own run: the two runs' corpus papers add up to the whole ingest's. `rows` (role -> figures,
    the size's entry's) is filled in place, and saved after each role."""
    for role in ROLES:
        if role in rows:
            print(earlier_line(n, f"ingest {role}", rows[role]), flush=True)
            continue
        where = root / "by_role" / role
        subprocess.run(["rm", "-rf", str(where)], check=True)
        where.mkdir(parents=True)
        (where / "ingest.toml").write_text(f"[ingest]\ninputs = [\n{input_lines(inputs, (role,))}]\n")
        rows[role] = child([sys.executable, "jobs/ingest.py", "--run", str(where / "run"), "--config",
                            str(where / "ingest.toml")], log)
        rows[role]["commit"] = commit()
        rows[role]["corpus_papers"] = ingest_count(where / "run", "papers_corpus")
        print(stage_line(n, f"ingest {role}", rows[role]) + f"  {rows[role]['corpus_papers']:,} corpus papers",
              flush=True)
        save()


def nodes_per_paper(run: Path, min_citations: int) -> dict:
    """Map nodes a paper of a finished ingest had it mapped the cited-only papers that at least
    `min_citations` mapped corpus papers cite ([ingest] cited_only_min_citations), read from its
    tables: the corpus papers mapped, plus those cited-only papers (the run's own setting must be
    at most min_citations: a papers table keeps only the cited-only papers its setting mapped)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    papers = ds.dataset(str(run / "papers")).to_table(columns=["paper_id", "source_file", "mapped"])
    corpus = papers.filter(pc.is_valid(papers["source_file"]))
    citing = corpus.filter(corpus["mapped"])["paper_id"]
    cited_only = papers.filter(pc.is_null(papers["source_file"]))["paper_id"]
    counts = None
    for b in ds.dataset(str(run / "references")).to_batches(columns=["citing_id", "cited_id"], batch_size=1 << 22):
        b = b.filter(pc.and_(pc.is_in(b["citing_id"], value_set=citing), pc.is_in(b["cited_id"], value_set=cited_only)))
        t = pa.table({"cited_id": b["cited_id"], "citing_id": b["citing_id"]}).group_by(
            ["cited_id", "citing_id"]).aggregate([])        # distinct (cited, citing) pairs of the batch
        counts = t if counts is None else pa.concat_tables([counts, t])
    per_cited = counts.group_by(["cited_id", "citing_id"]).aggregate([]).group_by("cited_id").aggregate(
        [("citing_id", "count")])
    kept = int(pc.sum(pc.greater_equal(per_cited["citing_id_count"], min_citations)).as_py() or 0)
    n_corpus = corpus.num_rows
    return {"min_citations": min_citations, "corpus_papers": n_corpus, "corpus_mapped": len(citing),
            "cited_only_mapped": kept, "nodes_per_paper": (len(citing) + kept) / n_corpus}


def fit(sizes: list[int], values: list[float], exponent: float, bounded: bool = False) -> tuple[float, float]:
    """(a, b) of value = a + b * n^exponent, least squares, a >= 0 (the stage's fixed cost: start-up,
    imports, the JVM); one size: a = 0. `bounded` (peak memory): a value that did not grow over the
    sizes is a bound the stage keeps (Spark's heap is set from the machine, not from n): a = the
    largest value, b = 0, rather than a line through the origin."""
    if len(sizes) < 2:
        return 0.0, values[0] / sizes[0] ** exponent
    xs = [s ** exponent for s in sizes]
    mx, my = sum(xs) / len(xs), sum(values) / len(values)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, values)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    if bounded and b <= 0:
        return max(values), 0.0
    if a < 0 or b <= 0:  # no fixed cost to separate (or noise): through the origin at the largest size
        return 0.0, values[-1] / xs[-1]
    return a, b


def slope(sizes: list[int], values: list[float]) -> float:
    """The log-log slope between the two largest sizes (NaN with one size)."""
    if len(sizes) < 2:
        return float("nan")
    return math.log(max(values[-1], 1e-3) / max(values[-2], 1e-3)) / math.log(sizes[-1] / sizes[-2])


def parallelism(cpu_s: float, wall_s: float, here: int) -> float:
    """Cores busy on average while the stage ran here (CPU s / wall s), between 1 and the cores."""
    return max(1.0, min(here, cpu_s / wall_s if wall_s > 0 else 1.0))


def node_speedup(cpu_s: float, wall_s: float, here: int, efficiency: float) -> tuple[float, float]:
    """(speed-up of the node's cores over this machine's, serial share): Amdahl from the
    parallelism measured here, each added core worth `efficiency` of one."""
    p = parallelism(cpu_s, wall_s, here)
    serial = min(1.0, max(0.0, (here / p - 1) / (here - 1))) if here > 1 else 1.0
    t_here = serial + (1 - serial) / here
    t_node = serial + (1 - serial) / (1 + (NODE_CORES - 1) * efficiency)
    return t_here / t_node, serial


def side_by_side(first: dict, second: dict, efficiency: float) -> dict:
    """Two projected stages run at once on the node (the pipeline measures evaluate while the render
    stage runs: [evaluate] beside_render): the wall time is the longer one's, or the two's CPU work
    over the node's cores where that is longer (each row's own hours assumed every core its own);
    the peak is the two peaks together."""
    cores = 1 + (NODE_CORES - 1) * efficiency
    hours = max(first["hours"], second["hours"], (first["cpu_hours"] + second["cpu_hours"]) / cores)
    return {"stages": [first["stage"], second["stage"]], "hours": hours,
            "saved_hours": first["hours"] + second["hours"] - hours,
            "peak_gb": first["peak_gb"] + second["peak_gb"]}


def commit() -> str:
    """The checkout's commit (+ "-dirty" with uncommitted changes): what the figures were measured with."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    return (head or "unknown") + ("-dirty" if dirty else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[250_000, 500_000, 1_000_000, 2_000_000])
    ap.add_argument("--fulltext-share", type=float, default=0.1, help="share of papers with full text (role train)")
    ap.add_argument("--dim", type=int, default=384, help="stand-in vector dimensions")
    ap.add_argument("--resolutions", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3, 3e-3, 1e-2])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ef-search", type=int, default=48, help="HNSW ef_search of the knn stage, fixed: what "
                    "[knn] target_recall chose on 620k real vectors (docs/scale.md). The stand-in vectors, topic "
                    "mixtures full of near-ties, would tune far higher (ef 1,536 for recall 0.95 at 500k), "
                    "which says nothing of real vectors; 0 = tune anyway")
    ap.add_argument("--root", type=Path, default=REPO / "runs" / "scale_run")
    ap.add_argument("--project-papers", type=float, default=33e6)
    ap.add_argument("--efficiency", type=float, default=0.7, help="work of each added node core, as a share of one")
    ap.add_argument("--train-hours", type=float, default=1.0, help="the training budget of the projected run "
                    "([train] max_hours)")
    ap.add_argument("--gpu-json", type=Path, help="bench/gpu_throughput.py --json output (else its 2026-12-04 H200 figures)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--resume", action="store_true", help="go on from --json, written after every stage: a size "
                    "found there keeps its run directory and its measured stages, the rest run")
    ap.add_argument("--sizes-from", type=Path, help="the sizes measured by an earlier run (its --json), used "
                    "beside those run now (a size in both: this run's); --sizes with none: only project them. "
                    "Only figures of the same code belong together: the file's commit is printed")
    ap.add_argument("--project-dim", type=int, default=768, help="vector dimensions of the projected run (SciBERT: "
                    "768); the knn stage's time and the b N part of its peak scale by project-dim / --dim")
    ap.add_argument("--cited-only-min-citations", type=int, help="project with the map nodes a paper that "
                    "[ingest] cited_only_min_citations = this would keep, counted on the largest size's run "
                    "(its papers and references tables; the generated default maps every cited-only paper a "
                    "mapped paper cites): the kNN, cluster, render, evaluate and embed rows scale with nodes")
    ap.add_argument("--target-peak-gib", type=float, default=12.0, help="each stage's peak at >= 2M papers, at most")
    ap.add_argument("--stage-memory-gib", type=float, help="[cluster] memory_gb of the runs: the Leiden runs at "
                    "once are those that fit in it (default --target-peak-gib; 0 = the machine's free memory)")
    ap.add_argument("--engine", default="igraph", choices=("igraph", "networkit"),
                    help="[cluster] engine: networkit runs each resolution on every core (docs/scale.md)")
    ap.add_argument("--warm-start", action="store_true", help="[cluster] warm_start = true: each finer resolution "
                    "from the coarser one's clusters (docs/scale.md); the default clusters every resolution from nothing")
    ap.add_argument("--ingest-by-role", action="store_true", help="after a size's stages, ingest the map corpus "
                    "and the training corpus each alone (its CPU share splits the projected ingest row; the whole "
                    "ingest of both is still the row)")
    ap.add_argument("--target-hours", type=float, default=4.0, help="the projected run, at most")
    ap.add_argument("--target-projected-peak-gb", type=float, default=100.0)
    Verdicts.add_arguments(ap)
    args = ap.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    log = args.root / "scale_run.log"
    if not args.resume:
        log.write_text("")
    here = os.cpu_count() or 1
    print(f"sizes {args.sizes}, full text {args.fulltext_share:.0%}, {here} cores here; load {os.getloadavg()}; "
          f"log {log}", flush=True)
    if args.resume and not args.json:
        sys.exit("--resume goes on from the file --json names: give --json")
    partial = {}
    if args.resume and args.json.is_file():
        partial = {r["papers"]: r for r in json.loads(args.json.read_text())["sizes"]}
    results = []

    def save(entry: dict) -> None:
        if args.json:
            args.json.write_text(json.dumps({"sizes": results + [entry], "complete": False}, indent=2))

    for n in sorted(args.sizes):
        results.append(one_size(n, args, log, partial.get(n), save))
    measured_at = commit()
    for r in results:
        r["commit"] = ", ".join(sorted({f.get("commit", measured_at) for f in r["stages"].values()}))
    if args.sizes_from:
        earlier = json.loads(args.sizes_from.read_text())
        fresh = {r["papers"] for r in results}
        kept = [r for r in earlier["sizes"] if r["papers"] not in fresh]
        for r in kept:
            print(f"from {args.sizes_from}: {r['papers']:,} papers, measured at commit {r.get('commit', 'unknown')}")
            for stage, f in r["stages"].items():
                print(stage_line(r["papers"], stage, f))
        results = sorted(results + kept, key=lambda r: r["papers"])
    if not results:
        sys.exit("nothing to project: give --sizes, or --sizes-from with an earlier run's --json")

    embed_rate, embed_start, embed_basis = gpu_embed_figures(args.gpu_json)
    N = args.project_papers
    big = results[-1]
    measured_ratio = nodes_ratio = big["nodes"] / big["papers"]
    node_scale = 1.0   # the stages that work on the map's nodes see a corpus this many times larger
    if args.cited_only_min_citations is not None:
        # the generator's citations decide the share; the largest size whose run directory is still there
        on_disk = [r["papers"] for r in results if (args.root / f"n{r['papers']}" / "run" / "references").is_dir()]
        if not on_disk:
            sys.exit(f"--cited-only-min-citations reads a run's tables: none of the sizes has its run under {args.root}")
        run = args.root / f"n{max(on_disk)}" / "run"
        own, rule = nodes_per_paper(run, 1), nodes_per_paper(run, args.cited_only_min_citations)
        node_scale = rule["nodes_per_paper"] / own["nodes_per_paper"]
        nodes_ratio = measured_ratio * node_scale
        print(f"\ncited_only_min_citations = {rule['min_citations']} on the {max(on_disk):,}-paper run's tables: "
              f"{rule['corpus_mapped']:,} mapped corpus papers + {rule['cited_only_mapped']:,} cited-only, against "
              f"{own['cited_only_mapped']:,} cited-only at 1 (the run's own): the map's nodes x {node_scale:.3f}")
    print(f"\nprojected to {N / 1e6:.0f}M papers ({N * nodes_ratio / 1e6:.0f}M map nodes at "
          f"{nodes_ratio:.2f} nodes a paper) on {NODE_CORES} cores, {NODE_MEMORY_GB} GB, 1 H100; "
          f"each added core worth {args.efficiency:.0%} of one")
    print(f"{'stage':<11} {'growth':>7} {'serial':>7} {'speed-up':>9} {'hours':>7} {'peak GB':>8}  basis")
    table, total = [], 0.0
    for stage in ("ingest", "importance", "train", "embed", "knn", "cluster", "render", "evaluate"):
        if stage == "train":
            hours, peak, basis = args.train_hours, None, f"the [train] max_hours budget ({args.train_hours:g} h), on the GPU"
            table.append({"stage": stage, "hours": hours, "peak_gb": peak, "basis": basis})
        elif stage == "embed":
            tokens, split = embed_tokens(big, nodes_ratio)
            hours = (N * tokens / embed_rate + embed_start) / 3600
            basis = (f"{split} / {embed_rate:,.0f} tokens/s + a start of {embed_start:.0f} s ({embed_basis})")
            table.append({"stage": stage, "hours": hours, "peak_gb": None, "basis": basis})
        else:
            sizes = [r["papers"] for r in results]
            # the growth is fitted on CPU seconds, the stage's work: the machine's load and the number
            # of worker processes move the wall time of one size and not another, the work much less
            works = [r["stages"][stage]["cpu_s"] for r in results]
            e, why = MODEL[stage]
            measured = slope(sizes, works)
            if measured > e + 0.15:  # grows faster than its model between the largest sizes: take what was seen
                e, why = measured, f"measured growth, above its model ({why})"
            a, b = fit(sizes, works, e)
            s = big["stages"][stage]
            # wall here = work / the parallelism seen at the largest size; the node divides that by its speed-up
            par = parallelism(s["cpu_s"], s["seconds"], here)
            speed, serial = node_speedup(s["cpu_s"], s["seconds"], here, args.efficiency)
            # kNN's distance computations and codes grow with the dimensions (the other stages' inputs do not)
            dims = args.project_dim / args.dim if stage == "knn" else 1.0
            Ns = N * (node_scale if stage in NODE_STAGES else 1.0)
            hours = (a + b * Ns ** e * dims) / par / speed / 3600
            anon = all(r["stages"][stage].get("peak_anon_bytes") for r in results)
            key = "peak_anon_bytes" if anon else "peak_rss_bytes"
            pa_, pb = fit(sizes, [r["stages"][stage][key] for r in results], 1.0, bounded=True)
            peak = (pa_ + pb * Ns * dims) / 1e9
            basis = (f"({a:.0f} + {b * big['papers'] ** e:.0f} x (N/n)^{e:.2f}) CPU s at {big['papers']:,}, "
                     f"N = {Ns / 1e6:.0f}M" + (" (in nodes)" if Ns != N else "")
                     + (f" x {args.project_dim}/{args.dim} dimensions" if dims != 1 else "")
                     + f"; / {par:.2f} cores busy here / {speed:.1f} on the node ({why}; slope seen {measured:.2f}); "
                     + ("peak without file-backed pages" if anon else "peak with file-backed pages (PSS)"))
            table.append({"stage": stage, "growth": e, "serial": serial, "speedup": speed, "hours": hours,
                          "cpu_hours": (a + b * Ns ** e * dims) / 3600, "peak_gb": peak, "basis": basis})
        row = table[-1]
        total += row["hours"]
        print(f"{stage:<11} {row.get('growth', float('nan')):>7.2f} {row.get('serial', float('nan')):>7.2f} "
              f"{row.get('speedup', float('nan')):>9.1f} {row['hours']:>7.2f} "
              f"{'' if row['peak_gb'] is None else format(row['peak_gb'], '.1f'):>8}  {row['basis']}")
        if stage == "ingest" and set(ROLES) <= set(big.get("by_role", {})):
            # each corpus alone pays its own start-up and resolution: their CPU shares split the row
            work = {role: big["by_role"][role]["cpu_s"] for role in ROLES}
            both = sum(work.values())
            row["by_role"] = {}
            for role in ROLES:
                share = work[role] / both
                row["by_role"][role] = {"hours": row["hours"] * share, "share": share}
                print(f"  {role + ' corpus':<17} {'':>13} {row['hours'] * share:>7.2f} {'':>8}  of the row: "
                      f"{share:.0%} of the two corpora's CPU ingested alone at {big['papers']:,} "
                      f"({work[role]:.0f} CPU s)")
    rows = {r["stage"]: r for r in table}
    beside = side_by_side(rows["render"], rows["evaluate"], args.efficiency)
    total -= beside["saved_hours"]
    print(f"{'  render and evaluate side by side':<44} {beside['hours']:>7.2f} {beside['peak_gb']:>8.1f}  the "
          f"pipeline's [evaluate] beside_render: the longer of the two (or their CPU work over the node's cores), "
          f"{beside['saved_hours']:.2f} h less than one after the other; the two peaks together")
    print(f"{'total':<11} {'':>7} {'':>7} {'':>9} {total:>7.2f}")
    print("unmeasured: placement (jobs/place.py) and the GPU stages' memory; the embed and train rows "
          "are GPU projections, not runs")

    verdicts = Verdicts()
    if big["papers"] >= 2_000_000:
        worst = max(big["stages"].values(), key=lambda r: r["peak_rss_bytes"])
        verdicts.at_most(f"largest stage peak at {big['papers']:,} papers, GiB", worst["peak_rss_bytes"] / 2**30,
                         args.target_peak_gib, "{:.2f}")
    else:
        verdicts.not_checked("stage peaks at 2M papers", f"the largest size run is {big['papers']:,}",
                             f"<= {args.target_peak_gib} GiB")
    verdicts.at_most(f"projected {N / 1e6:.0f}M run, hours", total, args.target_hours, "{:.2f}")
    peak_gb = max([r["peak_gb"] for r in table if r["peak_gb"] is not None] + [beside["peak_gb"]])
    verdicts.at_most("projected largest stage peak, GB", peak_gb, args.target_projected_peak_gb, "{:.1f}")
    if args.json:
        args.json.write_text(json.dumps({"sizes": results, "projection": table, "side_by_side": beside,
                                         "total_hours": total,
                                         "verdicts": verdicts.as_json(), "complete": True}, indent=2))
    return verdicts.finish(args.no_fail)


if __name__ == "__main__":
    sys.exit(main())
