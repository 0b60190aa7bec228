"""Benchmark readers: small file sets written literally in each release's layout, embeddings whose
L2 ranking is known, and the metrics derived by hand; one malformed file per reader."""
import json
import math

import numpy as np
import pytest

from mapping.evaluation.benchmarks import (csfcube_table, read_csfcube_abstracts, read_csfcube_anns, read_csfcube_queries,
                                           read_csfcube_splits, read_propensity, read_relish_annotations, read_relish_texts,
                                           read_scidocs_clicks, read_scidocs_labels, read_scidocs_metadata,
                                           read_scirepeval_metadata, read_scirepeval_qrels, relish_table, scidocs_table,
                                           scirepeval_table)
from mapping.evaluation.scidocs import pool_metrics, read_qrels
from sciencemap.runtime import UserError


def _on_axis(**dist):
    """Papers on a line: the query at 0, each other at its given distance."""
    return {p: np.array([d, 0.0], np.float32) for p, d in dist.items()}


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- SciDocs

def test_scidocs_table_by_hand(tmp_path):
    emb = _on_axis(q1=0, a=1, b=2, c=3, q2=0, y=1, z=2, x=3)
    # cite: q1 ranks its relevant a first (AP 1, nDCG 1); q2's relevant x comes 3rd of 3
    _write(tmp_path / "cite/test.qrel", "q1 0 a 1\nq1 0 b 0\nq1 0 c 0\nq2 0 x 1\nq2 0 y 0\nq2 0 z 0\n")
    _write(tmp_path / "cite/val.qrel", "q1 0 a 0\nq1 0 b 1\n")
    # cocite: the relevant 'nope' has no embedding; trec_eval counts it as never retrieved
    _write(tmp_path / "cocite/test.qrel", "q1 0 a 1\nq1 0 nope 1\nq1 0 b 0\n")
    for split, rows in {"train": [("t", 8), ("u", 9), ("v", 10), ("w", 11), ("gone", 0)], "test": [("s", 12)],
                        "val": [("r", 7)]}.items():
        text = "pid,class_label\n" + "".join(f"{p}b,bio\n{p}c,cs\n" for p, _ in rows)
        _write(tmp_path / f"mag/{split}.csv", text)
        for p, d in rows:
            if p != "gone":
                emb[f"{p}b"], emb[f"{p}c"] = np.array([d, 1.0], np.float32), np.array([-d, 1.0], np.float32)
    # recomm: a (nearest) clicked at display position 2; c (farthest of a, b, c) clicked at position 1
    _write(tmp_path / "recomm/test.csv", 'query_id,clicked_id,other_ids\nq1,a,"b,a,c"\nq1,c,"c,a,b"\n')
    _write(tmp_path / "recomm/propensity_scores.json", json.dumps({"scores": [2, 1, 1]}))

    t = scidocs_table(tmp_path, emb)
    assert sorted(t["absent"]) == ["coread", "coview", "mesh"]
    assert t["cite"]["map"] == pytest.approx((1 + 1 / 3) / 2)
    assert t["cite"]["ndcg"] == pytest.approx((1 + 1 / math.log2(4)) / 2) and t["cite"]["queries"] == 2
    assert t["cocite"]["map"] == pytest.approx(0.5) and t["cocite"]["missing"] == 1
    assert t["cocite"]["ndcg"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert t["mag"]["f1"] == pytest.approx(1.0) and t["mag"]["missing"] == 2 and t["mag"]["test"] == 2
    # propensities rescaled to mean 1: [1.5, .75, .75]; weights 1/.75 (position 2) and 1/1.5 (position 1)
    r = t["recomm"]
    assert r["ndcg"] == pytest.approx(0.75) and r["p1"] == pytest.approx(0.5) and r["clicks"] == 2
    assert r["adj_ndcg"] == pytest.approx((4 / 3 * 1 + 2 / 3 * 0.5) / 2)
    assert r["adj_p1"] == pytest.approx((4 / 3) / 2)
    val = scidocs_table(tmp_path, emb, split="val")
    assert val["cite"]["map"] == pytest.approx(1 / 2) and val["mag"]["test"] == 2  # b ranks 2nd
    assert "recomm" in val["absent"]


def test_scidocs_readers_and_malformed_files(tmp_path):
    meta = _write(tmp_path / "paper_metadata_view_cite_read.json",
                  json.dumps({"a": {"paper_id": "a", "title": "A study", "abstract": None}}))
    assert read_scidocs_metadata(meta) == {"a": {"paper_id": "a", "title": "A study", "abstract": ""}}
    _write(meta, '{"a": {"title": "A"},\n "b": }')
    with pytest.raises(UserError, match="line 2"):
        read_scidocs_metadata(meta)
    with pytest.raises(UserError, match="not a number"):
        read_qrels(_write(tmp_path / "cite/test.qrel", "q1 0 a yes\n"))
    labels = _write(tmp_path / "mag/train.csv", "pid,class_label\np1,bio\np2,cs,extra\n")
    with pytest.raises(UserError, match="line 3 has 3 fields"):
        read_scidocs_labels(labels)
    clicks = _write(tmp_path / "recomm/test.csv", 'q,c,o\nq1,a,"b,c"\n')
    with pytest.raises(UserError, match="line 2.*not among the shown"):
        read_scidocs_clicks(clicks)
    assert read_scidocs_clicks(_write(clicks, 'q,c,o\nq1,a,"b, a"\n')) == [("q1", "a", ["b", "a"])]
    with pytest.raises(UserError, match="propensity_scores.json"):
        read_propensity(_write(tmp_path / "recomm/propensity_scores.json", '{"scores": []}'))
    with pytest.raises(UserError, match="none of SciDocs"):
        scidocs_table(tmp_path / "empty", {"a": np.zeros(2)})


# ---------------------------------------------------------------- CSFCube

GRADES = {"background": [3, 2, 0, 0, 1], "method": [0, 2, 0, 3, 0], "result": [2, 0, 0, 0, 0]}


def _csfcube(root):
    for facet, grades in GRADES.items():
        cands = [f"c{i}" for i in range(1, 6)] + (["c6"] if facet == "method" else [])
        rels = grades + ([3] if facet == "method" else [])  # c6 has no embedding
        _write(root / f"test-pid2anns-csfcube-{facet}.json",
               json.dumps({"Q": {"cands": cands, "relevance_max": rels, "relevance_adju": rels}}))
    splits = {f: {k: [f"Q_{f}"] for k in ("fold1_dev", "fold2_dev", "fold1_test", "fold2_test")} for f in GRADES}
    splits["all"] = {"fold1_dev": ["Q_background"], "fold2_dev": ["Q_method", "Q_result"],
                     "fold1_test": ["Q_background", "Q_method"], "fold2_test": ["Q_result"]}
    _write(root / "evaluation_splits.json", json.dumps(splits))
    _write(root / "queries-release.csv", "pid,facet,year,title,paper type\n"
           'Q,background,2017,"A title, with a comma",data-driven approach\nQ,method,2017,T,theoretical\n')
    _write(root / "abstracts-csfcube-preds.jsonl", json.dumps(
        {"paper_id": "Q", "title": "T", "abstract": ["One.", "Two."], "pred_labels": ["background_label"] * 2}) + "\n")


def test_csfcube_table_by_hand(tmp_path):
    _csfcube(tmp_path)
    emb = _on_axis(Q=0, c1=1, c2=2, c3=3, c4=4, c5=5)
    t = csfcube_table(tmp_path, emb)
    bg, me, re = t["background"], t["method"], t["result"]
    # background: relevant (grade >= 2) at ranks 1, 2
    assert bg["av_precision"] == 1 and bg["r_precision"] == 1 and bg["recall"] == 1
    assert bg["precision"] == pytest.approx(2 / 20)
    # CSFCube's DCG: ranks 1 and 2 undiscounted, then gain / log2(rank)
    assert bg["ndcg"] == pytest.approx((3 + 2 + 1 / math.log2(5)) / (3 + 2 + 1 / math.log2(3)))
    assert bg["ndcg%20"] == 1.0  # the top 20 % of 5 is rank 1: 3 of the best 3
    # method: relevant at ranks 2 and 4; c6 (no embedding) is left out of the ranked pool
    assert me["av_precision"] == pytest.approx((1 / 2 + 2 / 4) / 2) and me["r_precision"] == pytest.approx(0.5)
    assert me["reciprocal_rank"] == pytest.approx(0.5) and me["ndcg%20"] == 0.0
    assert re["av_precision"] == 1.0
    # "all": the mean of the two test folds' means, not of the three queries
    assert t["all"]["av_precision"] == pytest.approx(((1 + 0.5) / 2 + 1) / 2)
    assert t["queries"] == 3 and t["missing"] == 1
    assert csfcube_table(tmp_path, emb, split="dev")["all"]["av_precision"] == pytest.approx(1.0)
    assert pool_metrics([0, 0], threshold=2)["av_precision"] == 0.0
    # a facet view: the method queries are ranked by the method vectors (relevant c4, c2 first now),
    # the other facets by the main vectors as before
    view = {"method": _on_axis(Q=0, c4=1, c2=2, c1=3, c3=4, c5=5)}
    tv = csfcube_table(tmp_path, emb, facet_emb=view)
    assert tv["method"]["av_precision"] == 1.0 and tv["background"] == t["background"]
    assert tv["facet_vectors"] == ["method"] and t["facet_vectors"] == []


def test_csfcube_readers_and_malformed_files(tmp_path):
    _csfcube(tmp_path)
    assert read_csfcube_abstracts(tmp_path / "abstracts-csfcube-preds.jsonl")["Q"]["abstract"] == "One. Two."
    rows = read_csfcube_queries(tmp_path / "queries-release.csv")
    assert [(r["pid"], r["facet"], r["title"]) for r in rows][0] == ("Q", "background", "A title, with a comma")
    assert read_csfcube_anns(tmp_path / "test-pid2anns-csfcube-result.json") == {
        "Q": {"c1": 2, "c2": 0, "c3": 0, "c4": 0, "c5": 0}}
    assert read_csfcube_splits(tmp_path / "evaluation_splits.json")["all"]["fold2_test"] == ["Q_result"]

    with pytest.raises(UserError, match="line 2: abstract must be a list"):
        read_csfcube_abstracts(_write(tmp_path / "a.jsonl", "\n" + json.dumps({"paper_id": 1, "title": "t", "abstract": "x"})))
    with pytest.raises(UserError, match="line 2: facet 'intro'"):
        read_csfcube_queries(_write(tmp_path / "q.csv", "pid,facet,year,title,paper type\n1,intro,2001,T,x\n"))
    with pytest.raises(UserError, match="5 cands but 4 relevance_adju"):
        read_csfcube_anns(_write(tmp_path / "anns.json", json.dumps(
            {"Q": {"cands": list("abcde"), "relevance_adju": [0, 1, 2, 3]}})))
    with pytest.raises(UserError, match="evaluation_splits.json"):
        read_csfcube_splits(_write(tmp_path / "evaluation_splits.json", json.dumps({"all": ["Q_result"]})))


# ---------------------------------------------------------------- RELISH

def test_relish_table_and_readers(tmp_path):
    anns = [{"uid": "u1", "pmid": "Q", "response": {"relevant": ["c1"], "partial": ["c3"], "irrelevant": ["c2"]}},
            {"uid": "u2", "pmid": "Q", "response": {"relevant": ["c2"], "partial": [], "irrelevant": []}}]
    _write(tmp_path / "RELISH_v1.json", json.dumps(anns))
    qrels, repeats = read_relish_annotations(tmp_path / "RELISH_v1.json")
    assert qrels == {"Q": {"c1": 2, "c3": 1, "c2": 0}} and repeats == 1
    t = relish_table(tmp_path, _on_axis(Q=0, c1=1, c2=2, c3=3))
    # ranked c1 (2), c2 (0), c3 (1): partial counts as relevant for MAP
    assert t["map"] == pytest.approx((1 + 2 / 3) / 2) and t["repeats"] == 1
    assert t["ndcg"] == pytest.approx((2 + 1 / math.log2(4)) / (2 + 1 / math.log2(3)))

    _write(tmp_path / "texts/PubMed-123.txt", "A title\nFirst line.\n\nSecond line.\n")
    assert read_relish_texts(tmp_path / "texts") == {
        "123": {"paper_id": "123", "title": "A title", "abstract": "First line. Second line."}}
    with pytest.raises(UserError, match="entry 0 lacks pmid or response"):
        read_relish_annotations(_write(tmp_path / "bad.json", json.dumps([{"pmid": "Q"}])))
    with pytest.raises(UserError, match="PubMed-9.txt line 1: no title"):
        read_relish_texts(_write(tmp_path / "t2/PubMed-9.txt", "\nabstract\n").parent)


# ---------------------------------------------------------------- SciRepEval

def test_scirepeval_table_and_readers(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"query_id": "q1", "cand_id": c, "score": s} for c, s in (("a", 0), ("b", 1), ("c", 0))]
    _write(tmp_path / "scidocs_cite/test_qrel.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "feeds_1").mkdir()
    pq.write_table(pa.Table.from_pylist([{"query_id": 7, "cand_id": 8, "score": 1},
                                         {"query_id": 7, "cand_id": 9, "score": 0}]), tmp_path / "feeds_1/test.parquet")
    emb = _on_axis(q1=0, a=1, b=2, c=3, **{"7": 0, "8": 1, "9": 2})
    t = scirepeval_table(tmp_path, emb)
    assert set(t) == {"scidocs_cite", "feeds_1"}
    # q1's relevant b ranks 2nd of 3
    assert t["scidocs_cite"]["map"] == pytest.approx(0.5)
    assert t["scidocs_cite"]["ndcg"] == pytest.approx(1 / math.log2(3))
    assert t["feeds_1"] == {"map": 1.0, "queries": 1, "missing": 0}
    assert read_scirepeval_qrels(tmp_path / "feeds_1/test.parquet") == {"7": {"8": 1, "9": 0}}

    meta = _write(tmp_path / "meta.jsonl", "".join(json.dumps(r) + "\n" for r in [
        {"query": {"doc_id": "q1", "title": "Q", "abstract": "qa"}, "candidates": [{"doc_id": "a", "title": "A"}]},
        {"query": "graph neural networks", "doc_id": "s1", "candidates": [{"doc_id": "b", "title": "B", "abstract": None}]},
        {"doc_id": "c", "title": "C", "abstract": "ca"}]))
    papers = read_scirepeval_metadata(meta)
    assert sorted(papers) == ["a", "b", "c", "q1", "s1"] and papers["s1"]["title"] == "graph neural networks"
    assert papers["b"]["abstract"] == ""

    bad = _write(tmp_path / "bad/test_qrel.jsonl", json.dumps(rows[0]) + "\n" + json.dumps({"query_id": "q1", "score": 1}))
    with pytest.raises(UserError, match="line 2: lacks cand_id"):
        read_scirepeval_qrels(bad)
    with pytest.raises(UserError, match="line 1: lacks doc_id"):
        read_scirepeval_metadata(_write(tmp_path / "m2.jsonl", json.dumps({"title": "no id"}) + "\n"))
    with pytest.raises(UserError, match="unknown SciRepEval task"):
        scirepeval_table(tmp_path, emb, tasks=("nope",))


def test_the_benchmark_command_reads_scidocs_jsonl_vectors(tmp_path, capsys):
    import subprocess
    import sys
    from pathlib import Path

    from mapping.evaluation.scidocs import write_embeddings_jsonl

    emb = _on_axis(q1=0, a=1, b=2, c=3)
    _write(tmp_path / "data/cite/test.qrel", "q1 0 a 0\nq1 0 b 0\nq1 0 c 1\n")     # the relevant c ranks 3rd
    write_embeddings_jsonl(tmp_path / "emb.jsonl", list(emb), np.stack(list(emb.values())))
    repo = Path(__file__).resolve().parents[3]
    p = subprocess.run([sys.executable, "jobs/benchmark.py", "--suite", "scidocs", "--data", str(tmp_path / "data"),
                        "--vectors", str(tmp_path / "emb.jsonl"), "--json"], cwd=repo, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["cite"]["map"] == pytest.approx(1 / 3)
    bad = subprocess.run([sys.executable, "jobs/benchmark.py", "--suite", "scidocs", "--data", str(tmp_path),
                          "--vectors", str(tmp_path / "missing.txt")], cwd=repo, capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
