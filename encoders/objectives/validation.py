"""Validation shared by the objectives that train on triplets: the objective's own loss, triplet
accuracy (the positive scores above the negative) overall and per negative kind, retrieval of
each anchor's positive among all validation candidates, ranked by the objective's own score, and the
geometry of the validation papers' vectors (alignment, uniformity, spectrum)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from encoders.objectives.batches import TripletBatch

if TYPE_CHECKING:
    from encoders.objectives.base import Objective


def retrieval_metrics(vectors: torch.Tensor, index: dict[str, int], data: dict, score_matrix) -> dict:
    """Rank each validation (anchor, positive) pair's positive among all validation candidates
    (every positive and negative paper) by `score_matrix` (higher = closer); the anchor itself and
    the anchor's other positives are left out of its list (filtered ranking). MRR and recall@1 / @5."""
    cand_ids = sorted(set(data["pi"]) | set(data["ni"]))
    if not cand_ids:
        return {}
    cand = torch.tensor([index[i] for i in cand_ids])
    col = {pid: j for j, pid in enumerate(cand_ids)}
    positives: dict[str, set[str]] = {}
    for a, p in zip(data["ai"], data["pi"]):
        positives.setdefault(a, set()).add(p)
    pairs = sorted({(a, p) for a, p in zip(data["ai"], data["pi"])})
    anchors = sorted(positives)
    scores = score_matrix(vectors[[index[a] for a in anchors]], vectors[cand])  # anchors x candidates
    row = {a: i for i, a in enumerate(anchors)}
    ranks = []
    for a, p in pairs:
        s = scores[row[a]].clone()
        skip = [col[x] for x in positives[a] - {p}] + ([col[a]] if a in col else [])
        s[skip] = float("-inf")
        ranks.append(1 + int((s > s[col[p]]).sum()))
    r = np.asarray(ranks, float)
    return {"pairs": len(pairs), "candidates": len(cand_ids), "mrr": float((1 / r).mean()),
            "recall@1": float((r <= 1).mean()), "recall@5": float((r <= 5).mean())}


@torch.inference_mode()
def evaluate(objective: Objective, enc, data: dict, batch_size: int = 32) -> dict:
    """The objective's loss, triplet accuracy and retrieval on `data`: ids (ai, pi, ni), kind, and
    `tokens` (paper id -> token ids; encoders.training.triplet_table). Each distinct paper is
    embedded once, in batches of `batch_size` padded to their longest."""
    n = len(data["ai"])
    if n == 0:
        return {"n": 0, "loss": None, "accuracy": None}
    order = list(dict.fromkeys(data["ai"] + data["pi"] + data["ni"]))
    index = {pid: i for i, pid in enumerate(order)}
    vec = torch.from_numpy(enc.encode_ids([data["tokens"][i] for i in order], batch_size))
    va, vp, vn = (vec[[index[i] for i in data[k]]] for k in ("ai", "pi", "ni"))
    correct = (objective.pair_scores(va, vp) > objective.pair_scores(va, vn)).numpy()
    tok = data["tokens"]
    batch = TripletBatch(data["ai"], data["pi"], data["ni"], [tok[i] for i in data["ai"]],
                         [tok[i] for i in data["pi"]], [tok[i] for i in data["ni"]])
    out = {"n": n, "loss": objective.validation_loss(va, vp, vn, batch), "accuracy": float(correct.mean())}
    kinds = np.asarray(data["kind"])
    for kind in sorted(set(data["kind"]) - {""}):
        out[f"accuracy_{kind}"] = float(correct[kinds == kind].mean())
    out.update(retrieval_metrics(vec, index, data, objective.score_matrix))
    out.update(geometry_figures(vec.numpy(), va.numpy(), vp.numpy()))
    return out


def geometry_figures(vectors, related_a, related_b) -> dict:
    """The geometry diagnostics (sciencemap.geometry, METHODS.md §7.2) of the validation papers'
    vectors, alignment over the (anchor, positive) pairs: "geometry_*" keys."""
    from sciencemap.geometry import geometry

    if len(vectors) < 2:
        return {}
    return {f"geometry_{k}": v for k, v in geometry(vectors, related_a, related_b).items() if k != "spectrum_dim"}
