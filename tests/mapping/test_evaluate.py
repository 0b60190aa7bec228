"""The evaluate stage: accuracy table, random baseline, network statistics, report sections."""
from __future__ import annotations

import json

import pytest

from mapping.cluster import ClusterConfig, run_cluster
from mapping.evaluate import EvaluateConfig, run_evaluate
from mapping.knn import KnnConfig, run_knn


def test_run_evaluate_report(tmp_path, make_run):
    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=30, dim=16, noise=0.3)
    run_knn(KnnConfig(k=8), layout)
    run_cluster(ClusterConfig(resolutions=[0.01, 0.2], min_cluster_size=2), layout)
    layout.ingest_summary.write_text(json.dumps({"per_source": {
        "elife": {"input_records": 10, "papers_corpus": 9, "papers_fulltext": 9, "papers_title_only": 40,
                  "references": 50, "references_resolved": 5, "record_rejects": 1, "rejects": {"no body": 1}},
        "pubmed": {"input_records": 5, "papers_corpus": 5, "record_rejects": 1, "rejects": {"x": 1}}}}))
    layout.importance_summary.write_text(json.dumps({"table3": [
        {"feature": "f_I", "mean": 0.7, "std": 0.8, "entropy": 0.9, "weight": 0.1173}], "n_triplets": 123,
        "triplets_by_kind_split": {"hard/train": 80, "easy/train": 43}}))
    layout.train_log.write_text("\n".join(json.dumps({"step": i, "loss": 1.0 / i}) for i in range(1, 5)))
    s = run_evaluate(EvaluateConfig(), layout)
    assert s["evaluated"] == 60
    m = json.loads(layout.metrics_json.read_text())     # strict JSON (NaN would fail with allow_nan)
    rows = m["mesh_accuracy"]["resolutions"]
    assert [r["resolution"] for r in rows] == [0.01, 0.2]
    coarse = rows[0]
    assert coarse["accuracy"] > 0.9 > coarse["accuracy_random"]   # planted MeSH topics = clusters
    assert rows[1]["granularity"] > coarse["granularity"]
    assert m["network"]["nodes"] == 180 and m["training"]["last_loss"] == pytest.approx(0.25)
    report = layout.report_md.read_text()
    for part in ("## Input", "## Citation importance", "## Training", "## MeSH clustering accuracy",
                 "## kNN network", "| elife | 10 | 9 |", "NO", "f_I", "n_triplets: 123", "average clustering"):
        assert part in report, part
