"""FLeW's facet weights, searched on the simplex against a validation task (METHODS.md §8.3).

    python jobs/facets.py weights --run runs/x [--step 0.1] [--split val]

The task: each anchor of the run's triplets of that split (the seed's, so that every facet is tried on
the same queries) ranks every paper those triplets name (its own positives and negatives and the other
anchors'; itself left out) by Σ_f w_f · cos_f(anchor, candidate) over the run's `facets` view; the
relevant candidates are the ones it cites (the `references` table). Each weight triple on the grid
(positive multiples of `step` summing to 1) gets the mean average precision over anchors; the best is
printed with the whole table and written to `<run>/facet_weights.json`, ready for
`jobs/embed.py --facet-weights`. Ties go to the triple nearest to equal weights.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from sciencemap.contracts import FACETS, SPLIT_VAL
from sciencemap.runtime import UserError


def simplex(step: float = 0.1, k: int = len(FACETS)) -> list[tuple[float, ...]]:
    """Every k-tuple of positive multiples of `step` summing to 1, in lexicographic order."""
    n = round(1 / step)
    if n < k or abs(n * step - 1) > 1e-9:
        raise UserError(f"step {step} must divide 1 into at least {k} parts (e.g. 0.1)")

    def rec(left: int, slots: int):
        if slots == 1:
            yield (left,)
            return
        for i in range(1, left - slots + 2):
            for rest in rec(left - i, slots - 1):
                yield (i, *rest)
    return [tuple(round(i * step, 10) for i in t) for t in rec(n, k)]


def average_precision(scores: np.ndarray, relevant: np.ndarray) -> float:
    """AP of one ranking (scores desc; ties by index) with boolean relevance."""
    order = np.argsort(-scores, kind="stable")
    rel = relevant[order]
    if not rel.any():
        return 0.0
    hits = np.cumsum(rel)
    return float((hits[rel] / (np.flatnonzero(rel) + 1)).mean())


def mean_ap(cos: np.ndarray, relevant: np.ndarray, mask: np.ndarray, w) -> float:
    """MAP over the anchors with a relevant candidate, ranking by Σ_f w_f cos_f."""
    s = cos @ np.asarray(w, np.float64)
    aps = [average_precision(s[i][mask[i]], relevant[i][mask[i]]) for i in range(len(s)) if relevant[i][mask[i]].any()]
    return float(np.mean(aps)) if aps else 0.0


def search(cos: np.ndarray, relevant: np.ndarray, mask: np.ndarray, step: float = 0.1) -> list[dict]:
    """cos: anchors x candidates x facets cosines; relevant, mask (False = left out): anchors x candidates.
    Returns [{"weights", "map"}] for every grid triple, best first (ties: nearest to equal weights)."""
    rows = [{"weights": list(w), "map": mean_ap(cos, relevant, mask, w)} for w in simplex(step, cos.shape[2])]
    even = 1 / cos.shape[2]
    rows.sort(key=lambda r: (-round(r["map"], 12), sum((x - even) ** 2 for x in r["weights"])))
    return rows


def search_run(run: str | Path, step: float = 0.1, split: str = SPLIT_VAL) -> dict:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from sciencemap.embeddings import load_view
    from sciencemap.layout import RunLayout
    from sciencemap.storage import write_json_atomic

    layout = RunLayout(Path(run))
    t0 = time.time()
    ids, keys, X = load_view(layout, "facets")
    if list(keys[:len(FACETS)]) != list(FACETS):
        raise UserError(f"the run's 'facets' view has keys {sorted(set(keys.tolist()))}, not {list(FACETS)}")
    V = X.reshape(-1, len(FACETS), X.shape[1])
    V = V / np.maximum(np.linalg.norm(V, axis=2, keepdims=True), 1e-12)
    row = {pid: i for i, pid in enumerate(ids[::len(FACETS)].tolist())}
    trip = ds.dataset(str(layout.table("triplets"))).to_table(
        columns=["anchor_id", "positive_id", "negative_id", "split"] + (["facet"] if "facet" in
                                                                         ds.dataset(str(layout.table("triplets"))).schema.names else []))
    keep = pc.equal(trip["split"], split)
    if "facet" in trip.column_names:
        keep = pc.and_(keep, pc.is_null(trip["facet"]))
    trip = trip.filter(keep)
    anchors = sorted({a for a in trip["anchor_id"].to_pylist() if a in row})
    cands = sorted({p for c in ("anchor_id", "positive_id", "negative_id") for p in trip[c].to_pylist() if p in row})
    if not anchors:
        raise UserError(f"no {split} triplets whose papers have facet vectors in {layout.root}")
    refs = ds.dataset(str(layout.table("references"))).to_table(
        columns=["citing_id", "cited_id"], filter=ds.field("citing_id").isin(anchors))
    cited = set(zip(refs["citing_id"].to_pylist(), refs["cited_id"].to_pylist()))
    A, C = V[[row[a] for a in anchors]], V[[row[c] for c in cands]]
    cos = np.einsum("afd,cfd->acf", A, C)
    relevant = np.array([[(a, c) in cited for c in cands] for a in anchors])
    mask = np.array([[c != a for c in cands] for a in anchors])
    rows = search(cos, relevant, mask, step)
    equal = [1 / len(FACETS)] * len(FACETS)
    out = {"best": rows[0], "equal_weights": {"weights": equal, "map": mean_ap(cos, relevant, mask, equal)},
           "anchors": len(anchors), "candidates": len(cands), "split": split, "step": step, "grid": rows,
           "seconds": round(time.time() - t0, 2)}
    write_json_atomic(layout.root / "facet_weights.json", out)
    return out
