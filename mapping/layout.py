"""2-D layout: UMAP of topic vectors, papers placed inside their topic (METHODS.md §5.3).

Only the topics are embedded with UMAP (cosine, seeded), so the cost grows with the number of
topics, not of papers. Each topic gets a disc of radius R_t = jitter · r₀ · sqrt(size_t / median
size), r₀ the median distance between a topic and its nearest other topic.

Inside the disc a paper's position is a local linear layout of its own vector (LocalLayout): the
topic's 2-D frame W_t = Σ_j u_tj (v̂_j − v̂_t)ᵀ / k over its k nearest topics j on the map (u_tj the
unit direction from t to j on the map, v̂ unit topic vectors), so a paper leaning towards topic j
in the vector space sits on the side of its disc that faces j, and papers with near vectors get
near positions. The offsets W_t x are centred and scaled per topic (rms radius) and squashed into
the disc (tanh of the radius). Everything is per paper and per topic: papers are placed block by
block in O(n · d), and a new paper is placed with the same frames without moving the old ones.
Topics where this gives no spread (one topic, a single member) fall back to a deterministic
point of the disc chosen by a hash of the paper_id.
"""
from __future__ import annotations

from dataclasses import dataclass

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


# ---------------------------------------------------------------- papers inside their topic

def map_neighbours(topic_xy: np.ndarray, k: int = 6) -> np.ndarray:
    """The k nearest other topics on the map (T × min(k, T−1) int64)."""
    T = len(topic_xy)
    kk = min(k, T - 1)
    if kk <= 0:
        return np.zeros((T, 0), np.int64)
    _, idx = cKDTree(np.asarray(topic_xy, float)).query(topic_xy, k=kk + 1)
    nb = np.empty((T, kk), np.int64)
    for t in range(T):                       # drop the topic itself (not always column 0 on ties)
        row = idx[t][idx[t] != t]
        nb[t] = row[:kk]
    return nb


def local_frames(topic_vecs: np.ndarray, topic_xy: np.ndarray, nbrs: np.ndarray) -> np.ndarray:
    """W (T × 2 × d, float32): row t maps a vector to its lean towards t's map neighbours (module doc)."""
    V = np.asarray(topic_vecs, np.float64)
    V = V / np.maximum(np.linalg.norm(V, axis=1, keepdims=True), 1e-12)
    xy = np.asarray(topic_xy, np.float64)
    T, d = V.shape
    W = np.zeros((T, 2, d), np.float32)
    if nbrs.shape[1] == 0:
        return W
    for lo in range(0, T, 4096):
        hi = min(T, lo + 4096)
        nb = nbrs[lo:hi]
        u = xy[nb] - xy[lo:hi, None, :]                                   # (t, k, 2)
        u /= np.maximum(np.linalg.norm(u, axis=2, keepdims=True), 1e-12)
        dv = V[nb] - V[lo:hi, None, :]                                    # (t, k, d)
        W[lo:hi] = np.einsum("tkc,tkd->tcd", u, dv) / nb.shape[1]
    return W


@dataclass
class LocalLayout:
    """Everything needed to place a paper inside its topic (topics indexed 0..T−1): the topics'
    map positions and disc radii, their frames (local_frames) and the centre and rms scale of the
    frame offsets of their papers. Kept in the run (save/load), so new papers are placed later
    exactly like the old ones."""
    topic_xy: np.ndarray          # T × 2
    radii: np.ndarray             # T
    frames: np.ndarray            # T × 2 × d float32
    center: np.ndarray            # T × 2: mean offset of the topic's papers
    scale: np.ndarray             # T: rms distance of the offsets from the centre (0 = no spread)
    seed: int = 0

    def offsets(self, X: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Raw frame offsets W_t x (n × 2 float64) of vectors X in topics `labels` (all ≥ 0)."""
        X = np.asarray(X, np.float32)
        return np.einsum("nd,ncd->nc", X, self.frames[labels], dtype=np.float64)

    def place(self, X: np.ndarray, labels: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Positions (n × 2 float64) of papers with vectors X and ids in topics `labels`."""
        labels = np.asarray(labels, np.int64)
        return self.from_offsets(self.offsets(X, labels), labels, ids)

    def from_offsets(self, off: np.ndarray, labels: np.ndarray, ids: np.ndarray) -> np.ndarray:
        labels = np.asarray(labels, np.int64)
        s = self.scale[labels]
        z = (off - self.center[labels]) / np.where(s > 0, s, 1.0)[:, None]
        r = np.linalg.norm(z, axis=1)
        squash = np.where(r > 1e-12, np.tanh(r) / np.maximum(r, 1e-12), 1.0)
        pos = self.topic_xy[labels] + (self.radii[labels] * squash)[:, None] * z
        flat = s <= 0                       # no spread to show: a hashed point of the disc instead
        if flat.any():
            pos[flat] = place_papers(np.asarray(ids, dtype=object)[flat], labels[flat], self.topic_xy,
                                     self.radii, self.seed)
        return pos

    def fit_spread(self, labels: np.ndarray, off: np.ndarray, chunk: int = 4_000_000) -> None:
        """Centre and rms scale of each topic's offsets (rows labelled -1 are left out), chunk by chunk."""
        T = len(self.topic_xy)
        s1, s2, cnt = np.zeros((T, 2)), np.zeros(T), np.zeros(T)
        for lo in range(0, len(labels), chunk):
            lb = labels[lo:lo + chunk]
            ok = lb >= 0
            lab, o = lb[ok], np.asarray(off[lo:lo + chunk][ok], np.float64)
            cnt += np.bincount(lab, minlength=T)
            for c in (0, 1):
                s1[:, c] += np.bincount(lab, weights=o[:, c], minlength=T)
            s2 += np.bincount(lab, weights=(o ** 2).sum(axis=1), minlength=T)
        n = np.maximum(cnt, 1)
        self.center = s1 / n[:, None]
        var = s2 / n - (self.center ** 2).sum(axis=1)
        # relative floor: rounding leaves a tiny positive variance where all offsets are equal
        spread = (cnt > 1) & (var > 1e-9 * np.maximum(s2 / n, 1e-30))
        self.scale = np.where(spread, np.sqrt(np.maximum(var, 0)), 0.0)

    def save(self, path, **extra) -> None:
        from sciencemap.storage import write_bytes_atomic
        import io

        buf = io.BytesIO()
        np.savez(buf, topic_xy=self.topic_xy, radii=self.radii, frames=self.frames, center=self.center,
                 scale=self.scale, seed=np.int64(self.seed), **extra)
        write_bytes_atomic(path, buf.getvalue())

    @classmethod
    def load(cls, path) -> tuple["LocalLayout", dict]:
        with np.load(path, allow_pickle=False) as z:
            d = {k: z[k] for k in z.files}
        lay = cls(topic_xy=d.pop("topic_xy"), radii=d.pop("radii"), frames=d.pop("frames"),
                  center=d.pop("center"), scale=d.pop("scale"), seed=int(d.pop("seed")))
        return lay, d


def new_local_layout(topic_vecs: np.ndarray, topic_xy: np.ndarray, topic_size: np.ndarray, jitter: float,
                     seed: int = 0, k: int = 6) -> LocalLayout:
    """Radii and frames from the topics; centre and scale still to be fitted (LocalLayout.fit_spread)."""
    T = len(topic_xy)
    return LocalLayout(topic_xy=np.asarray(topic_xy, np.float64), radii=disc_radii(topic_xy, topic_size, jitter),
                       frames=local_frames(topic_vecs, topic_xy, map_neighbours(topic_xy, k)),
                       center=np.zeros((T, 2)), scale=np.zeros(T), seed=seed)
