"""Topic layout (real UMAP) and paper positions around their topic."""
from __future__ import annotations

import numpy as np

from mapping.layout import paper_positions, topic_layout


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


def test_papers_placed_in_chunks_equal_one_call():
    from mapping.layout import disc_radii, place_papers

    rng = np.random.default_rng(3)
    txy = rng.normal(size=(7, 2)) * 5
    lab = rng.integers(0, 7, 5000)
    size = np.bincount(lab, minlength=7)
    ids = np.array([f"doi:10.1/{i}" for i in range(5000)], object)
    whole = paper_positions(ids, lab, txy, size, jitter=0.5, seed=4)
    R = disc_radii(txy, size, 0.5)
    parts = np.concatenate([place_papers(ids[lo:lo + 777], lab[lo:lo + 777], txy, R, seed=4)
                            for lo in range(0, 5000, 777)])
    np.testing.assert_array_equal(parts, whole)
    assert np.all(np.linalg.norm(whole - txy[lab], axis=1) <= R[lab] + 1e-12)
    assert not np.array_equal(paper_positions(ids, lab, txy, size, jitter=0.5, seed=5), whole)   # the seed matters
