"""Entropy weight method (METHODS.md §2) on Spark, plus a NumPy reference implementation.

Spark: two aggregations over the pairs table (min/max/mean/std, then S_j = Σ z and T_j = Σ z ln z),
e_j = (ln S_j − T_j / S_j) / ln n; a constant column gets entropy 1 and weight 0.
"""
from __future__ import annotations

import math

import numpy as np

FEATURES = ("I", "M", "R", "D", "S")
COLUMN = {"I": "f_I", "M": "f_M", "R": "f_R", "D": "f_D", "O": "f_O", "S": "S"}
FEATURE_SETS = {
    "default": ("I", "R", "D", "S"),   # = all without M (the seed paper's choice)
    "all": ("I", "M", "R", "D", "S"),
    "no_I": ("M", "R", "D", "S"), "no_M": ("I", "R", "D", "S"), "no_R": ("I", "M", "D", "S"),
    "no_D": ("I", "M", "R", "S"), "no_S": ("I", "M", "R", "D"),
}
WEIGHT_METHODS = ("entropy", "uniform")


def feature_set(name: str) -> tuple[str, ...]:
    """A named set, or an explicit comma list such as "I,R,D,S"."""
    from importance.runtime import UserError

    if name in FEATURE_SETS:
        return FEATURE_SETS[name]
    parts = tuple(p.strip() for p in name.split(",") if p.strip())
    if parts and all(p in COLUMN for p in parts):
        return parts
    raise UserError(f"feature set {name!r} is unknown; use one of {sorted(FEATURE_SETS)} or a list like 'I,R,D,S'")


def entropy_weights_numpy(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reference implementation, step by step as in METHODS.md §2: returns (entropy, weight)."""
    x = np.asarray(x, dtype=float)
    n, m = x.shape
    e = np.ones(m)
    for j in range(m):
        lo, hi = x[:, j].min(), x[:, j].max()
        if hi == lo:
            continue
        z = (x[:, j] - lo) / (hi - lo)
        p = z / z.sum()
        nz = p[p > 0]
        e[j] = -(nz * np.log(nz)).sum() / math.log(n)
    d = 1 - e
    w = d / d.sum() if d.sum() > 0 else np.zeros(m)
    return e, w


def weights_table(pairs, features: tuple[str, ...], method: str = "entropy") -> list[dict]:
    """Table 3 rows (feature, mean, std, entropy, weight) from two Spark aggregations."""
    from pyspark.sql import functions as F

    from importance.runtime import UserError

    if method not in WEIGHT_METHODS:
        raise UserError(f"weight method {method!r} is unknown; use one of {WEIGHT_METHODS}")
    cols = [COLUMN[f] for f in features]
    aggs = [F.count(F.lit(1)).alias("n")]
    for c in cols:
        aggs += [F.min(c).cast("double").alias(f"{c}_min"), F.max(c).cast("double").alias(f"{c}_max"),
                 F.mean(c).alias(f"{c}_mean"), F.stddev_pop(c).alias(f"{c}_std")]
    s1 = pairs.agg(*aggs).first()
    n = s1["n"]
    if n == 0:
        raise UserError("the pairs table is empty: no references resolved to cited ids; check the ingest output")
    aggs2 = []
    for c in cols:
        lo, hi = s1[f"{c}_min"], s1[f"{c}_max"]
        span = (hi - lo) if hi is not None and hi != lo else None
        if span is None:
            continue
        z = (F.col(c).cast("double") - F.lit(lo)) / F.lit(span)
        aggs2 += [F.sum(z).alias(f"{c}_S"), F.sum(F.when(z > 0, z * F.log(z)).otherwise(F.lit(0.0))).alias(f"{c}_T")]
    s2 = pairs.agg(*aggs2).first() if aggs2 else {}
    rows = []
    for f, c in zip(features, cols):
        ent = 1.0
        if s1[f"{c}_max"] != s1[f"{c}_min"] and n > 1:
            S, T = s2[f"{c}_S"], s2[f"{c}_T"]
            ent = (math.log(S) - T / S) / math.log(n)
        rows.append({"feature": f, "mean": float(s1[f"{c}_mean"]), "std": float(s1[f"{c}_std"] or 0.0),
                     "entropy": float(ent), "weight": 0.0, "min": s1[f"{c}_min"], "max": s1[f"{c}_max"]})
    if method == "entropy":
        d = [1 - r["entropy"] for r in rows]
        tot = sum(d)
        for r, dj in zip(rows, d):
            r["weight"] = dj / tot if tot > 0 else 0.0
    else:
        for r in rows:
            r["weight"] = 1.0 / len(rows)
    return rows


def score(pairs, rows: list[dict], scaled: bool = False):
    """importance = Σ w_j x_j on raw counts (default) or on min–max scaled values (option)."""
    from pyspark.sql import functions as F

    expr = F.lit(0.0)
    for r in rows:
        x = F.col(COLUMN[r["feature"]]).cast("double")
        if scaled:
            span = (r["max"] or 0) - (r["min"] or 0)
            x = (x - F.lit(r["min"])) / F.lit(span) if span else F.lit(0.0)
        expr = expr + F.lit(r["weight"]) * x
    return pairs.withColumn("importance", expr)


def format_table3(rows: list[dict]) -> str:
    lines = [f"{'feature':<8}{'mean':>10}{'std':>10}{'entropy':>10}{'weight':>10}"]
    for r in rows:
        lines.append(f"{r['feature']:<8}{r['mean']:>10.4f}{r['std']:>10.4f}{r['entropy']:>10.4f}{100 * r['weight']:>9.2f}%")
    return "\n".join(lines)
