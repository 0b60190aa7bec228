"""SciDocs evaluators: MAP / nDCG against a hand computation, the file formats, L2 ranking, SVM F1."""
import math

import numpy as np
import pytest

from sciencemap.runtime import UserError
from mapping.evaluation.scidocs import (evaluate_ranking, map_ndcg, read_embeddings_jsonl, read_qrels, svm_macro_f1,
                                        write_embeddings_jsonl, write_qrels)


def test_map_ndcg_by_hand():
    # relevant at ranks 2 and 4 of 4: AP = (1/2 + 2/4) / 2; DCG = 1/log2 3 + 1/log2 5, IDCG = 1 + 1/log2 3
    ap, nd = map_ndcg(["a", "b", "c", "d"], {"b", "d"})
    assert ap == pytest.approx(0.5)
    assert nd == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3)))
    assert map_ndcg(["b", "d", "a"], {"b", "d"}) == pytest.approx((1.0, 1.0))
    assert map_ndcg(["a", "b"], set()) == (0.0, 0.0)
    # graded: gain 2 at rank 2, 1 at rank 1; ideal puts the 2 first
    _, nd = map_ndcg(["x", "y"], {"x": 1, "y": 2})
    assert nd == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))


def test_files_and_l2_ranking(tmp_path):
    qrels = {"q": {"near": 1, "far": 0, "mid": 0}}
    write_qrels(tmp_path / "qrels.txt", qrels)
    assert (tmp_path / "qrels.txt").read_text().splitlines()[0] == "q 0 far 0"
    assert read_qrels(tmp_path / "qrels.txt") == qrels
    ids = ["q", "near", "mid", "far"]
    X = np.array([[0, 0], [0.1, 0], [1, 0], [5, 5]], np.float32)
    write_embeddings_jsonl(tmp_path / "emb.jsonl", ids, X)
    emb = read_embeddings_jsonl(tmp_path / "emb.jsonl")
    assert sorted(emb) == sorted(ids) and np.allclose(emb["far"], [5, 5])
    res = evaluate_ranking(read_qrels(tmp_path / "qrels.txt"), emb)
    assert res["map"] == pytest.approx(1.0) and res["queries"] == 1
    emb["near"] = np.array([9, 9], np.float32)  # now ranked last of 3
    res = evaluate_ranking(qrels, emb)
    assert res["map"] == pytest.approx(1 / 3) and res["ndcg"] == pytest.approx(0.5)
    (tmp_path / "bad.txt").write_text("q near 1\n")
    with pytest.raises(UserError, match="qid 0 pid rel"):
        read_qrels(tmp_path / "bad.txt")


def test_svm_macro_f1_separable_vs_noise():
    rng = np.random.default_rng(0)
    y = np.repeat(["a", "b", "c"], 20)
    centers = {"a": [3, 0], "b": [0, 3], "c": [-3, -3]}
    X = np.array([centers[c] for c in y]) + rng.normal(0, 0.3, (60, 2))
    good = svm_macro_f1(X, y)
    noise = svm_macro_f1(rng.normal(size=(60, 2)), y)
    assert good["macro_f1"] > 0.95 and good["classes"] == 3
    assert noise["macro_f1"] < good["macro_f1"] - 0.3


def test_graded_ranking_follows_the_grades():
    from mapping.evaluation.scidocs import evaluate_graded

    q = np.zeros(2, np.float32)
    emb = {"q": q, "a": np.array([1, 0], np.float32), "b": np.array([2, 0], np.float32),
           "c": np.array([3, 0], np.float32)}
    near_is_important = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
    r = evaluate_graded(near_is_important, emb)
    assert r["rho"] == pytest.approx(1.0) and r["ndcg"] == pytest.approx(1.0) and r["queries"] == 1
    far_is_important = {"q": {"a": 1.0, "b": 2.0, "c": 3.0}}
    r = evaluate_graded(far_is_important, emb)
    # reversed order: rho -1; nDCG = (1 + 2/log2 3 + 3/2) / (3 + 2/log2 3 + 1/2)
    assert r["rho"] == pytest.approx(-1.0)
    assert r["ndcg"] == pytest.approx((1 + 2 / np.log2(3) + 3 / 2) / (3 + 2 / np.log2(3) + 1 / 2))
    # equal grades carry no order: the query is left out; an unknown candidate is counted missing
    r = evaluate_graded({"q": {"a": 1.0, "b": 1.0, "zz": 2.0}}, emb)
    assert r["queries"] == 0 and r["missing"] == 1 and np.isnan(r["rho"])
