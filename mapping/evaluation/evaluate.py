"""Evaluation stage: MeSH clustering accuracy per resolution, network statistics, report.md.

Accuracy (METHODS.md §6) is measured on the papers that have MeSH descriptors (the PubMed
records) with the cluster labels they got in the full clustering; a random-assignment baseline
permutes those labels (same cluster sizes, seeded) so a reader sees how far A is above chance.

Built for 33M papers: the papers table is read in Arrow batches (paper_id and mesh only; papers
without MeSH filtered out per batch) into compact assignment arrays (mapping.evaluation.mesh_accuracy);
paper ids are mapped once to vector-store rows (the integer ids of edges and clusters); cluster
labels are read per resolution as (row, cluster) NumPy arrays and gathered by row; the references
table is read once into integer codes (vector-store rows, then the other ids; one int64 key a
distinct pair, mapping.evaluation.citation_graphs.read_citations), shared by every criterion's citation
graphs and the direct-citation graph, and freed before the kNN graph is loaded.
Network statistics (seed paper Table 6) of three graphs on the vector-store rows: the kNN graph,
the direct-citation graph of the same papers and a random graph G(n, m) of the kNN graph's density
(and one of the citation graph's density), with their pairwise edge overlap (Fig. 7).
Memory: the vector store's ids (Arrow), 9 bytes per MeSH assignment, the publication vectors
(~12 bytes per nonzero), one resolution's labels, the citation pair keys (8 bytes each), the
graphs' edge arrays (8 bytes an edge each; the kNN weights are dropped) and one igraph graph at a
time (mapping.evaluation.netstats).
"""
from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from sciencemap.ids import positions_in
from sciencemap.config import comma_floats, setting
from sciencemap.contracts import EDGES_META_KEY, FILE_STATUSES
from sciencemap.layout import RunLayout
from sciencemap.progress import Progress, current_rss_mb
from sciencemap.runtime import UserError, rss_mb
from sciencemap.storage import dataset, read_json_metadata, write_text_atomic
from sciencemap.vectors import open_vectors

from mapping.cluster import read_pair_keys
from mapping.evaluation.mesh_accuracy import CHECK_TAG_UIS, CHECK_TAGS, TermCollector, accuracy, granularity, mesh_vectors
from mapping.evaluation.citation_graphs import Citations, read_citations
from mapping.evaluation.netstats import (Links, default_workers, edge_overlap, network_stats, random_graph,
                                         sample_sizes, sorted_unique)

log = logging.getLogger(__name__)

BATCH_ROWS = 1 << 16          # rows per Arrow batch read from the papers table


@dataclass
class EvaluateConfig:
    major_weight: float = setting(2.0, "weight of a MeSH descriptor assignment flagged major (METHODS.md §6)")
    major_in_vector: bool = setting(True, "also weight major descriptors in the publication vectors")
    drop_check_tags: bool = setting(True, "leave out check tags (Humans, Animals, Male, Female, age groups, ...)")
    extra_check_tags: list[str] = setting(help="descriptor names dropped as check tags too (TOML only)", factory=list)
    baseline_seed: int = setting(0, "seed of the permuted-labels baseline and of the shortest-path sample",
                                 flags=("--seed",))
    path_sample: int | None = setting(None, "source nodes sampled for the average shortest path (0 = skip it; "
                                            "unset: 200, every node below; METHODS.md §5.5)")
    path_targets: int | None = setting(None, "target nodes sampled for the average shortest path (0 = every node; "
                                             "unset: 1,000, every node below; each source costs one breadth-first "
                                             "search over the graph either way)")
    clustering_sample: int | None = setting(None, "nodes sampled for the average clustering coefficient (unset: "
                                                  "every node up to 100,000, that many beyond; 0 = every node; "
                                                  "METHODS.md §5.5)")
    path_rel_se: float = setting(0.005, "stop the shortest-path sources once the mean's standard error is at most "
                                        "this share of it (after 32 sources; 0 = every sampled source; "
                                        "METHODS.md §5.5)")
    path_workers: int = setting(0, "processes running the shortest-path searches, 64 sources a pass (0 = one per "
                                   "core; fewer where the free memory does not hold a pass's ≈ 48 B a node each); "
                                   "same figures whatever the number; also the threads of the edge overlaps and clustering samples")
    random_graph_seed: int = setting(0, "seed of the random graph G(n, m) of the kNN graph's density (the one of "
                                        "the citation graph's density gets seed + 1)")
    random_citation_graph: bool = setting(True, "also measure a random graph of the citation graph's density")
    title: str = setting("sciencemap run report", "heading of report.md")
    # Methods compared on the same papers (mapping.evaluation.compare, METHODS.md §6.2-6.4)
    compare: bool = setting(True, "compare relatedness graphs (encoders, TF-IDF, BM25, citations, hybrids, "
                                  "random floor, criterion ceiling) on the papers of each criterion")
    criteria: list[str] = setting(help="criteria to compare on, where the run has them (comma-separated): "
                                       "mesh, subjects, arxiv, keywords",
                                  factory=lambda: ["mesh", "subjects", "arxiv", "keywords"],
                                  parse=lambda s: [x.strip() for x in s.split(",") if x.strip()])
    compare_k: int = setting(20, "neighbours per paper in the k-NN graphs of the comparison")
    max_papers: int = setting(100_000, "papers per criterion at most (a seeded sample beyond; 0 = all)")
    min_papers: int = setting(50, "criteria with fewer papers are not compared")
    granularities: list[float] = setting(help="granularities G at which A is reported (default: N/62.5, N/25, N/12.5 "
                                              "= 20, 50, 100 on 1,250 papers)", factory=list, parse=comma_floats)
    sweep_points: int = setting(16, "CPM resolutions per graph in the sweep")
    leiden_seeds: list[int] = setting(help="Leiden seeds per resolution (comma-separated)", factory=lambda: [0, 1, 2],
                                      parse=lambda s: [int(x) for x in s.split(",") if x.strip()])
    hybrids: list[str] = setting(help="hybrid graphs as 'name=graph:weight,graph:weight' (TOML only)", cli=False,
                                 factory=lambda: ["encoder + BM25=encoder:0.5,bm25:0.5",
                                                  "encoder + BM25 + DC=encoder:0.4,bm25:0.3,dc:0.3"])
    extra_vectors: list[str] = setting(help="more encoders to compare, as 'name=path': a run with a vector store, "
                                            "or Parquet of (paper_id, vector) rows; repeat the option", factory=list, append=True,
                                       parse=lambda s: s)
    compare_workers: int = setting(0, "processes sweeping the graphs in parallel (0 = one per core, at most one per graph)")
    compare_stable_below: int = setting(200_000, "graphs with fewer edges run Leiden until stable in the sweep; larger "
                                                 "ones at most the cluster stage's iteration cap")
    close_share: float = setting(0.5, "a method is flagged close to the criterion when more than this share of its "
                                      "edges are among the criterion's own k-NN edges")
    beside_render: bool = setting(True, "in the pipeline, measure in a process of its own while the render stage "
                                        "runs (the two at once hold both stages' memory); false: after it",
                                  outputs=False)


def clustered_rows(clusters: ds.Dataset, n: int) -> tuple[list[float], np.ndarray]:
    """The clustering's resolutions and which of the n rows have a cluster (at any resolution)."""
    found: set[float] = set()
    clustered = np.zeros(n, bool)
    for b in clusters.to_batches(columns=["resolution", "row"], batch_size=BATCH_ROWS * 16):
        found.update(pc.unique(b.column("resolution")).to_pylist())
        r = b.column("row").to_numpy()
        clustered[r[(r >= 0) & (r < n)]] = True
    return sorted(found), clustered


def labels_at(clusters: ds.Dataset, resolution: float) -> tuple[np.ndarray, np.ndarray]:
    """(row, cluster) NumPy arrays of one resolution."""
    t = clusters.to_table(columns=["row", "cluster"], filter=pc.field("resolution") == resolution)
    return (t.column("row").to_numpy().astype(np.int64, copy=False),
            t.column("cluster").to_numpy())


def read_mesh(papers: ds.Dataset, drop_names: frozenset, drop_uis: frozenset):
    """One pass over the papers table: the MeSH assignments of the papers that have MeSH (in
    table order) and those papers' ids."""
    coll, ids = TermCollector(drop_names, drop_uis), []
    with Progress("evaluate: MeSH lists", papers.count_rows(), "papers") as p:
        for b in papers.to_batches(columns=["paper_id", "mesh"], batch_size=BATCH_ROWS):
            has = pc.fill_null(pc.greater(pc.list_value_length(b.column("mesh")), 0), False)
            sel = b.filter(has)
            coll.add(sel.column("mesh"))
            ids.append(sel.column("paper_id"))
            p.advance(b.num_rows)
    return coll.finish(), pa.chunked_array(ids, pa.string())


def mesh_evaluation(papers: ds.Dataset, clusters: ds.Dataset, vector_ids: pa.Array, cfg: EvaluateConfig) -> dict:
    """Accuracy/granularity per resolution on the clustered papers with MeSH (first row of a
    paper id that appears twice)."""
    names = (CHECK_TAGS | frozenset(cfg.extra_check_tags)) if cfg.drop_check_tags else frozenset()
    uis = CHECK_TAG_UIS if cfg.drop_check_tags else frozenset()
    if "row" not in clusters.schema.names:
        raise UserError("the clusters table has no `row` column (written before clusters were stored by vector "
                        "row); re-run the knn and cluster stages")
    n = len(vector_ids)
    resolutions, clustered = clustered_rows(clusters, n)
    terms, ids = read_mesh(papers, names, uis)
    row = positions_in(ids, vector_ids)
    del ids
    cand = np.flatnonzero(row >= 0)
    cand = cand[clustered[row[cand]]]
    _, first = np.unique(row[cand], return_index=True)
    evaluated = np.zeros(len(row), bool)
    evaluated[cand[first]] = True
    mv = mesh_vectors(terms, evaluated, major_weight=cfg.major_weight, major_in_vector=cfg.major_in_vector)
    del terms
    ev_rows = row[mv.rows]
    out = {"papers_with_mesh": int(len(row)), "evaluated": int(len(ev_rows)),
           "descriptors": len(mv.descriptors), "resolutions": []}
    if len(ev_rows) == 0:
        return out
    for r in resolutions:
        rows_r, cl = labels_at(clusters, r)
        by_row = np.full(max(n, int(rows_r.max()) + 1 if len(rows_r) else 0), -1, cl.dtype)
        by_row[rows_r] = cl
        lab = by_row[ev_rows]
        V = mv.V
        if (lab < 0).any():                       # a paper without a label at this resolution
            keep = lab >= 0
            V, lab = V[keep], lab[keep]
            if len(lab) == 0:
                continue
        a, unrelated = accuracy(V, lab)
        perm = np.random.default_rng(cfg.baseline_seed).permutation(lab)
        a_rand, _ = accuracy(V, perm)
        out["resolutions"].append({
            "resolution": float(r), "clusters_total": int(pc.count_distinct(pa.array(cl)).as_py()),
            "clusters_evaluated": int(len(np.unique(lab))), "granularity": granularity(lab),
            "accuracy": a, "accuracy_random": a_rand, "unrelated": unrelated})
    return out


def citation_graph(citations: Citations) -> Links:
    """The direct-citation graph on the vector-store rows (the ids `citations` were read against)."""
    return Links.from_keys(citations.links_among_ids(), len(citations.ids))


GRAPH_TITLES = {"knn": "kNN", "citation": "direct citation", "random": "random (kNN density)",
                "random_citation": "random (citation density)"}


def networks(layout: RunLayout, n_rows: int, cfg: EvaluateConfig, citation: Links | None = None) -> dict:
    """Table 6 statistics of the kNN, direct-citation and random graphs on the `n_rows` vector-store
    rows and their pairwise edge overlap: {"graphs": {name: stats}, "overlap": [{a, b, ...}], seeds}.
    `citation`: the direct-citation graph (`citation_graph`; None: none). The kNN graph's edges are
    the cluster stage's, read without its weights; one graph's search graph at a time, and each
    random graph drawn when its turn comes and freed once its overlaps are taken, so at most one of
    the two is held beside another graph's search graph."""
    keys, n = read_pair_keys(layout)
    if n != n_rows:
        raise UserError(f"the kNN graph has {n:,} nodes but the vector store {n_rows:,} rows; "
                        "re-run the knn and cluster stages")
    # the cluster stage's edges without its weights: a sort of the keys in place, no argsort and gathers
    knn = Links.from_keys(sorted_unique(keys), n)
    del keys
    if citation is not None and citation.n != n:
        raise UserError(f"the citation graph has {citation.n:,} nodes but the kNN graph {n:,}")
    workers = cfg.path_workers or default_workers()
    order, stats, pairs, held = [], {}, {}, {}

    def measure(name: str, g: Links, drop: str | None = None) -> None:
        """g's overlaps with the graphs held, then (with `drop` freed first) its statistics."""
        for other, h in held.items():
            pairs[other, name] = edge_overlap(h, g, workers=workers)
        held.pop(drop, None)
        held[name] = g
        order.append(name)
        stats[name] = network_stats(g, cfg.path_sample, cfg.baseline_seed, path_targets=cfg.path_targets,
                                    clustering_sample=cfg.clustering_sample, name=name, path_workers=workers,
                                    path_rel_se=cfg.path_rel_se)

    measure("knn", knn)
    if citation is not None:
        measure("citation", citation)
    measure("random", random_graph(n, knn.m, cfg.random_graph_seed))
    if cfg.random_citation_graph and citation is not None:
        measure("random_citation", random_graph(n, citation.m, cfg.random_graph_seed + 1), drop="random")
    overlap = [{"a": a, "b": b, **pairs[a, b]} for i, a in enumerate(order) for b in order[i + 1:]]
    return {"graphs": stats, "overlap": overlap,
            "random_graph_seed": cfg.random_graph_seed,
            "path_rel_se": cfg.path_rel_se, "path_sample": sample_sizes(n, None, cfg.path_sample, None)[1]}


NETWORK_ROWS = [("nodes", "nodes"), ("edges", "edges"), ("average degree", "average_degree"), ("density", "density"),
                ("connected components", "connected_components"), ("largest component", "largest_component"),
                ("largest component (share of nodes)", "largest_component_share"),
                ("isolated nodes", "isolated_nodes"), ("average clustering coefficient", "average_clustering"),
                ("average shortest path length", "average_shortest_path"),
                ("its standard error", "shortest_path_se"),
                ("path sources searched", "shortest_path_sources"),
                ("reachable pairs in the path sample", "shortest_path_pairs")]


def _small(v) -> str:
    """Densities, shares and clustering of sparse graphs: four significant digits, not four decimals."""
    return "-" if v is None else "n/a" if isinstance(v, float) and math.isnan(v) else f"{v:.4g}"


def network_section(net: dict) -> list[str]:
    """Table 6 with the graphs as columns, then the edge overlap of each pair (Fig. 7)."""
    stats, names = net["graphs"], list(net["graphs"])
    any_stats = next(iter(stats.values()))
    rows = [[label] + [_small(stats[g].get(key)) if key in ("density", "largest_component_share", "average_clustering",
                                                            "shortest_path_se")
                       else stats[g].get(key) for g in names]
            for label, key in NETWORK_ROWS if any(key in stats[g] for g in names)]
    lines = ["## Network statistics", "",
             "The graphs on the same nodes (the papers of the vector store): the kNN graph (§5.2), the "
             "direct-citation graph (distinct undirected links between these papers from the references "
             "table) and random graphs G(n, m) of equal density (seed "
             f"{net['random_graph_seed']}" + (f"; {net['random_graph_seed'] + 1} for the citation-density one"
                                              if "random_citation" in stats else "") + "). Shortest paths: unweighted, averaged over the reachable pairs of "
             f"the sampled sources × {any_stats.get('shortest_path_targets', 0):,} sampled targets (the same "
             "nodes in every graph); the sources are searched in their seeded order until the mean's standard "
             f"error is at most {net.get('path_rel_se', 0):.1%} of it (at least 32, at most "
             f"{net.get('path_sample', any_stats.get('shortest_path_sources', 0)):,})"
             + (f"; clustering coefficient over {any_stats['clustering_sample']:,} sampled nodes"
                if "clustering_sample" in any_stats else "") + ".", ""]
    lines += _table(["statistic"] + [GRAPH_TITLES.get(g, g) for g in names], rows) + [""]
    if net["overlap"]:
        lines += ["Edge overlap: edges in both graphs, as a share of each graph's edges and as Jaccard "
                  "|A ∩ B| / |A ∪ B|; expected = m_A · m_B / (n (n − 1) / 2), the mean overlap with a random "
                  "graph of the same density (its shares are the other graph's density).", ""]
        lines += _table(["graph A", "graph B", "edges A", "edges B", "common", "share of A", "share of B",
                         "Jaccard", "expected common", "common / expected"],
                        [[GRAPH_TITLES.get(o["a"], o["a"]), GRAPH_TITLES.get(o["b"], o["b"]), o["edges_a"],
                          o["edges_b"], o["common"], _small(o["share_of_a"]), _small(o["share_of_b"]),
                          _small(o["jaccard"]), _small(o["common_expected"]), _small(o["common_over_expected"])]
                         for o in net["overlap"]]) + [""]
    return lines


def _fmt(v, nd=4):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "n/a" if math.isnan(v) else (f"{v:.{nd}f}" if abs(v) < 1e4 else f"{v:,.0f}")
    if isinstance(v, int):
        return f"{v:,}"
    return str(v).replace("|", "\\|")


def _table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
           ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in rows]


def _count(d: dict, *keys) -> float | None:
    for k in d:
        if any(s in k.lower() for s in keys) and isinstance(d[k], (int, float)):
            return d[k]
    return None


def ingest_section(s: dict) -> list[str]:
    """Per source: role, input records, papers, rejects by reason, and whether they add up.

    Reads the ingest stage's `per_source` block ({source: {role, input_records, papers_corpus,
    papers_fulltext, papers_mapped, papers_title_only, cited_only_left_out, references,
    references_resolved, record_rejects, rejects: {reason: n}}}); the check input = papers +
    record rejects is recomputed here. A summary written before roles: every paper mapped, no
    cited-only paper left out. Anything else is shown raw."""
    per = s.get("per_source") if isinstance(s, dict) else None
    if not isinstance(per, dict) or not per:
        return ["```json", json.dumps(s, indent=2, default=str)[:4000], "```"]
    rows, totals = [], np.zeros(7, dtype=np.int64)
    for name, d in sorted(per.items()):
        n_in, n_pap, n_rej = d.get("input_records", 0), d.get("papers_corpus", 0), d.get("record_rejects", 0)
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted((d.get("rejects") or {}).items())) or "-"
        adds = "yes" if n_in == n_pap + n_rej else "NO"
        refs = f"{d.get('references', 0):,} ({d.get('references_resolved', 0):,} resolved)"
        counts = [n_in, n_pap, d.get("papers_fulltext", 0), d.get("papers_mapped", n_pap),
                  d.get("papers_title_only", 0), d.get("cited_only_left_out", 0)]
        rows.append([name, d.get("role", "-"), *counts, refs, n_rej, reasons, adds])
        totals += [*counts, n_rej]
    rows.append(["**all**", "", *[int(x) for x in totals[:6]], "", int(totals[6]), "",
                 "yes" if totals[0] == totals[1] + totals[6] else "NO"])
    return _table(["source", "role", "input records", "papers", "full text", "mapped", "title-only cited",
                   "cited-only left out", "references", "record rejects", "rejects by reason (all levels)",
                   "input = papers + rejects"], rows) + files_section(s)


def files_section(s: dict) -> list[str]:
    """Every file under the input roots per source (found = parsed + rejected + skipped +
    auxiliary, recomputed here), the skipped files with their reasons and the recovery warnings
    (the first of each, with the totals); nothing for a summary written before the files table."""
    per = s.get("per_source") or {}
    rows = []
    for name, d in sorted(per.items()):
        f = d.get("files")
        if isinstance(f, dict):
            found = f.get("found", 0)
            rows.append([name, found, *[f.get(k, 0) for k in FILE_STATUSES], d.get("warnings", 0),
                         "yes" if found == sum(f.get(k, 0) for k in FILE_STATUSES) else "NO"])
    if not rows:
        return []
    lines = ["", "Files under the input roots (skipped: not an input of the format, or hidden; auxiliary: read "
                 "with other files; warnings: papers kept after recovering a damaged file):", ""]
    lines += _table(["source", "files found", *FILE_STATUSES, "warnings", "found = accounted"], rows)
    skipped = s.get("skipped_files") or {}
    if skipped.get("total"):
        first = skipped.get("first") or []
        if skipped.get("by_reason"):
            lines += ["", "Skipped files by reason:", ""]
            lines += _table(["source", "reason", "files"],
                            [[x.get("source"), x.get("reason"), x.get("count")] for x in skipped["by_reason"]])
        lines += ["", f"Skipped files ({skipped['total']:,}; the `files` table lists all"
                      + (f", the first {len(first)} here" if len(first) < skipped["total"] else "") + "):", ""]
        lines += [f"- `{x.get('path')}` ({x.get('source')}): {x.get('reason')}" for x in first]
    warns = s.get("warnings") or {}
    if isinstance(warns, dict) and warns.get("total"):
        first = warns.get("first") or []
        lines += ["", f"Warnings ({warns['total']:,}; the `warnings` table lists all"
                      + (f", the first {len(first)} here" if len(first) < warns["total"] else "") + "):", ""]
        lines += [f"- `{x.get('record_id')}` in `{x.get('source_file')}`: {x.get('warning')}" for x in first]
    return lines


def knn_section(s: dict) -> list[str]:
    """The kNN graph's search: index, recall@k on its own sample and how nprobe / ef_search was chosen."""
    lines = [f"- {s.get('papers', 0):,} papers, k = {s.get('k')}, {s.get('edges', 0):,} edges; index {s.get('index')} "
             f"on the {'GPU' if s.get('gpu') else 'CPU'}"]
    if s.get("index") == "flat":
        return lines + ["- exact search: every list is the true k nearest"]
    lines.append(f"- recall@{s.get('k')} {_fmt(s.get('recall_at_k'))} against exact search on "
                 f"{s.get('recall_queries')} seeded queries (target {s.get('target_recall')})")
    t = s.get("tuning") or {}
    param = t.get("param")
    if not t.get("tuned"):
        return lines + [f"- {param} {t.get('value')} as configured (not tuned)"]
    lines += [f"- {param} {t['value']}: the first value whose recall on another {t['sample_queries']} seeded queries "
              f"reached the target with its lower 95% bound (exact search {t['exact_ms_per_query']} ms a query "
              "there):", ""]
    lines += _table([param, "sample recall", "lower 95% bound", "ms a query"],
                    [[st[param], st["recall"], st.get("recall_low"), st["ms_per_query"]] for st in t["steps"]])
    return lines


FEATURE_NAMES = {"I": "introduction", "M": "methods", "R": "results", "D": "discussion", "S": "self-citation"}


def table3_note(s: dict, shown: list[str]) -> str:
    """Which feature set ran, and why each of the five features that is not in Table 3 is absent."""
    meta = s.get("triplet_meta") or {}
    name = meta.get("feature_set") or (s.get("config") or {}).get("feature_set") or "default"
    absent = [f for f in FEATURE_NAMES if f not in shown]
    why = {"default": "the seed paper's set leaves M out (`[importance] feature_set = all` adds it)"}.get(
        name, f"not in `[importance] feature_set = {name}`")
    note = f"Feature set `{name}`: {', '.join(shown)}"
    if absent:
        note += "; absent: " + ", ".join(f"{f} ({FEATURE_NAMES[f]} mentions)" if f != "S" else "S (self-citation)"
                                         for f in absent) + f": {why}"
    return note + ". A feature that is the same for every pair gets weight 0 (METHODS.md §2)."


def importance_section(s: dict) -> list[str]:
    lines: list[str] = []
    table = next((v for v in s.values() if isinstance(v, list) and v and isinstance(v[0], dict) and "feature" in v[0]), None)
    if table:
        cols = [c for c in ("feature", "mean", "std", "entropy", "weight") if c in table[0]]
        lines += [table3_note(s, [row.get("feature") for row in table]), ""]
        lines += ["Entropy weights (seed paper Table 3):", ""]
        lines += _table(cols, [[row.get(c) for c in cols] for row in table]) + [""]
    res = s.get("resolution_rate_per_source")
    if isinstance(res, dict) and res:
        lines += ["Reference resolution (share of references whose cited paper is a full-text corpus paper):", ""]
        lines += _table(["source", "references", "resolved", "rate"],
                        [[k, v.get("references"), v.get("resolved"), v.get("rate")] for k, v in sorted(res.items())
                         if isinstance(v, dict)]) + [""]
    for k, v in s.items():
        if k in ("seconds", "table3_text", "timings"):
            continue
        if isinstance(v, (int, float, str)):
            lines.append(f"- {k}: {_fmt(v)}")
        elif isinstance(v, dict) and all(isinstance(x, (int, float, str)) for x in v.values()):
            lines.append(f"- {k}: " + ", ".join(f"{a} = {_fmt(b)}" for a, b in v.items()))
    return lines


VAL_COLUMNS = ("val_loss", "val_accuracy", "val_accuracy_hard", "val_accuracy_easy", "val_mrr", "val_recall@1")


def steps_read_line(end: dict) -> str:
    """One line from the training log's `end` record (encoders.training.loop)."""
    stopped = f", stopped at {_fmt(end['steps_done'])} by the max_hours wall clock" if end.get("budget_stopped") else ""
    sample = (f", a seeded sample of the {_fmt(end['train_triplets_available'])} available"
              if end.get("sample_triplets") else "")
    return (f"- steps: {_fmt(end['planned_steps'])} planned by {end['planned_by']}{stopped}; read "
            f"{_fmt(end['triplets_seen'])} triplets ({_fmt(end['distinct_triplets_seen'])} distinct of "
            f"{_fmt(end['train_triplets'])} trained on{sample}), {_fmt(end['papers_seen'])} papers, "
            f"{_fmt(end['tokens_seen'])} tokens")


def train_section(path: Path) -> tuple[list[str], dict]:
    """Training loss at the first and last logged step, and the validation rows as a table."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    losses = [r for r in rows if r.get("kind", "train") == "train" and isinstance(r.get("loss"), (int, float))]
    vals = [r for r in rows if r.get("kind") == "val"]
    info = {"logged_steps": len(losses)}
    if losses:
        info.update(first_loss=losses[0]["loss"], last_loss=losses[-1]["loss"],
                    first_step=losses[0].get("step"), last_step=losses[-1].get("step"))
    lines = []
    if losses:
        lines += _table(["", "step", "training loss"], [["first logged", info["first_step"], info["first_loss"]],
                                                       ["last logged", info["last_step"], info["last_loss"]]])
        lines += [""]
    curve = RunLayout(path.parent).train_curve_png
    if curve.is_file():
        lines += [f"![training loss by step]({curve.name})", ""]
    end = next((r for r in reversed(rows) if r.get("kind") == "end"), None)
    if end:   # the trainer's last line: the step plan and what the steps read
        info["steps_read"] = end
        lines.append(steps_read_line(end))
    if vals:
        cols = [c for c in VAL_COLUMNS if any(c in v for v in vals)]
        lines += ["", "Validation triplets (held-out anchors; accuracy = share with d(a,p) < d(a,n); "
                      "MRR / recall@1 of each anchor's positive among all validation candidates):", "",
                  "| step | " + " | ".join(c.removeprefix("val_") for c in cols) + " |",
                  "|---" * (len(cols) + 1) + "|"]
        lines += ["| " + " | ".join([str(v.get("step"))] + [_fmt(v.get(c)) for c in cols]) + " |" for v in vals]
        info["validation"] = vals
    return lines, info


def run_evaluate(cfg: EvaluateConfig, layout: RunLayout) -> dict:
    """The whole stage: measure, then write report.md and metrics.json."""
    return write_report(layout, measure(cfg, layout))


@dataclass
class Measured:
    """What `measure` found, before the report's summary: the summary reads the render stage's
    outputs, everything here only the stages up to the cluster stage's."""
    metrics: dict
    lines: list[str]       # report.md without its summary
    n_vectors: int


def measure(cfg: EvaluateConfig, layout: RunLayout) -> Measured:
    """Every measurement of the stage (MeSH accuracy, the comparison, the networks). Reads the run
    up to the cluster stage's outputs and none of the render stage's, so the pipeline may run it in
    a process of its own while the render stage runs ([evaluate] beside_render)."""
    t0 = time.perf_counter()
    clusters = dataset(layout.table("clusters"), "run the cluster stage first")
    papers = dataset(layout.table("papers"), "run the ingest stage first")
    vector_ids = open_vectors(layout).ids_arrow()
    n_vectors = len(vector_ids)
    metrics: dict = {"title": cfg.title}
    lines = [f"# {cfg.title}", "", f"Run directory: `{layout.root}`", ""]

    if layout.ingest_summary.exists():
        s = json.loads(layout.ingest_summary.read_text())
        metrics["ingest"] = s
        lines += ["## Input", ""] + ingest_section(s) + [""]
    if layout.importance_summary.exists():
        s = json.loads(layout.importance_summary.read_text())
        metrics["importance"] = s
        lines += ["## Citation importance", ""] + importance_section(s) + [""]
    if layout.train_log.exists():
        tl, info = train_section(layout.train_log)
        metrics["training"] = info
        lines += ["## Training", ""] + tl + [""]

    edges = layout.table("edges")
    if edges.exists():
        s = read_json_metadata(edges, EDGES_META_KEY)
        metrics["knn"] = s
        lines += ["## kNN graph", ""] + knn_section(s) + [""]

    t1 = time.perf_counter()
    mesh = mesh_evaluation(papers, clusters, vector_ids, cfg)
    metrics["mesh_accuracy"] = mesh
    t_mesh = time.perf_counter() - t1
    rss_mesh = rss_mb()
    lines += ["## MeSH clustering accuracy", "",
              f"On {mesh['evaluated']:,} papers with MeSH descriptors ({mesh['descriptors']:,} descriptors after "
              "dropping check tags), with the clusters they got in the clustering of all papers. "
              "A = share of each paper's MeSH relatedness that falls inside its own cluster (METHODS.md §6); "
              "G = N²/Σn_c² (compare methods at equal G, not equal resolution). "
              "Random = the same labels permuted (same cluster sizes).", ""]
    if mesh["resolutions"]:
        lines += _table(["resolution", "clusters (all papers)", "clusters (evaluated)", "granularity G",
                         "accuracy A", "random A"],
                        [[f"{r['resolution']:g}", r["clusters_total"], r["clusters_evaluated"], r["granularity"],
                          r["accuracy"], r["accuracy_random"]] for r in mesh["resolutions"]])
    else:
        lines.append("No clustered paper has MeSH descriptors; accuracy not computed.")
    lines.append("")

    # the references table, read once for the criteria's citation graphs and the direct-citation graph
    t4 = time.perf_counter()
    citations = read_citations(dataset(layout.table("references")), vector_ids) \
        if layout.table("references").exists() else None
    t_refs = time.perf_counter() - t4
    t_cmp = 0.0
    if cfg.compare:
        from mapping.evaluation.compare import compare, compare_section
        t3 = time.perf_counter()
        cmp = compare(layout, cfg, citations)
        t_cmp = time.perf_counter() - t3
        metrics["comparison"] = cmp
        lines += compare_section(cmp, cfg)

    t2 = time.perf_counter()
    citation = citation_graph(citations) if citations is not None else None
    del citations, vector_ids          # freed before the kNN graph is loaded
    net = networks(layout, n_vectors, cfg, citation)
    del citation
    metrics["network"] = net
    t_net = time.perf_counter() - t2
    lines += network_section(net)
    metrics["timings"] = {"mesh_s": round(t_mesh, 3), "references_s": round(t_refs, 3), "comparison_s": round(t_cmp, 3),
                          "network_s": round(t_net, 3),
                          "total_s": round(time.perf_counter() - t0, 3),
                          "peak_rss_mesh_mb": round(rss_mesh), "peak_rss_mb": round(rss_mb()),
                          "rss_end_mb": round(current_rss_mb())}
    return Measured(metrics, lines, n_vectors)


def write_report(layout: RunLayout, measured: Measured) -> dict:
    """report.md (the summary first: it also reads the render stage's map) and metrics.json."""
    from mapping.evaluation.report_summary import summary_section

    metrics, lines = measured.metrics, list(measured.lines)
    mesh = metrics["mesh_accuracy"]
    head = 4   # title, blank, run directory, blank: the summary opens the report
    lines[head:head] = summary_section(layout, metrics, measured.n_vectors)
    write_text_atomic(layout.report_md, "\n".join(lines) + "\n")
    write_text_atomic(layout.metrics_json, json.dumps(_clean(metrics), indent=2, default=_json_default, allow_nan=False))
    summary = {"evaluated": mesh["evaluated"], "report": str(layout.report_md),
               "accuracy": {str(r["resolution"]): round(r["accuracy"], 4) for r in mesh["resolutions"]},
               **metrics["timings"]}
    log.info("evaluate: %s", summary)
    return summary


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return None if math.isnan(o) else float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _clean(o):
    """NaN/inf -> null so metrics.json is strict JSON."""
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, (float, np.floating)):
        return None if not math.isfinite(float(o)) else float(o)
    if isinstance(o, np.integer):
        return int(o)
    return o
