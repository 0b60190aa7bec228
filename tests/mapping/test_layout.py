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


def _three_topics(seed=0, d=24, per=200):
    """Three topic centres; topic 0's papers lean towards topic 1 by a known amount `lean`."""
    rng = np.random.default_rng(seed)
    V = rng.normal(size=(3, d))
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    lean = rng.uniform(0, 0.6, per)
    X0 = V[0] + lean[:, None] * (V[1] - V[0]) + 0.02 * rng.normal(size=(per, d))
    X1 = V[1] + 0.1 * rng.normal(size=(per, d))
    X2 = V[2] + 0.1 * rng.normal(size=(per, d))
    X = np.vstack([X0, X1, X2]).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    labels = np.repeat([0, 1, 2], per)
    return X, labels, lean


def test_local_layout_puts_papers_on_the_side_of_the_topic_they_lean_to():
    from mapping.layout import new_local_layout

    X, labels, lean = _three_topics()
    tv = np.vstack([X[labels == t].mean(axis=0) for t in range(3)])
    txy = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    lay = new_local_layout(tv, txy, np.bincount(labels), jitter=0.5, k=2)
    ids = np.array([f"p{i}" for i in range(len(X))], object)
    off = lay.offsets(X, labels)
    lay.fit_spread(labels, off)
    pos = lay.from_offsets(off, labels, ids)
    r = np.linalg.norm(pos - txy[labels], axis=1)
    assert np.all(r <= lay.radii[labels] + 1e-9)                  # inside the topic's disc
    assert r.max() > 0.5 * lay.radii.max()                        # and spread over it, not a dot
    towards_1 = pos[labels == 0, 0] - txy[0, 0]                   # topic 1 lies along +x from topic 0
    assert np.corrcoef(towards_1, lean)[0, 1] > 0.9
    # near vectors get near positions: distances in the plane follow distances between vectors
    i0 = np.flatnonzero(labels == 0)
    dv = np.linalg.norm(X[i0][:, None] - X[i0][None], axis=2).ravel()
    dp = np.linalg.norm(pos[i0][:, None] - pos[i0][None], axis=2).ravel()
    assert np.corrcoef(dv, dp)[0, 1] > 0.7


def test_local_layout_in_chunks_saved_and_reloaded_places_papers_identically(tmp_path):
    from mapping.layout import LocalLayout, new_local_layout

    X, labels, _ = _three_topics(seed=1)
    tv = np.vstack([X[labels == t].mean(axis=0) for t in range(3)])
    txy = np.array([[0.0, 0.0], [4.0, 1.0], [1.0, 5.0]])
    lay = new_local_layout(tv, txy, np.bincount(labels), jitter=0.5, seed=3)
    ids = np.array([f"p{i}" for i in range(len(X))], object)
    lay.fit_spread(labels, lay.offsets(X, labels), chunk=97)
    whole = lay.place(X, labels, ids)
    parts = np.vstack([lay.place(X[lo:lo + 64], labels[lo:lo + 64], ids[lo:lo + 64]) for lo in range(0, len(X), 64)])
    np.testing.assert_array_equal(parts, whole)
    lay.save(tmp_path / "l.npz", resolution=np.float64(0.01))
    again, extra = LocalLayout.load(tmp_path / "l.npz")
    np.testing.assert_array_equal(again.place(X, labels, ids), whole)
    assert float(extra["resolution"]) == 0.01


def test_topics_without_spread_fall_back_to_hashed_points():
    from mapping.layout import new_local_layout

    V = np.eye(4, 8)
    X = np.vstack([np.repeat(V[:1], 5, axis=0), V[1:]]).astype(np.float32)   # topic 0: five equal vectors
    labels = np.array([0, 0, 0, 0, 0, 1, 2, 3])
    txy = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0], [3.0, 3.0]])
    lay = new_local_layout(V, txy, np.bincount(labels), jitter=0.5)
    ids = np.array([f"p{i}" for i in range(8)], object)
    lay.fit_spread(labels, lay.offsets(X, labels))
    assert np.all(lay.scale == 0)
    pos = lay.place(X, labels, ids)
    assert len({tuple(p) for p in pos[:5]}) == 5                 # five distinct points, not one
    assert np.all(np.linalg.norm(pos - txy[labels], axis=1) <= lay.radii[labels] + 1e-12)
    np.testing.assert_array_equal(pos, lay.place(X, labels, ids))
