"""The render stage's readers (mapping.io): cluster labels by row, papers by row."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sciencemap.contracts import SCHEMAS
from sciencemap.runtime import UserError
from sciencemap.storage import read_table, write_table_atomic
from sciencemap.vectors import ensure_vectors
from mapping.io import cluster_labels, cluster_resolutions, join_rows, load_row_meta, read_titles


def test_join_rows_first_occurrence_and_missing():
    rows = pa.array(["a", "b", "c", "d"])
    papers = pa.chunked_array([pa.array(["c", "x", "a"]), pa.array(["c", "b", None])])
    row_of_paper, paper_of_row = join_rows(papers, rows, 4)
    assert row_of_paper.tolist() == [2, -1, 0, -1, 1, -1]    # the second "c" is a duplicate
    assert paper_of_row.tolist() == [2, 4, 0, -1]             # "d" has no metadata


def test_cluster_labels_per_resolution_by_row(tmp_path, make_run):
    layout, _ = make_run(tmp_path / "r", n_clusters=2, per=5, dim=4)
    t = pa.table({"paper_id": [f"p:{i}" for i in (0, 3, 9, 0, 1)], "row": pa.array([0, 3, 9, 0, 1], pa.int32()),
                  "resolution": [0.1, 0.1, 0.1, 0.5, 0.5], "cluster": pa.array([2, 0, 1, 7, 7], pa.int32())})
    write_table_atomic(t, layout.table("clusters"), SCHEMAS["clusters"])
    assert cluster_resolutions(layout) == [0.1, 0.5]
    lab = cluster_labels(layout, 0.1, 10)
    assert lab.dtype == np.int32 and lab.tolist() == [2, -1, -1, 0, -1, -1, -1, -1, -1, 1]
    assert cluster_labels(layout, 0.5, 10).tolist() == [7, 7] + [-1] * 8
    with pytest.raises(UserError, match="outside"):
        cluster_labels(layout, 0.1, 5)
    write_table_atomic(t.drop(["row"]), layout.table("clusters"))
    with pytest.raises(UserError, match="re-run the cluster stage"):
        cluster_resolutions(layout)


def test_row_meta_streams_the_papers_table_aligned_to_the_vector_rows(tmp_path, make_run):
    """Papers in another order than the vector rows, a duplicate, a paper without a vector, a
    vector without a paper; small batches so that every step crosses a batch boundary."""
    layout, _ = make_run(tmp_path / "r", n_clusters=3, per=10, dim=8)
    vec = ensure_vectors(layout)
    papers = read_table(layout.table("papers")).to_pandas()
    papers.loc[4, "title"] = "   "
    papers.loc[5, "title"] = None
    papers.loc[6, "year"] = None
    papers.loc[7, "source"] = None
    papers.loc[8, "fields"] = None
    extra = papers.iloc[[2]].assign(title="A duplicate, ignored", year=1900)
    ghost = papers.iloc[[3]].assign(paper_id="p:ghost", title="No vector")
    shuffled = papers.drop(index=[11]).sample(frac=1.0, random_state=1)
    table = pa.concat_tables([pa.Table.from_pandas(shuffled, schema=SCHEMAS["papers"], preserve_index=False),
                              pa.Table.from_pandas(extra, schema=SCHEMAS["papers"], preserve_index=False),
                              pa.Table.from_pandas(ghost, schema=SCHEMAS["papers"], preserve_index=False)])
    write_table_atomic(table, layout.table("papers"))
    meta = load_row_meta(layout, vec.ids_arrow(), batch_size=7)
    ids = vec.ids()
    ref = papers.drop(index=[11]).set_index("paper_id").reindex(ids)     # the pandas join the stage used to do
    assert meta.n == 30 and meta.without_metadata.tolist() == [i == 11 for i in range(30)]
    np.testing.assert_array_equal(meta.year, ref["year"].to_numpy(dtype=np.float64).astype(np.float32))
    src = [meta.sources[c] if c >= 0 else None for c in meta.source]
    assert src == [s if isinstance(s, str) else None for s in ref["source"]]
    assert meta.cited_only.tolist() == ref["source_file"].isna().tolist()
    assert meta.has_title.tolist() == [isinstance(t, str) and bool(t.strip()) for t in ref["title"]]
    assert meta.categories == ["Field0", "Field1", "Field2", "Field3"]
    fields = [set(f) if isinstance(f, np.ndarray) else set() for f in ref["fields"]]
    assert [{meta.categories[j] for j in meta.fields[i].indices} for i in range(30)] == fields
    # title words: papers-table order, mapped to rows; duplicates and the ghost map to none
    assert meta.words.shape == (31, len(meta.vocab)) and meta.word_row[-2:].tolist() == [-1, -1]
    row0 = int(np.flatnonzero(meta.word_row == 0)[0])
    assert {meta.vocab[j] for j in meta.words[row0].indices} == {"neuron", "cortex"}   # not "in", "model", "0"
    titles = read_titles(meta.papers_files, meta.paper_of_row[[0, 3, 11]])
    assert sorted(titles.values()) == sorted([ref["title"].iloc[0], ref["title"].iloc[3]])
