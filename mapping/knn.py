"""kNN graph (METHODS.md §5.1): each paper's k most similar papers by cosine similarity, with FAISS.

The vectors come from the run's vector store (sciencemap.vectors: a memory-mapped matrix of unit
rows, float32 or float16), so inner product = cosine and no copy of the matrix is ever made. The
search runs query block by query block; memory is bounded by one block (plus the index's codes).

Index (`index`, auto picks by size and device):
- flat (below exact_below): exact search. CPU: query blocks × database tiles of `db_block` rows,
  the tiles' top lists merged (faiss.ResultHeap); with n ≤ db_block one IndexFlatIP (the demo's
  edges are unchanged). GPUs: the database resident, one GpuIndexFlatIP per GPU (float32, else
  float16), tiles streamed only when it does not fit.
- hnsw_sq8 (auto above exact_below on a CPU): an HNSW graph over 8-bit codes; hnsw_flat over a
  float32 copy (memory!). FAISS has no GPU HNSW.
- ivf_sq8 (auto above exact_below on GPUs): IVF with 8-bit scalar-quantised codes; ivf_pq:
  product-quantised codes (pq_m bytes a vector); ivf_flat: a float32 copy. Trained on a seeded
  sample of train_per_list points per list.
- Re-ranking (all but hnsw_flat): the top rerank_factor·(k+1) candidates of each query re-ranked
  by exact dot products with rows of the memory map, on all cores (rerank), so the similarities
  are exact while memory is ~codes + one block.

Recall target: before the full search of an approximate index, nprobe / ef_search is raised along
a schedule until recall@k on a seeded sample of queries reaches target_recall (tune); a value set
in the settings is kept. The finished graph's recall@k is measured on another seeded sample: the
exact top k by faiss.knn on float32 tiles of the memory map (no second index).

Resumable, the faiss contrib big_batch_search pattern: each query block's (D, I) is written to
`knn_work/blocks/` (one atomic file per block) next to `fingerprint.json` (vectors, k, index
settings, seed, block size, device), the trained/filled index and the tuned value; a restarted
stage skips the finished blocks and searches the same saved index with the same value. A changed
fingerprint is refused (resume=False starts over). knn_work is removed once the edges are written;
its filled approximate index is kept in `knn_index/` (keep_index, KeptIndex) beside the
fingerprint of the vectors and build settings it was made from, so that placing new papers on the
map searches it instead of building it again.

Output: `edges` (src, dst int32 vector-store rows, similarity float32, rank int16), directed,
rank 1 = nearest, self-matches removed; part files per query-block range; the summary (index,
tuning, recall@k, timings...) as JSON in each part's Parquet schema metadata (contracts.EDGES_META_KEY).
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
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
from sciencemap.vectors import ensure_vectors, gather_rows, read_rows, release_rows, source_fingerprint, take_rows

log = logging.getLogger(__name__)

INDEXES = ("auto", "flat", "ivf_sq8", "ivf_pq", "ivf_flat", "hnsw_sq8", "hnsw_flat")
WORK_FORMAT = 2
KEPT_FORMAT = 1   # knn_index/ (KeptIndex)
GATHER_BYTES = 32 << 20   # re-ranking: float32 scratch per chunk
EXACT_TILE_BYTES = 64 << 20   # the recall and tuning samples' exact search: one float32 tile of the store
# The tuning schedules: nprobe (IVF lists visited) and efSearch (HNSW candidate list), each step about
# 1.5x the one before, so the chosen value is within 1.5x of the least that meets the target.
NPROBE_SCHEDULE = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
                   6144, 8192, 12288, 16384)
EF_SCHEDULE = (32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


@dataclass
class KnnConfig:
    k: int = setting(20, "neighbours per paper")
    index: str = setting("auto", "flat = exact (tiled); ivf_sq8 / ivf_pq = IVF with compressed codes and exact "
                         "re-ranking; ivf_flat = IVF with a full float32 copy; hnsw_sq8 = HNSW graph over 8-bit "
                         "codes with exact re-ranking; hnsw_flat = HNSW over a float32 copy; auto = flat below "
                         "exact_below vectors, above hnsw_sq8 on a CPU, ivf_sq8 on GPUs", choices=INDEXES)
    exact_below: int = setting(200_000, "auto: exact search below this many vectors")
    target_recall: float = setting(0.95, "approximate indexes: recall@k that a seeded sample of queries must reach "
                                   "before the full search; nprobe / ef_search are raised until it does (an "
                                   "unreachable target stops the stage with the best recall reached)")
    vector_dtype: str = setting("float32", "dtype of the vector store (float16 halves its size)",
                                choices=VECTORS_DTYPES)
    nlist: int = setting(0, "IVF lists; 0 = 8·sqrt(n) (at most n/39)")
    nprobe: int = setting(0, "IVF lists visited per query; 0 = tuned to target_recall; > 0 = fixed (recall reported)")
    rerank_factor: int = setting(2, "approximate indexes: candidates per query = rerank_factor·(k+1), re-ranked "
                                 "by exact dot products")
    pq_m: int = setting(0, "ivf_pq: bytes per code (sub-quantisers; must divide the dim); 0 = dim/8")
    train_per_list: int = setting(50, "IVF training sample: points per list (seeded)")
    kmeans_iter: int = setting(10, "IVF training: k-means iterations")
    hnsw_m: int = setting(32, "HNSW: links per vector (memory 2·M·4 bytes a vector beside its codes)")
    ef_construction: int = setting(64, "HNSW: candidate list while building the graph")
    ef_search: int = setting(0, "HNSW: candidate list per query; 0 = tuned to target_recall; > 0 = fixed")
    block_size: int = setting(16_384, "queries per block (one checkpoint file each; bounds the result arrays)")
    db_block: int = setting(262_144, "exact search on a CPU: database rows per tile (bounds memory at large n)")
    recall_queries: int = setting(1_000, "sample size of each recall measurement: one sample tunes nprobe / "
                                  "ef_search, another (seed + 1) measures the finished graph")
    seed: int = setting(0, "seed of the IVF training sample and the recall samples")
    gpu: str = setting("auto", "auto: FAISS on the GPU(s) when it sees one; never: CPU only; "
                       "require: fail without a GPU", choices=("auto", "never", "require"))
    gpu_memory_share: float = setting(0.8, "exact search on GPUs: share of each GPU's free memory the resident "
                                      "database may fill (float32 where it fits, else float16, else tiles streamed)")
    rerank_threads: int = setting(0, "threads that gather and score re-rank candidates; 0 = all cores")
    resume: bool = setting(True, "continue a killed search from knn_work (--no-resume: start over)")
    keep_index: bool = setting(True, "approximate indexes: keep the built index in knn_index/ for placing new "
                               "papers (`place`), which then loads it instead of building it again; its size "
                               "is the index's memory (codes + links: ≈ 34 GB at 33M × 768-d hnsw_sq8); "
                               "--no-keep-index: removed", outputs=False)


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
    kind: str         # flat | ivf_sq8 | ivf_pq | ivf_flat | hnsw_sq8 | hnsw_flat
    gpu: bool
    nlist: int = 0
    pq_m: int = 0

    @property
    def kq(self) -> int:
        return self.k + 1  # the query itself is usually first

    @property
    def param(self) -> str | None:
        """The search-time setting the tuning raises: nprobe (IVF), ef_search (HNSW), none (exact)."""
        return {"ivf": "nprobe", "hnsw": "ef_search"}.get(self.kind.split("_")[0])


def make_plan(cfg: KnnConfig, n: int, dim: int) -> Plan:
    if n < 2:
        raise UserError(f"kNN needs at least 2 embedded papers, found {n}")
    if cfg.k < 1:
        raise UserError(f"knn k must be at least 1, got {cfg.k}")
    if cfg.block_size < 1 or cfg.db_block < 1:
        raise UserError("knn block_size and db_block must be positive")
    if not 0 < cfg.target_recall <= 1:
        raise UserError(f"knn target_recall must be in (0, 1], got {cfg.target_recall}")
    kind = cfg.index
    if kind not in INDEXES:
        raise UserError(f"knn index {cfg.index!r} is unknown; use one of {', '.join(INDEXES)}")
    gpu = use_gpu(cfg)
    if kind == "auto":
        # above exact_below: on 620k real MiniLM vectors (bench/knn_real.py, 2 cores) HNSW-SQ8 met
        # recall@20 0.95 at several times IVF-SQ8's speed; FAISS has no GPU HNSW, so GPUs take IVF
        kind = "flat" if n < cfg.exact_below else ("ivf_sq8" if gpu else "hnsw_sq8")
    if gpu and kind.startswith("hnsw"):
        log.info("knn: FAISS has no GPU HNSW; %s runs on the CPU", kind)
        gpu = False
    p = Plan(n=n, dim=dim, k=min(cfg.k, n - 1), kind=kind, gpu=gpu)
    if kind.startswith("ivf"):
        # 8·sqrt(n) lists: on 620k real MiniLM vectors the tuned search reached recall@20 0.96 at 0.59 ms
        # a query with 6,300 lists (nprobe 128), against 1.0 ms with 3,150 and 1.6 ms with 1,575
        # (bench/knn_real.py); nprobe is then tuned to the target on a sample
        nlist = cfg.nlist or max(1, int(8 * math.sqrt(n)))
        p.nlist = max(1, min(nlist, n // 39))  # FAISS wants >= 39 training points per list
        if kind == "ivf_pq":
            p.pq_m = cfg.pq_m or max(1, dim // 8)
            if dim % p.pq_m:
                raise UserError(f"knn pq_m = {p.pq_m} must divide the vector dim {dim}")
    return p


def plan_settings(p: Plan, cfg: KnnConfig) -> dict:
    """What decides the search's results (the fingerprint's settings, and the summary's). A tuned
    nprobe / ef_search is recorded as 0 here (the target decides it) and in the summary's tuning."""
    s = {"index": p.kind, "k": p.k, "block_size": cfg.block_size, "seed": cfg.seed,
         "device": "gpu" if p.gpu else "cpu"}
    if p.kind == "flat":
        s["db_block"] = cfg.db_block
        return s
    s.update(target_recall=cfg.target_recall, rerank_factor=cfg.rerank_factor, recall_queries=cfg.recall_queries)
    if p.kind.startswith("ivf"):
        s.update(nlist=p.nlist, nprobe=cfg.nprobe, train_per_list=cfg.train_per_list, kmeans_iter=cfg.kmeans_iter)
        if p.kind == "ivf_pq":
            s["pq_m"] = p.pq_m
    else:
        s.update(hnsw_m=cfg.hnsw_m, ef_construction=cfg.ef_construction, ef_search=cfg.ef_search)
    return s


# ---------------------------------------------------------------- searchers


def gpu_free_bytes(device: int) -> int | None:
    """Free memory of CUDA device `device` (through torch, which the encoder stages install), or
    None when it cannot be asked."""
    try:
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    except Exception:   # noqa: BLE001 - no torch, no CUDA runtime: unknown
        return None


class ExactSearch:
    """Exact top-kq by inner product.

    CPU: one IndexFlatIP when n ≤ db_block, else database tiles searched in place and merged.
    GPU: the database stays resident on the GPU(s), split into contiguous row ranges, one
    GpuIndexFlatIP per GPU (float32 where it fits in gpu_memory_share of the free memory, else
    float16), added once; every query block is searched against them and the lists merged. Only
    when even float16 does not fit are tiles streamed (uploaded for each query block)."""

    def __init__(self, X: np.ndarray, p: Plan, cfg: KnnConfig):
        self.X, self.p, self.db_block = X, p, cfg.db_block
        self.whole, self.resident, self.storage = None, None, "cpu"
        if p.gpu:
            self.resident, self.storage = self._resident(cfg.gpu_memory_share)
        elif p.n <= self.db_block:
            index = faiss.IndexFlatIP(p.dim)
            index.add(read_rows(X, 0, p.n))
            self.whole = index

    def _resident(self, share: float):
        """[(first row, GPU index)] holding all rows, and the storage; (None, "streamed") if it cannot fit."""
        ngpu = gpu_count()
        per = -(-self.p.n // ngpu)
        free = [gpu_free_bytes(g) for g in range(ngpu)]
        storage = None
        for name, width in (("float32", 4), ("float16", 2)):
            if all(f is not None and per * self.p.dim * width <= share * f for f in free):
                storage = name
                break
        if storage is None:
            log.info("knn: %d x %d vectors do not fit on %d GPU(s) (free %s bytes); tiles are streamed",
                     self.p.n, self.p.dim, ngpu, free)
            return None, "streamed"
        shards = []
        with Progress("knn gpu upload", self.p.n, "vectors", logger=log) as prog:
            for g in range(ngpu):
                lo, hi = g * per, min(self.p.n, (g + 1) * per)
                if lo >= hi:
                    break
                res = faiss.StandardGpuResources()
                conf = faiss.GpuIndexFlatConfig()
                conf.device, conf.useFloat16 = g, storage == "float16"
                index = faiss.GpuIndexFlatIP(res, self.p.dim, conf)
                for a in range(lo, hi, self.db_block):
                    b = min(hi, a + self.db_block)
                    index.add(read_rows(self.X, a, b))
                    prog.advance(b - a)
                shards.append((lo, index, res))
        log.info("knn: database resident on %d GPU(s) as %s", len(shards), storage)
        return shards, storage

    def search(self, Q: np.ndarray, kq: int):
        if self.whole is not None:
            return self.whole.search(Q, kq)
        heap = faiss.ResultHeap(len(Q), kq, keep_max=True)
        for lo, D, I in self._parts(Q, kq):
            add_part(heap, lo, D, I, kq)
        heap.finalize()
        return heap.D, heap.I

    def _parts(self, Q: np.ndarray, kq: int):
        """(first row, D, I) of each part of the database: the resident GPU shards, else tiles."""
        if self.resident is not None:
            for lo, index, _ in self.resident:
                yield lo, *index.search(Q, min(kq, index.ntotal))
            return
        for lo in range(0, self.p.n, self.db_block):
            hi = min(self.p.n, lo + self.db_block)
            tile = read_rows(self.X, lo, hi)
            if self.p.gpu:   # streamed: the tile is uploaded again for each query block
                index = faiss.IndexFlatIP(self.p.dim)
                index.add(tile)
                yield lo, *_to_device(index, True).search(Q, min(kq, hi - lo))
            else:            # IndexFlatIP's own search function, on the tile in place (no copy into an index)
                yield lo, *faiss.knn(Q, tile, min(kq, hi - lo), metric=faiss.METRIC_INNER_PRODUCT)


def rerank(X: np.ndarray, Q: np.ndarray, I: np.ndarray, kq: int, threads: int = 0):
    """The kq best of each query's candidates I (-1 = none) by exact dot products with rows of X,
    on `threads` cores (0 = all). A float32 store is scored in place by FAISS's subset kernel
    (knn_inner_products_by_idx: OpenMP over queries, rows read straight from the memory map); a
    float16 store is gathered in bulk and scored in worker threads. Either way no Python runs per
    row, and the pages touched are unmapped again at the end (sciencemap.vectors.release_rows)."""
    I = np.asarray(I, np.int64)
    if (I < 0).any():   # FAISS's kernel stops a list at its first -1: move them to the end
        I = np.take_along_axis(I, np.argsort(I < 0, axis=1, kind="stable"), axis=1)
    try:
        if X.dtype == np.float32 and X.flags.c_contiguous:
            return _rerank_in_place(X, np.ascontiguousarray(Q, np.float32), np.ascontiguousarray(I), kq, threads)
        return _rerank_gathered(X, Q, I, kq, threads or os.cpu_count() or 1)
    finally:
        release_rows(X)


def _rerank_in_place(X: np.ndarray, Q: np.ndarray, I: np.ndarray, kq: int, threads: int):
    nq, kc = I.shape
    D_out = np.full((nq, kq), -np.inf, np.float32)
    I_out = np.full((nq, kq), -1, np.int64)
    k = min(kq, kc)
    D, L = np.empty((nq, k), np.float32), np.empty((nq, k), np.int64)
    before = faiss.omp_get_max_threads()
    if threads:
        faiss.omp_set_num_threads(threads)
    try:
        faiss.knn_inner_products_by_idx(faiss.swig_ptr(Q), faiss.swig_ptr(X), faiss.swig_ptr(I), Q.shape[1], nq,
                                        X.shape[0], kc, k, faiss.swig_ptr(D), faiss.swig_ptr(L), kc)
    finally:
        faiss.omp_set_num_threads(before)
    D_out[:, :k], I_out[:, :k] = np.where(L >= 0, D, -np.inf), L
    return D_out, I_out


def _rerank_gathered(X: np.ndarray, Q: np.ndarray, I: np.ndarray, kq: int, threads: int,
                     gather: Callable[[np.ndarray, np.ndarray], np.ndarray] = gather_rows, step: int = 64):
    """Candidates gathered `step` queries at a time (by `gather`: bulk through the map; the bench
    passes take_rows, the earlier per-row reads) and scored in `threads` threads."""
    nq, kc = I.shape
    D_out = np.full((nq, kq), -np.inf, np.float32)
    I_out = np.full((nq, kq), -1, np.int64)
    # 64 queries a chunk (8 MB of float32 rows at 768-d x 42): on 2 cores 1.5x faster than 256 a
    # chunk (the converted rows stay in cache for the products; bench/rerank_speed.py)
    step = max(1, min(step, GATHER_BYTES // max(1, kc * Q.shape[1] * 4)))

    def score(a: int) -> None:
        Ic = I[a:a + step]
        valid = Ic >= 0
        G = gather(X, np.where(valid, Ic, 0).ravel()).reshape(len(Ic), kc, -1)
        S = np.matmul(G, Q[a:a + step, :, None])[:, :, 0]
        S[~valid] = -np.inf
        top = np.argsort(-S, axis=1, kind="stable")[:, :kq]
        D_out[a:a + len(Ic), :top.shape[1]] = np.take_along_axis(S, top, axis=1)
        I_out[a:a + len(Ic), :top.shape[1]] = np.where(np.take_along_axis(valid, top, axis=1),
                                                         np.take_along_axis(Ic, top, axis=1), -1)

    if threads == 1 or nq <= step:
        for a in range(0, nq, step):
            score(a)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(score, range(0, nq, step)))
    return D_out, I_out


class _Approximate:
    """What the IVF and HNSW searchers share: the saved index (resume), the tuned parameter and the
    exact re-ranking of rerank_factor·kq candidates (skipped for a float32 index)."""

    rerank = True

    def __init__(self, X: np.ndarray, p: Plan, cfg: KnnConfig, work: "WorkDir | None"):
        self.X, self.p, self.cfg = X, p, cfg
        filled = work.load_index("filled") if work else None
        if filled is not None:
            log.info("knn: resuming with the saved index in %s", work.path)
            self.index = _to_device(filled, p.gpu)
            return
        self.index = self._build(work)
        if work:
            cpu_index = _to_cpu(self.index, p.gpu)
            work.save_index("filled", cpu_index)
            del cpu_index

    def _build(self, work):
        raise NotImplementedError

    def _sample(self, m: int, what: str) -> np.ndarray:
        """A seeded sample of m rows (all rows when m ≥ n) for training."""
        rows = np.arange(self.p.n) if m >= self.p.n else np.sort(
            np.random.default_rng(self.cfg.seed).choice(self.p.n, m, replace=False))
        log.info("knn: training %s on %d sampled vectors", what, len(rows))
        return take_rows(self.X, rows)

    def _add(self, index):
        step = max(self.cfg.block_size, 65_536)
        with Progress("knn add", self.p.n, "vectors", logger=log) as prog:
            for lo in range(0, self.p.n, step):
                hi = min(self.p.n, lo + step)
                index.add(read_rows(self.X, lo, hi))
                prog.advance(hi - lo)

    def schedule(self) -> tuple[int, ...]:
        raise NotImplementedError

    def set_param(self, value: int) -> int:
        raise NotImplementedError

    def search(self, Q: np.ndarray, kq: int):
        if not self.rerank:
            return self.index.search(Q, kq)
        kc = min(self.p.n, kq * max(1, self.cfg.rerank_factor))
        _, I = self.index.search(Q, kc)
        return rerank(self.X, Q, I, kq, self.cfg.rerank_threads)


class IvfSearch(_Approximate):
    """IVF (SQ8 / PQ / flat codes) + exact re-ranking of rerank_factor·kq candidates."""

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

    def _build(self, work):
        trained = work.load_index("trained") if work else None
        if trained is None:
            trained = self._train()
            if work:
                work.save_index("trained", trained)
        index = _to_device(trained, self.p.gpu)
        self._add(index)
        return index

    def _train(self):
        """Spherical k-means (faiss.Kmeans, on the GPU when there is one) for the lists, then the
        codes (SQ ranges / PQ codebooks) on the same seeded sample; the index stays on the CPU."""
        p = self.p
        m = min(p.n, max(39, self.cfg.train_per_list) * p.nlist)
        with Progress("knn train", m, "vectors", logger=log) as prog:
            sample = self._sample(m, f"{p.kind} ({p.nlist} lists)")
            km = faiss.Kmeans(p.dim, p.nlist, niter=self.cfg.kmeans_iter, seed=self.cfg.seed, spherical=True,
                              gpu=p.gpu, max_points_per_centroid=max(256, self.cfg.train_per_list))
            km.train(sample)
            index = self._empty()
            index.quantizer.add(km.centroids)
            index.train(sample)   # the quantizer is trained: this trains the codes only
            del sample, km
            prog.advance(m)
        return index

    def schedule(self) -> tuple[int, ...]:
        return tuple(v for v in NPROBE_SCHEDULE if v < self.p.nlist) + (self.p.nlist,)

    def set_param(self, nprobe: int) -> int:
        nprobe = max(1, min(int(nprobe), self.p.nlist))
        if self.p.gpu:
            faiss.GpuParameterSpace().set_index_parameter(self.index, "nprobe", nprobe)
        else:
            self.index.nprobe = nprobe
        return nprobe


class HnswSearch(_Approximate):
    """HNSW graph (faiss IndexHNSWSQ / IndexHNSWFlat, inner product) on the CPU; over 8-bit codes
    the rerank_factor·kq candidates are re-ranked exactly, over a float32 copy they are exact."""

    def __init__(self, X, p, cfg, work):
        self.rerank = p.kind == "hnsw_sq8"
        super().__init__(X, p, cfg, work)

    def _build(self, work):
        p, cfg = self.p, self.cfg
        if p.kind == "hnsw_sq8":
            index = faiss.IndexHNSWSQ(p.dim, faiss.ScalarQuantizer.QT_8bit, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.train(self._sample(min(p.n, 100_000), "hnsw_sq8 (8-bit ranges)"))
        else:
            index = faiss.IndexHNSWFlat(p.dim, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = cfg.ef_construction
        self._add(index)
        return index

    def schedule(self) -> tuple[int, ...]:
        return EF_SCHEDULE

    def set_param(self, ef: int) -> int:
        self.index.hnsw.efSearch = int(ef)
        return int(ef)


def make_searcher(X: np.ndarray, p: Plan, cfg: KnnConfig, work: "WorkDir | None" = None):
    t0 = time.perf_counter()
    if p.kind == "flat":
        s = ExactSearch(X, p, cfg)
    elif p.kind.startswith("hnsw"):
        s = HnswSearch(X, p, cfg, work)
    else:
        s = IvfSearch(X, p, cfg, work)
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


def add_part(heap, lo: int, D: np.ndarray, I: np.ndarray, kq: int) -> None:
    """A database part's top lists (rows from `lo`) into a faiss.ResultHeap of width kq."""
    I += lo
    if I.shape[1] < kq:   # a short part: pad to the heap's width
        D = np.pad(D, ((0, 0), (0, kq - I.shape[1])), constant_values=-np.inf)
        I = np.pad(I, ((0, 0), (0, kq - I.shape[1])), constant_values=-1)
    heap.add_result(np.ascontiguousarray(D), np.ascontiguousarray(I))


def exact_topk(X: np.ndarray, rows: np.ndarray, kq: int, progress: Progress | None = None):
    """Exact top-kq of the query rows over all rows of X (best first; -1 past the end of a store of
    fewer than kq rows): faiss.knn (BLAS products and FAISS's threaded heaps) on float32 tiles of
    EXACT_TILE_BYTES read from the store, merged in a faiss.ResultHeap. Against NumPy products and
    partitions on 32 MB tiles (before 2026-12-04): the same lists and similarities, 2.6x as fast at
    1M x 384 and 1.7x at 500k x 768 on 2 cores (1,000 queries, float16 stores); the partitions were
    one core (bench/knn_exact.py)."""
    n = len(X)
    Q = take_rows(X, rows)
    heap = faiss.ResultHeap(len(Q), kq, keep_max=True)
    tile = max(1024, EXACT_TILE_BYTES // (4 * X.shape[1]))
    for lo in range(0, n, tile):
        hi = min(n, lo + tile)
        add_part(heap, lo, *faiss.knn(Q, read_rows(X, lo, hi), min(kq, hi - lo), metric=faiss.METRIC_INNER_PRODUCT), kq)
        if progress:
            progress.advance(hi - lo)
    heap.finalize()
    return heap.D, heap.I


def recall_of(exact_I: np.ndarray, got_I: np.ndarray, rows: np.ndarray, k: int, n: int) -> float:
    """Share of the exact k nearest (self dropped) found in the graph's lists of the same rows."""
    return recall_stats(exact_I, got_I, rows, k, n)[0]


def recall_stats(exact_I: np.ndarray, got_I: np.ndarray, rows: np.ndarray, k: int, n: int) -> tuple[float, float]:
    """(recall@k, its lower 95% confidence bound: the mean less 1.96 standard errors of the
    queries' own recalls), over the sample `rows`."""
    se, de, _, _ = drop_self(np.zeros(exact_I.shape, np.float32), exact_I, rows, k)
    sg, dg, _, _ = drop_self(np.zeros(got_I.shape, np.float32), got_I, rows, k)
    found = np.isin(se.astype(np.int64) * n + de, sg.astype(np.int64) * n + dg)
    if not len(found):
        return 0.0, 0.0
    _, pos = np.unique(se, return_inverse=True)
    per_query = np.bincount(pos, weights=found) / np.bincount(pos)
    mean = float(found.sum() / len(found))
    spread = float(per_query.std(ddof=1)) if len(per_query) > 1 else 0.0
    return mean, mean - 1.96 * spread / np.sqrt(len(per_query))


# ---------------------------------------------------------------- the work directory


def _diff(old, new, prefix="") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += _diff(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


class WorkDir:
    """knn_work/: fingerprint.json, index.<stage>.faiss, tuning.json (the tuned nprobe / ef_search),
    blocks/<lo>.npz with (D, I) of one query block."""

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

    def save_tuning(self, tuning: dict) -> None:
        write_json_atomic(self.path / "tuning.json", tuning)

    def load_tuning(self) -> dict | None:
        f = self.path / "tuning.json"
        return json.loads(f.read_text()) if f.is_file() else None

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


class KeptIndex:
    """`<run>/knn_index/`: one filled approximate index (index.faiss) and the fingerprint of what it
    was built from (the vector store's source, dtype and shape, the index's build settings:
    index_settings). Placement loads it where the fingerprint matches its own plan and builds
    otherwise (then keeps what it built when `keep` is set). Passed where make_searcher takes a
    WorkDir: only the filled index is kept, the trained one is not.

    Written in an order a kill cannot corrupt: the fingerprint goes first and comes back last, so
    an index file without one is never trusted (and is replaced)."""

    INDEX, FINGERPRINT = "index.faiss", "fingerprint.json"

    def __init__(self, path: Path, fingerprint: dict, keep: bool = True):
        self.path, self.fingerprint, self.keep = Path(path), fingerprint, keep
        self.loaded = self.saved = False

    def _index_file(self) -> Path:
        return self.path / self.INDEX

    def matches(self) -> bool:
        try:
            return json.loads((self.path / self.FINGERPRINT).read_text()) == self.fingerprint \
                and self._index_file().is_file()
        except (OSError, ValueError):
            return False

    def load_index(self, stage: str):
        if stage != "filled" or not self.matches():
            return None
        index = faiss.read_index(str(self._index_file()))
        self.loaded = True
        return index

    def save_index(self, stage: str, index) -> None:
        if stage != "filled" or not self.keep:
            return
        self._start()
        with atomic_file(self._index_file()) as tmp:
            faiss.write_index(index, str(tmp))
        self._finish()

    def adopt(self, index_file: Path) -> None:
        """Keep an index written elsewhere (the knn stage's knn_work) by moving it here."""
        self._start()
        os.replace(index_file, self._index_file())
        self._finish()

    def _start(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / self.FINGERPRINT).unlink(missing_ok=True)

    def _finish(self) -> None:
        write_json_atomic(self.path / self.FINGERPRINT, self.fingerprint)
        self.saved = True

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def origin(self) -> str:
        """Where the searched index came from, for the summary."""
        if self.loaded:
            return f"loaded from {self.path}"
        return f"built here, kept in {self.path}" if self.saved else "built here"


def index_settings(p: Plan, cfg: KnnConfig) -> dict:
    """The settings that decide an approximate index's content (not how it is searched)."""
    s = {"index": p.kind, "seed": cfg.seed}
    if p.kind.startswith("ivf"):
        s.update(nlist=p.nlist, train_per_list=cfg.train_per_list, kmeans_iter=cfg.kmeans_iter, pq_m=p.pq_m)
    else:
        s.update(hnsw_m=cfg.hnsw_m, ef_construction=cfg.ef_construction)
    return s


def vectors_fingerprint(meta: dict) -> dict:
    """What identifies a vector store's content: its source (the embedding shards), dtype and shape."""
    return {key: meta.get(key) for key in ("source", "dtype", "rows", "dim")}


def kept_index(layout: RunLayout, vectors_meta: dict, p: Plan, cfg: KnnConfig, keep: bool = True) -> KeptIndex:
    """The run's KeptIndex for an approximate plan over its vector store."""
    return KeptIndex(layout.knn_index_dir, {"format": KEPT_FORMAT, "vectors": vectors_fingerprint(vectors_meta),
                                            "index": index_settings(p, cfg)}, keep)


# ---------------------------------------------------------------- entry points


def _recall(X, p: Plan, cfg: KnnConfig, lists: Callable[[np.ndarray], np.ndarray]) -> dict:
    """recall@k of the finished graph on the seeded sample (seed + 1: not the sample the tuning
    chose its setting on); `lists(rows)` returns the graph's (kq-wide) I of those rows."""
    rows = recall_rows(p.n, cfg.recall_queries, cfg.seed + 1)
    with Progress("knn recall (exact, tiled)", p.n, "rows", logger=log) as prog:
        _, exact = exact_topk(X, rows, p.kq, prog)
    r = recall_of(exact, lists(rows), rows, p.k, p.n)
    return {"recall_at_k": round(r, 4), "recall_queries": int(len(rows))}


def tune(searcher, X: np.ndarray, p: Plan, cfg: KnnConfig) -> dict:
    """Set the approximate index's search parameter (nprobe or ef_search) before the full search.

    Configured (> 0): that value, not changed. Else, on a seeded sample of recall_queries rows: the
    exact top k (tiled matrix products), then the sample searched at each value of the searcher's
    schedule, from the smallest, until recall@k reaches target_recall with the sample's own
    uncertainty taken off (its lower 95% bound: another sample, and the whole graph, then meet the
    target too); the first value that does is kept. Steps and timings go into the summary. A target that the whole schedule does not reach is
    a UserError naming the best recall and what gives more."""
    param = p.param
    fixed = cfg.nprobe if param == "nprobe" else cfg.ef_search
    if fixed > 0:
        value = searcher.set_param(fixed)
        log.info("knn: %s = %d as configured (not tuned)", param, value)
        return {"param": param, "value": value, "tuned": False}
    rows = recall_rows(p.n, cfg.recall_queries, cfg.seed)
    t0 = time.perf_counter()
    with Progress("knn tuning sample (exact, tiled)", p.n, "rows", logger=log) as prog:
        _, exact = exact_topk(X, rows, p.kq, prog)
    exact_ms = (time.perf_counter() - t0) / len(rows) * 1e3
    Q = take_rows(X, rows)
    steps = []
    for value in searcher.schedule():
        value = searcher.set_param(value)
        t1 = time.perf_counter()
        _, I = searcher.search(Q, p.kq)
        ms = (time.perf_counter() - t1) / len(rows) * 1e3
        r, low = recall_stats(exact, np.asarray(I), rows, p.k, p.n)
        steps.append({param: value, "recall": round(r, 4), "recall_low": round(low, 4), "ms_per_query": round(ms, 4)})
        log.info("knn tuning: %s %d -> recall@%d %.4f (95%% lower bound %.4f) on %d sample queries (%.3f ms a "
                 "query; exact %.3f)", param, value, p.k, r, low, len(rows), ms, exact_ms)
        if low >= cfg.target_recall:
            if ms > exact_ms:
                log.warning("knn: %s reaches recall %.4f only at %s %d, slower a query than exact search on the "
                            "sample (%.3f vs %.3f ms): index = flat would be exact and faster", p.kind, r, param,
                            value, ms, exact_ms)
            return {"param": param, "value": value, "tuned": True, "target_recall": cfg.target_recall,
                    "sample_queries": int(len(rows)), "sample_seed": cfg.seed, "exact_ms_per_query": round(exact_ms, 4),
                    "steps": steps}
    best = max(steps, key=lambda st: st["recall_low"])
    raise UserError(f"knn: {p.kind} reaches recall@{p.k} {best['recall']:.4f} at best ({param} {best[param]}, "
                    f"{len(rows)} sample queries), below target_recall {cfg.target_recall}; for more use index = "
                    f"flat (exact search{', on the GPU' if p.gpu else ''}), a GPU, a larger rerank_factor "
                    f"(now {cfg.rerank_factor}), or lower target_recall")


# the settings a finished graph records that decide how its index searches
MAP_SEARCH_KEYS = ("nlist", "rerank_factor", "train_per_list", "kmeans_iter", "pq_m", "hnsw_m", "ef_construction",
                   "seed", "target_recall")


def map_search_config(meta: dict, base: KnnConfig, n: int, dim: int) -> KnnConfig:
    """`base` with the search settings of a finished kNN graph (its edges' metadata), for searching
    the same vectors again (placement): where the index `base` plans is the graph's, its settings
    and its tuned nprobe / ef_search are taken as given (no second tuning); otherwise the graph's
    target_recall, and the new index is tuned to it."""
    import dataclasses

    if not meta:
        return base
    kind = make_plan(dataclasses.replace(base, gpu="never"), n, dim).kind
    if kind != meta.get("index"):
        return dataclasses.replace(base, target_recall=meta.get("target_recall", base.target_recall))
    given = {key: meta[key] for key in MAP_SEARCH_KEYS if key in meta}
    for param in ("nprobe", "ef_search"):
        if meta.get(param):
            given[param] = meta[param]
    return dataclasses.replace(base, **given)


def knn_edges(X: np.ndarray, cfg: KnnConfig) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The kNN lists of unit vectors X in memory (no checkpoints). Returns (summary, src, dst, similarity, rank)."""
    n, dim = X.shape
    p = make_plan(cfg, n, dim)
    searcher, build_s = make_searcher(X, p, cfg)
    t0 = time.perf_counter()
    tuning = tune(searcher, X, p, cfg) if p.param else None
    tune_s = time.perf_counter() - t0
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
               "build_s": round(build_s, 3), "tune_s": round(tune_s, 3), "search_s": round(search_s, 3)}
    if tuning:
        summary.update(_tuning_fields(tuning))
    if p.kind == "flat":
        summary["gpu_storage"] = searcher.storage
    else:
        summary.update(_recall(X, p, cfg, lambda rows: I[rows]))
    return summary, src, dst, sim, rank


def _tuning_fields(tuning: dict) -> dict:
    """The summary's view of tune()'s result: the value searched with, and the tuning record."""
    return {tuning["param"]: tuning["value"], "tuning": tuning}


def run_knn(cfg: KnnConfig, layout: RunLayout, on_block: Callable[[int], None] | None = None) -> dict:
    """The knn stage: vectors → index → tuning → resumable block search → edges table (+ summary metadata).

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
    fingerprint = {"format": WORK_FORMAT, "vectors": vectors_fingerprint(vec.meta),
                   "settings": settings}
    work = WorkDir(layout.knn_work_dir, fingerprint, cfg.resume)
    starts = list(range(0, p.n, cfg.block_size))
    done = sum(work.has(lo) for lo in starts)
    if done:
        log.info("knn: resuming, %d of %d query blocks already done in %s", done, len(starts), work.path)
    searcher, build_s = make_searcher(X, p, cfg, work)
    tuning, tune_s = None, 0.0
    if p.param:
        tuning = work.load_tuning()
        if tuning is None:   # a resumed search keeps the setting its saved blocks were searched with
            t = time.perf_counter()
            tuning = tune(searcher, X, p, cfg)
            tune_s = time.perf_counter() - t
            work.save_tuning(tuning)
        else:
            searcher.set_param(tuning["value"])
            log.info("knn: resuming with %s = %d (saved tuning)", tuning["param"], tuning["value"])
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
    storage = getattr(searcher, "storage", None)
    del searcher
    summary = {"papers": p.n, "dim": p.dim, "vector_dtype": vec.meta.get("dtype"), **settings, "gpu": p.gpu,
               "resumed_blocks": done, "blocks": len(starts), "load_s": round(load_s, 3),
               "build_s": round(build_s, 3), "tune_s": round(tune_s, 3), "search_s": round(search_s, 3)}
    if tuning:
        summary.update(_tuning_fields(tuning))
    if p.kind == "flat":
        summary["gpu_storage"] = storage
    else:
        t2 = time.perf_counter()
        summary.update(_recall(X, p, cfg, lambda rows: _lists_of(work, rows, cfg.block_size)))
        summary["recall_s"] = round(time.perf_counter() - t2, 3)
    for leftover in layout.root.glob(f".{layout.table('edges').name}.tmp-*"):  # a write killed half-way
        shutil.rmtree(leftover, ignore_errors=True)
    summary["edges"] = _write_edges(work, starts, p, layout, summary)
    if p.kind != "flat":
        kept = kept_index(layout, vec.meta, p, cfg)
        if cfg.keep_index and work.index_file("filled").is_file():
            kept.adopt(work.index_file("filled"))
            summary["index_kept"] = str(kept.path)
        elif not cfg.keep_index:
            kept.remove()
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
