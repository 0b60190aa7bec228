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
    old_png = layout.map_png.read_bytes()

    # new papers drawn from the same generating clusters (the same seed gives the same centres)
    Xn, tn = clustered_vectors(5, 12, 16, 0.3, seed=2)
    Xn = Xn + 0.05 * np.random.default_rng(9).normal(size=Xn.shape).astype(np.float32)
    new = RunLayout(tmp_path / "new")
    new_ids = [f"new:{i}" for i in range(len(Xn))] + [ids[0]]     # the last one is already on the map
    _write_embeddings(new, new_ids, np.vstack([Xn, np.asarray(vec.X[:1])]))
    s = run_place(PlaceConfig(new=str(new.root), k=10), layout)
    assert s["new_papers"] == 61 and s["placed"] == 60 and s["already_on_map"] == 1 and s["unplaced"] == 0
    placed = read_table(layout.table("placed")).to_pandas()
    assert placed["reason"].notna().sum() == 1 and placed["reason"].iloc[-1] == "already on the map"
    got = placed["cluster"].to_numpy()[:60]
    assert (got == tn).mean() >= 0.95                               # the cluster it was drawn from
    # positions inside the disc of the topic it was put in, from the saved layout
    lay, extra = LocalLayout.load(layout.map_layout)
    d = {int(c): i for i, c in enumerate(extra["cluster"])}
    t = np.array([d[c] for c in got])
    r = np.linalg.norm(placed[["x", "y"]].to_numpy()[:60] - lay.topic_xy[t], axis=1)
    assert np.all(r <= lay.radii[t] + 1e-5)
    # the old map is untouched, the PNGs redrawn with the new papers in red
    for name, data in before.items():
        path = layout.table("topics") / "part-00000.parquet" if name == "topics" else layout.map_positions
        assert path.read_bytes() == data
    assert layout.map_png.read_bytes() != old_png
    arr = np.asarray(Image.open(layout.map_png).convert("RGB"))[30:, :280].reshape(-1, 3).astype(int)
    assert ((arr[:, 0] > 180) & (arr[:, 1] < 80) & (arr[:, 2] < 80)).sum() > 0

    # an approximate search on the map: the map graph's tuned nprobe is reused, not tuned again
    knn = run_knn(KnnConfig(k=10, index="ivf_sq8", recall_queries=100), layout)
    s = run_place(PlaceConfig(new=str(new.root), k=10, index="ivf_sq8", redraw=False), layout)
    assert s["index"] == "ivf_sq8" and s["nprobe"] == knn["nprobe"] and s["search_from"] == "the map's kNN graph"
    got = read_table(layout.table("placed")).to_pandas()["cluster"].to_numpy()[:60]
    assert (got == tn).mean() >= 0.95


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
    assert set(ENCODER_KEYS) == {"model_hash", "pooling", "max_length", "dim"}
    # the same encoder (another path to the same weights) passes the check and goes on: here to the
    # unrendered map's own error
    (new.embeddings_dir / "manifest.json").write_text(json.dumps({**enc, "model_path": "/elsewhere/model"}))
    with pytest.raises(UserError, match="render"):
        run_place(PlaceConfig(new=str(new.root)), layout)
