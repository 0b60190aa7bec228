"""Placing new papers on a finished map (real FAISS search, the render stage's saved layout)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sciencemap.contracts import SCHEMAS, embeddings_schema
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import read_table, write_table_atomic
from sciencemap.vectors import ensure_vectors
from mapping.knn import KnnConfig, run_knn
from mapping.layout import LocalLayout
from mapping.place import PlaceConfig, majority_topic, run_place, vote_topics
from mapping.render import RenderConfig, run_render


def test_vote_topics_sums_similarities_and_reports_the_share():
    topic_of_row = np.array([0, 0, 1, 1, 1, -1, 2])
    I = np.array([[0, 2, 3, 4, 1],        # topic 1 three times (0.3 each), topic 0 twice (0.5 each)
                  [5, 5, 5, 5, 6],        # only row 6 is in a topic
                  [5, 5, -1, -1, -1],     # no neighbour in a topic
                  [0, 2, 1, 3, 6]])       # tie 0 vs 1 by weight: the smaller topic wins
    D = np.array([[0.5, 0.3, 0.3, 0.3, 0.5], [0.9] * 4 + [0.1], [0.9, 0.9, 0, 0, 0], [0.4, 0.4, 0.4, 0.4, 0.1]])
    t, share = vote_topics(D, I, topic_of_row)
    assert t.tolist() == [0, 2, -1, 0]             # 1.0 > 0.9: weight, not head count, decides the first
    np.testing.assert_allclose(share, [2 / 5, 1.0, 0.0, 2 / 5])
    assert majority_topic(I, topic_of_row).tolist() == [1, 2, -1, 0]


def _write_embeddings(layout, ids, X):
    layout.embeddings_dir.mkdir(parents=True, exist_ok=True)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel(), pa.float32()), X.shape[1])
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"paper_id": pa.array(ids, pa.string()), "vector": vec}, schema=embeddings_schema(X.shape[1])),
                   layout.embeddings_dir / "part-00000.parquet")


def test_new_papers_land_in_the_topic_of_their_cluster_without_moving_the_map(tmp_path, make_run, clustered_vectors):
    from PIL import Image

    layout, true = make_run(tmp_path / "map", n_clusters=5, per=40, dim=16, noise=0.3, seed=2)
    vec = ensure_vectors(layout)
    ids = vec.ids()
    write_table_atomic(pa.table({"paper_id": pa.array(ids, pa.string()), "row": pa.array(np.arange(len(ids)), pa.int32()),
                                 "resolution": pa.array(np.full(len(ids), 0.05)),
                                 "cluster": pa.array(true, pa.int32())}), layout.table("clusters"), SCHEMAS["clusters"])
    run_render(RenderConfig(layout_method="pca", width=400, height=300, legend_width=120), layout)
    before = {p: p_.read_bytes() for p, p_ in (("topics", layout.table("topics") / "part-00000.parquet"),
                                               ("xy", layout.map_positions)) if p_.exists()}
    own = {f: f.read_bytes() for f in sorted(layout.root.glob("map*.png")) + [layout.map_html]}

    # new papers drawn from the same generating clusters (the same seed gives the same centres)
    Xn, tn = clustered_vectors(5, 12, 16, 0.3, seed=2)
    Xn = Xn + 0.05 * np.random.default_rng(9).normal(size=Xn.shape).astype(np.float32)
    new = RunLayout(tmp_path / "new")
    # the last but one is a title-only paper of the new run's references, the last one already on the map
    new_ids = [f"new:{i}" for i in range(len(Xn))] + ["ref:titleonly", ids[0]]
    _write_embeddings(new, new_ids, np.vstack([Xn, Xn[:1], np.asarray(vec.X[:1])]))
    write_table_atomic(pa.table({"paper_id": new_ids, "source_file": [f"new/{i}.xml" for i in range(len(Xn))]
                                 + [None, "old.xml"]}), new.table("papers"))
    s = run_place(PlaceConfig(new=str(new.root), k=10), layout)
    assert s["new_papers"] == 62 and s["placed"] == 60 and s["already_on_map"] == 1 and s["unplaced"] == 0
    assert s["title_only_not_placed"] == 1 and s["papers"] == "corpus"
    placed = read_table(layout.table("placed")).to_pandas()
    assert placed["reason"].notna().sum() == 2 and placed["reason"].iloc[-1] == "already on the map"
    assert placed["reason"].iloc[-2] == "title-only cited paper (papers = corpus)"
    got = placed["cluster"].to_numpy()[:60]
    assert (got == tn).mean() >= 0.95                               # the cluster it was drawn from
    # positions inside the disc of the topic it was put in, from the saved layout
    lay, extra = LocalLayout.load(layout.map_layout)
    d = {int(c): i for i, c in enumerate(extra["cluster"])}
    t = np.array([d[c] for c in got])
    r = np.linalg.norm(placed[["x", "y"]].to_numpy()[:60] - lay.topic_xy[t], axis=1)
    assert np.all(r <= lay.radii[t] + 1e-5)
    # the old map is untouched, its own files byte for byte; the PNGs drawn again under placed/
    for name, data in before.items():
        path = layout.table("topics") / "part-00000.parquet" if name == "topics" else layout.map_positions
        assert path.read_bytes() == data
    assert {f: f.read_bytes() for f in own} == own
    assert sorted(p.name for p in layout.placed_dir.iterdir()) == sorted(f.name for f in own)
    html = (layout.placed_dir / "map.html").read_text()
    assert '"placed_points"' in html and "placed papers (60)" in html and "new:0" in html
    assert "placed_points" not in layout.map_html.read_text()

    for name in ("map.png", "map_field.png", "map_year.png"):
        # below the title, left of the legend: the map's own pixels, except the placed papers' black
        # dots and rings (a colour the map does not have)
        old = np.asarray(Image.open(layout.root / name).convert("RGB"))[30:, :280].reshape(-1, 3)
        new_ = np.asarray(Image.open(layout.placed_dir / name).convert("RGB"))[30:, :280].reshape(-1, 3)
        changed = (old != new_).any(axis=1)
        assert not (old == 0).all(axis=1).any() and (new_[changed] == 0).all()
        assert 60 <= changed.sum() <= 60 * 30, name
    # papers = all: the title-only one is placed too
    s = run_place(PlaceConfig(new=str(new.root), k=10, papers="all", redraw=False), layout)
    assert s["placed"] == 61 and s["title_only_not_placed"] == 0

    # an approximate search on the map: the map graph's tuned nprobe is reused, not tuned again
    knn = run_knn(KnnConfig(k=10, index="ivf_sq8", recall_queries=100), layout)
    s = run_place(PlaceConfig(new=str(new.root), k=10, index="ivf_sq8", redraw=False), layout)
    assert s["index"] == "ivf_sq8" and s["nprobe"] == knn["nprobe"] and s["search_from"] == "the map's kNN graph"
    # ... over the index the knn stage kept, not one built again
    assert s["index_from"] == f"loaded from {layout.knn_index_dir}"
    loaded = read_table(layout.table("placed")).to_pandas()
    got = loaded["cluster"].to_numpy()[:60]
    assert (got == tn).mean() >= 0.95
    # without it: built here (the same seeded IVF), the same placements, and kept for the next call
    (layout.knn_index_dir / "index.faiss").unlink()
    s = run_place(PlaceConfig(new=str(new.root), k=10, index="ivf_sq8", redraw=False), layout)
    assert s["index_from"] == f"built here, kept in {layout.knn_index_dir}"
    assert read_table(layout.table("placed")).to_pandas().equals(loaded)
    s = run_place(PlaceConfig(new=str(new.root), k=10, index="ivf_sq8", redraw=False), layout)
    assert s["index_from"] == f"loaded from {layout.knn_index_dir}"


def test_place_needs_a_rendered_map_and_matching_vectors(tmp_path, make_run):
    layout, true = make_run(tmp_path / "map", n_clusters=2, per=10, dim=8)
    ensure_vectors(layout)
    new = RunLayout(tmp_path / "new")
    _write_embeddings(new, ["n1"], np.ones((1, 8), np.float32))
    with pytest.raises(UserError, match="render"):
        run_place(PlaceConfig(new=str(new.root)), layout)
    with pytest.raises(UserError, match="--new"):
        run_place(PlaceConfig(), layout)


def test_vectors_of_another_encoder_are_refused_in_one_sentence(tmp_path, make_run):
    """The two runs' embedding manifests must agree on model hash, pooling, max_length and dim;
    the sentence names both encoders and the command that re-embeds with the map's."""
    import json

    from mapping.place import ENCODER_KEYS

    layout, _ = make_run(tmp_path / "map", n_clusters=2, per=10, dim=8)
    ensure_vectors(layout)
    new = RunLayout(tmp_path / "new")
    _write_embeddings(new, ["n1"], np.ones((1, 8), np.float32))
    enc = {"model_path": str(tmp_path / "map" / "model"), "model_hash": "a" * 64, "pooling": "mean",
           "max_length": 256, "dim": 8}
    (layout.embeddings_dir / "manifest.json").write_text(json.dumps(enc))
    for key, other in [("model_hash", "b" * 64), ("pooling", "cls"), ("max_length", 128), ("dim", 384)]:
        (new.embeddings_dir / "manifest.json").write_text(json.dumps({**enc, "model_path": "minilm", key: other}))
        with pytest.raises(UserError) as e:
            run_place(PlaceConfig(new=str(new.root)), layout)
        msg = str(e.value)
        assert msg.startswith(f"the new papers in {new.root} were embedded with minilm (")
        assert f"the map {layout.root} with {enc['model_path']} (hash aaaaaaaaaaaa, pooling mean, max_length 256" in msg
        assert msg.endswith(f"jobs/embed.py --run {new.root} --model {enc['model_path']} --pooling mean "
                            "--max-length 256 --restart")
    assert set(ENCODER_KEYS) == {"model_hash", "pooling", "max_length", "dim", "vector"}
    # the same FLeW model with other facet weights makes other main vectors: refused, the map's weights named
    fw = {"from": "sum of the facet view's vectors, weighted", "objective": "flew"}
    (layout.embeddings_dir / "manifest.json").write_text(json.dumps({**enc, "vector": {**fw, "facet_weights": [0.5, 0.3, 0.2]}}))
    (new.embeddings_dir / "manifest.json").write_text(json.dumps({**enc, "vector": {**fw, "facet_weights": [0.2, 0.3, 0.5]}}))
    with pytest.raises(UserError, match=r"facet weights \[0.5, 0.3, 0.2\].*--facet-weights 0.5,0.3,0.2$"):
        run_place(PlaceConfig(new=str(new.root)), layout)
    (layout.embeddings_dir / "manifest.json").write_text(json.dumps(enc))
    # the same encoder (another path to the same weights) passes the check and goes on: here to the
    # unrendered map's own error
    (new.embeddings_dir / "manifest.json").write_text(json.dumps({**enc, "model_path": "/elsewhere/model"}))
    with pytest.raises(UserError, match="render"):
        run_place(PlaceConfig(new=str(new.root)), layout)
