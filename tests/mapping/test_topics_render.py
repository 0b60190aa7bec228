"""Topics, overlays, layout and the PNG/HTML outputs (real datashader, bokeh, UMAP)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from mapping_data import make_run  # first: puts the repo root on sys.path

from sciencemap.contracts import SCHEMAS
from sciencemap.runtime import UserError
from sciencemap.storage import read_table
from mapping.cluster import ClusterConfig, run_cluster
from mapping.knn import KnnConfig, run_knn
from mapping.layout import paper_positions, topic_layout
from mapping.render import RenderConfig, CITED_ONLY_COLOR, category_colors, run_render
from mapping.topics import div_star, topic_labels, topic_overlays


def test_interdisciplinarity():
    d = np.array([[0, 1, 0.5], [1, 0, 0.2], [0.5, 0.2, 0]])
    assert div_star(np.array([7, 0, 0]), d) == 0.0          # one category -> 0
    assert np.isnan(div_star(np.array([0, 0, 0]), d))       # no categories -> undefined
    assert div_star(np.array([3, 3, 0]), d) == pytest.approx(2 * 1.0 * 2)   # n_c·(1−0)·(1+1)
    unbalanced = div_star(np.array([5, 1, 0]), d)
    assert 0 < unbalanced < 4                               # Gini > 0 lowers it
    papers = pd.DataFrame({"title": ["a b", "c d", "e f", "g h"], "year": [2000, 2002, None, 2010],
                           "fields": [["Bio"], ["Bio"], ["Bio", "CS"], ["CS"]], "source": ["x"] * 4})
    ov = topic_overlays(papers, np.array([0, 0, 1, 1]))
    assert ov.loc[0, "interdisciplinarity"] == 0.0 and ov.loc[0, "main_field"] == "Bio"
    assert ov.loc[1, "interdisciplinarity"] > 0
    assert ov.loc[0, "mean_year"] == pytest.approx(2001) and ov.loc[1, "mean_year"] == pytest.approx(2010)


def test_labels_are_distinctive_title_words():
    titles = ["Protein folding kinetics", "Chaperone protein folding", "Folding of protein domains",
              "Treebank parser for syntax", "Syntax parser evaluation", "A treebank of syntax"]
    labels = topic_labels(titles, np.array([0, 0, 0, 1, 1, 1]), n_words=2)
    assert set(labels[0].split(", ")) == {"folding", "protein"}
    assert set(labels[1].split(", ")) == {"syntax", "parser"} or set(labels[1].split(", ")) == {"syntax", "treebank"}


def test_paper_positions_deterministic_and_scaled():
    txy = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    size = np.array([400, 100, 100])
    ids = np.array([f"p{i}" for i in range(600)], object)
    lab = np.repeat([0, 1, 2], [400, 100, 100])
    pos = paper_positions(ids, lab, txy, size, jitter=0.35)
    perm = np.random.default_rng(0).permutation(600)
    pos2 = paper_positions(ids[perm], lab[perm], txy, size, jitter=0.35)
    np.testing.assert_allclose(pos[perm], pos2)              # order does not matter
    r = np.linalg.norm(pos - txy[lab], axis=1)
    assert r[lab == 0].max() <= 0.35 * 10 * 2 + 1e-9         # R = jitter·r0·sqrt(400/100)
    assert r[lab == 0].max() > r[lab == 1].max()


def test_umap_layout_small():
    # The only test that runs UMAP: its first fit in a fresh environment compiles numba code (~25 s).
    rng = np.random.default_rng(0)
    V = np.repeat(rng.normal(size=(3, 16)), 10, axis=0) + 0.05 * rng.normal(size=(30, 16))
    xy = topic_layout(V, "umap", seed=1, n_neighbors=5)
    assert xy.shape == (30, 2) and np.isfinite(xy).all()
    # topics from the same group lie closer together than topics from different groups
    g = np.repeat([0, 1, 2], 10)
    D = np.linalg.norm(xy[:, None] - xy[None], axis=2)
    same = D[g[:, None] == g[None]].mean()
    diff = D[g[:, None] != g[None]].mean()
    assert same < diff


def _nonwhite_matches(img: np.ndarray, colour_hex: str) -> int:
    """Pixels that are `colour` blended with white (datashader alpha on a white background)."""
    c = np.array([int(colour_hex[i:i + 2], 16) for i in (1, 3, 5)], float)
    px = img.reshape(-1, 3).astype(float)
    dark = 255 - px
    keep = dark.sum(axis=1) > 60
    a, b = dark[keep], (255 - c)
    cos = (a @ b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b) + 1e-9)
    return int((cos > 0.995).sum())


def test_render_stage_writes_topics_png_and_html(tmp_path):
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
