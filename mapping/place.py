"""Placing new papers on a finished map without recomputing it (METHODS.md §5.6).

A user with a new month of papers ingests and embeds them in a run of their own, with the map
run's model (`[embed] model = "<map run>/model"`), then:

    sciencemap place --run <map run> --new <new papers' run>

0. the two runs' embedding manifests must name the same encoder (model hash, pooling, max_length,
   dimensions: `same_encoder`), else place refuses and names the command that re-embeds,
1. the new papers' vectors (their run's vector store, converted from its embeddings),
2. their k nearest papers on the map: the knn stage's search (mapping.knn: exact below
   `exact_below` map papers, an approximate index with exact re-ranking above) over the map run's vector store,
   with the map graph's index settings and its tuned nprobe (mapping.knn.map_search_config); the
   approximate index is the one the map's knn stage kept in <map run>/knn_index/ where it was built
   from the same vectors with the same settings (mapping.knn.KeptIndex), else built here and kept
   there for the next call (`keep_index`),
3. a topic each: the map topic with the largest summed similarity among those neighbours (papers
   whose topic is not on the map do not vote); a paper none of whose neighbours is in a map topic
   is left unplaced, with the reason,
4. a position inside that topic: the map's own local layout (mapping.layout.LocalLayout, saved by
   the render stage), so a new paper sits where an old paper with its vector would,
5. the `placed` table (paper_id, cluster, x, y, vote share, nearest similarity; or the reason it
   was not placed: already on the map, a title-only cited paper under `papers = corpus`, no
   neighbour in a map topic) and the map PNGs drawn again with the new papers under
   <map run>/placed_maps/: the map's papers exactly as the render stage drew them (its colours,
   area borders and labels), the placed papers on top as black dots, a colour no source or overlay
   has, ringed (mapping.render.draw_pngs marks), "placed (new)" in map.png's legend; and map.html
   with the placed papers as a layer (hover: id, title, topic; a checkbox switches it off). The
   map's own files, old papers, topics, their positions and overlay values stay as they are:
   nothing of kNN, Leiden or UMAP is re-run.

`[place] papers = corpus` (the default) places the new run's papers with a record of their own;
the title-only papers their reference lists name are in the new run too (they are embedded for
the new run's own map) and would otherwise be "placed" by their titles alone.

Scale: the new vectors are read in blocks of `block_size`; per new paper the stage keeps its
topic, position and two floats. Beside them the map's index: loaded, it costs the read of its file
(≈ 34 GB at 33M × 768-d hnsw_sq8) instead of its build (≈ 53 min on 16 cores, docs/scale.md).
1M new papers on a 1M-paper map: bench/placement.py.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, fields as dc_fields
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from sciencemap.config import setting
from sciencemap.contracts import EDGES_META_KEY
from sciencemap.layout import RunLayout
from sciencemap.progress import Progress
from sciencemap.runtime import UserError, rss_mb
from sciencemap.storage import dataset, read_json_metadata, read_table, require_dir, write_table_atomic
from sciencemap.vectors import ensure_vectors, open_vectors, read_rows

from mapping.io import cluster_labels, load_row_meta
from mapping.knn import (INDEXES, KeptIndex, KnnConfig, Plan, kept_index, make_plan, make_searcher,
                         map_search_config, tune)
from mapping.layout import LocalLayout
from mapping.render import CITED_ONLY, RenderConfig, draw_pngs, map_categories, write_html

log = logging.getLogger(__name__)

PLACED = "placed (new)"
PLACED_SCHEMA = pa.schema([
    ("paper_id", pa.string()), ("cluster", pa.int32()), ("x", pa.float32()), ("y", pa.float32()),
    ("vote_share", pa.float32()), ("nearest_similarity", pa.float32()), ("reason", pa.string())])


@dataclass
class PlaceConfig:
    new: str = setting("", "run directory of the new papers: its embeddings (embed stage, the map run's model)")
    k: int = setting(20, "neighbours on the map that vote for a new paper's topic")
    index: str = setting("auto", "search over the map's vectors, as [knn] index", choices=INDEXES)
    exact_below: int = setting(200_000, "auto: exact search below this many map papers")
    block_size: int = setting(16_384, "new papers per search block")
    papers: str = setting("corpus", "which of the new run's papers to place: corpus = those with a record of "
                                    "their own; all = also the title-only papers their references name",
                          choices=("corpus", "all"))
    redraw: bool = setting(True, "draw the map PNGs again with the placed papers, under <map run>/placed_maps/ "
                                 "(the map's own files are never touched; --no-redraw: only the table)")
    gpu: str = setting("auto", "FAISS on the GPU as in [knn]", choices=("auto", "never", "require"))
    keep_index: bool = setting(True, "an approximate index built here (the map's knn stage kept none, or kept "
                               "one of other settings) is kept in <map run>/knn_index/ for the next call, "
                               "as [knn] keep_index")


def vote_topics(D: np.ndarray, I: np.ndarray, topic_of_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per query: the topic with the largest summed similarity among its neighbours I (-1 = none),
    ties to the smaller topic number, and that topic's share of the voting neighbours.
    Returns (topic, share); topic -1 where no neighbour is in a topic."""
    nq, k = I.shape
    t = np.where(I >= 0, topic_of_row[np.maximum(I, 0)], -1)
    w = np.where(t >= 0, np.maximum(D.astype(np.float64), 0.0) + 1e-9, 0.0)   # a zero similarity still votes
    # sort each row's neighbours by topic, then sum the weights of equal topics (vectorised per row)
    order = np.argsort(t, axis=1, kind="stable")
    ts, ws = np.take_along_axis(t, order, 1), np.take_along_axis(w, order, 1)
    new = np.ones_like(ts, bool)
    new[:, 1:] = ts[:, 1:] != ts[:, :-1]
    grp = np.cumsum(new, axis=1) - 1
    sums = np.bincount((np.arange(nq)[:, None] * k + grp).ravel(), weights=ws.ravel(),
                       minlength=nq * k).reshape(nq, k)
    first_t = np.full((nq, k), -1, np.int64)
    rows, cols = np.nonzero(new)
    first_t[rows, grp[rows, cols]] = ts[rows, cols]
    sums[first_t < 0] = -1.0
    best = np.argmax(sums, axis=1)           # first maximum = smallest topic number among ties
    topic = first_t[np.arange(nq), best]
    voters = (t >= 0).sum(axis=1)
    count = ((t == topic[:, None]) & (topic[:, None] >= 0)).sum(axis=1)
    share = np.where(voters > 0, count / np.maximum(voters, 1), 0.0)
    return np.where(voters > 0, topic, -1), share


def majority_topic(I: np.ndarray, topic_of_row: np.ndarray) -> np.ndarray:
    """Per query the topic most of its neighbours are in (ties: the smaller topic), -1 if none."""
    return vote_topics(np.ones(I.shape), I, topic_of_row)[0]


@dataclass
class MapState:
    """What placement reads from a finished map run."""
    layout: LocalLayout
    extra: dict                   # what the render stage saved beside the layout
    clusters: np.ndarray          # map topic d -> cluster id at the map resolution
    resolution: float
    topic_of_row: np.ndarray      # map vector row -> map topic d (-1: in no topic on the map)


def load_map(layout: RunLayout, n: int) -> MapState:
    if not layout.map_layout.is_file():
        raise UserError(f"{layout.map_layout} is missing; run the render stage on {layout.root} first")
    lay, extra = LocalLayout.load(layout.map_layout)
    clusters = extra["cluster"].astype(np.int64)
    res = float(extra["resolution"])
    labels = cluster_labels(layout, res, n)
    dense = np.full(max(int(labels.max()), int(clusters.max())) + 1, -1, np.int64)
    dense[clusters] = np.arange(len(clusters))
    topic_of_row = np.where(labels >= 0, dense[np.maximum(labels, 0)], -1)
    return MapState(lay, extra, clusters, res, topic_of_row)


def place_vectors(X_map, state: MapState, Q_store, ids: np.ndarray, cfg: PlaceConfig, exclude: np.ndarray,
                  knn_meta: dict | None = None, kept: Callable[[Plan, KnnConfig], KeptIndex] | None = None):
    """Topic, position, vote share and nearest similarity of each row of the new store. `knn_meta`:
    the map's kNN graph summary, whose index settings and tuned nprobe / ef_search the search reuses;
    `kept(plan, settings)`: the map's kept index (mapping.knn.KeptIndex), loaded instead of built
    where it was built from the same vectors with the same settings."""
    n_new, dim = Q_store.shape
    kcfg = map_search_config(knn_meta or {}, KnnConfig(k=cfg.k, index=cfg.index, exact_below=cfg.exact_below,
                                                       block_size=cfg.block_size, gpu=cfg.gpu), X_map.shape[0], dim)
    plan = make_plan(kcfg, X_map.shape[0], dim)
    index = kept(plan, kcfg) if kept is not None and plan.kind != "flat" else None
    searcher, build_s = make_searcher(X_map, plan, kcfg, index)
    search = {"index": plan.kind}
    if index is not None:
        search["index_from"] = index.origin()
    if plan.param:
        tuning = tune(searcher, X_map, plan, kcfg)
        search[plan.param] = tuning["value"]
        search["search_from"] = "tuned here" if tuning["tuned"] else "the map's kNN graph"
    k = min(cfg.k, plan.n)
    topic = np.full(n_new, -1, np.int64)
    share = np.zeros(n_new, np.float32)
    nearest = np.full(n_new, np.nan, np.float32)
    xy = np.full((n_new, 2), np.nan, np.float32)
    with Progress("place: search, vote, position", n_new, "papers", logger=log) as prog:
        for lo in range(0, n_new, cfg.block_size):
            hi = min(n_new, lo + cfg.block_size)
            Q = read_rows(Q_store, lo, hi)
            D, I = searcher.search(Q, k)
            D, I = np.asarray(D, np.float32), np.asarray(I, np.int64)
            t, s = vote_topics(D, I, state.topic_of_row)
            t[exclude[lo:hi]] = -1
            topic[lo:hi], share[lo:hi] = t, s
            nearest[lo:hi] = D[:, 0]
            ok = np.flatnonzero(t >= 0)
            if len(ok):
                xy[lo + ok] = state.layout.place(Q[ok], t[ok], ids[lo:hi][ok])
            prog.advance(hi - lo)
    return topic, share, nearest, xy, {**search, "index_build_s": round(build_s, 3)}


# what makes two runs' vectors comparable: the same weights, pooled the same way over the same tokens
# "vector": how the main vector was made (an objective's own, with its settings: FLeW's facet weights)
ENCODER_KEYS = ("model_hash", "pooling", "max_length", "dim", "vector")


def same_encoder(map_layout: RunLayout, new_layout: RunLayout) -> None:
    """Refuse vectors of another encoder: the two runs' embedding manifests must agree on
    ENCODER_KEYS (runs whose vectors came from another tool, without a manifest, are not checked)."""
    from sciencemap.contracts import EMBEDDINGS_MANIFEST
    from sciencemap.embeddings import embeddings_dir, read_manifest

    dirs = [embeddings_dir(lay) for lay in (map_layout, new_layout)]
    if not all((d / EMBEDDINGS_MANIFEST).is_file() for d in dirs):
        return
    old, new = read_manifest(dirs[0]), read_manifest(dirs[1])
    # "vector" is compared where both manifests have it (manifests written before it lack it)
    differ = [k for k in ENCODER_KEYS if old.get(k) != new.get(k) and (k != "vector" or (k in old and k in new))]
    if differ:
        def told(m):
            w = (m.get("vector") or {}).get("facet_weights")
            return (f"{m.get('model_path')} (hash {str(m.get('model_hash'))[:12]}, pooling {m.get('pooling')}, "
                    f"max_length {m.get('max_length')}, {m.get('dim')} dimensions"
                    + (f", facet weights {w}" if w else "") + ")")
        raise UserError(f"the new papers in {new_layout.root} were embedded with {told(new)}, the map {map_layout.root} "
                        f"with {told(old)}: vectors of two encoders cannot share a map; embed the new papers with "
                        f"the map's: jobs/embed.py --run {new_layout.root} --model {old.get('model_path')} "
                        f"--pooling {old.get('pooling')} --max-length {old.get('max_length')} --restart"
                        + (f" --facet-weights {','.join(map(str, (old.get('vector') or {})['facet_weights']))}"
                           if (old.get("vector") or {}).get("facet_weights") else ""))


def run_place(cfg: PlaceConfig, layout: RunLayout) -> dict:
    if not cfg.new:
        raise UserError("say which papers to place: --new <run directory with their embeddings>")
    new_layout = RunLayout(require_dir(cfg.new, "run directory of the new papers"))
    same_encoder(layout, new_layout)
    vec = open_vectors(layout)
    state = load_map(layout, vec.n)
    new_vec = ensure_vectors(new_layout, "float32", log.info)
    if new_vec.dim != vec.dim:
        raise UserError(f"the new papers' vectors have {new_vec.dim} dimensions, the map's {vec.dim}: embed them "
                        f"with the map run's model ({layout.model_dir})")
    ids = new_vec.ids()
    # an Arrow hash lookup: np.isin on object arrays compares every pair (hours at 1M × 1M)
    on_map = pc.is_in(new_vec.ids_arrow(), value_set=vec.ids_arrow()).to_numpy(zero_copy_only=False)
    title_only = ~with_record(new_layout, new_vec.ids_arrow()) if cfg.papers == "corpus" else np.zeros(len(ids), bool)
    edges = layout.table("edges")
    knn_meta = read_json_metadata(edges, EDGES_META_KEY) if edges.exists() else {}
    skip = on_map | title_only
    topic, share, nearest, xy, search = place_vectors(
        vec.X, state, new_vec.X, ids, cfg, skip, knn_meta,
        kept=lambda plan, kcfg: kept_index(layout, vec.meta, plan, kcfg, keep=cfg.keep_index))
    reason = np.full(len(ids), None, dtype=object)
    reason[title_only] = "title-only cited paper (papers = corpus)"
    reason[on_map] = "already on the map"
    reason[(topic < 0) & ~skip] = "no neighbour in a map topic"
    placed = topic >= 0
    table = pa.table({"paper_id": pa.array(ids, pa.string()),
                      "cluster": pa.array(np.where(placed, state.clusters[np.maximum(topic, 0)], -1), pa.int32()),
                      "x": pa.array(xy[:, 0]), "y": pa.array(xy[:, 1]),
                      "vote_share": pa.array(share), "nearest_similarity": pa.array(nearest),
                      "reason": pa.array(reason, pa.string())}, schema=PLACED_SCHEMA)
    write_table_atomic(table, layout.table("placed"))
    summary = {"new_papers": int(len(ids)), "placed": int(placed.sum()), "already_on_map": int(on_map.sum()),
               "title_only_not_placed": int((title_only & ~on_map).sum()), "papers": cfg.papers,
               "unplaced": int(((topic < 0) & ~skip).sum()), "map_resolution": state.resolution,
               "median_vote_share": float(np.median(share[placed])) if placed.any() else None,
               "topics_receiving": int(len(np.unique(topic[placed]))), **search}
    if cfg.redraw and placed.any():
        rows = np.flatnonzero(placed)
        titles = paper_titles(new_layout, ids[rows])
        summary.update(redraw(layout, vec, state, xy[placed], pd.DataFrame({
            "paper_id": ids[rows], "title": titles, "cluster": state.clusters[topic[placed]]})))
    summary["peak_rss_mb"] = round(rss_mb())
    log.info("place: %s", summary)
    return summary


def with_record(layout: RunLayout, ids: pa.Array) -> np.ndarray:
    """Per id: whether the run's papers table gives it a record of its own (a source file), not
    only a title from someone's reference list. A run without a papers table: all of them."""
    papers = layout.table("papers")
    if not papers.exists():
        return np.ones(len(ids), bool)
    t = read_table(papers, columns=["paper_id", "source_file"])
    corpus = pc.filter(t.column("paper_id"), pc.is_valid(t.column("source_file")))
    return pc.is_in(ids, value_set=corpus).to_numpy(zero_copy_only=False)


def _render_config(extra: dict) -> RenderConfig:
    """The render stage's settings of this map (saved with its layout), for PNGs like its own."""
    saved = json.loads(str(extra["render_config"])) if "render_config" in extra else {}
    known = {f.name for f in dc_fields(RenderConfig)}
    return RenderConfig(**{k: v for k, v in saved.items() if k in known})


def paper_titles(layout: RunLayout, ids: np.ndarray) -> list:
    """The titles of `ids` from a run's papers table (None where it has none or no table)."""
    papers = dataset(layout.table("papers")) if layout.table("papers").exists() else None
    if papers is None or "title" not in papers.schema.names:
        return [None] * len(ids)
    # only the placed papers' rows leave the Parquet reader
    t = papers.to_table(columns=["paper_id", "title"], filter=ds.field("paper_id").isin(pa.array(ids, pa.string())))
    title_of = dict(zip(t.column("paper_id").to_pylist(), t.column("title").to_pylist()))
    return [title_of.get(p) for p in ids]


def redraw(layout: RunLayout, vec, state: MapState, new_xy: np.ndarray, new_papers: pd.DataFrame) -> dict:
    """The map PNGs and map.html again under placed_maps/: the old papers at their saved positions,
    the placed ones on top (`new_papers`: paper_id, title, cluster, in the order of new_xy)."""
    if not layout.map_positions.is_file():
        raise UserError(f"{layout.map_positions} is missing; re-run the render stage on {layout.root}")
    pxy = np.load(layout.map_positions, mmap_mode="r")
    if len(pxy) != vec.n:
        raise UserError(f"{layout.map_positions} has {len(pxy)} rows for {vec.n} vectors; re-run the render stage")
    shown = np.flatnonzero(np.isfinite(pxy[:, 0]) & (state.topic_of_row >= 0))
    meta = load_row_meta(layout, vec.ids_arrow())
    codes, names = map_categories(meta.source, meta.sources, meta.cited_only)
    t = read_table(layout.table("topics")).to_pandas()
    t = t[t["resolution"] == state.resolution].set_index("cluster").loc[state.clusters].reset_index()
    cfg = _render_config(state.extra)
    areas = read_table(layout.table("areas")).to_pandas() if layout.table("areas").exists() else None
    topic_area = state.extra.get("topic_area")
    out = RunLayout(layout.placed_dir)
    out.root.mkdir(parents=True, exist_ok=True)
    # the map's papers exactly as the render stage drew them; the placed ones on top (draw_pngs marks)
    map_xy = np.asarray(pxy[shown], np.float32)
    base, files, _, _, regions = draw_pngs(out, map_xy, codes[shown], names, state.topic_of_row[shown], t, cfg,
                                           state.resolution, under=CITED_ONLY, areas=areas,
                                           topic_area=None if topic_area is None else np.asarray(topic_area),
                                           marks=np.asarray(new_xy, np.float32), marks_label=PLACED)
    # map.html with the placed papers as a layer; the topics' example titles as render saved them
    examples = json.loads(str(state.extra["examples"])) if "examples" in state.extra else [[] for _ in range(len(t))]
    label = t.set_index("cluster")["label"]
    layer = new_papers.assign(x=new_xy[:, 0], y=new_xy[:, 1], topic=new_papers["cluster"].map(label))
    write_html(out, base, map_xy, t, examples, cfg, areas, placed=layer, regions=regions)
    return {"pngs": files, "html": str(out.map_html)}

