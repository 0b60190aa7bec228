"""MeSH accuracy: O(nnz) formula vs the N×N definition, IC, granularity, relative accuracy; the
Arrow-built publication vectors vs the per-paper Python construction they replaced."""
from __future__ import annotations

import bisect
import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp

from mapping.evaluation.mesh_accuracy import (CHECK_TAG_UIS, CHECK_TAGS, TermCollector, accuracy, accuracy_bruteforce,
                                              granularity, information_content, mesh_array, mesh_terms, mesh_vectors,
                                              publication_vectors, relative_accuracy)


# ---------------------------------------------------------------- the previous implementation, as reference

def _ref_ic(records, major_weight=2.0, drop_names=CHECK_TAGS, drop_uis=CHECK_TAG_UIS):
    f, trees = Counter(), {}
    for terms in records:
        for t in terms if terms is not None else ():
            if t.get("name") in drop_names or t.get("ui") in drop_uis:
                continue
            k = t.get("ui") or t.get("name")
            if not k:
                continue
            f[k] += major_weight if t.get("major") else 1.0
            trees.setdefault(k, set()).update(t.get("tree_numbers") or ())
    tn_list = sorted((tn, k) for k, tns in trees.items() for tn in tns)
    tns_sorted = [tn for tn, _ in tn_list]
    F = {}
    for k in f:
        desc = set()
        for tn in trees.get(k, ()):
            i = bisect.bisect_left(tns_sorted, tn + ".")
            while i < len(tns_sorted) and tns_sorted[i].startswith(tn + "."):
                desc.add(tn_list[i][1])
                i += 1
        desc.discard(k)
        F[k] = f[k] + sum(f[d] for d in desc)
    total = sum(F.values())
    return {k: -math.log(v / total) for k, v in F.items()}


def _ref_vectors(records, major_weight=2.0, major_in_vector=True, drop_names=CHECK_TAGS, drop_uis=CHECK_TAG_UIS):
    ic = _ref_ic(records, major_weight, drop_names, drop_uis)
    keys = sorted(ic)
    col = {k: i for i, k in enumerate(keys)}
    rows, indptr, indices, data = [], [0], [], []
    for r, terms in enumerate(records):
        comp = {}
        for t in terms if terms is not None else ():
            if t.get("name") in drop_names or t.get("ui") in drop_uis:
                continue
            k = t.get("ui") or t.get("name")
            if k not in col or ic[k] <= 0:
                continue
            val = ic[k] * (major_weight if (major_in_vector and t.get("major")) else 1.0)
            comp[col[k]] = max(comp.get(col[k], 0.0), val)
        if not comp:
            continue
        rows.append(r)
        for c in sorted(comp):
            indices.append(c)
            data.append(comp[c])
        indptr.append(len(indices))
    V = sp.csr_matrix((np.asarray(data, float), np.asarray(indices, np.int64), np.asarray(indptr, np.int64)),
                      shape=(len(rows), len(keys)))
    norms = np.sqrt(np.asarray(V.multiply(V).sum(axis=1)).ravel())
    V = (sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ V).tocsr()
    return np.asarray(rows, np.int64), V, keys, ic


def _assert_same(mv, ref):
    rows, V, keys, ic = ref
    assert np.array_equal(mv.rows, rows) and mv.descriptors == keys
    assert np.array_equal(mv.ic, [ic[k] for k in keys])
    assert mv.V.shape == V.shape
    assert np.array_equal(mv.V.indptr, V.indptr) and np.array_equal(mv.V.indices, V.indices)
    assert np.array_equal(mv.V.data, V.data)           # bit for bit: the demo's accuracy must not move


TREE = {"Parent": ["C01"], "ChildA": ["C01.100"], "ChildB": ["C01.200"], "Grandchild": ["C01.100.5"],
        "Other": ["D02"], "OtherChild": ["D02.7"], "Lonely": [], "Humans": ["B01.050.150"],
        "Both": ["C01.100.5.1", "D02.7.3"], "Coded": ["E1"]}


def _random_records(n, rng, messy=False):
    names = list(TREE)
    recs = []
    for _ in range(n):
        k = rng.integers(0 if messy else 1, 6 if messy else 5)
        terms = []
        for nm in rng.choice(names, size=k, replace=messy):
            t = {"ui": None, "name": str(nm), "major": bool(rng.integers(0, 2)), "tree_numbers": TREE[nm]}
            if messy:
                if nm in ("Coded", "Other"):
                    t["ui"] = [None, "", f"D0{nm[:3]}"][rng.integers(0, 3)]   # "" falls back to the name
                if rng.random() < 0.1:
                    t["major"] = None
                if rng.random() < 0.1:
                    t["tree_numbers"] = None
                if rng.random() < 0.05:
                    t["name"] = ""                                              # no key: dropped
            terms.append(t)
        recs.append(None if messy and rng.random() < 0.05 else terms)
    return recs


@pytest.mark.parametrize("seed", range(6))
def test_arrow_vectors_equal_the_python_construction(seed):
    rng = np.random.default_rng(seed)
    recs = _random_records(300, rng, messy=True)
    for mw, miv in ((2.0, True), (1.0, True), (3.0, False)):
        _assert_same(publication_vectors(recs, major_weight=mw, major_in_vector=miv), _ref_vectors(recs, mw, miv))
        assert information_content(recs, mw) == _ref_ic(recs, mw)
    assert information_content(recs, drop_names=frozenset(), drop_uis=frozenset()) == \
        _ref_ic(recs, drop_names=frozenset(), drop_uis=frozenset())


def test_arrow_vectors_equal_the_python_construction_on_the_sample(repo_root):
    from importance.ingest.readers import parse_file

    recs = []
    for name in ("dev-data-small.csv.gz", "test-data-small.csv.gz"):
        path = repo_root / "sample" / "pubmed" / name
        recs += [d["mesh"] for kind, d in parse_file("pubmed_csv", "pubmed", str(path), path.read_bytes())
                 if kind == "paper"]
    assert len(recs) == 450
    mv, ref = publication_vectors(recs), _ref_vectors(recs)
    _assert_same(mv, ref)
    assert mv.V.shape == (450, 2717) and mv.V.nnz == 4621
    labels = np.random.default_rng(0).integers(0, 20, mv.V.shape[0])
    assert accuracy(mv.V, labels) == accuracy(ref[1], labels)


def test_chunked_collection_and_paper_selection():
    rng = np.random.default_rng(7)
    recs = _random_records(200, rng, messy=True)
    arr = mesh_array(recs)
    c = TermCollector()
    for lo in range(0, 200, 37):                         # slices carry an offset into the parent array
        c.add(pa.chunked_array([arr.slice(lo, 20), arr.slice(lo + 20, 17)]) if lo + 20 < 200 else arr.slice(lo, 37))
    chunked = c.finish()
    whole = mesh_terms(arr)
    assert chunked.papers == whole.papers == 200
    _assert_same(mesh_vectors(chunked), _ref_vectors(recs))
    _assert_same(mesh_vectors(whole, chunk=5), _ref_vectors(recs))     # CSR built in chunks of whole papers
    # a selection of papers = the vectors of those papers alone (IC from them), positions kept
    pick = rng.random(200) < 0.5
    sub = [r for r, p in zip(recs, pick) if p]
    rows, V, keys, ic = _ref_vectors(sub)
    for chunk in (1 << 22, 3):
        _assert_same(mesh_vectors(whole, pick, chunk=chunk), (np.flatnonzero(pick)[rows], V, keys, ic))


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
            [{"name": "Elsewhere", "major": False, "tree_numbers": ["D01", "C01.300"]}],
            [{"name": "Sibling", "major": False, "tree_numbers": ["C010"]}]]   # not below C01: no "."
    ic = information_content(recs)
    assert "Humans" not in ic
    assert ic["Parent"] <= ic["Branch"] <= ic["Grandchild"]
    # F(Parent) = 1 + (2+1) + 1 + 1 (Elsewhere is below C01 through C01.300) = 6; F(Branch) = 3 + 1 = 4
    total = 6 + 4 + 1 + 1 + 1
    assert ic["Parent"] == pytest.approx(-np.log(6 / total))
    assert ic["Branch"] == pytest.approx(-np.log(4 / total))
    assert ic["Sibling"] == pytest.approx(-np.log(1 / total))


def test_no_descriptors_left():
    mv = publication_vectors([[{"name": "Humans", "major": True, "tree_numbers": []}], None, []])
    assert mv.V.shape == (0, 0) and len(mv.rows) == 0 and mv.descriptors == []


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
