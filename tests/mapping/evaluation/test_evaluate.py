"""The evaluate stage: accuracy table, random baseline, network statistics, report sections; MeSH
labels gathered by vector-store row and citation links by row, against hand-built tables."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from sciencemap.contracts import SCHEMAS
from sciencemap.storage import dataset, read_table, write_table_atomic
from sciencemap.vectors import ensure_vectors

from mapping.cluster import ClusterConfig, load_graph, run_cluster
from mapping.evaluation.citation_graphs import read_citations
from mapping.evaluation.evaluate import EvaluateConfig, mesh_evaluation, run_evaluate
from mapping.knn import KnnConfig, run_knn
from mapping.evaluation.mesh_accuracy import accuracy, granularity, publication_vectors


def test_run_evaluate_report(tmp_path, make_run):
    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=30, dim=16, noise=0.3)
    run_knn(KnnConfig(k=8), layout)
    run_cluster(ClusterConfig(resolutions=[0.01, 0.2], min_cluster_size=2), layout)
    layout.ingest_summary.write_text(json.dumps({"per_source": {
        "elife": {"role": "train+map", "input_records": 10, "papers_corpus": 9, "papers_fulltext": 9,
                  "papers_mapped": 9, "papers_title_only": 40, "cited_only_left_out": 2,
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
    assert m["network"]["graphs"]["knn"]["nodes"] == 180 and m["training"]["last_loss"] == pytest.approx(0.25)
    assert list(m["network"]["graphs"]) == ["knn", "random"]          # no references table: no citation graph
    report = layout.report_md.read_text()
    for part in ("## Input", "## Citation importance", "## Training", "## MeSH clustering accuracy",
                 "## Network statistics", "| elife | train+map | 10 | 9 | 9 | 9 | 40 | 2 |",
                 "| pubmed | - | 5 | 5 |", "NO", "f_I", "n_triplets: 123",
                 "average clustering", "| statistic | kNN | random (kNN density) |"):
        assert part in report, part


def test_run_evaluate_three_graphs(tmp_path, make_run):
    layout, _ = make_run(tmp_path / "r", n_clusters=6, per=30, dim=16, noise=0.3)
    run_knn(KnnConfig(k=8), layout)
    run_cluster(ClusterConfig(resolutions=[0.05], min_cluster_size=2), layout)
    # citations: the chain p:0 - p:1 - ... - p:59 (some cited both ways or twice), plus a self-citation
    # and links to papers outside the run, which are no links
    pairs = [(f"p:{i}", f"p:{i + 1}") for i in range(59)] + [("p:5", "p:4"), ("p:7", "p:8"), ("p:9", "p:9"),
                                                              ("p:3", "x:1"), ("x:2", "p:3"), ("p:3", None)]
    write_table_atomic(pa.Table.from_pylist([{"citing_id": a, "cited_id": b} for a, b in pairs],
                                            schema=SCHEMAS["references"]), layout.table("references"))
    run_evaluate(EvaluateConfig(path_sample=180, path_targets=0), layout)
    net = json.loads(layout.metrics_json.read_text())["network"]
    g = net["graphs"]
    assert list(g) == ["knn", "citation", "random", "random_citation"]
    c = g["citation"]
    # a path of 60 nodes and 120 papers that cite nothing here
    assert c["nodes"] == 180 and c["edges"] == 59 and c["isolated_nodes"] == 120
    assert c["connected_components"] == 121 and c["largest_component"] == 60
    assert c["largest_component_share"] == pytest.approx(1 / 3)
    assert c["density"] == pytest.approx(59 / (180 * 179 / 2)) and c["average_degree"] == pytest.approx(118 / 180)
    assert c["average_clustering"] == 0.0
    # every ordered pair of the path: distance |i - j|, mean (N + 1) / 3 over N (N - 1) pairs
    assert c["shortest_path_pairs"] == 60 * 59 and c["average_shortest_path"] == pytest.approx(61 / 3)
    knn = load_graph(layout)
    assert g["knn"]["edges"] == knn.m == g["random"]["edges"] and g["random_citation"]["edges"] == 59
    assert g["random"]["nodes"] == g["random_citation"]["nodes"] == 180
    ov = {(o["a"], o["b"]): o for o in net["overlap"]}
    assert len(ov) == 6
    kc = ov[("knn", "citation")]
    knn_links = set(zip(knn.lo.tolist(), knn.hi.tolist()))
    common = len(knn_links & {(i, i + 1) for i in range(59)})
    assert 0 < common < 59 and kc["common"] == common
    assert kc["share_of_a"] == pytest.approx(common / knn.m) and kc["share_of_b"] == pytest.approx(common / 59)
    assert kc["jaccard"] == pytest.approx(common / (knn.m + 59 - common))
    assert kc["common_expected"] == pytest.approx(knn.m * 59 / (180 * 179 / 2))
    report = layout.report_md.read_text()
    for part in ("| statistic | kNN | direct citation | random (kNN density) | random (citation density) |",
                 f"| edges | {knn.m:,} | 59 | {knn.m:,} | 59 |", f"| kNN | direct citation | {knn.m:,} | 59 | {common} | "):
        assert part in report, part
    cells = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ")[1:] for line in report.splitlines()
             if line.startswith("| ")}
    assert cells["isolated nodes"][1] == "120" and cells["largest component (share of nodes)"][1] == "0.3333"
    assert cells["average shortest path length"][1] == "20.3333" and cells["density"][1] == "0.003662"
    # without the citation-density random graph: the three columns of the seed's Table 6
    run_evaluate(EvaluateConfig(path_sample=20, random_citation_graph=False), layout)
    net = json.loads(layout.metrics_json.read_text())["network"]
    assert list(net["graphs"]) == ["knn", "citation", "random"] and len(net["overlap"]) == 3
    assert "| statistic | kNN | direct citation | random (kNN density) |\n" in layout.report_md.read_text()


def _rewrite_papers(layout, extra_rows):
    t = read_table(layout.table("papers"))
    rows = t.to_pylist() + [{**t.slice(0, 1).to_pylist()[0], **r} for r in extra_rows]
    write_table_atomic(pa.Table.from_pylist(rows, schema=SCHEMAS["papers"]), layout.table("papers"))


def test_mesh_evaluation_gathers_labels_by_row(tmp_path, make_run):
    layout, true = make_run(tmp_path / "r", n_clusters=6, per=30, dim=16, noise=0.3)
    vec = ensure_vectors(layout)
    ids = vec.ids()
    dup = {"paper_id": "p:1", "mesh": [{"ui": None, "name": "Topic5", "major": True, "tree_numbers": ["A05.001"]}]}
    stranger = {"paper_id": "q:0", "mesh": [{"ui": "D1", "name": "Topic0", "major": False, "tree_numbers": []}]}
    _rewrite_papers(layout, [dup, stranger])                 # a repeated id (first row counts), an unknown paper
    rng = np.random.default_rng(0)
    order = rng.permutation(len(ids))
    order = order[ids[order] != "p:4"]                       # p:4 has MeSH but no cluster: not evaluated
    second = rng.integers(0, 7, len(ids))
    labels = {0.1: true, 0.5: second}
    write_table_atomic(pa.concat_tables([pa.table({
        "paper_id": pa.array(ids[order], pa.string()), "row": pa.array(order, pa.int32()),
        "resolution": pa.array(np.full(len(order), r)), "cluster": pa.array(lab[order], pa.int32())})
        for r, lab in labels.items()]), layout.table("clusters"), SCHEMAS["clusters"])
    cfg = EvaluateConfig()
    out = mesh_evaluation(dataset(layout.table("papers")), dataset(layout.table("clusters")), vec.ids_arrow(), cfg)

    papers = read_table(layout.table("papers")).to_pylist()
    row_of = {p: i for i, p in enumerate(ids.tolist())}
    seen, ev = set(), []
    for p in papers:
        if p["mesh"] and p["paper_id"] in row_of and p["paper_id"] != "p:4" and p["paper_id"] not in seen:
            seen.add(p["paper_id"])
            ev.append(p)
    mv = publication_vectors([p["mesh"] for p in ev])
    ev_rows = np.array([row_of[ev[i]["paper_id"]] for i in mv.rows])
    assert out["papers_with_mesh"] == 62 and out["evaluated"] == len(ev_rows) == 59
    assert out["descriptors"] == len(mv.descriptors) == 12
    for got, (r, lab) in zip(out["resolutions"], labels.items()):
        lab = lab[ev_rows].astype(np.int32)
        assert got["resolution"] == r and got["clusters_total"] == len(np.unique(lab_all := labels[r][order]))
        assert got["accuracy"] == accuracy(mv.V, lab)[0]
        assert got["accuracy_random"] == accuracy(mv.V, np.random.default_rng(0).permutation(lab))[0]
        assert got["granularity"] == granularity(lab) and got["clusters_evaluated"] == len(np.unique(lab))
        assert len(lab_all) == len(ids) - 1
    assert out["resolutions"][0]["accuracy"] > 0.9 > out["resolutions"][1]["accuracy"]


def test_citation_links_by_row(tmp_path, make_run):
    layout, _ = make_run(tmp_path / "r", n_clusters=2, per=5, dim=8)
    vec = ensure_vectors(layout)
    pairs = [("p:0", "p:1"), ("p:1", "p:0"), ("p:0", "p:1"), ("p:2", "p:9"), ("p:3", "p:3"), ("p:4", "x:1"),
             (None, "p:1"), ("p:5", None), ("p:9", "p:8")]
    write_table_atomic(pa.Table.from_pylist([{"citing_id": a, "cited_id": b} for a, b in pairs],
                                            schema=SCHEMAS["references"]), layout.table("references"))
    n = vec.n
    expect = np.array(sorted([0 * n + 1, 2 * n + 9, 8 * n + 9]))
    for chunk in (None, 2):
        got = read_citations(dataset(layout.table("references")), vec.ids_arrow(), chunk_rows=chunk).links_among_ids()
        assert np.array_equal(got, expect)


def test_old_clusters_table_is_refused(tmp_path, make_run):
    from sciencemap.runtime import UserError

    layout, _ = make_run(tmp_path / "r", n_clusters=2, per=5, dim=8)
    vec = ensure_vectors(layout)
    write_table_atomic(pa.table({"paper_id": pa.array(["p:0"]), "resolution": pa.array([0.1]),
                                 "cluster": pa.array([0], pa.int32())}), layout.table("clusters"))
    with pytest.raises(UserError, match="re-run the knn and cluster stages"):
        mesh_evaluation(dataset(layout.table("papers")), dataset(layout.table("clusters")), vec.ids_arrow(),
                        EvaluateConfig())
