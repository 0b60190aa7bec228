"""The map's second level: research areas = clusters of topics (METHODS.md §5.3).

The topic graph links two topics of the map by the summed similarity of the kNN edges between
their (shown) papers; Leiden (modularity, `[render] area_resolution`, seeded) on it groups the
topics into areas. An area gets the topics' overlays computed over its papers (label from
distinctive title words, main field, mean year, DIV) and the size-weighted mean position of its
topics. On the maps an area is a shape: every grid cell near a topic belongs to its nearest
topic's area, and the outline of an area's cells, smoothed, is drawn (area_outlines).

Scale: the edges table is streamed in batches; per batch the links between different topics are
summed into sparse (T × T) matrices, so memory follows the number of linked topic pairs.
"""
from __future__ import annotations

import igraph as ig
import numpy as np
import pyarrow.parquet as pq
import scipy.sparse as sp
from scipy.ndimage import gaussian_filter
from scipy.spatial import cKDTree

from sciencemap.progress import Progress
from sciencemap.storage import table_files


def topic_graph(edges_path, topic_of_row: np.ndarray, n_topics: int, batch_size: int = 4_000_000) -> sp.csr_matrix:
    """Symmetric T × T matrix: summed similarity of the kNN edges between papers of two different
    topics (rows with topic -1 are left out)."""
    W = sp.csr_matrix((n_topics, n_topics))
    files = table_files(edges_path)
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    with Progress("render: topic graph", total, "edges") as prog:
        for f in files:
            for b in pq.ParquetFile(f).iter_batches(batch_size=batch_size, columns=["src", "dst", "similarity"]):
                ta = topic_of_row[b.column(0).to_numpy()]
                tb = topic_of_row[b.column(1).to_numpy()]
                ok = (ta >= 0) & (tb >= 0) & (ta != tb)
                w = np.maximum(b.column(2).to_numpy()[ok].astype(np.float64), 0.0)
                W = W + sp.csr_matrix((w, (ta[ok], tb[ok])), shape=(n_topics, n_topics))
                prog.advance(b.num_rows)
    return (W + W.T).tocsr()


def area_membership(W: sp.csr_matrix, resolution: float = 1.0, seed: int = 0) -> np.ndarray:
    """Area of each topic: Leiden (modularity with `resolution`) on the topic graph, seeded;
    areas numbered by decreasing number of topics. A topic without links is an area of its own."""
    T = W.shape[0]
    if T == 0:
        return np.zeros(0, np.int64)
    U = sp.triu(W, k=1).tocoo()
    g = ig.Graph(n=T, edges=np.column_stack([U.row, U.col]), directed=False)
    import random

    random.seed(seed)                      # igraph's Leiden draws from Python's random generator
    part = g.community_leiden(objective_function="modularity", weights=U.data, resolution=resolution,
                              n_iterations=-1)
    memb = np.asarray(part.membership, np.int64)
    counts = np.bincount(memb)
    order = np.argsort(-counts, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[memb]


def area_regions(topic_px: np.ndarray, topic_area: np.ndarray, width: int, height: int, cell: int = 4,
                 reach: float = 3.0) -> np.ndarray:
    """Area of each grid cell (rows × cols, -1 = no topic near): the nearest topic's area, for cells
    within `reach` × the median nearest-topic distance of a topic (pixel coordinates)."""
    rows, cols = height // cell, width // cell
    grid = np.full((rows, cols), -1, np.int64)
    if len(topic_px) == 0:
        return grid
    tree = cKDTree(topic_px)
    if len(topic_px) > 1:
        d, _ = tree.query(topic_px, k=2)
        r = reach * max(float(np.median(d[:, 1])), cell)
    else:
        r = reach * 10 * cell
    cy, cx = np.mgrid[0:rows, 0:cols]
    pts = np.column_stack([(cx.ravel() + 0.5) * cell, (cy.ravel() + 0.5) * cell])
    dist, idx = tree.query(pts, k=1)
    lab = np.where(dist <= r, topic_area[idx], -1)
    grid[:] = lab.reshape(rows, cols)
    return grid


def area_outlines(grid: np.ndarray, cell: int = 4, sigma: float = 1.5, min_cells: int = 3) -> list[tuple[int, np.ndarray]]:
    """Smooth closed outlines of each area's cells: (area, (k, 2) points in pixels, first = last).
    Each area's indicator over the grid is blurred (Gaussian, `sigma` cells) and cut at 0.5, so
    the outline follows the cells' boundary without its steps; an area of one or two topics is the
    disc (or two discs, joined where they touch) of the cells near them, like any other. Pieces
    enclosing fewer than `min_cells` cells are left out. Work per area: its bounding box."""
    import contourpy

    out = []
    pad = int(np.ceil(3 * sigma)) + 1
    for a in np.unique(grid[grid >= 0]).tolist():
        rows, cols = np.nonzero(grid == a)
        r0, c0 = max(rows.min() - pad, 0), max(cols.min() - pad, 0)
        box = np.zeros((rows.max() + pad + 1 - r0 + 2 * pad, cols.max() + pad + 1 - c0 + 2 * pad))
        box[rows - r0 + pad, cols - c0 + pad] = 1.0        # zero margin all round: every outline closes
        blurred = gaussian_filter(box, sigma, mode="constant")
        for line in contourpy.contour_generator(z=blurred, line_type="Separate").lines(0.5):
            x, y = line[:, 0], line[:, 1]
            if abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2 < min_cells:
                continue                                   # a speck (shoelace area in cells)
            px = (x - pad + c0 + 0.5) * cell
            py = (y - pad + r0 + 0.5) * cell
            out.append((int(a), np.column_stack([px, py])))
    return out
