"""Layout + rendering stage: `topics` table, a Datashader PNG and an interactive Bokeh HTML map.

run_render:
1. picks the map resolution (`map_resolution`, default: the middle one of the clustered ones),
2. topic vectors (mean of member vectors) → UMAP 2-D (mapping.layout), papers around their topic,
3. overlays for every clustered resolution (mapping.topics); topics at other resolutions are placed
   at the mean position of their papers on the map, so all levels share one coordinate system,
4. writes `topics`, `map.png` (all papers, coloured by source, with a legend) and `map.html`.

Scale (33M papers): the vectors are the run's vector store (sciencemap.vectors, written by the knn
stage), read in row blocks, never whole; clusters are read per resolution as (row, cluster);
the papers table is streamed once and joined to the rows by paper_id (mapping.io.load_row_meta);
labels come from one title vocabulary for all resolutions; positions are float32 and datashader
counts them chunk by chunk. The summary gives each step's time, memory now and peak memory.

The HTML is self-contained (Bokeh INLINE resources; the background image is a data: URI), so it
opens without network access. Strings from the data reach the page only as Bokeh data (hover
fields, table cells, canvas labels), which BokehJS inserts as text, never as HTML; the tests
open it in headless Chromium with a `<script>` title to check that.
"""
from __future__ import annotations

import base64
import contextlib
import io
import logging
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.config import setting
from sciencemap.contracts import SCHEMAS, VECTORS_IDS
from sciencemap.layout import RunLayout
from sciencemap.progress import Progress, current_rss_mb
from sciencemap.runtime import UserError, rss_mb
from sciencemap.storage import write_bytes_atomic, write_table_atomic, write_text_atomic
from sciencemap.vectors import open_vectors

from mapping.io import cluster_labels, cluster_resolutions, load_row_meta, read_titles
from mapping.layout import disc_radii, place_papers, topic_layout
from mapping.topics import PaperData, central_rows, overlays, topic_vectors

log = logging.getLogger(__name__)

# Distinct colours (Tableau 10, then a few more) for categories such as `source`.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]


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
    seed: int = setting(42, "seed of the UMAP layout and of the papers' jitter")
    jitter: float = setting(0.5, "paper disc radius, in units of the median nearest-topic distance")
    label_words: int = setting(3, "distinctive title words in a topic's label (class-based TF-IDF)")
    examples: int = setting(3, "titles closest to each topic's mean vector, in the HTML map's hover")
    labels_on_map: int = setting(40, "largest topics get a text label on the HTML map")
    title: str = setting("Map of science", "title of the legend in map.png and of the HTML map")
    html_width: int = setting(1000, "width of the HTML map's plot and topic table, in pixels")
    html_height: int = setting(750, "height of the HTML map's plot, in pixels")


# Cited papers known only from a reference list (no record of their own) are drawn in grey, so
# that the corpus sources stand out against the much larger cloud of cited titles.
CITED_ONLY = "cited, title only"
CITED_ONLY_COLOR = "#c4c4c4"


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


def _bounds(x: np.ndarray, y: np.ndarray, margin: float = 0.05):
    x0, x1 = float(np.min(x)), float(np.max(x))
    y0, y1 = float(np.min(y)), float(np.max(y))
    dx, dy = (x1 - x0) or 1.0, (y1 - y0) or 1.0
    return (x0 - margin * dx, x1 + margin * dx), (y0 - margin * dy, y1 + margin * dy)


def shade_points(x, y, codes, names: list[str], width: int, height: int, x_range, y_range, colors: dict[str, str],
                 chunk: int = 2_000_000, progress=None):
    """Datashader: count points per category (chunk by chunk, counts added) and shade; returns a
    PIL RGBA image. `codes` index `names`; x, y may be float32.

    Cited-only papers form a grey layer underneath, so the corpus sources are drawn on top of
    them instead of being blended into a much larger grey count.
    """
    import datashader as ds
    import datashader.transfer_functions as tf

    cvs = ds.Canvas(plot_width=width, plot_height=height, x_range=x_range, y_range=y_range)
    codes = np.asarray(codes)
    cited_code = names.index(CITED_ONLY) if CITED_ONLY in names else -1
    layers = []
    for is_cited in (True, False):
        keys = {c: v for c, v in colors.items() if (c == CITED_ONLY) == is_cited}
        if not keys:
            continue
        cats = sorted(keys)
        to_cat = np.full(len(names), -1, np.int32)          # global code -> position in this layer's cats
        for i, c in enumerate(names):
            if c in keys:
                to_cat[i] = cats.index(c)
        total = None
        for lo in range(0, len(codes), chunk):
            c = codes[lo:lo + chunk]
            sel = np.flatnonzero((c == cited_code) == is_cited)
            if len(sel):
                df = pd.DataFrame({"x": x[lo:lo + chunk][sel], "y": y[lo:lo + chunk][sel],
                                   "c": pd.Categorical.from_codes(to_cat[c[sel]], categories=cats)})
                agg = cvs.points(df, "x", "y", ds.count_cat("c"))
                if total is None:
                    total = agg
                else:
                    total.data += agg.data
            if progress is not None:
                progress.advance(min(chunk, len(codes) - lo))
        if total is None:
            continue
        img = tf.shade(total, color_key=keys, how="eq_hist", min_alpha=120 if is_cited else 220)
        # Single pixels vanish on a 1000-px map: grow every point a little, then more where sparse.
        layers.append(tf.dynspread(tf.spread(img, px=1), threshold=0.6, max_px=2))
    return tf.stack(*layers).to_pil()


def compose_png(img, counts: dict[str, int], colors: dict[str, str], width: int, height: int,
                legend_width: int, title: str):
    """White canvas of exactly width × height: the map on the left, a legend on the right."""
    from PIL import Image, ImageDraw, ImageFont

    out = Image.new("RGB", (width, height), "white")
    out.paste(img, (0, 0), img)
    draw = ImageDraw.Draw(out)
    try:  # matplotlib ships DejaVu Sans; PIL's built-in bitmap font is the fallback
        from matplotlib import font_manager

        font = ImageFont.truetype(font_manager.findfont("DejaVu Sans"), 13)
    except Exception:  # noqa: BLE001
        font = ImageFont.load_default()
    x0 = width - legend_width + 12
    draw.text((x0, 12), title[:40], fill="black", font=font)
    draw.text((x0, 32), "colour = source", fill="#444444", font=font)
    yy = 56
    for cat in colors:
        draw.rectangle([x0, yy, x0 + 14, yy + 14], fill=colors[cat])
        draw.text((x0 + 22, yy + 1), f"{cat} ({counts.get(cat, 0):,})"[:32], fill="black", font=font)
        yy += 22
        if yy > height - 20:
            break
    return out


def _linear_colors(values: np.ndarray, palette: list[str], missing: str = "#bbbbbb") -> list[str]:
    v = np.asarray(values, float)
    ok = np.isfinite(v)
    out = np.full(len(v), missing, dtype=object)
    if ok.any():
        lo, hi = np.nanmin(v[ok]), np.nanmax(v[ok])
        idx = np.zeros(ok.sum(), int) if hi == lo else ((v[ok] - lo) / (hi - lo) * (len(palette) - 1)).round().astype(int)
        out[ok] = np.asarray(palette, dtype=object)[idx]
    return list(out)


def build_html(topics: pd.DataFrame, examples: list[list[str]], background_png: bytes, x_range, y_range,
               cfg: RenderConfig) -> str:
    """Self-contained Bokeh document: background image, topic circles + hover, colour selector, table."""
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.models import (ColumnDataSource, CustomJS, DataTable, HoverTool, LabelSet,
                              Select, TableColumn)
    from bokeh.palettes import Viridis256
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    t = topics.reset_index(drop=True)
    fields = list(t["main_field"].fillna(""))
    top_fields = pd.Series(fields).value_counts().index[:len(PALETTE) - 1]
    fcol = {f: PALETTE[i] for i, f in enumerate(top_fields)}
    c_field = [fcol.get(f, "#7f7f7f") for f in fields]
    c_year = _linear_colors(t["mean_year"].to_numpy(), list(Viridis256))
    c_inter = _linear_colors(t["interdisciplinarity"].to_numpy(), list(Viridis256))
    size = t["size"].to_numpy(float)
    msize = 6 + 34 * np.sqrt(size / max(size.max(), 1))
    fmt = lambda a: ["" if not np.isfinite(v) else f"{v:.1f}" for v in np.asarray(a, float)]  # noqa: E731
    data = {
        "x": t["x"].astype(float).tolist(), "y": t["y"].astype(float).tolist(),
        "msize": msize.tolist(), "label": t["label"].fillna("").tolist(), "size": t["size"].astype(int).tolist(),
        "main_field": fields, "mean_year": fmt(t["mean_year"]), "inter": fmt(t["interdisciplinarity"]),
        "examples": [" | ".join(e) for e in examples],
        "c_field": c_field, "c_year": c_year, "c_inter": c_inter, "color": list(c_field),
    }
    src = ColumnDataSource(data)
    p = figure(width=cfg.html_width, height=cfg.html_height, x_range=x_range, y_range=y_range,
               tools="pan,wheel_zoom,box_zoom,reset,save", active_scroll="wheel_zoom", title=cfg.title)
    p.image_url(url=["data:image/png;base64," + base64.b64encode(background_png).decode()],
                x=x_range[0], y=y_range[1], w=x_range[1] - x_range[0], h=y_range[1] - y_range[0], anchor="top_left")
    circles = p.scatter("x", "y", size="msize", source=src, fill_color="color", fill_alpha=0.45,
                        line_color="#333333", line_alpha=0.6)
    # Field values in tuple tooltips are inserted as text by BokehJS (no "{safe}" anywhere).
    p.add_tools(HoverTool(renderers=[circles], tooltips=[
        ("topic", "@label"), ("papers", "@size"), ("main field", "@main_field"), ("mean year", "@mean_year"),
        ("interdisciplinarity (DIV)", "@inter"), ("examples", "@examples")]))
    n_lab = min(cfg.labels_on_map, len(t))
    big = np.argsort(-size, kind="stable")[:n_lab]
    lab_src = ColumnDataSource({"x": [data["x"][i] for i in big], "y": [data["y"][i] for i in big],
                                "label": [data["label"][i] for i in big]})
    p.add_layout(LabelSet(x="x", y="y", text="label", source=lab_src, text_font_size="9pt",
                          text_color="#111111", background_fill_color="white", background_fill_alpha=0.6,
                          x_offset=4, y_offset=4))
    p.xaxis.visible = p.yaxis.visible = False
    p.grid.visible = False
    select = Select(title="Colour topics by", value="c_field",
                    options=[("c_field", "main field"), ("c_year", "mean year"), ("c_inter", "interdisciplinarity (DIV)")])
    select.js_on_change("value", CustomJS(args={"src": src}, code="""
        const d = Object.assign({}, src.data);
        d.color = d[cb_obj.value];
        src.data = d;
    """))
    table = DataTable(source=src, width=cfg.html_width, height=260, index_position=None, columns=[
        TableColumn(field="label", title="topic", width=360), TableColumn(field="size", title="papers", width=70),
        TableColumn(field="main_field", title="main field", width=200),
        TableColumn(field="mean_year", title="mean year", width=80),
        TableColumn(field="inter", title="interdisciplinarity (DIV)", width=110)])
    return file_html(column(select, p, table), resources=INLINE, title=cfg.title)


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


def paper_xy(ids_path, labels: np.ndarray, topic_xy: np.ndarray, radii: np.ndarray, seed: int,
             chunk: int = 1_000_000) -> np.ndarray:
    """float32 positions (n × 2) of the vector rows (NaN where unlabelled), from the ids file read
    chunk by chunk (a paper's point depends only on its id and topic)."""
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
                out[lo + ok] = place_papers(ids[ok], lb[ok], topic_xy, radii, seed)
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
    stage keeps ~40 bytes of arrays plus its title words and fields as sparse rows."""
    steps = Steps("render")
    with steps("load"):
        vec = open_vectors(layout)
        n = vec.n
        res_list = cluster_resolutions(layout)
        map_res = choose_resolution(res_list, cfg.map_resolution)
        labels_map = cluster_labels(layout, map_res, n)
        on_map = labels_map >= 0
        if not on_map.any():
            raise UserError("no clustered paper has a vector; re-run knn and cluster on this run's embeddings")
    with steps("papers"):
        meta = load_row_meta(layout, vec.ids_arrow())
    n_topics = int(labels_map.max()) + 1

    with steps("topic_vectors"):
        with Progress("render: topic vectors", n, "rows") as prog:
            tv = topic_vectors(vec.X, labels_map, n_topics, progress=prog)

    with steps("layout"):
        txy = topic_layout(tv, cfg.layout_method, cfg.seed, cfg.n_neighbors, cfg.min_dist)
        tsize = np.bincount(labels_map[on_map], minlength=n_topics)
        pxy = paper_xy(vec.path / VECTORS_IDS, labels_map, txy, disc_radii(txy, tsize, cfg.jitter), cfg.seed)

    with steps("topics"):
        data = PaperData(fields=meta.fields, categories=meta.categories, year=meta.year, source=meta.source,
                         sources=meta.sources, words=meta.words, vocab=meta.vocab, word_row=meta.word_row)
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
                xy = txy if r == map_res else group_mean_xy(lab, pxy, len(ov))
                ov["x"], ov["y"], ov["resolution"] = xy[:, 0].astype(np.float32), xy[:, 1].astype(np.float32), r
                ov = ov[ov["size"] > 0]
                rows.append(ov)
                if r == map_res:
                    map_topics = ov
                prog.advance(1)
        topics = pd.concat(rows, ignore_index=True)
        write_table_atomic(pa.Table.from_pandas(topics, preserve_index=False), layout.table("topics"),
                           SCHEMAS["topics"])

    with steps("examples"):
        with Progress("render: example titles", n, "rows") as prog:
            central = central_rows(vec.X, labels_map, tv, meta.has_title, cfg.examples, progress=prog)
        wanted = [meta.paper_of_row[central[c]] for c in map_topics["cluster"]]
        titles = read_titles(meta.papers_files, np.concatenate(wanted) if wanted else np.zeros(0, np.int64))
        examples = [[titles[i] for i in w.tolist()] for w in wanted]

    with steps("render"):
        codes, names = map_categories(meta.source, meta.sources, meta.cited_only)
        summary = render_files(layout, pxy, codes, names, on_map, map_topics, examples, cfg)
    summary.update({"map_resolution": map_res, "papers_on_map": int(on_map.sum()),
                    "papers_without_metadata": int((meta.source[on_map] < 0).sum()),
                    "topics_on_map": int(len(map_topics)), "topics_rows": int(len(topics)),
                    "vectors": {"rows": n, "dim": vec.dim, "dtype": vec.meta.get("dtype")},
                    "title_words": int(len(meta.vocab)), "field_categories": int(len(meta.categories)),
                    **{f"{k}_s": v["s"] for k, v in steps.record.items()},
                    "steps": steps.record, "peak_rss_mb": round(rss_mb())})
    log.info("render: %s", summary)
    return summary


def render_files(layout: RunLayout, pxy: np.ndarray, codes: np.ndarray, names: list[str], on_map: np.ndarray,
                 map_topics: pd.DataFrame, examples: list[list[str]], cfg: RenderConfig) -> dict:
    """Write map.png and map.html from paper positions (float32), their colour categories
    (codes into `names`) and the map-resolution topics."""
    if cfg.width <= cfg.legend_width + 50 or cfg.height < 50:
        raise UserError(f"map size {cfg.width}x{cfg.height} is too small for a legend of {cfg.legend_width} px")
    if not np.asarray(on_map).all():
        keep = np.flatnonzero(on_map)
        pxy, codes = pxy[keep], codes[keep]
    n_cat = np.bincount(codes, minlength=len(names))
    present = [names[i] for i in np.flatnonzero(n_cat)]
    colors = category_colors(present)
    order = sorted(np.flatnonzero(n_cat).tolist(), key=lambda i: -n_cat[i])
    counts = {names[i]: int(n_cat[i]) for i in order}
    xr, yr = _bounds(pxy[:, 0], pxy[:, 1])
    mw, mh = cfg.width - cfg.legend_width, cfg.height
    with Progress("render: datashader", 2 * len(codes), "points") as prog:
        img = shade_points(pxy[:, 0], pxy[:, 1], codes, names, mw, mh, xr, yr, colors, progress=prog)
    png = compose_png(img, counts, colors, cfg.width, cfg.height, cfg.legend_width, cfg.title)
    buf = io.BytesIO()
    png.save(buf, format="PNG")
    write_bytes_atomic(layout.map_png, buf.getvalue())
    # The HTML background is the bare datashader image on white (its extent = the plot ranges).
    from PIL import Image

    bg = Image.new("RGB", img.size, "white")
    bg.paste(img, (0, 0), img)
    b2 = io.BytesIO()
    bg.save(b2, format="PNG")
    html = build_html(map_topics, examples, b2.getvalue(), xr, yr, cfg)
    write_text_atomic(layout.map_html, html)
    return {"png": str(layout.map_png), "html": str(layout.map_html), "html_bytes": len(html), "sources": counts}
