"""The knn stage's exact sample search (its tuning and recall samples: mapping.knn.exact_topk) against
the NumPy tiles it replaced, on the same generated store in one run.

    .venv/bin/python bench/knn_exact.py                       # 1M x 384 float16, 1,000 queries
    .venv/bin/python bench/knn_exact.py --n 2000000 --dim 768

Both find each sampled row's exact top k+1 over every row of a float16 vector store (unit rows, a
memory-mapped .npy like the run's). Prints each one's time and rows/s, the ratio, and whether the
lists and similarities are the same (exit 1 if they differ). At the node's 33M rows the stage runs
two such searches (tuning, recall) on the CPU, the GPU path too.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rerank_speed import store  # bench/rerank_speed.py; a script's own folder is on its import path

from mapping.knn import exact_topk, recall_rows
from sciencemap.vectors import read_rows, take_rows


def numpy_topk(X: np.ndarray, rows: np.ndarray, kq: int, tile_bytes: int = 32 << 20):
    """The code before 2026-12-04: NumPy products on 32 MB tiles, each tile's and the running best
    lists cut with argpartition, a stable sort at the end."""
    Q = take_rows(X, rows)
    tile = max(1024, tile_bytes // (16 * max(1, len(rows))))
    bestD = np.full((len(rows), 0), -np.inf, np.float32)
    bestI = np.zeros((len(rows), 0), np.int64)
    for lo in range(0, len(X), tile):
        hi = min(len(X), lo + tile)
        S = Q @ read_rows(X, lo, hi).T
        if S.shape[1] > kq:
            part = np.argpartition(-S, kq - 1, axis=1)[:, :kq]
            S, idx = np.take_along_axis(S, part, axis=1), part + lo
        else:
            idx = np.broadcast_to(np.arange(lo, hi), S.shape)
        D, I = np.concatenate([bestD, S], axis=1), np.concatenate([bestI, idx], axis=1)
        if D.shape[1] > kq:
            part = np.argpartition(-D, kq - 1, axis=1)[:, :kq]
            D, I = np.take_along_axis(D, part, axis=1), np.take_along_axis(I, part, axis=1)
        bestD, bestI = D, I
    order = np.argsort(-bestD, axis=1, kind="stable")
    return np.take_along_axis(bestD, order, axis=1), np.take_along_axis(bestI, order, axis=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=20)
    a = ap.parse_args()
    kq = a.k + 1
    with tempfile.TemporaryDirectory() as tmp:
        X = store(Path(tmp), a.n, a.dim, "float16")
        rows = recall_rows(a.n, a.queries, 0)
        t = time.perf_counter()
        D0, I0 = numpy_topk(X, rows, kq)
        before = time.perf_counter() - t
        t = time.perf_counter()
        D1, I1 = exact_topk(X, rows, kq)
        now = time.perf_counter() - t
    same = np.array_equal(I0, I1)
    print(f"{a.queries:,} queries over {a.n:,} x {a.dim} float16, top {kq}:\n"
          f"  NumPy tiles (before)        {before:8.2f} s  {a.n / before:12,.0f} rows/s\n"
          f"  exact_topk (faiss.knn)      {now:8.2f} s  {a.n / now:12,.0f} rows/s   {before / now:.2f}x\n"
          f"  same lists: {same}; largest similarity difference {np.abs(D0 - D1).max():.2e}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
