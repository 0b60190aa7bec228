"""One declaration per map overlay (mapping.overlays): an overlay added here, the share of papers
with full text per topic, reaches the topics table, a PNG with its colour bar and the HTML map's
switch, hover and blob, with no other edit. Real render stage on generated papers and vectors."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sciencemap.storage import read_table, write_table_atomic
from sciencemap.vectors import ensure_vectors
from mapping.html_map import payload_of, unpack_topics
from mapping.overlays import OVERLAYS, Overlay, TopicGroups, topics_schema
from mapping.render import RenderConfig, run_render
from sciencemap.contracts import SCHEMAS


def share_with_full_text(g: TopicGroups) -> np.ndarray:
    return g.mean(g.data.columns["has_fulltext"])


FULLTEXT = Overlay("fulltext", "fulltext_share", pa.float32(), share_with_full_text,
                   "share of the topic's papers with full text", "share with full text", palette="cividis",
                   bar_digits=2, digits=2, paper_column="has_fulltext")


@pytest.fixture
def with_fulltext_overlay():
    OVERLAYS.append(FULLTEXT)
    yield FULLTEXT
    OVERLAYS.remove(FULLTEXT)


def test_an_overlay_declared_once_reaches_table_png_and_html(tmp_path, make_run, with_fulltext_overlay):
    from PIL import Image

    layout, true = make_run(tmp_path / "r", n_clusters=6, per=30, dim=16, noise=0.3)
    papers = read_table(layout.table("papers"))
    # cluster c: papers with full text in share c / 5 (every 5th paper of cluster 0..5, i.e. 0, 1/5, ...)
    rank = np.zeros(len(true), int)
    for c in range(6):
        idx = np.flatnonzero(true == c)
        rank[idx] = np.arange(len(idx))
    full = (rank % 5) < true
    papers = papers.set_column(papers.schema.get_field_index("has_fulltext"), "has_fulltext", pa.array(full))
    write_table_atomic(papers, layout.table("papers"), SCHEMAS["papers"])
    vec = ensure_vectors(layout)
    ids = vec.ids()
    pos = {p: i for i, p in enumerate(papers.column("paper_id").to_pylist())}
    row_label = np.array([true[pos[p]] for p in ids])
    write_table_atomic(pa.table({"paper_id": pa.array(ids, pa.string()), "row": pa.array(np.arange(len(ids)), pa.int32()),
                                 "resolution": pa.array(np.full(len(ids), 0.05)),
                                 "cluster": pa.array(row_label, pa.int32())}), layout.table("clusters"), SCHEMAS["clusters"])

    s = run_render(RenderConfig(map_resolution=0.05, layout_method="pca", width=500, height=360, legend_width=140,
                                papers_shown="all"), layout)

    topics = read_table(layout.table("topics"))
    assert topics.schema.equals(topics_schema(SCHEMAS["topics"])) and topics.schema.names[-1] == "fulltext_share"
    t = topics.to_pandas()
    want = {c: full[true == c].mean() for c in range(6)}             # cluster ids follow the labels here
    got = {int(r.cluster): float(r.fulltext_share) for r in t.itertuples()}
    assert sorted(got.values()) == pytest.approx(sorted(want.values()), abs=1e-6)
    assert len(set(np.round(list(got.values()), 3))) == 6             # six different shares, 0 to 1

    png = layout.map_overlay_png("fulltext")
    assert s["pngs"]["map_fulltext"] == str(png)
    img = np.asarray(Image.open(png).convert("RGB")).astype(int)
    assert len({tuple(p) for p in img[60:300, 410:420].reshape(-1, 3)}) > 50   # its colour bar: a gradient

    html = layout.map_html.read_text()
    df, head = unpack_topics(payload_of(html))
    assert "fulltext" in {c["name"] for c in head["columns"]}
    assert sorted(df["fulltext"]) == pytest.approx(sorted(want.values()), abs=1e-4)
    for text in ('"fulltext_bar"', '"share with full text"', '"@fulltext_s"', '"fulltext_mapper"'):
        assert text in html, text
