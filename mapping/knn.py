"""kNN graph (METHODS.md §5.1): each paper's k most similar papers by cosine similarity, with FAISS.

The vectors come from the run's vector store (sciencemap.vectors: a memory-mapped matrix of unit
rows, float32 or float16), so inner product = cosine and no copy of the matrix is ever made. The
search runs query block by query block; memory is bounded by one block (plus the IVF codes).

Index (`index`, auto picks by size):
- flat: exact search, tiled: query blocks × database tiles of `db_block` rows, each tile an
  IndexFlatIP, the tiles' top lists merged (faiss.ResultHeap). With n ≤ db_block it is one
  IndexFlatIP over all vectors, as before (the demo's edges are unchanged).
- ivf_sq8 (large corpora): IVF with 8-bit scalar-quantised codes (a quarter of float32), then the
  top rerank_factor·(k+1) candidates of each query re-ranked by exact dot products gathered from
  the memory map, so recall stays high while memory is ~codes + one block. ivf_pq: product-quantised
  codes (pq_m bytes a vector), same re-ranking. ivf_flat: full float32 copy in the index (memory!).
  Trained on a seeded sample of train_per_list points per list.
- GPU: when FAISS sees one (gpu = auto) the same indexes run on it (index_cpu_to_all_gpus); the
  code path is one for faiss-cpu and faiss-gpu (requirements-gpu.txt, `make install-gpu`).

Resumable, the faiss contrib big_batch_search pattern: each query block's (D, I) is written to
`knn_work/blocks/` (one atomic file per block) next to `fingerprint.json` (vectors, k, index
settings, seed, block size, device) and the trained/filled IVF index; a restarted stage skips the
finished blocks and searches the same saved index. A changed fingerprint is refused (resume=False
starts over). knn_work is removed once the edges table is written.

Recall@k (every non-flat index): on `recall_queries` seeded query rows, the exact top k by tiled
matrix products over the memory map (NumPy/BLAS, no second index), compared with the graph's lists.

Output: `edges` (src, dst int32 vector-store rows, similarity float32, rank int16), directed,
rank 1 = nearest, self-matches removed; part files per query-block range; the summary (index,
recall@k, timings...) as JSON in each part's Parquet schema metadata (contracts.EDGES_META_KEY).
"""
from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.config import setting
from sciencemap.contracts import EDGES_META_KEY, SCHEMAS, VECTORS_DTYPES
from sciencemap.layout import RunLayout
from sciencemap.progress import Progress
from sciencemap.runtime import UserError
from sciencemap.storage import atomic_dir, atomic_file, sweep_temporaries, write_json_atomic
from sciencemap.embeddings import embedding_shards, embeddings_dir
from sciencemap.vectors import ensure_vectors, read_rows, source_fingerprint, take_rows

log = logging.getLogger(__name__)

INDEXES = ("auto", "flat", "ivf_sq8", "ivf_pq", "ivf_flat")
WORK_FORMAT = 1
GATHER_BYTES = 32 << 20   # re-ranking and recall: float32 scratch per chunk


@dataclass
class KnnConfig:
    k: int = setting(20, "neighbours per paper")
    index: str = setting("auto", "flat = exact (tiled); ivf_sq8 / ivf_pq = IVF with compressed codes and exact "
                         "re-ranking; ivf_flat = IVF with a full float32 copy; auto = flat below exact_below "
                         "vectors, ivf_sq8 above", choices=INDEXES)
    exact_below: int = setting(200_000, "auto: exact search below this many vectors")
    vector_dtype: str = setting("float32", "dtype of the vector store (float16 halves its size)",
                                choices=VECTORS_DTYPES)
    nlist: int = setting(0, "IVF lists; 0 = 2·sqrt(n) (at most n/39)")
    nprobe: int = setting(16, "IVF lists visited per query")
    rerank_factor: int = setting(2, "IVF: candidates per query = rerank_factor·(k+1), re-ranked by exact dot products")
    pq_m: int = setting(0, "ivf_pq: bytes per code (sub-quantisers; must divide the dim); 0 = dim/8")
    train_per_list: int = setting(50, "IVF training sample: points per list (seeded)")
    kmeans_iter: int = setting(10, "IVF training: k-means iterations")
    block_size: int = setting(16_384, "queries per block (one checkpoint file each; bounds the result arrays)")
    db_block: int = setting(262_144, "exact search: database rows per tile (bounds memory at large n)")
    recall_queries: int = setting(1_000, "sample size for recall@k against exact search (non-flat indexes)")
    seed: int = setting(0, "seed of the IVF training sample and the recall queries")
    gpu: str = setting("auto", "auto: FAISS on the GPU(s) when it sees one; never: CPU only; "
                       "require: fail without a GPU", choices=("auto", "never", "require"))
    resume: bool = setting(True, "continue a killed search from knn_work (--no-resume: start over)")


# ---------------------------------------------------------------- devices and memory


def gpu_count() -> int:
    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def use_gpu(cfg: KnnConfig) -> bool:
    """The device rule of the knn stage: never = CPU; require without a GPU that FAISS sees is a
    UserError; auto takes the GPU(s) FAISS sees, and logs which it took and why."""
    if cfg.gpu == "never":
        return False
    n = gpu_count()
    if cfg.gpu == "require" and n == 0:
        raise UserError("knn gpu = require, but FAISS sees no GPU (faiss-cpu installed, or no CUDA device); "
                        "install the GPU build with `make install-gpu` on a CUDA 12 machine, or set gpu = auto")
    if cfg.gpu == "auto":
        log.info("knn gpu auto: %s", f"FAISS on {n} GPU(s)" if n else
                 "CPU (" + ("no CUDA device seen by FAISS" if hasattr(faiss, "StandardGpuResources")
                           else "faiss-cpu build") + ")")
    return n > 0


def _to_device(index, gpu: bool):
    return faiss.index_cpu_to_all_gpus(index) if gpu else index


def _to_cpu(index, gpu: bool):
    return faiss.index_gpu_to_cpu(index) if gpu else index


# ---------------------------------------------------------------- plan


@dataclass
class Plan:
    n: int
    dim: int
    k: int            # neighbours kept per paper
    kind: str         # flat | ivf_sq8 | ivf_pq | ivf_flat
    gpu: bool
    nlist: int = 0
    pq_m: int = 0

    @property
    def kq(self) -> int:
        return self.k + 1  # the query itself is usually first


def make_plan(cfg: KnnConfig, n: int, dim: int) -> Plan:
    if n < 2:
        raise UserError(f"kNN needs at least 2 embedded papers, found {n}")
    if cfg.k < 1:
        raise UserError(f"knn k must be at least 1, got {cfg.k}")
    if cfg.block_size < 1 or cfg.db_block < 1:
        raise UserError("knn block_size and db_block must be positive")
    kind = cfg.index
    if kind == "auto":
        kind = "flat" if n < cfg.exact_below else "ivf_sq8"
    if kind not in INDEXES[1:]:
        raise UserError(f"knn index {cfg.index!r} is unknown; use one of {', '.join(INDEXES)}")
    p = Plan(n=n, dim=dim, k=min(cfg.k, n - 1), kind=kind, gpu=use_gpu(cfg))
    if kind != "flat":
        # 2·sqrt(n): on bench/knn_scale.py's 1M clustered vectors 2,000 lists at nprobe 16 reach recall@20
        # 0.99 at 1.7x the queries/s of 4,000 lists at nprobe 24 (recall 0.97)
        nlist = cfg.nlist or max(1, int(2 * math.sqrt(n)))
        p.nlist = max(1, min(nlist, n // 39))  # FAISS wants >= 39 training points per list
        if kind == "ivf_pq":
            p.pq_m = cfg.pq_m or max(1, dim // 8)
            if dim % p.pq_m:
                raise UserError(f"knn pq_m = {p.pq_m} must divide the vector dim {dim}")
    return p


def plan_settings(p: Plan, cfg: KnnConfig) -> dict:
    """What decides the search's results (the fingerprint's settings, and the summary's)."""
    s = {"index": p.kind, "k": p.k, "block_size": cfg.block_size, "seed": cfg.seed,
         "device": "gpu" if p.gpu else "cpu"}
    if p.kind == "flat":
        s["db_block"] = cfg.db_block
    else:
        s.update(nlist=p.nlist, nprobe=cfg.nprobe, rerank_factor=cfg.rerank_factor,
                 train_per_list=cfg.train_per_list, kmeans_iter=cfg.kmeans_iter)
        if p.kind == "ivf_pq":
            s["pq_m"] = p.pq_m
    return s


# ---------------------------------------------------------------- searchers


class ExactSearch:
    """Exact top-kq by inner product: one IndexFlatIP when n ≤ db_block, else database tiles merged."""

    def __init__(self, X: np.ndarray, p: Plan, db_block: int):
        self.X, self.p, self.db_block = X, p, db_block
        self.whole = None
        if p.n <= db_block:
            index = faiss.IndexFlatIP(p.dim)
            index.add(read_rows(X, 0, p.n))
            self.whole = _to_device(index, p.gpu)

    def search(self, Q: np.ndarray, kq: int):
        if self.whole is not None:
            return self.whole.search(Q, kq)
        heap = faiss.ResultHeap(len(Q), kq, keep_max=True)
        for lo in range(0, self.p.n, self.db_block):
            hi = min(self.p.n, lo + self.db_block)
            tile = read_rows(self.X, lo, hi)
            if self.p.gpu:
                index = faiss.IndexFlatIP(self.p.dim)
                index.add(tile)
                D, I = _to_device(index, True).search(Q, min(kq, hi - lo))
                del index
            else:  # IndexFlatIP's own search function, on the tile in place (no copy into an index)
                D, I = faiss.knn(Q, tile, min(kq, hi - lo), metric=faiss.METRIC_INNER_PRODUCT)
            del tile
            I += lo
            if I.shape[1] < kq:   # a short last tile: pad to the heap's width
                D = np.pad(D, ((0, 0), (0, kq - I.shape[1])), constant_values=-np.inf)
                I = np.pad(I, ((0, 0), (0, kq - I.shape[1])), constant_values=-1)
            heap.add_result(np.ascontiguousarray(D), np.ascontiguousarray(I))
        heap.finalize()
        return heap.D, heap.I


def rerank(X: np.ndarray, Q: np.ndarray, I: np.ndarray, kq: int):
    """The kq best of each query's candidates I (-1 = none) by exact dot products with rows of X."""
    nq, kc = I.shape
    D_out = np.full((nq, kq), -np.inf, np.float32)
    I_out = np.full((nq, kq), -1, np.int64)
    step = max(1, GATHER_BYTES // max(1, kc * Q.shape[1] * 4))
    for a in range(0, nq, step):
        Ic = I[a:a + step]
        valid = Ic >= 0
        G = take_rows(X, np.where(valid, Ic, 0).ravel()).reshape(len(Ic), kc, -1)
        S = np.matmul(G, Q[a:a + step, :, None])[:, :, 0]
        S[~valid] = -np.inf
        top = np.argsort(-S, axis=1, kind="stable")[:, :kq]
        D_out[a:a + len(Ic), :top.shape[1]] = np.take_along_axis(S, top, axis=1)
        I_out[a:a + len(Ic), :top.shape[1]] = np.where(np.take_along_axis(valid, top, axis=1),
                                                         np.take_along_axis(Ic, top, axis=1), -1)
    return D_out, I_out


class IvfSearch:
    """IVF (SQ8 / PQ / flat codes) + exact re-ranking of rerank_factor·kq candidates."""

    def __init__(self, X: np.ndarray, p: Plan, cfg: KnnConfig, work: "WorkDir | None"):
        self.X, self.p, self.cfg = X, p, cfg
        filled = work.load_index("filled") if work else None
        if filled is not None:
            log.info("knn: resuming with the saved index in %s", work.path)
            self.index = _to_device(filled, p.gpu)
        else:
            trained = work.load_index("trained") if work else None
            if trained is None:
                trained = self._train()
                if work:
                    work.save_index("trained", trained)
            self.index = _to_device(trained, p.gpu)
            self._add()
            if work:
                cpu_index = _to_cpu(self.index, p.gpu)
                work.save_index("filled", cpu_index)
                del cpu_index
        self._set_nprobe(cfg.nprobe)

    def _empty(self):
        p = self.p
        quantizer = faiss.IndexFlatIP(p.dim)
        if p.kind == "ivf_sq8":
            index = faiss.IndexIVFScalarQuantizer(quantizer, p.dim, p.nlist, faiss.ScalarQuantizer.QT_8bit,
                                                  faiss.METRIC_INNER_PRODUCT)
        elif p.kind == "ivf_pq":
            index = faiss.IndexIVFPQ(quantizer, p.dim, p.nlist, p.pq_m, 8, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexIVFFlat(quantizer, p.dim, p.nlist, faiss.METRIC_INNER_PRODUCT)
        index.own_fields = True
        quantizer.this.disown()
        return index

    def _train(self):
        """Spherical k-means (faiss.Kmeans, on the GPU when there is one) for the lists, then the
        codes (SQ ranges / PQ codebooks) on the same seeded sample; the index stays on the CPU."""
        p, X = self.p, self.X
        m = min(p.n, max(39, self.cfg.train_per_list) * p.nlist)
        rng = np.random.default_rng(self.cfg.seed)
        rows = np.arange(p.n) if m >= p.n else np.sort(rng.choice(p.n, m, replace=False))
        log.info("knn: training %s (%d lists) on %d sampled vectors", p.kind, p.nlist, m)
        with Progress("knn train", m, "vectors", logger=log) as prog:
            sample = take_rows(X, rows)
            km = faiss.Kmeans(p.dim, p.nlist, niter=self.cfg.kmeans_iter, seed=self.cfg.seed, spherical=True,
                              gpu=p.gpu, max_points_per_centroid=max(256, self.cfg.train_per_list))
            km.train(sample)
            index = self._empty()
            index.quantizer.add(km.centroids)
            index.train(sample)   # the quantizer is trained: this trains the codes only
            del sample, km
            prog.advance(m)
        return index

    def _add(self):
        p, X = self.p, self.X
        step = max(self.cfg.block_size, 65_536)
        with Progress("knn add", p.n, "vectors", logger=log) as prog:
            for lo in range(0, p.n, step):
                hi = min(p.n, lo + step)
                self.index.add(read_rows(X, lo, hi))
                prog.advance(hi - lo)

    def _set_nprobe(self, nprobe: int):
        nprobe = max(1, min(nprobe, self.p.nlist))
        if self.p.gpu:
            faiss.GpuParameterSpace().set_index_parameter(self.index, "nprobe", nprobe)
        else:
            self.index.nprobe = nprobe

    def search(self, Q: np.ndarray, kq: int):
        kc = min(self.p.n, kq * max(1, self.cfg.rerank_factor))
        _, I = self.index.search(Q, kc)
        D, I = rerank(self.X, Q, I, kq)
        return D, I


def make_searcher(X: np.ndarray, p: Plan, cfg: KnnConfig, work: "WorkDir | None" = None):
    t0 = time.perf_counter()
    s = ExactSearch(X, p, cfg.db_block) if p.kind == "flat" else IvfSearch(X, p, cfg, work)
    return s, time.perf_counter() - t0


def search_block(searcher, X: np.ndarray, lo: int, hi: int, kq: int):
    """(D float32, I int32) of the kq best rows for queries lo..hi (the query itself included)."""
    D, I = searcher.search(read_rows(X, lo, hi), kq)
    return np.asarray(D, np.float32), np.asarray(I).astype(np.int32)


# ---------------------------------------------------------------- lists, recall


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


def recall_rows(n: int, n_queries: int, seed: int) -> np.ndarray:
    """The fixed, seeded sample of query rows of the recall measurement."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, min(n_queries, n), replace=False))


def exact_topk(X: np.ndarray, rows: np.ndarray, kq: int, progress: Progress | None = None):
    """Exact top-kq of the query rows over all rows of X, by tiled matrix products (BLAS)."""
    n = len(X)
    Q = take_rows(X, rows)
    tile = max(1024, GATHER_BYTES // (16 * max(1, len(rows))))  # scores, their negation, int64 positions
    bestD = np.full((len(rows), 0), -np.inf, np.float32)
    bestI = np.zeros((len(rows), 0), np.int64)
    for lo in range(0, n, tile):
        hi = min(n, lo + tile)
        S = Q @ read_rows(X, lo, hi).T
        if S.shape[1] > kq:
            part = np.argpartition(-S, kq - 1, axis=1)[:, :kq]
            S = np.take_along_axis(S, part, axis=1)
            idx = part + lo
        else:
            idx = np.broadcast_to(np.arange(lo, hi), S.shape)
        D = np.concatenate([bestD, S], axis=1)
        I = np.concatenate([bestI, idx], axis=1)
        if D.shape[1] > kq:
            part = np.argpartition(-D, kq - 1, axis=1)[:, :kq]
            D, I = np.take_along_axis(D, part, axis=1), np.take_along_axis(I, part, axis=1)
        bestD, bestI = D, I
        if progress:
            progress.advance(hi - lo)
    order = np.argsort(-bestD, axis=1, kind="stable")
    return np.take_along_axis(bestD, order, axis=1), np.take_along_axis(bestI, order, axis=1)


def recall_of(exact_I: np.ndarray, got_I: np.ndarray, rows: np.ndarray, k: int, n: int) -> float:
    """Share of the exact k nearest (self dropped) found in the graph's lists of the same rows."""
    se, de, _, _ = drop_self(np.zeros(exact_I.shape, np.float32), exact_I, rows, k)
    sg, dg, _, _ = drop_self(np.zeros(got_I.shape, np.float32), got_I, rows, k)
    truth = se.astype(np.int64) * n + de
    got = sg.astype(np.int64) * n + dg
    return float(np.isin(truth, got).sum() / max(1, len(truth)))


# ---------------------------------------------------------------- the work directory


def _diff(old, new, prefix="") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += _diff(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


class WorkDir:
    """knn_work/: fingerprint.json, index.<stage>.faiss, blocks/<lo>.npz with (D, I) of one query block."""

    def __init__(self, path: Path, fingerprint: dict, resume: bool):
        self.path = Path(path)
        self.blocks = self.path / "blocks"
        fp_file = self.path / "fingerprint.json"
        if self.path.exists() and not resume:
            log.info("knn: resume off, removing %s", self.path)
            shutil.rmtree(self.path)
        if fp_file.is_file():
            WorkDir.check(self.path, fingerprint)
        elif self.path.exists():
            shutil.rmtree(self.path)  # no fingerprint: nothing that can be trusted
        self.blocks.mkdir(parents=True, exist_ok=True)
        sweep_temporaries(self.blocks)   # half-written block / index files of a killed run
        sweep_temporaries(self.path)
        if not fp_file.is_file():
            write_json_atomic(fp_file, fingerprint)

    @staticmethod
    def check(path: Path, fingerprint: dict, partial: bool = False) -> None:
        """Refuse a work directory started with another fingerprint (partial: only the keys given)."""
        try:
            old = json.loads((Path(path) / "fingerprint.json").read_text())
        except (OSError, ValueError):
            return
        if partial:
            old = {key: {k2: old.get(key, {}).get(k2) for k2 in sub} for key, sub in fingerprint.items()}
        changed = _diff(old, fingerprint)
        if changed:
            raise UserError(f"{path} holds a kNN search started with other inputs or settings "
                            f"({'; '.join(changed)}); to start over run the knn stage with --no-resume "
                            f"(resume = false), or delete {path}")

    def block_file(self, lo: int) -> Path:
        return self.blocks / f"{lo:012d}.npz"

    def has(self, lo: int) -> bool:
        return self.block_file(lo).is_file()

    def save(self, lo: int, D: np.ndarray, I: np.ndarray) -> None:
        with atomic_file(self.block_file(lo)) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, D=D, I=I)

    def load(self, lo: int):
        with np.load(self.block_file(lo)) as z:
            return z["D"], z["I"]

    def index_file(self, stage: str) -> Path:
        return self.path / f"index.{stage}.faiss"

    def save_index(self, stage: str, index) -> None:
        with atomic_file(self.index_file(stage)) as tmp:
            faiss.write_index(index, str(tmp))

    def load_index(self, stage: str):
        f = self.index_file(stage)
        return faiss.read_index(str(f)) if f.is_file() else None

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


# ---------------------------------------------------------------- entry points


def _recall(X, p: Plan, cfg: KnnConfig, lists: Callable[[np.ndarray], np.ndarray]) -> dict:
    """recall@k on the seeded sample; `lists(rows)` returns the graph's (kq-wide) I of those rows."""
    rows = recall_rows(p.n, cfg.recall_queries, cfg.seed)
    with Progress("knn recall (exact, tiled)", p.n, "rows", logger=log) as prog:
        _, exact = exact_topk(X, rows, p.kq, prog)
    r = recall_of(exact, lists(rows), rows, p.k, p.n)
    return {"recall_at_k": round(r, 4), "recall_queries": int(len(rows))}


def knn_edges(X: np.ndarray, cfg: KnnConfig) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The kNN lists of unit vectors X in memory (no checkpoints). Returns (summary, src, dst, similarity, rank)."""
    n, dim = X.shape
    p = make_plan(cfg, n, dim)
    searcher, build_s = make_searcher(X, p, cfg)
    t1 = time.perf_counter()
    Ds, Is = [], []
    for lo in range(0, n, cfg.block_size):
        D, I = search_block(searcher, X, lo, min(n, lo + cfg.block_size), p.kq)
        Ds.append(D)
        Is.append(I)
    D, I = np.concatenate(Ds), np.concatenate(Is)
    search_s = time.perf_counter() - t1
    src, dst, sim, rank = drop_self(D, I, np.arange(n, dtype=np.int32), p.k)
    summary = {"papers": n, "dim": dim, **plan_settings(p, cfg), "gpu": p.gpu, "edges": int(len(src)),
               "build_s": round(build_s, 3), "search_s": round(search_s, 3)}
    if p.kind != "flat":
        summary.update(_recall(X, p, cfg, lambda rows: I[rows]))
    return summary, src, dst, sim, rank


def run_knn(cfg: KnnConfig, layout: RunLayout, on_block: Callable[[int], None] | None = None) -> dict:
    """The knn stage: vectors → resumable block search → edges table (+ summary metadata).

    on_block(lo) runs after each query block is saved (tests use it to simulate a kill)."""
    t0 = time.perf_counter()
    if cfg.resume and layout.knn_work_dir.exists():
        # before the vectors are (re)converted: a changed embed run or dtype is refused right away
        shards, _ = embedding_shards(embeddings_dir(layout))
        WorkDir.check(layout.knn_work_dir, {"vectors": {"source": source_fingerprint(shards),
                                                        "dtype": cfg.vector_dtype}}, partial=True)
    vec = ensure_vectors(layout, cfg.vector_dtype, log=log.info)
    X = vec.X
    load_s = time.perf_counter() - t0
    p = make_plan(cfg, vec.n, vec.dim)
    settings = plan_settings(p, cfg)
    fingerprint = {"format": WORK_FORMAT, "vectors": {key: vec.meta.get(key) for key in ("source", "dtype", "rows", "dim")},
                   "settings": settings}
    work = WorkDir(layout.knn_work_dir, fingerprint, cfg.resume)
    starts = list(range(0, p.n, cfg.block_size))
    done = sum(work.has(lo) for lo in starts)
    if done:
        log.info("knn: resuming, %d of %d query blocks already done in %s", done, len(starts), work.path)
    searcher, build_s = make_searcher(X, p, cfg, work)
    t1 = time.perf_counter()
    with Progress("knn search", p.n, "queries", logger=log,
                  done=sum(min(p.n, lo + cfg.block_size) - lo for lo in starts if work.has(lo))) as prog:
        for lo in starts:
            if work.has(lo):
                continue
            hi = min(p.n, lo + cfg.block_size)
            D, I = search_block(searcher, X, lo, hi, p.kq)
            work.save(lo, D, I)
            prog.advance(hi - lo)
            if on_block:
                on_block(lo)
    search_s = time.perf_counter() - t1
    del searcher
    summary = {"papers": p.n, "dim": p.dim, "vector_dtype": vec.meta.get("dtype"), **settings, "gpu": p.gpu,
               "resumed_blocks": done, "blocks": len(starts), "load_s": round(load_s, 3),
               "build_s": round(build_s, 3), "search_s": round(search_s, 3)}
    if p.kind != "flat":
        t2 = time.perf_counter()
        summary.update(_recall(X, p, cfg, lambda rows: _lists_of(work, rows, cfg.block_size)))
        summary["recall_s"] = round(time.perf_counter() - t2, 3)
    for leftover in layout.root.glob(f".{layout.table('edges').name}.tmp-*"):  # a write killed half-way
        shutil.rmtree(leftover, ignore_errors=True)
    summary["edges"] = _write_edges(work, starts, p, layout, summary)
    work.remove()
    summary["total_s"] = round(time.perf_counter() - t0, 3)
    log.info("knn: %s", summary)
    return summary


def _lists_of(work: WorkDir, rows: np.ndarray, block_size: int) -> np.ndarray:
    """The saved (kq-wide) neighbour lists of the sorted `rows`, block file by block file."""
    parts = []
    blocks = rows // block_size
    for b in np.unique(blocks):
        _, I = work.load(int(b) * block_size)
        parts.append(I[rows[blocks == b] - int(b) * block_size])
    return np.concatenate(parts)


def _write_edges(work: WorkDir, starts: list[int], p: Plan, layout: RunLayout, summary: dict) -> int:
    """One Parquet part per query block, the summary (with the edge count) in each part's schema metadata."""
    edges = 0
    for lo in starts:  # count first, from the I arrays alone, so the metadata is complete on the first write
        with np.load(work.block_file(lo)) as z:
            I = z["I"]
        keep = (I != np.arange(lo, lo + len(I))[:, None]) & (I >= 0)
        edges += int(np.minimum(keep.sum(axis=1), p.k).sum())
    schema = SCHEMAS["edges"].with_metadata({EDGES_META_KEY: json.dumps({**summary, "edges": edges}).encode()})
    written = 0
    with atomic_dir(layout.table("edges")) as tmp, Progress("knn write", p.n, "queries", logger=log) as prog:
        for i, lo in enumerate(starts):
            D, I = work.load(lo)
            src, dst, sim, rank = drop_self(D, I, np.arange(lo, lo + len(I), dtype=np.int32), p.k)
            t = pa.table([pa.array(src.astype(np.int32, copy=False)), pa.array(dst.astype(np.int32, copy=False)),
                          pa.array(sim.astype(np.float32, copy=False)), pa.array(rank)], schema=schema)
            pq.write_table(t, tmp / f"part-{i:05d}.parquet")
            written += len(src)
            prog.advance(len(I))
    assert written == edges, (written, edges)
    return edges
