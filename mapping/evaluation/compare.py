"""Method comparison of the evaluate stage (METHODS.md §6.2-6.4): relatedness graphs on
the same evaluated papers, accuracy–granularity curves, relative accuracy, Fig. 5 plot, Fig. 6 table.

Per criterion the run offers (MeSH descriptors; subject areas of JATS journals such as eLife;
arXiv categories; author keywords), the focal papers are the papers that have it (a seeded
sample of `max_papers` when more). On them, every method becomes a graph (mapping.evaluation.relatedness):
the run's encoder and any extra vector stores (20-NN, cosine), TF-IDF and BM25 20-NN over title +
abstract, direct citation / extended direct citation / bibliographic coupling / co-citation from
the references table, a random 20-regular graph (floor), the criterion's own 20-NN relatedness
(ceiling) and the hybrids of the config. Each graph is written to the run
(`relatedness/<criterion>/<graph>.parquet`: source row, target row, raw and normalised weight;
`relatedness/<criterion>/papers.parquet`: the focal papers in row order, then the external nodes).
Curves (mapping.evaluation.curves) go to `relatedness/curves.parquet`, plots to `relatedness/<criterion>.png`.

Relative accuracy is relative to the mean of the compared methods whose clusterings reach the
whole range of reported granularities (a sparse direct-citation graph may never get coarse enough:
its components stay apart; it then shows A where it has it and no relative accuracy); the floor
and the ceiling are shown against that same mean but do not enter it.
A criterion is "close" to a method when the method draws on the information the criterion was
made from (author keywords are words of the text; MeSH descriptors and subjects are not) or
when more than `close_share` of the method's edges are among the criterion's own 20-NN edges;
the report says so next to the method.
"""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from sciencemap.ids import positions_in
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import atomic_file, dataset
from sciencemap.vectors import open_vectors, take_rows

from mapping.evaluation.citation_graphs import Citations, citation_graphs, read_citations
from mapping.evaluation.curves import Criterion, accuracy_at, relative_accuracies, sweep
from mapping.evaluation.mesh_accuracy import mesh_terms, mesh_vectors
from mapping.evaluation.relatedness import RelGraph, hybrid
from mapping.evaluation.text_graphs import bm25_graph, criterion_graph, random_regular_graph, tfidf_graph, vector_graph

log = logging.getLogger(__name__)

# Criteria: name -> (papers column, sources whose values are that criterion, title). Subjects of
# PubMed records are MeSH categories (the MeSH criterion covers them) and ScisummNet's one field is
# a constant, so "subjects" takes the journals' own subject groups only.
CRITERIA = {
    "mesh": ("mesh", None, "MeSH descriptors"),
    "subjects": ("fields", ("elife", "pmc"), "journal subject areas"),
    "arxiv": ("fields", ("s2orc", "unarxive"), "arXiv categories"),
    "keywords": ("keywords", None, "author keywords"),
}
# Methods that draw on the text the criterion was made from (author keywords are words of it).
SAME_SOURCE = {"keywords": ("tfidf", "bm25")}
FLOOR, CEILING = "random", "criterion"
TITLES = {"encoder": "this run's encoder", "tfidf": "TF-IDF", "bm25": "BM25", "dc": "direct citation",
          "edc": "extended direct citation", "bc": "bibliographic coupling", "cc": "co-citation",
          FLOOR: "random (floor)", CEILING: "criterion (ceiling)"}


def label_vectors(labels: list[list[str]]) -> tuple[sp.csr_matrix, np.ndarray]:
    """Unit vectors of label sets, each label weighted by its information content −ln(share of
    assignments); rows = papers with at least one label (returned as positions)."""
    lab = [sorted({str(x).strip().lower() for x in (ls or []) if x and str(x).strip()}) for ls in labels]
    rows = np.array([i for i, ls in enumerate(lab) if ls], np.int64)
    vocab: dict[str, int] = {}
    ind, ptr = [], [0]
    for i in rows:
        ind.extend(vocab.setdefault(x, len(vocab)) for x in lab[i])
        ptr.append(len(ind))
    ind = np.asarray(ind, np.int64)
    count = np.bincount(ind, minlength=len(vocab)).astype(float)
    ic = -np.log(count / max(count.sum(), 1.0))
    V = sp.csr_matrix((ic[ind], ind, np.asarray(ptr)), shape=(len(rows), len(vocab)))
    norms = np.sqrt(np.asarray(V.multiply(V).sum(axis=1)).ravel())
    keep = norms > 0                      # a paper whose only label is everyone's carries no signal
    V = (sp.diags(1.0 / np.where(keep, norms, 1.0)) @ V).tocsr()[keep]
    return V, rows[keep]


def focal_papers(papers_ds, name: str, max_papers: int, seed: int) -> pa.Table | None:
    """The papers that have the criterion (paper_id, title, abstract, the criterion's column),
    deduplicated by id and sorted by it; a seeded sample of max_papers when more."""
    col, sources, _ = CRITERIA[name]
    if col not in papers_ds.schema.names:
        return None
    cols = ["paper_id", "title", "abstract", col] + (["source"] if sources else [])
    parts = []
    for b in papers_ds.to_batches(columns=cols, batch_size=1 << 16):
        has = pc.fill_null(pc.greater(pc.list_value_length(b.column(col)), 0), False)
        if sources:
            has = pc.and_(has, pc.is_in(b.column("source"), value_set=pa.array(sources)))
        t = pa.Table.from_batches([b]).filter(has)
        if t.num_rows:
            parts.append(t.select(["paper_id", "title", "abstract", col]))
    if not parts:
        return None
    t = pa.concat_tables(parts)
    t = t.take(pc.sort_indices(t, [("paper_id", "ascending")]))
    ids = t.column("paper_id").to_numpy(zero_copy_only=False)
    first = np.r_[True, ids[1:] != ids[:-1]] if len(ids) else np.zeros(0, bool)
    t = t.filter(pa.array(first))
    if max_papers and t.num_rows > max_papers:
        pick = np.sort(np.random.default_rng(seed).choice(t.num_rows, max_papers, replace=False))
        t = t.take(pa.array(pick))
    return t


def make_criterion(name: str, t: pa.Table, cfg) -> Criterion:
    col = CRITERIA[name][0]
    if name == "mesh":
        from mapping.evaluation.mesh_accuracy import CHECK_TAG_UIS, CHECK_TAGS
        drop = (CHECK_TAGS | frozenset(cfg.extra_check_tags)) if cfg.drop_check_tags else frozenset(cfg.extra_check_tags)
        mv = mesh_vectors(mesh_terms(t.column(col), drop, CHECK_TAG_UIS if cfg.drop_check_tags else frozenset()),
                          major_weight=cfg.major_weight, major_in_vector=cfg.major_in_vector)
        return Criterion(name, mv.V, mv.rows, {"descriptors": len(mv.descriptors)})
    V, rows = label_vectors(t.column(col).to_pylist())
    return Criterion(name, V, rows, {"labels": int(V.shape[1])})


def parse_hybrid(spec: str) -> tuple[str, list[tuple[str, float]]]:
    """'encoder:0.5,bm25:0.5' (optionally 'name=' first) -> (name, [(graph, weight)])."""
    name, _, body = spec.rpartition("=")
    parts = []
    for item in body.split(","):
        g, _, w = item.strip().partition(":")
        try:
            parts.append((g.strip(), float(w) if w else 1.0))
        except ValueError:
            raise UserError(f"hybrid {spec!r}: weight {w!r} of {g!r} is not a number") from None
    if not parts or any(not g for g, _ in parts):
        raise UserError(f"hybrid {spec!r}: write it as 'graph:weight,graph:weight' (e.g. 'encoder:0.5,bm25:0.5')")
    return (name.strip() or " + ".join(g for g, _ in parts)), parts


def extra_vector_stores(specs: list[str]) -> list[tuple[str, Path]]:
    out = []
    for s in specs:
        name, _, path = s.partition("=")
        if not path:
            raise UserError(f"extra_vectors entry {s!r}: write it as 'name=path' (a run with a vector store, or "
                            "Parquet of paper_id, vector rows)")
        out.append((name.strip(), Path(path.strip())))
    return out


def focal_vectors(where, ids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(positions of the focal papers that have a vector, their vectors as float32 rows) from a
    run's vector store, or from a Parquet file / folder of (paper_id, vector) rows — vectors made
    anywhere (SPECTER2, SciNCL, ...) as the embed stage writes them."""

    where = where.root if isinstance(where, RunLayout) else Path(where)
    if where.suffix == ".parquet" or (where.is_dir() and not (where / "vectors").exists()
                                      and not (where / "embeddings").exists() and any(where.glob("*.parquet"))):
        t = dataset(where).to_table(columns=["paper_id", "vector"], filter=pc.field("paper_id").isin(ids))
        if t.num_rows == 0:
            return np.zeros(0, np.int64), np.zeros((0, 0), np.float32)
        pos = positions_in(t.column("paper_id"), ids)
        pos, first = np.unique(pos, return_index=True)        # a repeated id: its first vector
        vec = t.column("vector").combine_chunks()
        lengths = pc.list_value_length(vec).to_numpy(zero_copy_only=False)
        if len(set(lengths.tolist())) != 1:
            raise UserError(f"{where}: the vectors have different lengths ({sorted(set(lengths.tolist()))[:5]})")
        X = pc.list_flatten(vec).to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, int(lengths[0]))
        return pos, X[first]
    vec = open_vectors(RunLayout(where))
    rows = positions_in(ids, vec.ids_arrow())
    have = np.flatnonzero(rows >= 0)
    return have, take_rows(vec.X, rows[have])


def encoder_graph(where, ids: pa.Array, k: int, name: str) -> tuple[RelGraph | None, int]:
    """k-NN graph of the focal papers' vectors (papers without a vector: isolated nodes)."""
    have, X = focal_vectors(where, ids)
    if len(have) < 2:
        return None, int(len(have))
    g = vector_graph(X, k, name)
    return RelGraph(name, len(ids), len(ids), have[g.lo], have[g.hi], g.a, {**g.info, "papers_with_vector": int(len(have))}), int(len(have))


def build_graphs(layout: RunLayout, t: pa.Table, crit: Criterion, cfg,
                 citations: Citations | None = None) -> tuple[dict[str, RelGraph], dict[str, str]]:
    """Every method's graph on the focal papers; {name: why} for those that could not be built.
    The citation graphs come from `citations` (the references table read once for all criteria;
    None: the run has no references table)."""
    ids, n, k = t.column("paper_id").combine_chunks(), t.num_rows, cfg.compare_k
    graphs, skipped = {}, {}
    for name, where in [("encoder", layout)] + extra_vector_stores(cfg.extra_vectors):
        try:
            g, have = encoder_graph(where, ids, k, name)
        except UserError as e:
            skipped[name] = str(e)
            continue
        if g is None:
            skipped[name] = f"{have} focal papers have a vector"
        else:
            graphs[name] = g
    texts = [f"{a or ''} {b or ''}".strip() for a, b in zip(t.column("title").to_pylist(), t.column("abstract").to_pylist())]
    if sum(bool(x) for x in texts) >= 2:
        graphs["tfidf"] = tfidf_graph(texts, k)
        graphs["bm25"] = bm25_graph(texts, k)
    if citations is not None:
        for name, g in citation_graphs(citations, ids).items():
            if g.m:
                graphs[name] = g
            else:
                skipped[name] = "no citation links between these papers"
    else:
        skipped["citations"] = "the run has no references table"
    graphs[FLOOR] = random_regular_graph(n, k, cfg.random_graph_seed)
    graphs[CEILING] = criterion_graph(crit.V, crit.rows, n, k)
    for spec in cfg.hybrids:
        name, parts = parse_hybrid(spec)
        missing = [g for g, _ in parts if g not in graphs]
        if missing:
            skipped[name] = "no " + ", ".join(missing) + " graph here"
            continue
        try:
            graphs[name] = hybrid(name, [(graphs[g], w) for g, w in parts])
        except ValueError as e:
            skipped[name] = str(e)
    return graphs, skipped


def write_graph(dest: Path, g: RelGraph) -> None:
    t = pa.table({"src": pa.array(g.lo, pa.int64()), "dst": pa.array(g.hi, pa.int64()),
                  "relatedness": pa.array(g.a, pa.float64()), "weight": pa.array(g.normalised(), pa.float64())})
    with atomic_file(dest) as tmp:
        pq.write_table(t, tmp)


def edge_share(g: RelGraph, ceiling: RelGraph) -> float:
    """Share of g's edges (between focal papers) that are edges of the criterion's own k-NN graph."""
    f = (g.lo < g.n_focal) & (g.hi < g.n_focal)
    if not f.any():
        return float("nan")
    key = g.lo[f] * ceiling.n + g.hi[f]
    return float(np.isin(key, ceiling.lo * ceiling.n + ceiling.hi).mean())


def sweep_all(graphs: dict[str, RelGraph], crit: Criterion, g_range: tuple[float, float], cfg) -> dict[str, dict]:
    """Every graph's curve; graphs in parallel worker processes (`compare_workers`, 0 = one per core,
    at most one per graph). Leiden runs until an iteration changes nothing on graphs below
    `compare_stable_below` edges, else at most the cluster stage's iteration cap (a random graph of
    200k edges otherwise takes dozens of iterations at every resolution)."""
    import os
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from mapping.cluster import DEFAULT_MAX_ITERATIONS

    def iters(g: RelGraph) -> int:
        return -1 if g.m < cfg.compare_stable_below else DEFAULT_MAX_ITERATIONS

    args = {n: (g, crit, g_range, cfg.sweep_points, tuple(cfg.leiden_seeds), None, iters(g)) for n, g in graphs.items()}
    workers = min(len(graphs), cfg.compare_workers or os.cpu_count() or 1)
    if workers <= 1:
        return {n: sweep(*a) for n, a in args.items()}
    # forkserver: the workers do not inherit this process's threads (FAISS's OpenMP pool)
    with ProcessPoolExecutor(workers, mp_context=get_context("forkserver")) as pool:
        futures = {n: pool.submit(sweep, *a) for n, a in args.items()}
        return {n: f.result() for n, f in futures.items()}


def g_cover(curve: dict) -> tuple[float, float]:
    """The granularities every seed's clusterings of a graph reach: (largest minimum, smallest maximum).
    A sparse citation graph may never get coarse (its components stay apart)."""
    los, his = [], []
    for s in curve["seeds"]:
        G = [p["granularity"] for p in curve["points"] if p["seed"] == s and math.isfinite(p["granularity"])]
        if G:
            los.append(min(G))
            his.append(max(G))
    return (max(los), min(his)) if los else (float("nan"), float("nan"))


def granularity_targets(cfg, n: int) -> list[float]:
    if cfg.granularities:
        return [float(x) for x in cfg.granularities]
    return [round(n / d, 1) for d in (62.5, 25.0, 12.5)]   # 20 / 50 / 100 on 1,250 papers


def compare(layout: RunLayout, cfg, citations: Citations | None = None) -> dict:
    """The comparison for every criterion the run has: {criterion: {...}} (also written to the run).
    `citations`: the references table as codes (mapping.evaluation.citation_graphs.read_citations), shared
    with the caller; when not given and the run has references, read here once for all criteria."""
    papers = dataset(layout.table("papers"), "run the ingest stage first")
    if citations is None and layout.table("references").exists():
        citations = read_citations(dataset(layout.table("references")), open_vectors(layout).ids_arrow())
    out_dir = layout.root / "relatedness"
    out: dict = {}
    rows_all = []
    for name in cfg.criteria:
        if name not in CRITERIA:
            raise UserError(f"unknown criterion {name!r}; choose from {', '.join(CRITERIA)}")
        t0 = time.perf_counter()
        t = focal_papers(papers, name, cfg.max_papers, cfg.baseline_seed)
        if t is None or t.num_rows < cfg.min_papers:
            out[name] = {"skipped": f"{0 if t is None else t.num_rows} papers have {CRITERIA[name][2]} "
                                    f"(at least {cfg.min_papers} needed)"}
            continue
        crit = make_criterion(name, t, cfg)
        if len(crit.rows) < cfg.min_papers:
            out[name] = {"skipped": f"{len(crit.rows)} papers have informative {CRITERIA[name][2]}"}
            continue
        graphs, skipped = build_graphs(layout, t, crit, cfg, citations)
        n_eval = len(crit.rows)
        targets = granularity_targets(cfg, n_eval)
        g_range = (min(targets) / 2.0, min(max(targets) * 2.0, n_eval / 2.0))
        curves = sweep_all(graphs, crit, g_range, cfg)
        for gname in graphs:
            for p in curves[gname]["points"]:
                rows_all.append({"criterion": name, "graph": gname, **p})
        cover = {g: g_cover(c) for g, c in curves.items()}
        lo_t, hi_t = min(targets), max(targets)
        methods = [g for g in graphs if g not in (FLOOR, CEILING) and cover[g][0] <= lo_t and cover[g][1] >= hi_t]
        nan = {"mean": float("nan"), "std": float("nan"), "per_seed": []}
        rel = relative_accuracies(curves, reference=methods) if methods else {g: nan for g in curves}
        ceiling = graphs[CEILING]
        entry = {"title": CRITERIA[name][2], "papers": t.num_rows, "evaluated": n_eval, **crit.info,
                 "granularities": targets, "skipped": skipped, "graphs": {}}
        for gname, g in graphs.items():
            share = edge_share(g, ceiling) if gname != CEILING else 1.0
            close, notes = [], []
            if gname not in methods and gname not in (FLOOR, CEILING):
                rel[gname] = {**nan, "why": f"its curve covers G {cover[gname][0]:.3g}–{cover[gname][1]:.3g} only"}
                notes.append(f"no relative accuracy: its clusterings reach G {cover[gname][0]:.3g}–{cover[gname][1]:.3g} "
                             f"only, not {lo_t:g}–{hi_t:g}")
            if gname in SAME_SOURCE.get(name, ()):
                close.append("draws on the text the criterion was made from")
            if gname != CEILING and share > cfg.close_share:
                close.append(f"{share:.0%} of its edges are among the criterion's own {cfg.compare_k}-NN edges")
            info = {k: v for k, v in g.info.items() if k != "external_ids"}   # an Arrow array: written below
            entry["graphs"][gname] = {"edges": g.m, "nodes": g.n, "external_nodes": g.n - g.n_focal,
                                      "info": info, "at": accuracy_at(curves[gname], targets),
                                      "relative_accuracy": rel[gname], "criterion_edge_share": share,
                                      "close_to_criterion": close, "notes": notes, "sweep_s": curves[gname]["seconds"],
                                      "resolutions": curves[gname]["resolutions"]}
            write_graph(out_dir / name / f"{gname.replace(' ', '_').replace('/', '_')}.parquet", g)
        ids = t.column("paper_id").combine_chunks()
        with atomic_file(out_dir / name / "papers.parquet") as tmp:
            pq.write_table(pa.table({"row": pa.array(np.arange(len(ids)), pa.int64()), "paper_id": ids}), tmp)
        for gname, g in graphs.items():
            ext = g.info.get("external_ids")
            if ext is not None and len(ext):         # extended direct citation's extra nodes, rows n_focal..
                with atomic_file(out_dir / name / f"{gname}_external_nodes.parquet") as tmp:
                    pq.write_table(pa.table({"row": pa.array(np.arange(len(ids), len(ids) + len(ext)), pa.int64()),
                                             "paper_id": ext}), tmp)
        plot_curves(out_dir / f"{name}.png", curves, CRITERIA[name][2], n_eval, targets)
        entry["plot"] = str((out_dir / f"{name}.png").relative_to(layout.root))
        entry["seconds"] = round(time.perf_counter() - t0, 3)
        out[name] = entry
        log.info("compare %s: %d papers, %d graphs in %.1f s", name, n_eval, len(graphs), entry["seconds"])
    if rows_all:
        with atomic_file(out_dir / "curves.parquet") as tmp:
            pq.write_table(pa.Table.from_pylist(rows_all), tmp)
    return out


def plot_curves(dest: Path, curves: dict[str, dict], title: str, n: int, targets: list[float]) -> None:
    """Fig. 5: accuracy against granularity (log), one line per graph (mean over Leiden seeds at
    each resolution), a band from the lowest to the highest seed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=120)
    tab20 = plt.get_cmap("tab20").colors
    palette = iter([tab20[i] for i in (0, 2, 4, 6, 8, 10, 12, 16, 18, 1, 3, 5, 7, 9, 11, 13, 17, 19)] * 4)  # no greys
    for gname, c in curves.items():
        by_r: dict[float, list[dict]] = {}
        for p in c["points"]:
            by_r.setdefault(p["resolution"], []).append(p)
        rs = sorted(by_r)
        G = np.array([np.mean([p["granularity"] for p in by_r[r]]) for r in rs])
        A = [[p["accuracy"] for p in by_r[r]] for r in rs]
        ok = np.isfinite(G) & (G > 0)
        style = ({"ls": ":", "color": "grey"} if gname == FLOOR else {"ls": "--", "color": "black"} if gname == CEILING
                 else {"color": next(palette)})
        line, = ax.plot(G[ok], np.array([np.mean(a) for a in A])[ok], marker=".", label=TITLES.get(gname, gname), **style)
        ax.fill_between(G[ok], np.array([min(a) for a in A])[ok], np.array([max(a) for a in A])[ok],
                        color=line.get_color(), alpha=0.15, lw=0)
    save_curve_plot(fig, ax, dest, targets, "accuracy A", f"Accuracy against granularity: {title}, {n:,} papers")


def save_curve_plot(fig, ax, dest: Path, targets: list[float], ylabel: str, title: str, legend_size: int = 8,
                    dpi: int = 120, grid: bool = False) -> None:
    """The Fig. 5 frame shared by the stage and the quality experiment: the reported granularities
    as light rules, log G axis, labels, legend; written atomically as PNG and closed."""
    import matplotlib.pyplot as plt

    for t in targets:
        ax.axvline(t, color="0.85", lw=0.8, zorder=0)
    ax.set_xscale("log")
    ax.set_xlabel("granularity G = N² / Σ n_c²")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=legend_size, loc="upper right")
    if grid:
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(dest) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    plt.close(fig)


def _f(v, nd=3) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


def compare_section(cmp: dict, cfg) -> list[str]:
    """report.md: per criterion, the Fig. 6 table (relative accuracy) with A at the target
    granularities, the plot, and what could not be compared."""
    lines = ["## Methods compared on the same papers", "",
             f"Each method is a {cfg.compare_k}-NN or citation graph on the papers that have the criterion; "
             f"Leiden CPM on CWTS-normalised weights over a resolution sweep ({cfg.sweep_points} resolutions × "
             f"Leiden seeds {', '.join(map(str, cfg.leiden_seeds))}); A at granularity G interpolated in log G per "
             "seed, mean ± std over seeds. Relative accuracy (seed paper Fig. 6): each curve divided by the mean of "
             "the compared methods over their common granularity range, averaged (1 = the average method; floor "
             "and ceiling do not enter the mean). METHODS.md §6.2-6.4.", ""]
    for name, e in cmp.items():
        if "skipped" in e and "graphs" not in e:
            lines += [f"### {CRITERIA[name][2]}", "", f"Not compared: {e['skipped']}.", ""]
            continue
        lines += [f"### {e['title']} ({e['evaluated']:,} papers)", "", f"![accuracy against granularity]({e['plot']})", ""]
        gs = e["granularities"]
        head = ["graph", "edges", "relative accuracy"] + [f"A at G = {g:g}" for g in gs] + ["edges in criterion k-NN", "note"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        order = sorted(e["graphs"], key=lambda g: -(e["graphs"][g]["relative_accuracy"]["mean"]
                                                    if math.isfinite(e["graphs"][g]["relative_accuracy"]["mean"]) else -1))
        for g in order:
            d = e["graphs"][g]
            ra = d["relative_accuracy"]
            cells = [TITLES.get(g, g), f"{d['edges']:,}" + (f" (+{d['external_nodes']:,} external nodes)" if d["external_nodes"] else ""),
                     _f(ra["mean"]) + (f" ± {_f(ra['std'])}" if math.isfinite(ra.get("std", float("nan"))) else "")]
            cells += [_f(d["at"][float(x)]["mean"]) + (f" ± {_f(d['at'][float(x)]['std'])}"
                                                        if math.isfinite(d["at"][float(x)]["std"]) else "") for x in gs]
            cells += [_f(d["criterion_edge_share"], 2), "; ".join(d["close_to_criterion"] + d["notes"])]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        if e["skipped"]:
            lines += ["Not built here: " + "; ".join(f"{TITLES.get(k, k)} ({v})" for k, v in e["skipped"].items()) + ".", ""]
        close = [TITLES.get(g, g) for g, d in e["graphs"].items() if d["close_to_criterion"] and g != CEILING]
        if close:
            lines += [f"Close to the criterion: {', '.join(close)} (see the note column): their accuracy on it "
                      "partly measures the criterion's own construction.", ""]
    return lines
