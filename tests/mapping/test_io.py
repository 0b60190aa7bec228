"""The inputs the mapping stages share (mapping.io)."""
from __future__ import annotations

import numpy as np

from mapping.io import l2_normalise, load_papers


def test_l2_normalise_unit_rows_and_zero_rows_stay_zero():
    X = np.array([[3, 4], [0, 0], [-1e-20, 0]], dtype=np.float64)
    Y = l2_normalise(X)
    assert Y.dtype == np.float32
    np.testing.assert_allclose(Y[0], [0.6, 0.8])
    assert np.array_equal(Y[1], [0, 0]) and np.isfinite(Y).all()


def test_load_papers_reads_only_the_asked_columns(tmp_path, make_run):
    layout, _ = make_run(tmp_path / "r", n_clusters=2, per=5, dim=4)
    papers = load_papers(layout, ["paper_id", "title"])
    assert list(papers.columns) == ["paper_id", "title"] and len(papers) == 10
