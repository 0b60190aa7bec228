"""kNN graph (METHODS.md §5): each paper's k most similar papers by cosine similarity, with FAISS.

Vectors are L2-normalised, so inner product = cosine. Exact search (IndexFlatIP) below
`exact_below` vectors, IVF-flat (inner product) above; with IVF, recall@k against exact search is
measured on a fixed, seeded sample of queries and reported. The GPU is used when FAISS sees one.
Output: `edges` (src, dst, similarity, rank), directed, rank 1 = nearest, self-matches removed.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import faiss
import numpy as np
import pyarrow as pa

from sciencemap.config import setting
from sciencemap.contracts import SCHEMAS
from sciencemap.embeddings import load_embeddings
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import write_table_atomic

from mapping.io import l2_normalise

log = logging.getLogger(__name__)


@dataclass
class KnnConfig:
    k: int = setting(20, "neighbours per paper")
    index: str = setting("auto", "exact (flat) or IVF search; auto decides by size", choices=("auto", "flat", "ivf"))
    exact_below: int = setting(200_000, "auto: exact search below this many vectors")
    nlist: int = setting(0, "IVF lists; 0 = 4·sqrt(n)")
    nprobe: int = setting(32, "IVF lists visited per query")
    batch_size: int = setting(16_384, "queries per search call (bounds memory of the result arrays)")
    recall_queries: int = setting(1_000, "sample size for recall@k of IVF vs exact")
    seed: int = setting(0, "seed of the IVF training sample and the recall queries")
    gpu: str = setting("auto", "auto: search on the GPU(s) when FAISS sees one; never: CPU only",
                       choices=("auto", "never"))


def _maybe_gpu(index, cfg: KnnConfig):
    if cfg.gpu != "never" and hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:
        return faiss.index_cpu_to_all_gpus(index), True
    return index, False


def build_index(X: np.ndarray, cfg: KnnConfig):
    """Return (index, kind, on_gpu). X must be unit rows, float32, C-contiguous."""
    n, d = X.shape
    kind = cfg.index
    if kind == "auto":
        kind = "flat" if n < cfg.exact_below else "ivf"
    if kind not in ("flat", "ivf"):
        raise UserError(f"knn index {cfg.index!r} is unknown; use auto, flat or ivf")
    if kind == "flat":
        index, gpu = _maybe_gpu(faiss.IndexFlatIP(d), cfg)
        index.add(X)
        return index, kind, gpu
    nlist = cfg.nlist or max(1, int(4 * math.sqrt(n)))
    nlist = min(nlist, max(1, n // 39))  # FAISS wants >= 39 training points per list
    quantizer = faiss.IndexFlatIP(d)
    ivf = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
    index, gpu = _maybe_gpu(ivf, cfg)
    rng = np.random.default_rng(cfg.seed)
    train = X if n <= nlist * 256 else X[np.sort(rng.choice(n, nlist * 256, replace=False))]
    index.train(train)
    index.add(X)
    if gpu:
        faiss.GpuParameterSpace().set_index_parameter(index, "nprobe", cfg.nprobe)
    else:
        index.nprobe = cfg.nprobe
    return index, kind, gpu


def search(index, X: np.ndarray, k: int, batch_size: int, rows: np.ndarray | None = None):
    """Search k+1 neighbours (the query itself is usually first) for X[rows] in batches."""
    rows = np.arange(len(X)) if rows is None else rows
    D = np.empty((len(rows), k + 1), np.float32)
    I = np.empty((len(rows), k + 1), np.int64)
    for a in range(0, len(rows), batch_size):
        q = X[rows[a:a + batch_size]]
        D[a:a + len(q)], I[a:a + len(q)] = index.search(q, k + 1)
    return D, I


def drop_self(D: np.ndarray, I: np.ndarray, rows: np.ndarray, k: int):
    """Remove each query's own row and FAISS's -1 padding; keep the first k neighbours in order.

    Returns flat arrays (src_row, dst_row, similarity, rank). When duplicates push the query out
    of its own k+1 results, the (k+1)-th neighbour is dropped instead.
    """
    keep = (I != rows[:, None]) & (I >= 0)
    rank = np.cumsum(keep, axis=1)
    keep &= rank <= k
    src = np.broadcast_to(rows[:, None], I.shape)[keep]
    return src, I[keep], D[keep], rank[keep].astype(np.int16)


def recall_at_k(index, X: np.ndarray, k: int, n_queries: int, seed: int) -> float:
    """Mean share of the exact k nearest neighbours that `index` also returns, on a seeded sample."""
    n = len(X)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, min(n_queries, n), replace=False))
    exact = faiss.IndexFlatIP(X.shape[1])
    exact.add(X)
    De, Ie = search(exact, X, k, 4096, rows)
    Da, Ia = search(index, X, k, 4096, rows)
    se, de, _, _ = drop_self(De, Ie, rows, k)
    sa, da, _, _ = drop_self(Da, Ia, rows, k)
    truth = set(zip(se.tolist(), de.tolist()))
    got = set(zip(sa.tolist(), da.tolist()))
    return len(truth & got) / max(1, len(truth))


def knn_edges(X: np.ndarray, cfg: KnnConfig) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Compute the kNN lists for unit vectors X. Returns (summary, src, dst, similarity, rank)."""
    n = len(X)
    if n < 2:
        raise UserError(f"kNN needs at least 2 embedded papers, found {n}")
    k = min(cfg.k, n - 1)
    t0 = time.perf_counter()
    index, kind, gpu = build_index(X, cfg)
    t1 = time.perf_counter()
    D, I = search(index, X, k, cfg.batch_size)
    t2 = time.perf_counter()
    src, dst, sim, rank = drop_self(D, I, np.arange(n), k)
    summary = {"papers": n, "k": k, "index": kind, "gpu": gpu, "edges": int(len(src)),
               "build_s": round(t1 - t0, 3), "search_s": round(t2 - t1, 3)}
    if kind == "ivf":
        summary["recall_at_k"] = round(recall_at_k(index, X, k, cfg.recall_queries, cfg.seed), 4)
        summary["recall_queries"] = min(cfg.recall_queries, n)
        summary["nprobe"] = cfg.nprobe
    return summary, src, dst, sim, rank


def run_knn(cfg: KnnConfig, layout: RunLayout) -> dict:
    t0 = time.perf_counter()
    ids, X = load_embeddings(layout)
    X = l2_normalise(X)
    t_load = time.perf_counter() - t0
    summary, src, dst, sim, rank = knn_edges(X, cfg)
    t1 = time.perf_counter()
    table = pa.table({"src": pa.array(ids[src], pa.string()), "dst": pa.array(ids[dst], pa.string()),
                      "similarity": pa.array(sim, pa.float32()), "rank": pa.array(rank, pa.int16())})
    write_table_atomic(table, layout.table("edges"), SCHEMAS["edges"])
    summary.update(load_s=round(t_load, 3), write_s=round(time.perf_counter() - t1, 3), dim=int(X.shape[1]))
    log.info("knn: %s", summary)
    return summary
