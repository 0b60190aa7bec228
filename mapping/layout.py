"""2-D layout: UMAP of topic vectors, papers placed around their topic (METHODS.md §5).

Only the topics are embedded with UMAP (cosine, seeded), so the cost grows with the number of
topics, not of papers. A paper is drawn at its topic's position plus a deterministic jitter: a
point in a disc of radius R_t = jitter · r₀ · sqrt(size_t / median size), with r₀ the median
distance between a topic and its nearest other topic. The point in the disc comes from a hash of
the paper_id (uniform over the disc area), so positions do not depend on row order or on the
number of workers, and placing N papers is O(N) — fine for millions.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from sciencemap.runtime import UserError


def topic_layout(V: np.ndarray, method: str = "umap", seed: int = 42, n_neighbors: int = 15,
                 min_dist: float = 0.1) -> np.ndarray:
    """2-D coordinates of topic vectors V (n × d). Tiny inputs fall back to PCA (UMAP needs ≥ ~5)."""
    n = len(V)
    if n == 0:
        return np.zeros((0, 2))
    if n == 1:
        return np.zeros((1, 2))
    if method not in ("umap", "pca"):
        raise UserError(f"layout method {method!r} is unknown; use umap or pca")
    if method == "umap" and n >= 5:
        import umap  # noqa: I001  imported lazily: numba compilation costs ~20 s on the first fit

        reducer = umap.UMAP(n_components=2, metric="cosine", n_neighbors=min(n_neighbors, n - 1),
                            min_dist=min_dist, random_state=seed, n_jobs=1, init="spectral" if n > 10 else "random")
        return np.asarray(reducer.fit_transform(V), float)
    Vn = V / np.maximum(np.linalg.norm(V, axis=1, keepdims=True), 1e-12)
    Vc = Vn - Vn.mean(axis=0)
    U, S, _ = np.linalg.svd(Vc, full_matrices=False)
    out = U[:, :2] * S[:2]
    if out.shape[1] < 2:
        out = np.column_stack([out, np.zeros(n)])
    sign = np.sign(out[np.argmax(np.abs(out), axis=0), [0, 1]])  # fix SVD's sign ambiguity
    return out * np.where(sign == 0, 1, sign)


def hash_uniforms(ids: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two independent U[0,1) numbers per id, from a seeded 64-bit hash of the id string."""
    h = pd.util.hash_array(np.asarray(ids, dtype=object), hash_key=f"{seed:016d}"[:16]).astype(np.uint64)
    u1 = (h >> np.uint64(32)).astype(np.float64) / 2**32
    u2 = (h & np.uint64(0xFFFFFFFF)).astype(np.float64) / 2**32
    return u1, u2


def disc_radii(topic_xy: np.ndarray, topic_size: np.ndarray, jitter: float = 0.35) -> np.ndarray:
    """R_t = jitter · r₀ · sqrt(size_t / median size), r₀ = median nearest-other-topic distance."""
    topic_xy = np.asarray(topic_xy, float)
    if len(topic_xy) > 1:
        dist, _ = cKDTree(topic_xy).query(topic_xy, k=2)
        r0 = float(np.median(dist[:, 1]))
        if r0 <= 0:
            r0 = float(np.ptp(topic_xy, axis=0).max() or 1.0) / np.sqrt(len(topic_xy))
    else:
        r0 = 1.0
    med = float(np.median(topic_size)) if len(topic_size) else 1.0
    med = med or 1.0
    return jitter * r0 * np.sqrt(np.asarray(topic_size, float) / med)


def place_papers(ids: np.ndarray, labels: np.ndarray, topic_xy: np.ndarray, radii: np.ndarray,
                 seed: int = 0) -> np.ndarray:
    """Positions (float64, n × 2) of papers `ids` in topics `labels`: a point of the topic's disc
    chosen by a hash of the id. Call it on chunks of papers; the result does not depend on them."""
    labels = np.asarray(labels, np.int64)
    u1, u2 = hash_uniforms(ids, seed)
    r = radii[labels] * np.sqrt(u1)
    theta = 2 * np.pi * u2
    return np.asarray(topic_xy, float)[labels] + np.column_stack([r * np.cos(theta), r * np.sin(theta)])


def paper_positions(ids: np.ndarray, labels: np.ndarray, topic_xy: np.ndarray, topic_size: np.ndarray,
                    jitter: float = 0.35, seed: int = 0) -> np.ndarray:
    """Positions of papers: topic position + deterministic disc jitter scaled by sqrt(topic size)."""
    return place_papers(ids, labels, topic_xy, disc_radii(topic_xy, topic_size, jitter), seed)
