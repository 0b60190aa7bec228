"""Layout + rendering stage: `topics` table, map PNGs (base + overlays) and an interactive HTML map.

run_render:
1. picks the map resolution (`map_resolution`, default: the middle one of the clustered ones) and
   the papers the map shows (`papers_shown`: the corpus's own papers by default; papers known only
   as cited references stay in the kNN graph and the clusters but are not drawn or counted),
2. topic vectors (mean of the shown members' vectors) → UMAP 2-D (mapping.layout), papers inside
   their topic's disc by a local linear layout of their own vectors (mapping.layout.LocalLayout,
   saved as map_layout.npz so new papers can be placed later); topics at other resolutions are
   placed at the mean position of their papers, so all levels share one coordinate system,
3. overlays for every clustered resolution (mapping.topics),
4. writes `topics`, map.png (papers by source), map_field.png (by their topic's main field, legend
   with papers per field), map_interdisciplinarity.png (topic DIV, colour bar), map_year.png
   (topic mean year, colour bar), each titled with the paper and topic counts and the largest
   topics labelled (mapping.map_png), and map.html.

Scale (33M papers): the vectors are the run's vector store (sciencemap.vectors, written by the knn
stage), read in row blocks, never whole (twice: topic means, then the papers' offsets in their
topic's frame); clusters are read per resolution as (row, cluster); the papers table is streamed
once and joined to the rows by paper_id (mapping.io.load_row_meta); labels come from one title
vocabulary for all resolutions; positions are float32 and datashader aggregates them chunk by
chunk. The summary gives each step's time, memory now and peak memory.

The HTML is self-contained (Bokeh INLINE resources; the background image is a data: URI), so it
opens without network access. Strings from the data reach the page only as Bokeh data (hover
fields, table cells, canvas labels), which BokehJS inserts as text, never as HTML; the tests
open it in headless Chromium with a `<script>` title to check that.
"""
from __future__ import annotations

import contextlib
import io
import logging
import time
import json
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.config import setting
from sciencemap.contracts import SCHEMAS, VECTORS_IDS
from sciencemap.layout import RunLayout
from sciencemap.progress import Progress, current_rss_mb
from sciencemap.runtime import UserError, rss_mb
from sciencemap.storage import atomic_file, write_bytes_atomic, write_table_atomic, write_text_atomic
from sciencemap.vectors import open_vectors, read_rows, rows_per_block

from mapping import html_map
from mapping.areas import area_membership, area_outlines, area_regions, topic_graph
from mapping.io import cluster_labels, cluster_resolutions, load_row_meta, read_titles
from mapping.layout import LocalLayout, new_local_layout, topic_layout
from mapping.map_png import (AREA_TINTS, PALETTE, TITLE_H, UNDER_COLOR, Frame, bounds, colour_bar, compose, legend, palette_of,
                             place_labels, shade_categories, shade_values)
from mapping.overlays import OVERLAYS, overlays, topics_schema
from mapping.topics import PaperData, central_rows, infer_fields, topic_vectors

log = logging.getLogger(__name__)

@dataclass
class RenderConfig:
    map_resolution: float = setting(0.0, "CPM resolution drawn on the map; 0 = the middle one of the resolutions "
                                         "in `clusters`")
    width: int = setting(1200, "map.png width in pixels, legend included")
    height: int = setting(900, "map.png height in pixels")
    legend_width: int = setting(220, "width of the legend strip on the right of map.png, in pixels")
    layout_method: str = setting("umap", "2-D layout of the topics", choices=("umap", "pca"), flags=("--layout",))
    n_neighbors: int = setting(15, "UMAP neighbours (capped at topics - 1)")
    min_dist: float = setting(0.1, "UMAP minimum distance between laid-out topics")
    infer_fields: bool = setting(True, "papers without a field take the field most similar to them among their kNN "
                                       "neighbours' (so topics of papers without subjects still get overlays)")
    papers_shown: str = setting("corpus", "papers drawn and counted on the map: corpus = papers with a record "
                                          "of their own; all = cited-only references too", choices=("corpus", "all"))
    seed: int = setting(42, "seed of the UMAP layout (and of the hashed positions of topics without spread)")
    jitter: float = setting(0.5, "topic disc radius, in units of the median nearest-topic distance")
    frame_neighbours: int = setting(6, "map neighbours that orient a topic's local layout of its papers")
    legend_fields: int = setting(12, "main fields named in map_field.png's legend (the rest: 'other fields')")
    labels_on_png: int = setting(25, "largest topics labelled on the map PNGs (labels never overlap)")
    area_resolution: float = setting(1.0, "second level: modularity resolution of Leiden on the topic graph "
                                          "(research areas = clusters of topics); 0 = no areas")
    area_labels: int = setting(12, "largest areas labelled (bold) on the map PNGs")
    label_words: int = setting(3, "distinctive title words in a topic's label (class-based TF-IDF)")
    examples: int = setting(3, "titles closest to each topic's mean vector, in the HTML map's hover")
    labels_on_map: int = setting(40, "most topic labels shown at once on the HTML map, largest topics first; a "
                                     "label without room (it would overlap another) is hidden until zooming makes room")
    title: str = setting("Map of science", "corpus name in the title of the map PNGs and of the HTML map")
    html_width: int = setting(1000, "width of the HTML map's plot and topic table, in pixels")
    html_height: int = setting(750, "height of the HTML map's plot, in pixels")
    html_backend: str = setting("webgl", "how the HTML map draws its topic points: webgl (falls back to the canvas "
                                         "where the browser has no WebGL) or canvas", choices=("webgl", "canvas"))
    html_title_chars: int = setting(80, "example titles in the HTML map's hover are cut to this many characters "
                                        "(the file grows ~0.5 MB per 10 characters at 100k topics)")
    html_table_rows: int = setting(0, "rows of the HTML map's topic table, largest topics first; 0 = all")
    view: str = setting("", "'' = the map of the main vectors; a facet (e.g. method: a key of the run's 'facets' "
                        "view, or view:key) = a facet map in <run>/maps/<key>/: kNN, Leiden and this render on "
                        "that view's vectors (METHODS.md §8.6)")


# Cited papers known only from a reference list (no record of their own) are drawn in grey, so
# that the corpus sources stand out against the much larger cloud of cited titles.
CITED_ONLY = "cited, title only"
CITED_ONLY_COLOR = UNDER_COLOR
NO_FIELD, OTHER_FIELDS = "no field", "other fields"
# placed papers drawn on a map: black (no source colour in mapping.map_png PALETTE, no overlay's),
# ringed up to MARKS_MAX of them (beyond, the rings would cover the map), ring radius in pixels
MARK_COLOR, MARKS_MAX, MARK_R = "#000000", 5_000, 3


def category_colors(categories) -> dict[str, str]:
    cats = sorted(set(categories) - {CITED_ONLY})
    colors = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(cats)}
    if CITED_ONLY in set(categories):
        colors[CITED_ONLY] = CITED_ONLY_COLOR
    return colors


def map_categories(source: np.ndarray, sources: list[str], cited_only: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Colour category per paper as (int32 code, names): its source ("unknown" where it has none),
    or CITED_ONLY for papers without a record of their own (or without metadata)."""
    names = list(sources) + ["unknown", CITED_ONLY]
    codes = np.where(np.asarray(source) >= 0, source, len(sources)).astype(np.int32)
    codes[np.asarray(cited_only, bool)] = len(sources) + 1
    return codes, names


def choose_resolution(available: list[float], wanted: float) -> float:
    available = sorted(available)
    if not available:
        raise UserError("the clusters table is empty; re-run the cluster stage")
    if wanted <= 0:
        return available[(len(available) - 1) // 2]
    for r in available:
        if abs(r - wanted) <= 1e-12 * max(1.0, abs(wanted)):
            return r
    raise UserError(f"map_resolution {wanted} was not clustered; use one of {available} or add it to [cluster] resolutions")


class Steps:
    """Wall time, memory now and peak memory of each step of a stage, for its summary."""

    def __init__(self, name: str):
        self.name, self.record = name, {}

    @contextlib.contextmanager
    def __call__(self, step: str):
        t = time.perf_counter()
        yield
        self.record[step] = {"s": round(time.perf_counter() - t, 3), "rss_mb": round(current_rss_mb()),
                             "peak_rss_mb": round(rss_mb())}
        log.info("%s: %s took %.1f s, RSS %.0f MB (peak %.0f MB)", self.name, step, self.record[step]["s"],
                 self.record[step]["rss_mb"], self.record[step]["peak_rss_mb"])


def frame_offsets(X, labels: np.ndarray, lay: LocalLayout, block_rows: int | None = None) -> np.ndarray:
    """float32 offsets (n × 2) of the labelled rows in their topic's frame (NaN elsewhere), from the
    vector store read in blocks."""

    n, d = X.shape
    out = np.full((n, 2), np.nan, np.float32)
    step = block_rows or rows_per_block(d, 8 * 2)      # the block and its gathered frames
    with Progress("render: papers' local layout", n, "rows") as prog:
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            ok = np.flatnonzero(labels[lo:hi] >= 0)
            if len(ok):
                Xb = read_rows(X, lo, hi)
                out[lo + ok] = lay.offsets(Xb[ok], labels[lo:hi][ok])
                del Xb
            prog.advance(hi - lo)
    return out


def paper_xy(ids_path, labels: np.ndarray, off: np.ndarray, lay: LocalLayout, chunk: int = 1_000_000) -> np.ndarray:
    """float32 positions (n × 2) of the vector rows (NaN where unlabelled) from their frame
    offsets; the ids file is read chunk by chunk (topics without spread hash the paper_id)."""
    n = len(labels)
    out = np.full((n, 2), np.nan, np.float32)
    with Progress("render: paper positions", n, "papers") as prog:
        lo = 0
        for b in pq.ParquetFile(ids_path).iter_batches(batch_size=chunk, columns=["paper_id"]):
            hi = lo + b.num_rows
            lb = labels[lo:hi]
            ok = np.flatnonzero(lb >= 0)
            if len(ok):
                ids = b.column(0).to_numpy(zero_copy_only=False)
                out[lo + ok] = lay.from_offsets(off[lo:hi][ok].astype(np.float64), lb[ok], ids[ok])
            prog.advance(hi - lo)
            lo = hi
    if lo != n:
        raise UserError(f"{ids_path} has {lo} ids for {n} vector rows; re-run the knn stage")
    return out


def group_mean_xy(labels: np.ndarray, pxy: np.ndarray, n_topics: int, chunk: int = 4_000_000) -> np.ndarray:
    """Mean position of each topic's papers (float64 sums, chunk by chunk)."""
    s = np.zeros((n_topics, 2))
    cnt = np.zeros(n_topics)
    for lo in range(0, len(labels), chunk):
        lb = labels[lo:lo + chunk]
        ok = lb >= 0
        lab = lb[ok]
        cnt += np.bincount(lab, minlength=n_topics)
        for i in (0, 1):
            s[:, i] += np.bincount(lab, weights=pxy[lo:lo + chunk, i][ok], minlength=n_topics)
    return s / np.maximum(cnt, 1)[:, None]


def run_render(cfg: RenderConfig, layout: RunLayout) -> dict:
    """The stage: see the module doc. Memory: the vector store is read in blocks; per paper the
    stage keeps ~50 bytes of arrays plus its title words and fields as sparse rows."""
    if cfg.view:   # the stage sends these to mapping.facet_maps.run_facet_map
        raise ValueError(f"run_render draws the main vectors' map; view {cfg.view!r} is a facet map (run_facet_map)")
    steps = Steps("render")
    with steps("load"):
        vec = open_vectors(layout)
        n = vec.n
        res_list = cluster_resolutions(layout)
        map_res = choose_resolution(res_list, cfg.map_resolution)
        labels_all = cluster_labels(layout, map_res, n)
        if not (labels_all >= 0).any():
            raise UserError("no clustered paper has a vector; re-run knn and cluster on this run's embeddings")
    with steps("papers"):
        meta = load_row_meta(layout, vec.ids_arrow())
        clustered = labels_all >= 0
        on_map = clustered & (~meta.cited_only if cfg.papers_shown == "corpus" else True)
        if not on_map.any():
            raise UserError(f"none of the {int(clustered.sum()):,} clustered papers has a record of its own "
                            "(all are cited-only references); set [render] papers_shown = \"all\" to draw them")
        labels_map = np.where(on_map, labels_all, -1).astype(np.int32)
        # topics with a shown paper, numbered 0..T-1 for the layout (the topics table keeps `cluster`)
        present = np.flatnonzero(np.bincount(labels_map[on_map], minlength=int(labels_all.max()) + 1))
        dense = np.full(int(labels_all.max()) + 1, -1, np.int32)
        dense[present] = np.arange(len(present), dtype=np.int32)
        lab_d = np.where(on_map, dense[np.maximum(labels_map, 0)], -1).astype(np.int32)
        T = len(present)
        tsize = np.bincount(lab_d[on_map], minlength=T)

    with steps("topic_vectors"):
        with Progress("render: topic vectors", n, "rows") as prog:
            tv = topic_vectors(vec.X, lab_d, T, progress=prog, workers=0)   # every core

    with steps("layout"):
        txy = topic_layout(tv, cfg.layout_method, cfg.seed, cfg.n_neighbors, cfg.min_dist)
        lay = new_local_layout(tv, txy, tsize, cfg.jitter, cfg.seed, cfg.frame_neighbours)
        off = frame_offsets(vec.X, lab_d, lay)
        lay.fit_spread(lab_d, off)
        pxy = paper_xy(vec.path / VECTORS_IDS, lab_d, off, lay)
        del off
        with atomic_file(layout.map_positions) as tmp, open(tmp, "wb") as f:
            np.save(f, pxy)             # a file object: np.save would add ".npy" to the temporary's name

    with steps("topics"):
        inferred = 0
        if cfg.infer_fields and layout.table("edges").exists():
            meta.fields, inferred = infer_fields(layout.table("edges"), meta.fields, on_map)
        data = PaperData(fields=meta.fields, categories=meta.categories, year=meta.year, source=meta.source,
                         sources=meta.sources, words=meta.words, vocab=meta.vocab, word_row=meta.word_row,
                         columns=meta.columns)
        rows = []
        map_topics = None
        with Progress("render: topic overlays", len(res_list), "resolutions", every_s=0) as prog:
            for r in res_list:
                if r == map_res:
                    lab = labels_map
                else:
                    lab = cluster_labels(layout, r, n)
                    lab[~on_map] = -1        # the map's papers only, so all levels share its coordinates
                ov = overlays(data, lab, cfg.label_words)
                if r == map_res:
                    xy = np.full((len(ov), 2), np.nan)
                    xy[present] = txy
                else:
                    xy = group_mean_xy(lab, pxy, len(ov))
                ov["x"], ov["y"], ov["resolution"] = xy[:, 0].astype(np.float32), xy[:, 1].astype(np.float32), r
                ov = ov[ov["size"] > 0]
                rows.append(ov)
                if r == map_res:
                    map_topics = ov.reset_index(drop=True)      # row d = dense topic d
                prog.advance(1)
        topics = pd.concat(rows, ignore_index=True)
        write_table_atomic(pa.Table.from_pandas(topics, preserve_index=False), layout.table("topics"),
                           topics_schema(SCHEMAS["topics"]))

    with steps("areas"):
        # every clustered row links its map topic (cited-only papers too: they hold most kNN edges)
        graph_topic = np.where(clustered, dense[np.maximum(labels_all, 0)], -1)
        areas, topic_area = research_areas(layout, data, lab_d, graph_topic, map_topics, cfg)
        if areas is not None:
            write_table_atomic(pa.Table.from_pandas(areas, preserve_index=False), layout.table("areas"),
                               topics_schema(SCHEMAS["areas"]))
    with steps("examples"):
        with Progress("render: example titles", n, "rows") as prog:
            central = central_rows(vec.X, lab_d, tv, meta.has_title & on_map, cfg.examples, progress=prog,
                                   workers=0)
        wanted = [meta.paper_of_row[central[d]] for d in range(T)]
        titles = read_titles(meta.papers_files, np.concatenate(wanted) if wanted else np.zeros(0, np.int64))
        examples = [[titles[i] for i in w.tolist()] for w in wanted]

    with steps("layout file"):   # what placement needs to draw the map again, map.html included
        lay.save(layout.map_layout, cluster=present.astype(np.int32), resolution=np.float64(map_res),
                 topic_vecs=tv.astype(np.float32), render_config=np.str_(json.dumps(asdict(cfg))),
                 topic_area=topic_area, examples=np.str_(json.dumps(examples)))

    with steps("render"):
        codes, names = map_categories(meta.source, meta.sources, meta.cited_only)
        keep = np.flatnonzero(on_map)
        summary = render_files(layout, pxy[keep], codes[keep], names, lab_d[keep], map_topics, examples, cfg,
                               map_res, areas, topic_area)
    summary.update({"map_resolution": map_res, "papers_shown": cfg.papers_shown,
                    "papers_clustered": int(clustered.sum()), "papers_on_map": int(on_map.sum()),
                    "cited_only_clustered": int((clustered & meta.cited_only).sum()),
                    "cited_only_not_drawn": int((clustered & ~on_map).sum()),
                    "papers_without_metadata": int((meta.source[on_map] < 0).sum()),
                    "papers_with_inferred_field": int(inferred),
                    "topics_clustered": int(len(np.unique(labels_all[clustered]))),
                    "topics_on_map": int(len(map_topics)), "topics_rows": int(len(topics)),
                    "areas": int(len(areas)) if areas is not None else 0,
                    "vectors": {"rows": n, "dim": vec.dim, "dtype": vec.meta.get("dtype")},
                    "title_words": int(len(meta.vocab)), "field_categories": int(len(meta.categories)),
                    **{f"{k}_s": v["s"] for k, v in steps.record.items()},
                    "steps": steps.record, "peak_rss_mb": round(rss_mb())})
    log.info("render: %s", summary)
    return summary


def research_areas(layout: RunLayout, data: PaperData, lab_d: np.ndarray, graph_topic: np.ndarray,
                   map_topics: pd.DataFrame, cfg: RenderConfig) -> tuple[pd.DataFrame | None, np.ndarray]:
    """The second level (mapping.areas): (areas table or None, area of each map topic, -1 = none)."""
    T = len(map_topics)
    edges = layout.table("edges")
    if cfg.area_resolution <= 0 or not edges.exists() or T < 2:
        return None, np.full(T, -1, np.int64)
    W = topic_graph(edges, graph_topic, T)
    topic_area = area_membership(W, cfg.area_resolution, cfg.seed)
    row_area = np.where(lab_d >= 0, topic_area[np.maximum(lab_d, 0)], -1)
    ov = overlays(data, row_area, 2, n_topics=int(topic_area.max()) + 1, distinct_labels=True)
    size = map_topics["size"].to_numpy(np.float64)
    n_area = len(ov)
    wsum = np.bincount(topic_area, weights=size, minlength=n_area)
    for c in ("x", "y"):
        ov[c] = (np.bincount(topic_area, weights=size * map_topics[c].to_numpy(np.float64), minlength=n_area)
                 / np.maximum(wsum, 1)).astype(np.float32)
    ov["topics"] = np.bincount(topic_area, minlength=n_area).astype(np.int32)
    ov = ov.rename(columns={"cluster": "area"})
    return ov[SCHEMAS["areas"].names + [o.column for o in OVERLAYS]], topic_area


def field_codes(main_field: pd.Series, sizes: np.ndarray, n_named: int) -> tuple[np.ndarray, list[str], dict]:
    """Per topic a code into the legend's names: the `n_named` main fields with most papers, then
    'other fields', then 'no field' (topics none of whose papers has a field)."""
    mf = main_field.fillna(NO_FIELD).to_numpy(dtype=object)
    papers = pd.Series(sizes, dtype=np.int64).groupby(mf).sum().sort_values(ascending=False, kind="stable")
    named = [f for f in papers.index if f != NO_FIELD][:n_named]
    names = named + [OTHER_FIELDS, NO_FIELD]
    pos = {f: i for i, f in enumerate(named)}
    codes = np.array([pos.get(f, len(named) + 1 if f == NO_FIELD else len(named)) for f in mf], np.int32)
    colors = {f: PALETTE[i % len(PALETTE)] for i, f in enumerate(named)}
    colors[OTHER_FIELDS] = "#555555"
    colors[NO_FIELD] = UNDER_COLOR
    return codes, names, colors


def _png_bytes(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


AREA_LINE = "#6e6e6e"   # research areas' outlines on the PNGs (and, lighter, on the HTML map)


def area_tint(area: int) -> str:
    return AREA_TINTS[area % len(AREA_TINTS)]


def tint_layer(shapes: list[tuple[int, np.ndarray]], frame: Frame):
    """RGBA image of the map: each area's shapes filled with its tint, drawn under the papers."""
    from PIL import Image, ImageDraw

    layer = Image.new("RGBA", (frame.map_w, frame.map_h), (255, 255, 255, 0))
    draw = ImageDraw.Draw(layer)
    for a, xy in shapes:
        draw.polygon([(x, y - TITLE_H) for x, y in xy.tolist()], fill=area_tint(a) + "50")   # light: the papers keep their colours
    return layer


def area_shapes_px(map_topics: pd.DataFrame, topic_area, frame: Frame, cell: int = 4) -> list[tuple[int, np.ndarray]]:
    """The research areas' smooth outlines (mapping.areas.area_outlines) in the frame's image pixels."""
    tx, ty = frame.to_px(map_topics["x"].to_numpy(), map_topics["y"].to_numpy())
    grid = area_regions(np.column_stack([tx, ty - TITLE_H]), np.asarray(topic_area), frame.map_w, frame.map_h, cell)
    return [(a, xy + np.array([0.0, TITLE_H])) for a, xy in area_outlines(grid, cell)]


def draw_pngs(layout: RunLayout, pxy: np.ndarray, codes: np.ndarray, names: list[str], topic: np.ndarray,
              map_topics: pd.DataFrame, cfg: RenderConfig, map_res: float, colors: dict[str, str] | None = None,
              under: str | None = CITED_ONLY, areas: pd.DataFrame | None = None,
              topic_area: np.ndarray | None = None, marks: np.ndarray | None = None,
              marks_label: str = "placed (new)"):
    """map.png (papers by category: `codes` into `names`) and the overlay PNGs (papers by their
    topic's row in `map_topics`: `topic`), from float32 positions. Returns (the base map's
    datashader image, {name: path}, papers per category, papers and topics per main field, the research
    areas' shapes for map.html: (label, tint, xs, ys) in data coordinates, or None without areas).
    `marks` (data positions: placed papers) are drawn on top of every PNG, not shaded with the map's
    papers, so the map's own pixels and colours stay as the render stage drew them: a black dot
    each (a colour no source and no overlay has), ringed up to MARKS_MAX of them, and a legend entry
    `marks_label` on map.png."""
    if cfg.width <= cfg.legend_width + 50 or cfg.height < 80:
        raise UserError(f"map size {cfg.width}x{cfg.height} is too small for a legend of {cfg.legend_width} px")
    n_cat = np.bincount(codes, minlength=len(names))
    present = [names[i] for i in np.flatnonzero(n_cat)]
    colors = {**category_colors(present), **(colors or {})}
    order = sorted(np.flatnonzero(n_cat).tolist(), key=lambda i: -n_cat[i])
    counts = {names[i]: int(n_cat[i]) for i in order}
    xr, yr = bounds(pxy[:, 0], pxy[:, 1])
    frame = Frame(cfg.width, cfg.height, cfg.legend_width, xr, yr)
    x, y = pxy[:, 0], pxy[:, 1]
    title = f"{cfg.title}: {len(pxy):,} papers, {len(map_topics):,} topics (CPM resolution {map_res:g})"
    if marks is not None and len(marks):
        title += f", {len(marks):,} {marks_label}"
    sizes = map_topics["size"].to_numpy()
    big = np.argsort(-sizes, kind="stable")[:cfg.labels_on_png]
    lab_text = map_topics["label"].fillna("").to_numpy(dtype=object)[big].tolist()
    lab_x, lab_y = map_topics["x"].to_numpy()[big], map_topics["y"].to_numpy()[big]

    outlines, area_text, tints, regions = [], None, None, None
    if areas is not None and topic_area is not None and len(areas) > 1:
        shapes = area_shapes_px(map_topics, topic_area, frame)
        outlines = [[tuple(pt) for pt in xy.tolist()] for _, xy in shapes]
        tints = tint_layer(shapes, frame)
        # the same shapes for map.html, in data coordinates (its plot ranges are this frame's)
        label = areas.set_index("area")["label"] if "area" in areas.columns else pd.Series(dtype=object)
        regions = [(str(label.get(a, "")), area_tint(a), *frame.to_data(xy[:, 0], xy[:, 1])) for a, xy in shapes]
        top = areas.sort_values("size", ascending=False, kind="stable").head(cfg.area_labels)
        area_text = (top["label"].fillna("").str.upper().tolist(), top["x"].to_numpy(), top["y"].to_numpy())

    dots, rings = [], []
    if marks is not None and len(marks):
        mx, my = frame.to_px(marks[:, 0], marks[:, 1])
        dots = list(zip(mx.round().tolist(), my.round().tolist()))
        if len(marks) <= MARKS_MAX:
            rings = [(a - MARK_R, b - MARK_R, a + MARK_R, b + MARK_R) for a, b in zip(mx.tolist(), my.tolist())]

    def finish(img, path, draw_legend):
        out, draw = compose(img, frame, title, under=tints)
        draw_legend(draw)
        draw.point(dots, fill=MARK_COLOR)
        for box in rings:
            draw.ellipse(box, outline=MARK_COLOR, width=1)
        for line in outlines:
            draw.line(line, fill=AREA_LINE, width=2, joint="curve")
        boxes: list = []                    # areas first: topic labels never cover them
        if area_text:
            place_labels(draw, frame, *area_text, bold=True, boxes=boxes)
        place_labels(draw, frame, lab_text, lab_x, lab_y, boxes=boxes)
        write_bytes_atomic(path, _png_bytes(out))

    files = {}
    with Progress("render: datashader", (1 + len(OVERLAYS)) * len(codes), "points") as prog:
        base = shade_categories(x, y, codes, names, colors, frame, under=under, progress=prog)
        marked = [(marks_label, MARK_COLOR, len(dots))] if dots else []
        finish(base, layout.map_png, lambda d: legend(d, frame, "colour = source",
                                                      [(c, colors[c], counts[c]) for c in counts] + marked))
        files["map"] = str(layout.map_png)

        field_summary = None
        for ov in OVERLAYS:
            path = layout.map_overlay_png(ov.name)
            if ov.kind == "category":
                fcode, fnames, fcolors = field_codes(map_topics[ov.column], sizes, cfg.legend_fields)
                fcount = np.bincount(fcode[topic], minlength=len(fnames))
                ftopics = np.bincount(fcode, minlength=len(fnames))
                img = shade_categories(x, y, fcode[topic], fnames, fcolors, frame, under=NO_FIELD, progress=prog)
                items = [(f, fcolors[f], int(fcount[i])) for i, f in enumerate(fnames) if fcount[i]]
                finish(img, path, lambda d, h=ov.title, it=items: legend(d, frame, h, it))
                if field_summary is None:   # the first category overlay's: the main fields
                    field_summary = {f: {"papers": int(fcount[i]), "topics": int(ftopics[i])}
                                     for i, f in enumerate(fnames)}
            else:
                tval = map_topics[ov.column].to_numpy(np.float64)
                fin = tval[np.isfinite(tval)]
                span = (float(fin.min()), float(fin.max())) if len(fin) else (0.0, 1.0)
                pal = palette_of(ov.palette)
                img = shade_values(x, y, tval[topic], frame, pal, span, progress=prog)
                note = f"no value ({int((~np.isfinite(tval)).sum()):,} topics)" if len(fin) < len(tval) else ""
                finish(img, path, lambda d, h=ov.title, p=pal, s=span, f=f".{ov.bar_digits}f", nt=note:
                       colour_bar(d, frame, h, p, s, f, nt))
            files[f"map_{ov.name}"] = str(path)
    return base, files, counts, field_summary, regions


def write_html(layout: RunLayout, base, pxy: np.ndarray, map_topics: pd.DataFrame, examples: list[list[str]],
               cfg: RenderConfig, areas: pd.DataFrame | None, placed: pd.DataFrame | None = None,
               regions: list | None = None) -> str:
    """map.html over the base map's bare datashader image on white (extent = the plot ranges);
    `placed`: the placed papers' layer (mapping.place); `regions`: the areas' shapes as draw_pngs
    returns them (label, tint, xs, ys in data coordinates)."""
    from PIL import Image

    bg = Image.new("RGB", base.size, "white")
    bg.paste(base, (0, 0), base)
    xr, yr = bounds(pxy[:, 0], pxy[:, 1])
    html = html_map.build_html(map_topics, examples, _png_bytes(bg), xr, yr, cfg, fields=areas, placed=placed,
                                 webgl=cfg.html_backend == "webgl", regions=regions)
    write_text_atomic(layout.map_html, html)
    return html


def render_files(layout: RunLayout, pxy: np.ndarray, codes: np.ndarray, names: list[str], topic: np.ndarray,
                 map_topics: pd.DataFrame, examples: list[list[str]], cfg: RenderConfig, map_res: float,
                 areas: pd.DataFrame | None = None, topic_area: np.ndarray | None = None) -> dict:
    """Write the map PNGs (draw_pngs) and map.html from the shown papers' positions (float32),
    their source categories (codes into `names`) and topics (rows of `map_topics`)."""
    base, files, counts, field_summary, regions = draw_pngs(layout, pxy, codes, names, topic, map_topics, cfg,
                                                            map_res, areas=areas, topic_area=topic_area)
    html = write_html(layout, base, pxy, map_topics, examples, cfg, areas, regions=regions)
    return {"png": str(layout.map_png), "pngs": files, "html": str(layout.map_html), "html_bytes": len(html),
            "sources": counts, "fields": field_summary}
