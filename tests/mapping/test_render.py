"""The render stage: topics table, map.png and map.html (real datashader, bokeh)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sciencemap.contracts import SCHEMAS
from sciencemap.runtime import UserError
from sciencemap.storage import read_table, write_table_atomic
from mapping.cluster import ClusterConfig, run_cluster
from mapping.knn import KnnConfig, run_knn
from mapping.render import RenderConfig, CITED_ONLY_COLOR, category_colors, run_render


def _nonwhite_matches(img: np.ndarray, colour_hex: str) -> int:
    """Pixels that are `colour` blended with white (datashader alpha on a white background)."""
    c = np.array([int(colour_hex[i:i + 2], 16) for i in (1, 3, 5)], float)
    px = img.reshape(-1, 3).astype(float)
    dark = 255 - px
    keep = dark.sum(axis=1) > 60
    a, b = dark[keep], (255 - c)
    cos = (a @ b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b) + 1e-9)
    return int((cos > 0.995).sum())


def test_render_stage_writes_topics_png_and_html(tmp_path, make_run):
    from PIL import Image

    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=30, dim=16, noise=0.3)
    run_knn(KnnConfig(k=8), layout)
    run_cluster(ClusterConfig(resolutions=[0.01, 0.05], min_cluster_size=3), layout)
    cfg = RenderConfig(map_resolution=0.05, layout_method="pca", width=500, height=360, legend_width=140)
    s = run_render(cfg, layout)
    topics = read_table(layout.table("topics"))
    assert topics.schema.equals(SCHEMAS["topics"])
    t = topics.to_pandas()
    assert set(t["resolution"]) == {0.01, 0.05}
    assert t.groupby("resolution")["size"].sum().eq(180).all()
    assert t["label"].str.len().gt(0).all() and np.isfinite(t[["x", "y"]].to_numpy()).all()
    img = Image.open(layout.map_png)
    assert img.size == (500, 360)
    arr = np.asarray(img.convert("RGB"))[:, : 500 - 140]    # the map area, legend excluded
    colours = category_colors(["elife", "pubmed", "scisummnet"])
    hits = {src: _nonwhite_matches(arr, c) for src, c in colours.items()}
    assert all(v > 0 for v in hits.values()), hits           # all 3 source colours are drawn
    assert _nonwhite_matches(arr, CITED_ONLY_COLOR) > 0       # and the grey cited-only layer
    assert len({tuple(p) for p in arr.reshape(-1, 3)}) >= 3
    html = layout.map_html.read_text()
    assert "cdn.bokeh.org" not in html and "<script" in html  # INLINE resources
    assert s["topics_on_map"] == int((t["resolution"] == 0.05).sum())
    with pytest.raises(UserError):
        run_render(RenderConfig(map_resolution=0.5, layout_method="pca"), layout)


def test_render_survives_missing_titles_and_papers_without_metadata(tmp_path, make_run):
    """A third of the titles null and a sixth of the embedded papers absent from the papers table
    (so the reindex gives them NaN titles and fields): labels, examples and HTML carry no 'nan'."""
    layout, _ = make_run(tmp_path / "r", n_clusters=4, per=30, dim=16, noise=0.3)
    papers = read_table(layout.table("papers")).to_pandas()
    papers.loc[papers.index % 3 == 1, "title"] = None
    papers = papers[papers.index % 6 != 5]
    write_table_atomic(pa.Table.from_pandas(papers, preserve_index=False), layout.table("papers"), SCHEMAS["papers"])
    run_knn(KnnConfig(k=8), layout)
    run_cluster(ClusterConfig(resolutions=[0.05], min_cluster_size=3), layout)
    s = run_render(RenderConfig(layout_method="pca", width=400, height=300, legend_width=120), layout)
    assert s["papers_without_metadata"] == 20 and s["papers_on_map"] == 120
    t = read_table(layout.table("topics")).to_pandas()
    assert t["label"].str.len().gt(0).all()
    assert t["main_field"].str.startswith("Field").all()
    html = layout.map_html.read_text()
    for label in t["label"]:
        assert label in html
    assert not any(w in lab for lab in t["label"] for w in ("nan", "none"))
    assert " in model " in html                             # the example titles reach the page
    # examples are " | "-joined titles: a missing one would show as nan or None between them
    assert not any(f"{sep}{w}" in html or f"{w}{sep}" in html for w in ("nan", "None", "<NA>") for sep in (" |", "| "))
