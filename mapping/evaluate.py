"""Evaluation stage: MeSH clustering accuracy per resolution, kNN network statistics, report.md.

Accuracy (METHODS.md §6) is measured on the papers that have MeSH descriptors (the PubMed
records) with the cluster labels they got in the full clustering; a random-assignment baseline
permutes those labels (same cluster sizes, seeded) so a reader sees how far A is above chance.
"""
from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sciencemap.config import setting
from sciencemap.embeddings import load_embedding_ids
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import read_table, write_text_atomic

from mapping.cluster import load_graph
from mapping.mesh_accuracy import CHECK_TAG_UIS, CHECK_TAGS, accuracy, granularity, publication_vectors
from mapping.netstats import network_stats

log = logging.getLogger(__name__)


@dataclass
class EvaluateConfig:
    major_weight: float = setting(2.0, "weight of a MeSH descriptor assignment flagged major (METHODS.md §6)")
    major_in_vector: bool = setting(True, "also weight major descriptors in the publication vectors")
    drop_check_tags: bool = setting(True, "leave out check tags (Humans, Animals, Male, Female, age groups, ...)")
    extra_check_tags: list[str] = setting(help="descriptor names dropped as check tags too (TOML only)", factory=list)
    baseline_seed: int = setting(0, "seed of the permuted-labels baseline and of the shortest-path sample",
                                 flags=("--seed",))
    path_sample: int = setting(200, "source nodes sampled for the average shortest path (0 = skip it)")
    title: str = setting("sciencemap run report", "heading of report.md")


def mesh_evaluation(papers: pd.DataFrame, clusters: pd.DataFrame, cfg: EvaluateConfig) -> dict:
    """Accuracy/granularity per resolution on papers with MeSH. papers: paper_id, mesh."""
    has_mesh = papers["mesh"].map(lambda m: m is not None and len(m) > 0)
    pm = papers[has_mesh].drop_duplicates("paper_id")
    clustered = set(clusters["paper_id"].unique())
    pm = pm[pm["paper_id"].isin(clustered)].reset_index(drop=True)
    names = (CHECK_TAGS | frozenset(cfg.extra_check_tags)) if cfg.drop_check_tags else frozenset()
    uis = CHECK_TAG_UIS if cfg.drop_check_tags else frozenset()
    records = [list(m) for m in pm["mesh"]]
    mv = publication_vectors(records, major_weight=cfg.major_weight, major_in_vector=cfg.major_in_vector,
                             drop_names=names, drop_uis=uis)
    ev_ids = pm["paper_id"].to_numpy(dtype=object)[mv.rows]
    out = {"papers_with_mesh": int(has_mesh.sum()), "evaluated": int(len(ev_ids)),
           "descriptors": len(mv.descriptors), "resolutions": []}
    rng_seed = cfg.baseline_seed
    for r in sorted(clusters["resolution"].unique()):
        lab = clusters[clusters["resolution"] == r].set_index("paper_id")["cluster"].reindex(ev_ids).to_numpy()
        if len(lab) == 0:
            continue
        a, unrelated = accuracy(mv.V, lab)
        perm = np.random.default_rng(rng_seed).permutation(lab)
        a_rand, _ = accuracy(mv.V, perm)
        out["resolutions"].append({
            "resolution": float(r), "clusters_total": int(clusters.loc[clusters["resolution"] == r, "cluster"].nunique()),
            "clusters_evaluated": int(len(np.unique(lab))), "granularity": granularity(lab),
            "accuracy": a, "accuracy_random": a_rand, "unrelated": unrelated})
    return out


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
    """Per source: input records, papers, rejects by reason, and whether they add up.

    Reads the ingest stage's `per_source` block ({source: {input_records, papers_corpus,
    papers_fulltext, papers_title_only, references, references_resolved, record_rejects,
    rejects: {reason: n}}}); the check input = papers + record rejects is recomputed here.
    Anything else is shown raw."""
    per = s.get("per_source") if isinstance(s, dict) else None
    if not isinstance(per, dict) or not per:
        return ["```json", json.dumps(s, indent=2, default=str)[:4000], "```"]
    rows, totals = [], np.zeros(5, dtype=np.int64)
    for name, d in sorted(per.items()):
        n_in, n_pap, n_rej = d.get("input_records", 0), d.get("papers_corpus", 0), d.get("record_rejects", 0)
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted((d.get("rejects") or {}).items())) or "-"
        adds = "yes" if n_in == n_pap + n_rej else "NO"
        refs = f"{d.get('references', 0):,} ({d.get('references_resolved', 0):,} resolved)"
        rows.append([name, n_in, n_pap, d.get("papers_fulltext", 0), d.get("papers_title_only", 0), refs,
                     n_rej, reasons, adds])
        totals += [n_in, n_pap, d.get("papers_fulltext", 0), d.get("papers_title_only", 0), n_rej]
    rows.append(["**all**", *[int(x) for x in totals[:4]], "", int(totals[4]), "",
                 "yes" if totals[0] == totals[1] + totals[4] else "NO"])
    return _table(["source", "input records", "papers", "full text", "title-only cited", "references",
                   "record rejects", "rejects by reason (all levels)", "input = papers + rejects"], rows)


def importance_section(s: dict) -> list[str]:
    lines: list[str] = []
    table = next((v for v in s.values() if isinstance(v, list) and v and isinstance(v[0], dict) and "feature" in v[0]), None)
    if table:
        cols = [c for c in ("feature", "mean", "std", "entropy", "weight") if c in table[0]]
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
    lines = [f"- {k}: {_fmt(v)}" for k, v in info.items()]
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
    t0 = time.perf_counter()
    clusters = read_table(layout.table("clusters")).to_pandas()
    papers = read_table(layout.table("papers"), columns=["paper_id", "mesh"]).to_pandas()
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

    t1 = time.perf_counter()
    mesh = mesh_evaluation(papers, clusters, cfg)
    metrics["mesh_accuracy"] = mesh
    t_mesh = time.perf_counter() - t1
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

    t2 = time.perf_counter()
    graph = load_graph(layout)
    extra = 0
    if layout.embeddings_dir.exists():
        try:
            ids = load_embedding_ids(layout)
            extra = int(len(set(ids) - set(graph.ids)))
        except UserError:
            pass
    citation_pairs = None
    ref_dir = layout.table("references")
    if ref_dir.exists():
        refs = read_table(ref_dir, columns=["citing_id", "cited_id"]).to_pandas().dropna()
        idx = pd.Index(graph.ids)
        a, b = idx.get_indexer(refs["citing_id"]), idx.get_indexer(refs["cited_id"])
        ok = (a >= 0) & (b >= 0)
        citation_pairs = (a[ok], b[ok])
    net = network_stats(graph, extra, cfg.path_sample, cfg.baseline_seed, citation_pairs)
    metrics["network"] = net
    t_net = time.perf_counter() - t2
    lines += ["## kNN network", ""] + _table(["statistic", "value"], [[k.replace("_", " "), v] for k, v in net.items()])
    lines.append("")
    metrics["timings"] = {"mesh_s": round(t_mesh, 3), "network_s": round(t_net, 3),
                          "total_s": round(time.perf_counter() - t0, 3)}
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
