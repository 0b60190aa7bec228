"""SciDocs-protocol evaluators (METHODS.md §7): file formats, L2 ranking, MAP / nDCG, linear-SVM F1.

File formats are SciDocs' own, so a user who has the real SciDocs data gets comparable numbers:
- embeddings JSONL: one `{"paper_id": ..., "embedding": [floats]}` object per line;
- qrels: whitespace-separated `qid 0 pid rel` lines (rel > 0 = relevant, 0 = a non-relevant
  candidate; every listed pid is a candidate of that query).

Ranking (cite, co-cite, co-view, co-read): each query's candidates are ranked by ascending L2
distance between the query's and the candidate's embeddings. MAP is the mean over queries of
average precision (binary relevance: rel > 0); nDCG uses the graded rel with gain rel and the
log2(rank + 1) discount, normalised by the ideal ordering, over the full candidate list (SciDocs
computes it with pytrec_eval's `ndcg`, which is the same quantity).
Classification: LinearSVC on frozen embeddings, C chosen on a grid by 3-fold CV (macro-F1).
Graded ranking (not a SciDocs task; for importance): each query's candidates carry a real grade
(e.g. a reference's importance to the citing paper); Spearman's rho between grade and closeness
(negative L2 distance), and nDCG with the grades as gains.

Also here, for `mapping/evaluation/benchmarks.py` (the official release files of SciDocs, CSFCube, RELISH and
SciRepEval): trec_eval-style scoring (`evaluate_ranking(..., trec=True)`: a judged candidate with no
embedding stays in AP's denominator and in the ideal DCG, as when trec_eval scores a run that omits
it), precision at k, the CSFCube per-query pool metrics (`pool_metrics`), SciDocs' own MAG/MeSH
protocol (`svm_test_f1`) and the recommendation click metrics (`click_metrics`).
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from sciencemap.runtime import UserError

C_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2)


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """`qid 0 pid rel` lines -> {qid: {pid: rel}}. Blank lines are skipped."""
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 4:
            raise UserError(f"{path} line {n} has {len(parts)} fields; qrels lines are 'qid 0 pid rel'")
        qid, _, pid, rel = parts
        try:
            out[qid][pid] = int(float(rel))
        except ValueError:
            raise UserError(f"{path} line {n}: relevance {rel!r} is not a number") from None
    return dict(out)


def write_qrels(path: str | Path, qrels: Mapping[str, Mapping[str, int]]) -> None:
    lines = [f"{q} 0 {p} {int(r)}" for q in sorted(qrels) for p, r in sorted(qrels[q].items())]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_embeddings_jsonl(path: str | Path) -> dict[str, np.ndarray]:
    """SciDocs embeddings JSONL -> {paper_id: float32 vector}."""
    out: dict[str, np.ndarray] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            if "paper_id" not in rec or "embedding" not in rec:
                raise UserError(f"{path} line {n} lacks paper_id or embedding; "
                                'each line must be {"paper_id": ..., "embedding": [...]}')
            out[str(rec["paper_id"])] = np.asarray(rec["embedding"], np.float32)
    return out


def write_embeddings_jsonl(path: str | Path, ids: Sequence[str], X: np.ndarray) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for pid, v in zip(ids, np.asarray(X, np.float32)):
            f.write(json.dumps({"paper_id": pid, "embedding": [round(float(x), 6) for x in v]}) + "\n")


def map_ndcg(ranked: Sequence[str], relevant: Mapping[str, int] | Iterable[str],
             k: int | None = None) -> tuple[float, float]:
    """Average precision and nDCG (nDCG@k when k is given) of one ranked candidate list.
    `relevant`: {pid: grade} or a set of relevant pids (grade 1); relevant pids absent from `ranked`
    count as never retrieved (AP's denominator, the ideal DCG), as trec_eval counts them.
    A query with no relevant candidate scores (0, 0)."""
    grades = dict(relevant) if isinstance(relevant, Mapping) else {p: 1 for p in relevant}
    grades = {p: g for p, g in grades.items() if g > 0}
    if not grades:
        return 0.0, 0.0
    hits, ap, dcg = 0, 0.0, 0.0
    for i, pid in enumerate(ranked, 1):
        g = grades.get(pid, 0)
        if g > 0:
            hits += 1
            ap += hits / i
            if k is None or i <= k:
                dcg += g / math.log2(i + 1)
    ideal = sorted(grades.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, 1))
    return ap / len(grades), (dcg / idcg if idcg > 0 else 0.0)


def precision_at(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Relevant pids among the first k, over k (trec_eval's P_k: a short list still divides by k)."""
    rel = set(relevant)
    return sum(p in rel for p in ranked[:k]) / k


def rank_by_l2(query: np.ndarray, cand_ids: Sequence[str], cand_vecs: np.ndarray) -> list[str]:
    """Candidates by ascending L2 distance to the query (ties: input order)."""
    d = np.linalg.norm(np.asarray(cand_vecs, np.float64) - np.asarray(query, np.float64)[None, :], axis=1)
    return [cand_ids[i] for i in np.argsort(d, kind="stable")]


def _with_embedding(qid: str, cands: Mapping[str, float], emb: Mapping[str, np.ndarray]) -> tuple[list[str], int]:
    """A query's candidates that have an embedding, and how many ids lack one (no query
    embedding: no candidates, and the query counts as the one missing id)."""
    if qid not in emb:
        return [], 1
    ids = [p for p in cands if p in emb]
    return ids, len(cands) - len(ids)


def rank_queries(qrels: Mapping[str, Mapping[str, float]], emb: Mapping[str, np.ndarray]
                 ) -> tuple[dict[str, list[str]], int]:
    """{qid: its embedded candidates by ascending L2 distance} and how many ids lacked an embedding
    (a query without one is left out and counts as one)."""
    out, missing = {}, 0
    for qid, cands in qrels.items():
        ids, lacking = _with_embedding(qid, cands, emb)
        missing += lacking
        if ids:
            out[qid] = rank_by_l2(emb[qid], ids, np.stack([emb[p] for p in ids]))
    return out, missing


def evaluate_ranking(qrels: Mapping[str, Mapping[str, int]], emb: Mapping[str, np.ndarray],
                     trec: bool = False, ndcg_k: int | None = None, precision_k: Sequence[int] = ()) -> dict:
    """SciDocs ranking task: MAP and nDCG (means over queries) for qrels and an id -> vector map.
    Queries or candidates without an embedding are skipped and counted. trec=True scores as
    trec_eval does a run that lacks those candidates: a relevant one still counts as not retrieved.
    `ndcg_k` cuts nDCG at k; each k in `precision_k` adds "P_k"."""
    ranked, missing = rank_queries(qrels, emb)
    aps, ndcgs, precs = [], [], {k: [] for k in precision_k}
    for qid, order in ranked.items():
        judged = qrels[qid] if trec else {p: qrels[qid][p] for p in order}
        ap, nd = map_ndcg(order, judged, ndcg_k)
        aps.append(ap)
        ndcgs.append(nd)
        for k in precision_k:
            precs[k].append(precision_at(order, [p for p, r in judged.items() if r > 0], k))
    mean = lambda v: float(np.mean(v)) if v else float("nan")  # noqa: E731
    return {"map": mean(aps), "ndcg": mean(ndcgs), **{f"P_{k}": mean(v) for k, v in precs.items()},
            "queries": len(aps), "missing": missing}


def svm_macro_f1(X: np.ndarray, y: Sequence, c_grid: Sequence[float] = C_GRID, folds: int = 3,
                 seed: int = 0) -> dict:
    """SciDocs classification: LinearSVC, C picked by the best mean macro-F1 over stratified
    `folds`-fold CV; returns that macro-F1 (mean over folds) and the C."""
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.svm import LinearSVC

    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    best = (-1.0, None, None)
    for c in c_grid:
        s = cross_val_score(LinearSVC(C=c, max_iter=5000), X, np.asarray(y), cv=cv, scoring="f1_macro")
        if s.mean() > best[0]:
            best = (float(s.mean()), float(c), float(s.std()))
    return {"macro_f1": best[0], "C": best[1], "fold_std": best[2], "n": int(len(y)),
            "classes": int(len(set(y)))}


def svm_test_f1(X_train: np.ndarray, y_train: Sequence, X_test: np.ndarray, y_test: Sequence,
                c_grid: Sequence[float] = C_GRID, folds: int = 3) -> dict:
    """SciDocs' MAG/MeSH protocol: LinearSVC (squared hinge, random_state 42) with C picked on the
    training set by `folds`-fold grid search (scored, as a plain GridSearchCV is, by accuracy), refit
    on all of it, and macro-F1 of its predictions on the test set."""
    from sklearn.metrics import f1_score
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import LinearSVC

    grid = GridSearchCV(LinearSVC(loss="squared_hinge", random_state=42, max_iter=10000),
                        {"C": list(c_grid)}, cv=folds)
    grid.fit(np.asarray(X_train), np.asarray(y_train))
    pred = grid.predict(np.asarray(X_test))
    return {"macro_f1": float(f1_score(np.asarray(y_test), pred, average="macro")),
            "C": float(grid.best_params_["C"]), "train": int(len(y_train)), "test": int(len(y_test))}


def pool_metrics(grades: Sequence[float], threshold: float, k: int = 20) -> dict:
    """CSFCube's per-query metrics of one ranked pool, given the gold grades in rank order.
    Binary relevance is grade >= threshold (AP, R-precision, P@k, recall@k, reciprocal rank);
    the nDCGs use the grades as gains with CSFCube's DCG, which leaves rank 1 *and* rank 2
    undiscounted (gain / log2(rank) from rank 2 on), over the whole pool, the top k, and the top
    20 % of the pool ("ndcg%20"). R-precision is CSFCube's: precision at the rank of the last
    relevant candidate."""
    g = np.asarray(grades, np.float64)
    rel = g >= threshold
    n, n_rel = len(g), int(rel.sum())
    hit_ranks = np.flatnonzero(rel) + 1

    def ndcg(cut: int) -> float:
        def dcg(v):
            v = v[:cut]
            return float(v[0] + np.sum(v[1:] / np.log2(np.arange(2, len(v) + 1)))) if len(v) else 0.0
        best = dcg(np.sort(g)[::-1])
        return dcg(g) / best if best else 0.0

    return {"av_precision": float(np.mean(np.arange(1, n_rel + 1) / hit_ranks)) if n_rel else 0.0,
            "r_precision": n_rel / hit_ranks[-1] if n_rel else 0.0,
            "precision": float(rel[:k].sum()) / k,
            "recall": float(rel[:k].sum()) / n_rel if n_rel else 0.0,
            "reciprocal_rank": 1.0 / hit_ranks[0] if n_rel else 0.0,
            "ndcg": ndcg(n), f"ndcg@{k}": ndcg(k), "ndcg%20": ndcg(int(0.2 * n))}


def click_metrics(clicks: Sequence[tuple[str, str, Sequence[str]]], emb: Mapping[str, np.ndarray],
                  propensity: Sequence[float]) -> dict:
    """SciDocs recommendation metrics for (query, clicked, shown candidates in display order) with
    candidates scored by closeness (-L2) to the query: per click, nDCG = 1/log2(2 + a) and P@1 =
    [a == 0], a = candidates scored above the clicked one (ties count half). The adjusted means
    weight each click by 1 / propensity of its display position (propensities rescaled to mean 1).
    Clicks whose query or clicked paper has no embedding, and shown candidates without one, are
    skipped and counted."""
    prop = np.asarray(propensity, np.float64)
    prop = prop * len(prop) / prop.sum()
    nd, p1, w, missing = [], [], [], 0
    for query, clicked, shown in clicks:
        if query not in emb or clicked not in emb:
            missing += 1
            continue
        others = [c for c in shown if c != clicked and c in emb]
        missing += sum(c != clicked and c not in emb for c in shown)
        q = np.asarray(emb[query], np.float64)
        d_click = np.linalg.norm(np.asarray(emb[clicked], np.float64) - q)
        d = np.array([np.linalg.norm(np.asarray(emb[c], np.float64) - q) for c in others])
        above = float(np.sum(d < d_click) + 0.5 * np.sum(d == d_click))
        nd.append(1 / math.log2(2 + above))
        p1.append(float(above == 0))
        pos = list(shown).index(clicked)
        if pos >= len(prop):
            raise UserError(f"a click at display position {pos + 1} has no propensity score "
                            f"(only {len(prop)} given)")
        w.append(1 / prop[pos])
    if not nd:
        return {"adj_ndcg": float("nan"), "adj_p1": float("nan"), "ndcg": float("nan"), "p1": float("nan"),
                "clicks": 0, "missing": missing}
    return {"adj_ndcg": float(np.average(nd, weights=w)), "adj_p1": float(np.average(p1, weights=w)),
            "ndcg": float(np.mean(nd)), "p1": float(np.mean(p1)), "clicks": len(nd), "missing": missing}


def evaluate_graded(graded: Mapping[str, Mapping[str, float]], emb: Mapping[str, np.ndarray]) -> dict:
    """Mean over queries of Spearman's rho(grade, -L2 distance) and of nDCG (gain = grade).
    Only queries with at least two candidates of distinct grades count (rho is undefined else)."""
    from scipy.stats import spearmanr

    rhos, ndcgs, missing = [], [], 0
    for qid, cands in graded.items():
        ids, lacking = _with_embedding(qid, cands, emb)
        missing += lacking
        grades = np.array([cands[p] for p in ids], np.float64)
        if len(ids) < 2 or np.all(grades == grades[0]):
            continue
        vecs = np.stack([emb[p] for p in ids]).astype(np.float64)
        dist = np.linalg.norm(vecs - np.asarray(emb[qid], np.float64)[None, :], axis=1)
        rhos.append(float(spearmanr(grades, -dist).statistic))
        ndcgs.append(map_ndcg(rank_by_l2(emb[qid], ids, vecs), dict(zip(ids, grades)))[1])
    return {"rho": float(np.mean(rhos)) if rhos else float("nan"),
            "ndcg": float(np.mean(ndcgs)) if ndcgs else float("nan"),
            "queries": len(rhos), "missing": missing}
