"""Full-text paragraph retrieval (issue 31; METHODS.md §7.3): each section chunk of a set of held-out
papers queries all the other chunks; a hit is a chunk of the same paper, and, harder, a chunk of the
same paper from another of its sections.

- recall@k, same paper: the share of queries with a chunk of their own paper among their k nearest;
  over the queries whose paper has another chunk in the set;
- recall@k, other section: the share with a chunk of their own paper *from another section* among the
  k nearest; over the queries whose paper has chunks of at least two sections in the set.

Nearest by cosine of dense vectors (`dense_topk`, exact, in blocks of queries) or by BM25 over the
chunks' words (`bm25_topk`: text_graphs' weights and sparse top-k); the query itself is never its own
neighbour, ties go to the lower row. A query with fewer than k scored neighbours (BM25 with no shared
term) misses what it lacks.
"""
from __future__ import annotations

import numpy as np

KS = (1, 3)
BLOCK = 1024


def dense_topk(X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's k most cosine-similar other rows, best first: directed (src, dst, score) arrays."""
    U = np.asarray(X, np.float64)
    U = U / np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-12)
    n = len(U)
    k = min(k, n - 1)
    src, dst, val = [], [], []
    for lo in range(0, n, BLOCK):
        S = U[lo:lo + BLOCK] @ U.T
        rows = np.arange(lo, min(lo + BLOCK, n))
        S[rows - lo, rows] = -np.inf
        order = np.argsort(-S, axis=1, kind="stable")[:, :k]     # stable: ties to the lower row
        src.append(np.repeat(rows, k))
        dst.append(order.ravel())
        val.append(np.take_along_axis(S, order, axis=1).ravel())
    cat = lambda xs, t: np.concatenate(xs).astype(t) if xs else np.zeros(0, t)  # noqa: E731
    return cat(src, np.int64), cat(dst, np.int64), cat(val, np.float64)


def bm25_topk(texts: list[str], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each chunk's k best other chunks by BM25 (k1 1.2, b 0.75; English stop words out), best first."""
    from mapping.evaluation.text_graphs import _counts, bm25_weights, sparse_topk

    C = _counts(texts, max_df=1.0)
    Q, D = bm25_weights(C)
    return sparse_topk(Q, D, k, label="BM25 chunk top-k")


def paragraph_recall(src: np.ndarray, dst: np.ndarray, paper, section, ks=KS, queries=None) -> dict:
    """recall@k of a same-paper chunk and of an other-section chunk of the same paper (see the module doc),
    from directed neighbour lists (src, dst), grouped by src in ascending order, best first within;
    `queries`: a boolean mask of the chunks whose queries count (all by default; they still rank every chunk)."""
    paper, section = np.asarray(paper, object), np.asarray(section, object)
    n = len(paper)
    _, paper_no = np.unique(paper, return_inverse=True)
    chunks_of = np.bincount(paper_no, minlength=paper_no.max() + 1 if n else 0)
    sections_of = {}
    for p, s in zip(paper_no, section):
        sections_of.setdefault(p, set()).add(s)
    counted = np.ones(n, bool) if queries is None else np.asarray(queries, bool)
    has_other_chunk = (chunks_of[paper_no] > 1) & counted
    has_other_section = np.asarray([len(sections_of[p]) > 1 for p in paper_no], bool) & counted
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    rank = np.arange(len(src)) - np.searchsorted(src, src, side="left")     # place in its query's list
    same = paper_no[dst] == paper_no[src]
    other = same & (section[dst] != section[src])
    out = {"chunks": n, "papers": int(len(chunks_of)), "queries_same_paper": int(has_other_chunk.sum()),
           "queries_other_section": int(has_other_section.sum())}
    for k in ks:
        within = rank < k
        hit_same = np.zeros(n, bool)
        hit_same[src[within & same]] = True
        hit_other = np.zeros(n, bool)
        hit_other[src[within & other]] = True
        out[f"recall@{k}_same_paper"] = float(hit_same[has_other_chunk].mean()) if has_other_chunk.any() else None
        out[f"recall@{k}_other_section"] = float(hit_other[has_other_section].mean()) if has_other_section.any() else None
    return out
