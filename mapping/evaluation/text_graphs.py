"""Text and vector k-NN relatedness graphs on the evaluated papers (METHODS.md §6.2).

- TF-IDF: scikit-learn's TfidfVectorizer over title + abstract (lower-cased, English stop words
  removed, smoothed idf, sublinear tf 1 + ln tf, unit rows); relatedness = cosine.
- BM25 (Okapi, Lucene's idf ln(1 + (N - df + 0.5) / (df + 0.5)), k1 = 1.2, b = 0.75): each paper's
  distinct terms are the query, every other paper a document; score(i -> j) = Σ_{t ∈ i} idf(t) ·
  tf_tj (k1 + 1) / (tf_tj + k1 (1 - b + b |d_j| / avgdl)). The 20-NN lists follow the query side;
  the graph keeps a pair at its larger score (kNN symmetrisation, as for the encoders).
- Criterion relatedness (the ceiling): the criterion's own unit vectors (e.g. MeSH), cosine.
- Encoder vectors: cosine k-NN with FAISS (mapping.knn, exact).

All sparse ones share `sparse_topk`: blocks of query rows times the whole matrix as a sparse
product (only pairs sharing a term are ever formed), each row's k best kept; memory is one
block's product. Terms in more than `max_df` of the papers are dropped first (they relate
everything to everything and make the product dense; 0.5 by default, as common for BM25 runs
over PubMed). Ties are broken by the lower row number, so graphs are deterministic.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mapping.evaluation.relatedness import RelGraph, from_pairs
from sciencemap.progress import Progress



def _counts(texts: list[str], max_df: float, stop_words="english"):
    from sklearn.feature_extraction.text import CountVectorizer

    cv = CountVectorizer(lowercase=True, stop_words=stop_words, max_df=max_df, min_df=1, dtype=np.float64)
    return cv.fit_transform(texts).tocsr()


def sparse_topk(Q: sp.csr_matrix, D: sp.csr_matrix, k: int, block_pairs: int = 20_000_000,
                label: str = "sparse k-NN") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each query row's k highest scores Q_i · D_j over j ≠ i (scores > 0 only), as directed
    (src, dst, score) arrays. Query rows are taken in blocks sized so that a block's product holds
    about `block_pairs` nonzeros (estimated from the term document frequencies)."""
    n = Q.shape[0]
    DT = D.T.tocsr()
    df = np.diff(DT.indptr).astype(np.float64)                 # documents per term
    est = np.asarray(Q.astype(bool).astype(np.float64) @ df).ravel()   # pairs each query row forms
    srcs, dsts, vals = [], [], []
    lo = 0
    with Progress(label, n, "papers") as p:
        while lo < n:
            hi = lo + 1 + int(np.searchsorted(np.cumsum(est[lo:]), block_pairs))
            hi = min(n, max(hi, lo + 1))
            S = (Q[lo:hi] @ DT).tocoo()
            r, c, v = S.row.astype(np.int64) + lo, S.col.astype(np.int64), S.data
            ok = (r != c) & (v > 0)
            r, c, v = r[ok], c[ok], v[ok]
            order = np.lexsort((c, -v, r))                      # by row, best first, ties: lower column
            r, c, v = r[order], c[order], v[order]
            start = np.searchsorted(r, r, side="left")
            keep = (np.arange(len(r)) - start) < k
            srcs.append(r[keep])
            dsts.append(c[keep])
            vals.append(v[keep])
            p.advance(hi - lo)
            lo = hi
    cat = lambda xs, t: np.concatenate(xs).astype(t) if xs else np.zeros(0, t)
    return cat(srcs, np.int64), cat(dsts, np.int64), cat(vals, np.float64)


def _unit(X: sp.csr_matrix) -> sp.csr_matrix:
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return (sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ X).tocsr()


def tfidf_graph(texts: list[str], k: int = 20, max_df: float = 0.5, name: str = "tfidf") -> RelGraph:
    from sklearn.feature_extraction.text import TfidfTransformer

    C = _counts(texts, max_df)
    X = TfidfTransformer(norm="l2", use_idf=True, smooth_idf=True, sublinear_tf=True).fit_transform(C).tocsr()
    s, d, v = sparse_topk(X, X, k, label="TF-IDF k-NN")
    return from_pairs(name, s, d, v, len(texts), k=k, terms=int(X.shape[1]), max_df=max_df)


def bm25_weights(C: sp.csr_matrix, k1: float = 1.2, b: float = 0.75) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(query side, document side) of BM25 as sparse matrices: Q = the distinct terms of each
    paper (1s), D = idf(t) · tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl)); score = Q · Dᵀ."""
    n = C.shape[0]
    df = np.bincount(C.indices, minlength=C.shape[1]).astype(np.float64)
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    dl = np.asarray(C.sum(axis=1)).ravel()
    avgdl = float(dl.mean()) if n else 1.0
    rows = np.repeat(np.arange(n), np.diff(C.indptr))
    tf = C.data
    norm = k1 * (1 - b + b * dl[rows] / (avgdl if avgdl > 0 else 1.0))
    D = sp.csr_matrix((idf[C.indices] * tf * (k1 + 1) / (tf + norm), C.indices, C.indptr), shape=C.shape)
    Q = sp.csr_matrix((np.ones_like(tf), C.indices, C.indptr), shape=C.shape)
    return Q, D


def bm25_graph(texts: list[str], k: int = 20, k1: float = 1.2, b: float = 0.75, max_df: float = 0.5,
               name: str = "bm25") -> RelGraph:
    C = _counts(texts, max_df)
    Q, D = bm25_weights(C, k1, b)
    s, d, v = sparse_topk(Q, D, k, label="BM25 k-NN")
    return from_pairs(name, s, d, v, len(texts), k=k, k1=k1, b=b, terms=int(C.shape[1]), max_df=max_df)


def criterion_graph(V: sp.csr_matrix, rows: np.ndarray, n_focal: int, k: int = 20, name: str = "criterion") -> RelGraph:
    """k-NN by the criterion's own relatedness (cosine of its unit vectors V, whose row i is focal
    paper rows[i]): the best any relatedness can do on this criterion."""
    s, d, v = sparse_topk(V, V, k, label="criterion k-NN")
    rows = np.asarray(rows, np.int64)
    return from_pairs(name, rows[s], rows[d], v, n_focal, k=k)


def vector_graph(X: np.ndarray, k: int = 20, name: str = "encoder") -> RelGraph:
    """Exact cosine k-NN of dense vectors (FAISS flat inner product over unit rows)."""
    from mapping.knn import KnnConfig, knn_edges
    from sciencemap.vectors import unit_rows

    Xn = np.ascontiguousarray(unit_rows(np.asarray(X, np.float32)))
    _, s, d, sim, _ = knn_edges(Xn, KnnConfig(k=k, index="flat", gpu="never"))
    return from_pairs(name, s, d, sim, len(Xn), k=k)


def random_regular_graph(n: int, k: int = 20, seed: int = 0, name: str = "random") -> RelGraph:
    """A random k-regular graph (igraph's K_Regular, seeded; the floor: degree like a k-NN graph,
    no relatedness). Falls back to k - 1 when n·k is odd."""
    import random

    import igraph as ig

    k = min(k, n - 1)
    if (n * k) % 2:
        k -= 1
    random.seed(seed)
    ig.set_random_number_generator(random)
    g = ig.Graph.K_Regular(n, k, directed=False, multiple=False)
    e = np.asarray(g.get_edgelist(), np.int64).reshape(-1, 2)
    return from_pairs(name, e[:, 0], e[:, 1], np.ones(len(e)), n, k=k, seed=seed)
