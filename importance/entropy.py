"""Entropy weight method (METHODS.md §2) on Spark, plus a NumPy reference implementation.

Spark: one aggregation over the pairs table (min, max, Σx, Σx², Σ x ln x per feature; a second one
only for a feature whose minimum is not 0), e_j = (ln S_j − T_j / S_j) / ln n with S_j = Σ z and
T_j = Σ z ln z; a constant column gets entropy 1 and weight 0.
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
    from sciencemap.runtime import UserError

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


def stats_aggs(features: tuple[str, ...]) -> list:
    """Aggregate expressions whose results combine across groups by sum/min/max: per feature
    min, max, Σx, Σx², Σ x ln x. With min = 0 (every count feature in practice) they give
    the entropy in ONE pass: z = x/M, S = Σx/M, T = (Σ x ln x − ln M·Σx)/M (METHODS.md §2)."""
    from pyspark.sql import functions as F

    aggs = [F.count(F.lit(1)).alias("n")]
    for f in features:
        x = F.col(COLUMN[f]).cast("double")
        c = COLUMN[f]
        aggs += [F.min(x).alias(f"{c}_min"), F.max(x).alias(f"{c}_max"), F.sum(x).alias(f"{c}_sum"),
                 F.sum(x * x).alias(f"{c}_sq"), F.sum(F.when(x > 0, x * F.log(x)).otherwise(0.0)).alias(f"{c}_xlx")]
    return aggs


def combine_stats(rows: list[dict], features: tuple[str, ...]) -> dict:
    """Merge per-group stats_aggs rows (e.g. one per source) into one."""
    out = {"n": sum(r["n"] or 0 for r in rows)}
    for f in features:
        c = COLUMN[f]
        mins = [r[f"{c}_min"] for r in rows if r[f"{c}_min"] is not None]
        maxs = [r[f"{c}_max"] for r in rows if r[f"{c}_max"] is not None]
        out[f"{c}_min"] = min(mins) if mins else None
        out[f"{c}_max"] = max(maxs) if maxs else None
        for k in ("sum", "sq", "xlx"):
            out[f"{c}_{k}"] = sum(r[f"{c}_{k}"] or 0.0 for r in rows)
    return out


def weights_from_stats(st: dict, features: tuple[str, ...], method: str = "entropy", pairs=None) -> list[dict]:
    """Table 3 rows from combined stats. A feature whose minimum is not 0 needs Σ z ln z with its own
    shift: one more aggregation over `pairs` (never the case for counts and the 0/1 flag S)."""
    from pyspark.sql import functions as F

    from sciencemap.runtime import UserError

    if method not in WEIGHT_METHODS:
        raise UserError(f"weight method {method!r} is unknown; use one of {WEIGHT_METHODS}")
    n = st["n"]
    if n == 0:
        raise UserError("the pairs table is empty: no references resolved to cited ids; check the ingest output")
    shifted = [f for f in features if st[f"{COLUMN[f]}_min"] not in (0, 0.0, None)
               and st[f"{COLUMN[f]}_max"] != st[f"{COLUMN[f]}_min"]]
    extra = {}
    if shifted:
        if pairs is None:
            raise ValueError("a feature with a non-zero minimum needs the pairs DataFrame")
        aggs = []
        for f in shifted:
            c = COLUMN[f]
            lo, span = st[f"{c}_min"], st[f"{c}_max"] - st[f"{c}_min"]
            z = (F.col(c).cast("double") - F.lit(lo)) / F.lit(span)
            aggs += [F.sum(z).alias(f"{c}_S"), F.sum(F.when(z > 0, z * F.log(z)).otherwise(0.0)).alias(f"{c}_T")]
        extra = pairs.agg(*aggs).first().asDict()
    rows = []
    for f in features:
        c = COLUMN[f]
        lo, hi = st[f"{c}_min"], st[f"{c}_max"]
        mean = st[f"{c}_sum"] / n
        var = max(0.0, st[f"{c}_sq"] / n - mean * mean)
        ent = 1.0
        if hi is not None and hi != lo and n > 1:
            if f in shifted:
                S, T = extra[f"{c}_S"], extra[f"{c}_T"]
            else:  # lo == 0: z = x / hi
                S = st[f"{c}_sum"] / hi
                T = (st[f"{c}_xlx"] - math.log(hi) * st[f"{c}_sum"]) / hi
            ent = (math.log(S) - T / S) / math.log(n)
        rows.append({"feature": f, "mean": float(mean), "std": float(math.sqrt(var)), "entropy": float(ent),
                     "weight": 0.0, "min": lo, "max": hi})
    if method == "entropy":
        d = [1 - r["entropy"] for r in rows]
        tot = sum(d)
        for r, dj in zip(rows, d):
            r["weight"] = dj / tot if tot > 0 else 0.0
    else:
        for r in rows:
            r["weight"] = 1.0 / len(rows)
    return rows


def weights_table(pairs, features: tuple[str, ...], method: str = "entropy") -> list[dict]:
    """Table 3 rows (feature, mean, std, entropy, weight): one Spark aggregation (two when a
    feature's minimum is not 0)."""
    from sciencemap.runtime import UserError

    if method not in WEIGHT_METHODS:
        raise UserError(f"weight method {method!r} is unknown; use one of {WEIGHT_METHODS}")
    st = pairs.agg(*stats_aggs(features)).first().asDict()
    return weights_from_stats(st, features, method, pairs)


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
