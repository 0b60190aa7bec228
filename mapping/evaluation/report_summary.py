"""The opening of report.md: what this run read, which encoder made its vectors, what the map
holds, and one sentence per criterion on which graph did best and where this run's encoder stands.
Every figure comes from the run's own files (ingest summary, embedding manifest, model card, map
layout, topics and areas tables, the evaluate stage's metrics); a part whose file is missing is
left out, never guessed."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from sciencemap.contracts import EMBEDDINGS_MANIFEST
from sciencemap.layout import RunLayout
from sciencemap.storage import read_table

# a model card beside the weights says how they were trained (encoders.training.export writes it)
MODEL_CARD = "sciencemap.json"


def _n(v) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)


def corpus_line(ingest: dict, nodes: int | None, papers_shown: str | None) -> str | None:
    per = ingest.get("per_source") or {}
    if not per:
        return None
    total = {k: sum(int(d.get(k) or 0) for d in per.values())
             for k in ("papers_corpus", "papers_fulltext", "papers_title_only")}
    sources = ", ".join(f"{s} {int(d.get('papers_corpus') or 0):,}" for s, d in sorted(per.items()))
    line = (f"- **Corpus:** {total['papers_corpus']:,} papers with a record of their own ({sources}; "
            f"{total['papers_fulltext']:,} with full text), and {total['papers_title_only']:,} title-only "
            "papers known from their reference lists")
    if nodes is not None:
        line += (f". The kNN graph and the clusters hold {nodes:,} papers: the records and the title-only "
                 "papers with a title")
    if papers_shown == "corpus":
        line += "; the map draws and counts only the papers with a record (`[render] papers_shown = corpus`)"
    elif papers_shown == "all":
        line += "; the map draws them all (`[render] papers_shown = all`)"
    return line + "."


def encoder_line(layout: RunLayout) -> str | None:
    path = layout.embeddings_dir / EMBEDDINGS_MANIFEST
    if not path.is_file():
        return None
    m = json.loads(path.read_text())
    model = Path(str(m.get("model_path") or "?"))
    card_path = model / MODEL_CARD
    card = json.loads(card_path.read_text()) if card_path.is_file() else None
    name = "this run's fine-tuned model" if model.resolve() == layout.model_dir.resolve() else f"`{model}`"
    line = (f"- **Encoder:** {name} (weights hash {str(m.get('model_hash'))[:12]}), {m.get('pooling')} pooling "
            f"over at most {m.get('max_length')} tokens, {m.get('dim')} dimensions")
    if card:
        obj = card.get("objective") or {}
        base = (card.get("config") or {}).get("model") or card.get("base_model") or "?"
        line += (f"; fine-tuned from {base} with the {obj.get('name', '?')} objective for "
                 f"{_n(card.get('steps'))} steps")
    elif model.is_dir():
        line += "; used as it is (no sciencemap model card: not fine-tuned by sciencemap)"
    else:
        line += f"; {model} is no longer there, so how it was trained is not known here"
    return line + "."


def map_line(layout: RunLayout) -> str | None:
    if not layout.map_layout.is_file() or not layout.table("topics").exists():
        return None
    with np.load(layout.map_layout, allow_pickle=False) as z:
        res = float(z["resolution"])
        shown = len(z["cluster"])
    topics = read_table(layout.table("topics"), columns=["resolution"]).column(0).to_numpy()
    all_topics = int((np.abs(topics - res) <= 1e-12 * max(1.0, abs(res))).sum())
    line = (f"- **Map:** Leiden CPM at resolution {res:g}: {all_topics:,} topics, {shown:,} of them with a paper "
            "on the map")
    if layout.table("areas").exists():
        line += f", grouped into {read_table(layout.table('areas'), columns=['area']).num_rows:,} research areas"
    return line + "."


def _rel(d: dict) -> float:
    v = (d.get("relative_accuracy") or {}).get("mean")
    return v if isinstance(v, (int, float)) and math.isfinite(v) else float("nan")


def criterion_lines(comparison: dict, titles: dict, floor: str, ceiling: str, criteria: dict) -> list[str]:
    """Per criterion: the best compared graph and where this run's encoder stands among them
    (relative accuracy, METHODS.md §6.4; the floor and the ceiling are bounds, not methods)."""
    out = []
    for name, e in comparison.items():
        if "graphs" not in e:
            title = e.get("title") or (criteria[name][2] if name in criteria else name)
            out.append(f"- **{title}:** not compared: {e.get('skipped')}.")
            continue
        ranked = sorted(((g, _rel(d)) for g, d in e["graphs"].items() if g not in (floor, ceiling)
                         and math.isfinite(_rel(d))), key=lambda gv: -gv[1])
        if not ranked:
            continue
        best, best_v = ranked[0]
        line = (f"- **{e['title']}** ({e['evaluated']:,} papers): {titles.get(best, best)} did best (relative "
                f"accuracy {best_v:.3f})")
        enc = dict(ranked).get("encoder")
        if enc is not None and best != "encoder":
            rank = [g for g, _ in ranked].index("encoder") + 1
            above = [titles.get(g, g) for g, v in ranked if v > enc]
            line += (f"; this run's encoder is {rank} of {len(ranked)} ({enc:.3f}), below "
                     + ", ".join(above))
        out.append(line + ".")
    return out


def summary_section(layout: RunLayout, metrics: dict, nodes: int | None) -> list[str]:
    from mapping.evaluation.compare import CEILING, CRITERIA, FLOOR, TITLES

    render_cfg = None
    if layout.map_layout.is_file():
        with np.load(layout.map_layout, allow_pickle=False) as z:
            if "render_config" in z:
                render_cfg = json.loads(str(z["render_config"]))
    lines = [corpus_line(metrics.get("ingest") or {}, nodes, (render_cfg or {}).get("papers_shown")),
             encoder_line(layout), map_line(layout)]
    lines = [x for x in lines if x]
    if metrics.get("comparison"):
        lines += criterion_lines(metrics["comparison"], TITLES, FLOOR, CEILING, CRITERIA)
    return (["## Summary", ""] + lines + [""]) if lines else []
