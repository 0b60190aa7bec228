"""Facet maps (mapping.facet_maps): `[render] view = method` maps the run's method vectors in
<run>/maps/method/ with real FAISS, igraph Leiden and the render; the run's own map is untouched."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mapping.cluster import ClusterConfig, run_cluster
from mapping.facet_maps import parse_view, run_facet_map, view_embeddings
from mapping.knn import KnnConfig, run_knn
from mapping.render import RenderConfig, run_render
from sciencemap.contracts import EMBEDDINGS_MANIFEST, FACETS, view_schema
from sciencemap.embeddings import load_embeddings
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import write_json_atomic


def _write_view(layout: RunLayout, ids, V: np.ndarray, shards: int = 2) -> None:
    """A 'facets' view as the embed stage writes it: K rows a paper, shards like the main ones."""
    d = layout.embeddings_dir / "views" / "facets"
    d.mkdir(parents=True)
    n, k, dim = V.shape
    parts = np.array_split(np.arange(n), shards)
    for i, part in enumerate(parts):
        t = pa.table({"paper_id": pa.array(np.repeat(np.asarray(ids, object)[part], k), pa.string()),
                      "key": pa.array(list(FACETS) * len(part), pa.string()),
                      "vector": pa.FixedSizeListArray.from_arrays(pa.array(V[part].ravel(), pa.float32()), dim)},
                     schema=view_schema(dim))
        pq.write_table(t, d / f"part-{i:05d}.parquet")
    write_json_atomic(d / EMBEDDINGS_MANIFEST, {"view": "facets", "keys": list(FACETS), "dim": dim, "n_shards": shards,
                                                "finished_shards": list(range(shards)), "complete": True})


@pytest.fixture
def facet_run(tmp_path, make_run, clustered_vectors):
    layout, labels = make_run(tmp_path / "run", n_clusters=6, per=40)
    ids = [f"p:{i}" for i in range(len(labels))]
    # method vectors: three groups that cut across the six topics (papers i % 3)
    M, _ = clustered_vectors(3, len(ids), 32, 0.3, seed=5)
    M = M.reshape(3, len(ids), 32)[np.arange(len(ids)) % 3, np.arange(len(ids))]
    B = np.asarray(load_embeddings(layout)[1])
    _write_view(layout, ids, np.stack([B, M, B], axis=1).astype(np.float32))
    return layout, labels, M


def test_view_embeddings_are_the_keys_vectors_and_resume(facet_run):
    layout, _, M = facet_run
    dest = layout.root / "x" / "embeddings"
    view_embeddings(layout, "facets", "method", dest)
    ids, X = load_embeddings(dest)
    np.testing.assert_array_equal(X, M)
    first = [(p.stat().st_mtime_ns) for p in sorted(dest.glob("part-*.parquet"))]
    view_embeddings(layout, "facets", "method", dest)   # same source shards: kept as written
    assert [(p.stat().st_mtime_ns) for p in sorted(dest.glob("part-*.parquet"))] == first
    with pytest.raises(UserError, match="no key 'aims'"):
        view_embeddings(layout, "facets", "aims", dest)
    with pytest.raises(UserError, match="no view 'head'"):
        view_embeddings(layout, "head", "head", dest)
    assert parse_view("method") == ("facets", "method") and parse_view("head:head") == ("head", "head")


def test_render_view_method_maps_the_method_vectors(facet_run):
    layout, labels, M = facet_run
    run_knn(KnnConfig(k=10), layout)
    run_cluster(ClusterConfig(resolutions=[0.05, 0.2]), layout)
    main = run_render(RenderConfig(), layout)
    main_png = layout.map_png.read_bytes()
    s = run_facet_map(RenderConfig(view="method"), layout)
    sub = RunLayout(layout.root / "maps" / "method")
    assert s["k"] == 10 and s["resolutions"] == [0.05, 0.2] and set(s["linked"]) >= {"papers"}
    assert sub.map_png.is_file() and sub.map_html.is_file() and layout.map_png.read_bytes() == main_png
    # the facet map's neighbours are the method vectors' own: same group (i % 3), not the same topic
    e = pq.read_table(sub.table("edges"), columns=["src", "dst", "rank"]).to_pandas()
    ids = pq.read_table(sub.vectors_dir / "ids.parquet").column("paper_id").to_pylist()
    row = np.array([int(i.split(":")[1]) for i in ids])
    first = e[e["rank"] == 1]
    assert (row[first.src] % 3 == row[first.dst] % 3).mean() > 0.95
    assert (labels[row[first.src]] == labels[row[first.dst]]).mean() < 0.5
    assert main["png"] != s["png"]
