"""Evaluation stage: accuracy table, random baseline, network statistics, report sections."""
from __future__ import annotations

import json

import numpy as np
import pytest
from mapping_data import make_run  # first: puts the repo root on sys.path

from mapping.cluster import ClusterConfig, build_graph, run_cluster
from mapping.evaluate import EvaluateConfig, run_evaluate
from mapping.knn import KnnConfig, run_knn
from mapping.netstats import network_stats


def test_network_stats_on_known_graph():
    # two triangles and one separate edge; node "z" embedded but without edges
    src = np.array(["a", "b", "c", "d", "e", "f", "g"], object)
    dst = np.array(["b", "c", "a", "e", "f", "d", "h"], object)
    g = build_graph(src, dst, np.ones(7))
    s = network_stats(g, extra_isolated=1, path_sample=10,
                      citation_pairs=(np.array([0, 0]), np.array([1, 3])))
    assert s["nodes"] == 9 and s["edges"] == 7
    assert s["connected_components"] == 4 and s["isolated_nodes"] == 1
    assert s["average_degree"] == pytest.approx(14 / 9)
    assert s["density"] == pytest.approx(7 / 36)
    assert s["average_clustering"] == pytest.approx(6 / 8)   # triangle nodes 1, pair nodes 0 (8 graph nodes)
    assert s["average_shortest_path"] == pytest.approx(1.0)
    assert s["citation_links_in_knn"] == 1 and s["citation_overlap"] == pytest.approx(0.5)


def test_run_evaluate_report(tmp_path):
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
