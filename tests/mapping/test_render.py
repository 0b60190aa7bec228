"""The render stage: topics table, map.png and map.html (real datashader, bokeh), from a run with a
vector store and a clusters table by row (written here, so these tests do not depend on knn/cluster)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sciencemap.contracts import SCHEMAS
from sciencemap.runtime import UserError
from sciencemap.storage import read_table, write_table_atomic
from sciencemap.vectors import ensure_vectors
from mapping.html_map import payload_of, unpack_topics
from mapping.layout import LocalLayout, new_local_layout, topic_layout
from mapping.render import RenderConfig, CITED_ONLY_COLOR, category_colors, field_codes, run_render
from mapping.overlays import OVERLAYS, topic_overlays, topics_schema
from mapping.topics import topic_vectors


def _nonwhite_matches(img: np.ndarray, colour_hex: str) -> int:
    """Pixels that are `colour` blended with white (datashader alpha on a white background)."""
    c = np.array([int(colour_hex[i:i + 2], 16) for i in (1, 3, 5)], float)
    px = img.reshape(-1, 3).astype(float)
    dark = 255 - px
    keep = dark.sum(axis=1) > 60
    a, b = dark[keep], (255 - c)
    cos = (a @ b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b) + 1e-9)
    return int((cos > 0.995).sum())


def _clusters(layout, vec, labels_by_res: dict[float, np.ndarray]) -> None:
    """A clusters table (paper_id, row, resolution, cluster) from labels per vector row (-1 = none)."""
    ids = vec.ids()
    parts = []
    for r, lab in labels_by_res.items():
        rows = np.flatnonzero(lab >= 0)
        parts.append(pa.table({"paper_id": pa.array(ids[rows], pa.string()), "row": pa.array(rows, pa.int32()),
                               "resolution": pa.array(np.full(len(rows), r)),
                               "cluster": pa.array(lab[rows], pa.int32())}))
    write_table_atomic(pa.concat_tables(parts), layout.table("clusters"), SCHEMAS["clusters"])


def _render_run(root, make_run, dtype="float32", **kw):
    """make_run's papers and embeddings + the vector store + clusters from the true labels: 0.05 =
    the generating clusters, 0.01 = pairs of them merged."""
    layout, true = make_run(root, **kw)
    vec = ensure_vectors(layout, dtype)
    _clusters(layout, vec, {0.05: true, 0.01: true // 2})
    return layout, vec, true


def test_render_stage_writes_topics_png_and_html(tmp_path, make_run):
    from PIL import Image

    layout, _, _ = _render_run(tmp_path / "r", make_run, n_clusters=6, per=30, dim=16, noise=0.3)
    cfg = RenderConfig(map_resolution=0.05, layout_method="pca", width=500, height=360, legend_width=140,
                       papers_shown="all")
    s = run_render(cfg, layout)
    topics = read_table(layout.table("topics"))
    assert topics.schema.equals(topics_schema(SCHEMAS["topics"]))
    assert topics.schema.names[-3:] == ["main_field", "mean_year", "interdisciplinarity"]
    t = topics.to_pandas()
    assert set(t["resolution"]) == {0.01, 0.05}
    assert t.groupby("resolution")["size"].sum().eq(180).all()
    assert t["label"].str.len().gt(0).all() and np.isfinite(t[["x", "y"]].to_numpy()).all()
    img = Image.open(layout.map_png)
    assert img.size == (500, 360)
    arr = np.asarray(img.convert("RGB"))[30:, : 500 - 140]  # the map area: title band and legend excluded
    colours = category_colors(["elife", "pubmed", "scisummnet"])
    hits = {src: _nonwhite_matches(arr, c) for src, c in colours.items()}
    assert all(v > 0 for v in hits.values()), hits           # all 3 source colours are drawn
    assert _nonwhite_matches(arr, CITED_ONLY_COLOR) > 0       # and the grey cited-only layer
    assert len({tuple(p) for p in arr.reshape(-1, 3)}) >= 3
    html = layout.map_html.read_text()
    assert "cdn.bokeh.org" not in html and "<script" in html  # INLINE resources
    assert s["topics_on_map"] == int((t["resolution"] == 0.05).sum())
    papers = read_table(layout.table("papers")).to_pandas()
    want = papers["source"].where(papers["source_file"].notna(), "cited, title only").value_counts().to_dict()
    assert s["sources"] == want and want["cited, title only"] == 25
    for step in ("load", "papers", "topic_vectors", "layout", "topics", "examples", "render"):
        assert s["steps"][step]["s"] >= 0 and s["steps"][step]["peak_rss_mb"] > 0
    with pytest.raises(UserError):
        run_render(RenderConfig(map_resolution=0.5, layout_method="pca"), layout)


def test_overlay_pngs_show_fields_values_and_counts(tmp_path, make_run):
    """map_field.png draws each named field in its legend colour, with the papers per field in the
    summary; the value overlays have a colour bar; every PNG has the size asked for."""
    from PIL import Image

    layout, _, true = _render_run(tmp_path / "r", make_run, n_clusters=8, per=30, dim=16, noise=0.3)
    cfg = RenderConfig(map_resolution=0.05, layout_method="pca", width=600, height=400, legend_width=200)
    s = run_render(cfg, layout)
    t = read_table(layout.table("topics")).to_pandas()
    t = t[t["resolution"] == 0.05].reset_index(drop=True)
    # make_run's cluster c has papers in Field{c % 4} (every 5th also in Field{(c+1) % 4})
    assert sorted(t["main_field"]) == sorted(f"Field{c % 4}" for c in range(8))
    assert s["fields"]["Field0"]["topics"] == 2 and s["fields"]["Field0"]["papers"] == int(t[t["main_field"] == "Field0"]["size"].sum())
    assert sum(v["papers"] for v in s["fields"].values()) == s["papers_on_map"]
    codes, names, colors = field_codes(t["main_field"], t["size"].to_numpy(), 12)
    arr = np.asarray(Image.open(layout.map_overlay_png("field")).convert("RGB"))
    for f in ("Field0", "Field1", "Field2", "Field3"):
        assert _nonwhite_matches(arr[30:, :400], colors[f]) > 0, f       # drawn on the map
        assert _nonwhite_matches(arr[30:, 400:], colors[f]) > 0, f       # and a swatch in the legend
    assert [ov.name for ov in OVERLAYS] == ["field", "year", "interdisciplinarity"]
    for name in (ov.name for ov in OVERLAYS):
        img = Image.open(layout.map_overlay_png(name))
        assert img.size == (600, 400)
        assert s["pngs"][f"map_{name}"] == str(layout.map_overlay_png(name))
    year = np.asarray(Image.open(layout.map_overlay_png("year")).convert("RGB")).astype(int)
    bar = year[60:300, 410:420]                                         # the colour bar's column
    assert len({tuple(p) for p in bar.reshape(-1, 3)}) > 50              # a gradient, not a swatch


def test_cited_only_papers_are_not_drawn_unless_asked(tmp_path, make_run):
    layout, _, true = _render_run(tmp_path / "r", make_run, n_clusters=6, per=35, dim=16, noise=0.3)
    papers = read_table(layout.table("papers")).to_pandas()
    cited = int(papers["source_file"].isna().sum())
    corpus = run_render(RenderConfig(map_resolution=0.05, layout_method="pca", width=400, height=300,
                                     legend_width=120), layout)
    t = read_table(layout.table("topics")).to_pandas()
    assert corpus["papers_on_map"] == 210 - cited and corpus["cited_only_not_drawn"] == cited == 30
    assert corpus["papers_clustered"] == 210 and "cited, title only" not in corpus["sources"]
    assert t.groupby("resolution")["size"].sum().eq(210 - cited).all()
    every = run_render(RenderConfig(map_resolution=0.05, layout_method="pca", width=400, height=300,
                                    legend_width=120, papers_shown="all"), layout)
    assert every["papers_on_map"] == 210 and every["cited_only_not_drawn"] == 0
    # a run whose clustered papers are all cited-only has nothing to draw by default
    papers["source_file"] = None
    write_table_atomic(pa.Table.from_pandas(papers, schema=SCHEMAS["papers"], preserve_index=False),
                       layout.table("papers"))
    with pytest.raises(UserError, match="papers_shown"):
        run_render(RenderConfig(map_resolution=0.05, layout_method="pca"), layout)


def test_render_stage_equals_the_in_memory_computation(tmp_path, make_run):
    """The streamed stage (vector store blocks, papers joined by id, one vocabulary) gives the
    topics table of the whole-table computation: the pandas join, dense topic means, overlays per
    resolution, positions in float64."""
    layout, vec, true = _render_run(tmp_path / "r", make_run, n_clusters=6, per=40, dim=16, noise=0.5)
    papers = read_table(layout.table("papers")).to_pandas()
    # the papers table in another order than the vectors, one paper missing: rows match by id
    papers = papers.drop(index=[5]).sample(frac=1.0, random_state=0)
    write_table_atomic(pa.Table.from_pandas(papers, schema=SCHEMAS["papers"], preserve_index=False),
                       layout.table("papers"))
    fine = true.copy()
    fine[true == 2] = 6 + (np.arange((true == 2).sum()) % 2)     # cluster 2 split in two, ids with a gap
    _clusters(layout, vec, {0.01: true // 2, 0.05: true, 0.1: fine})
    cfg = RenderConfig(layout_method="pca", width=400, height=300, legend_width=120, papers_shown="all")
    s = run_render(cfg, layout)
    assert s["map_resolution"] == 0.05 and s["papers_without_metadata"] == 1
    got = read_table(layout.table("topics")).to_pandas()

    ids = vec.ids()
    X = np.asarray(vec.X)
    meta = papers.set_index("paper_id").reindex(ids).reset_index()
    tv = topic_vectors(X, true)
    txy = topic_layout(tv, "pca", cfg.seed)
    lay = new_local_layout(tv, txy, np.bincount(true), cfg.jitter, cfg.seed, cfg.frame_neighbours)
    off = lay.offsets(X, true)
    lay.fit_spread(true, off)
    pxy = lay.from_offsets(off, true, ids)
    saved, extra = LocalLayout.load(layout.map_layout)
    np.testing.assert_allclose(saved.topic_xy, txy)
    np.testing.assert_allclose(saved.scale, lay.scale, rtol=1e-5)
    assert extra["resolution"] == 0.05 and list(extra["cluster"]) == list(range(6))
    for r, lab in ((0.01, true // 2), (0.05, true), (0.1, fine)):
        ov = topic_overlays(meta, lab, cfg.label_words)
        ov = ov[ov["size"] > 0].reset_index(drop=True)
        g = got[got["resolution"] == r].reset_index(drop=True)
        for c in ("cluster", "size", "label", "main_field", "mean_year", "interdisciplinarity"):
            np.testing.assert_array_equal(g[c].to_numpy(), ov[c].to_numpy(), err_msg=f"{c} at {r}")
        xy = txy if r == 0.05 else np.column_stack(
            [np.bincount(lab, weights=pxy[:, i]) / np.maximum(np.bincount(lab), 1) for i in (0, 1)])[ov["cluster"]]
        np.testing.assert_allclose(g[["x", "y"]].to_numpy(), xy, rtol=1e-5, atol=1e-5)
    assert (got["resolution"] == 0.1).sum() == 7 and "Field" in got["main_field"].iloc[0]


def test_render_survives_missing_titles_and_papers_without_metadata(tmp_path, make_run):
    """A third of the titles null and a sixth of the embedded papers absent from the papers table
    (no title, fields or year for them): labels, examples and HTML carry no 'nan'."""
    layout, vec, true = _render_run(tmp_path / "r", make_run, n_clusters=4, per=30, dim=16, noise=0.3)
    papers = read_table(layout.table("papers")).to_pandas()
    papers.loc[papers.index % 3 == 1, "title"] = None
    papers = papers[papers.index % 6 != 5]
    write_table_atomic(pa.Table.from_pandas(papers, preserve_index=False), layout.table("papers"), SCHEMAS["papers"])
    _clusters(layout, vec, {0.05: true})
    s = run_render(RenderConfig(layout_method="pca", width=400, height=300, legend_width=120, papers_shown="all"),
                   layout)
    assert s["papers_without_metadata"] == 20 and s["papers_on_map"] == 120
    t = read_table(layout.table("topics")).to_pandas()
    assert t["label"].str.len().gt(0).all()
    assert t["main_field"].str.startswith("Field").all()
    page, _ = unpack_topics(payload_of(layout.map_html.read_text()))   # the topics as the page decodes them
    assert sorted(page["label"]) == sorted(t["label"])
    assert not any(w in lab for lab in t["label"] for w in ("nan", "none"))
    examples = page[["ex0", "ex1", "ex2"]].to_numpy().ravel().tolist()
    assert any(" in model " in e for e in examples)        # the example titles reach the page
    # a missing title would show as nan or None
    assert not any(w in e.split() for e in examples for w in ("nan", "None", "<NA>"))


def test_render_from_a_float16_store_and_with_unclustered_rows(tmp_path, make_run):
    layout, vec, true = _render_run(tmp_path / "r", make_run, dtype="float16", n_clusters=3, per=20, dim=8)
    assert vec.X.dtype == np.float16
    lab = true.copy()
    lab[::10] = -1                                         # rows left out of the map resolution
    _clusters(layout, vec, {0.05: lab, 0.01: true // 2})
    s = run_render(RenderConfig(map_resolution=0.05, layout_method="pca", width=300, height=200, legend_width=100,
                                papers_shown="all"), layout)
    t = read_table(layout.table("topics")).to_pandas()
    assert s["papers_on_map"] == 54
    assert t.groupby("resolution")["size"].sum().eq(54).all()   # every level holds the map's papers


def test_render_needs_the_vector_store_and_clusters_by_row(tmp_path, make_run):
    layout, true = make_run(tmp_path / "r", n_clusters=2, per=10, dim=4)
    with pytest.raises(UserError, match="knn"):
        run_render(RenderConfig(layout_method="pca"), layout)
    vec = ensure_vectors(layout)
    old = pa.table({"paper_id": pa.array(vec.ids(), pa.string()), "resolution": np.full(20, 0.1),
                    "cluster": pa.array(true, pa.int32())})
    write_table_atomic(old, layout.table("clusters"))
    with pytest.raises(UserError, match="re-run the cluster stage"):
        run_render(RenderConfig(layout_method="pca"), layout)
