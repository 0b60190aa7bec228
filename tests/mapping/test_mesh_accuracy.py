"""MeSH accuracy: O(nnz) formula vs the N×N definition, IC, granularity, relative accuracy."""
from __future__ import annotations

import numpy as np
import pytest

from mapping.mesh_accuracy import (accuracy, accuracy_bruteforce, granularity, information_content,
                                   publication_vectors, relative_accuracy)


def _random_records(n, rng):
    tree = {"Parent": ["C01"], "ChildA": ["C01.100"], "ChildB": ["C01.200"], "Grandchild": ["C01.100.5"],
            "Other": ["D02"], "OtherChild": ["D02.7"], "Lonely": [], "Humans": ["B01.050.150"]}
    names = list(tree)
    recs = []
    for _ in range(n):
        k = rng.integers(1, 5)
        recs.append([{"ui": None, "name": nm, "major": bool(rng.integers(0, 2)), "tree_numbers": tree[nm]}
                     for nm in rng.choice(names, size=k, replace=False)])
    return recs


def test_fast_accuracy_equals_bruteforce():
    rng = np.random.default_rng(0)
    mv = publication_vectors(_random_records(120, rng))
    for n_clusters in (1, 3, 10, 60):
        labels = rng.integers(0, n_clusters, size=mv.V.shape[0])
        fast, _ = accuracy(mv.V, labels)
        assert fast == pytest.approx(accuracy_bruteforce(mv.V, labels), abs=1e-10)
    # all in one cluster: every paper's whole relatedness is inside -> 1 (minus papers related to no one)
    a, unrelated = accuracy(mv.V, np.zeros(mv.V.shape[0]))
    assert a == pytest.approx(1 - unrelated / mv.V.shape[0])


def test_ic_respects_descendants_and_drops_check_tags():
    recs = [[{"name": "Parent", "major": False, "tree_numbers": ["C01"]}],
            [{"name": "Branch", "major": True, "tree_numbers": ["C01.100"]}],
            [{"name": "Branch", "major": False, "tree_numbers": ["C01.100"]},
             {"name": "Humans", "major": False, "tree_numbers": ["B01"]}],
            [{"name": "Grandchild", "major": False, "tree_numbers": ["C01.100.200"]}],
            [{"name": "Elsewhere", "major": False, "tree_numbers": ["D01", "C01.300"]}]]
    ic = information_content(recs)
    assert "Humans" not in ic
    assert ic["Parent"] <= ic["Branch"] <= ic["Grandchild"]
    # F(Parent) = 1 + (2+1) + 1 + 1 (Elsewhere is below C01 through C01.300) = 6; F(Branch) = 3 + 1 = 4
    total = 6 + 4 + 1 + 1
    assert ic["Parent"] == pytest.approx(-np.log(6 / total))
    assert ic["Branch"] == pytest.approx(-np.log(4 / total))


def test_granularity_formula():
    assert granularity(np.array([0, 0, 1, 1])) == pytest.approx(2.0)
    assert granularity(np.arange(7)) == pytest.approx(7.0)
    assert granularity(np.array([0, 0, 0, 1])) == pytest.approx(16 / 10)


def test_relative_accuracy():
    G = np.array([10, 100, 1000.0])
    r = relative_accuracy({"good": (G, np.array([0.6, 0.5, 0.4])), "bad": (G, np.array([0.2, 0.1, 0.05]))})
    assert r["good"] > 1 > r["bad"]
    assert (r["good"] + r["bad"]) / 2 == pytest.approx(1.0)
    with pytest.raises(ValueError):
        relative_accuracy({"a": (np.array([1, 2.0]), np.array([1, 1.0])), "b": (np.array([5, 6.0]), np.array([1, 1.0]))})
