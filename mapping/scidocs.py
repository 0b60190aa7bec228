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
        out[qid][pid] = int(float(rel))
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


def map_ndcg(ranked: Sequence[str], relevant: Mapping[str, int] | Iterable[str]) -> tuple[float, float]:
    """Average precision and nDCG of one ranked candidate list. `relevant`: {pid: grade} or a set
    of relevant pids (grade 1). A query with no relevant candidate scores (0, 0)."""
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
            dcg += g / math.log2(i + 1)
    ideal = sorted(grades.values(), reverse=True)[:len(ranked)]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, 1))
    return ap / len(grades), (dcg / idcg if idcg > 0 else 0.0)


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


def evaluate_ranking(qrels: Mapping[str, Mapping[str, int]], emb: Mapping[str, np.ndarray]) -> dict:
    """SciDocs ranking task: MAP and nDCG (means over queries) for qrels and an id -> vector map.
    Queries or candidates without an embedding are skipped and counted."""
    aps, ndcgs, missing = [], [], 0
    for qid, cands in qrels.items():
        ids, lacking = _with_embedding(qid, cands, emb)
        missing += lacking
        if not ids:
            continue
        ranked = rank_by_l2(emb[qid], ids, np.stack([emb[p] for p in ids]))
        ap, nd = map_ndcg(ranked, {p: cands[p] for p in ids})
        aps.append(ap)
        ndcgs.append(nd)
    return {"map": float(np.mean(aps)) if aps else float("nan"),
            "ndcg": float(np.mean(ndcgs)) if ndcgs else float("nan"),
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
