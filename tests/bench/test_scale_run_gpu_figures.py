"""bench/scale_run.py's GPU embed figures: the embed job's rate after its first batch and that
batch's start, from bench/gpu_throughput.py's JSON (or the loop's whole rate from an older one)."""
from __future__ import annotations

import json


def gpu_json(path, rows, summary):
    path.write_text(json.dumps({"rows": [{"name": n, "tokens_per_s": r} for n, r in rows], "embed_summary": summary}))
    return path


def test_the_steady_rate_and_the_start_from_the_benchs_json(tmp_path, bench_module, repo_root, monkeypatch):
    monkeypatch.syspath_prepend(str(repo_root / "bench"))   # scale_run imports its siblings
    scale_run = bench_module("scale_run")
    rows = [("bare compiled forward", 2.2e6), ("embed job (loop: feed + forward + writes)", 4.0e5),
            ("embed job (whole call)", 3.9e5), ("embed job after its first batch", 2.1e6)]
    rate, start, basis = scale_run.gpu_embed_figures(gpu_json(tmp_path / "new.json", rows, {"first_batch_seconds": 28.2}))
    assert (rate, start) == (2.1e6, 28.2) and "after its first batch" in basis
    # a file written before the steady row existed: the loop's rate, its start inside it
    rate, start, basis = scale_run.gpu_embed_figures(gpu_json(tmp_path / "old.json", rows[:3], {"compiled": True}))
    assert (rate, start) == (4.0e5, 0.0) and "embed job (loop" in basis
    # no file: the H200 figures the script names
    assert scale_run.gpu_embed_figures(None)[:2] == (scale_run.GPU_EMBED_TOKENS_PER_S, scale_run.GPU_EMBED_START_S)


def test_render_and_evaluate_side_by_side(bench_module, repo_root, monkeypatch):
    """The longer of the two, unless their CPU work over the node's cores is longer; peaks summed."""
    monkeypatch.syspath_prepend(str(repo_root / "bench"))
    scale_run = bench_module("scale_run")
    render = {"stage": "render", "hours": 0.3, "cpu_hours": 0.35, "peak_gb": 15.0}
    evaluate = {"stage": "evaluate", "hours": 0.5, "cpu_hours": 1.2, "peak_gb": 30.0}
    b = scale_run.side_by_side(render, evaluate, 0.7)
    assert b["hours"] == 0.5 and abs(b["saved_hours"] - 0.3) < 1e-12 and b["peak_gb"] == 45.0
    # stages that keep every core busy: the node's cores (1 + 15 x 0.7 = 11.5) bound them
    busy = scale_run.side_by_side({**render, "cpu_hours": 3.0}, {**evaluate, "cpu_hours": 5.2}, 0.7)
    assert abs(busy["hours"] - 8.2 / 11.5) < 1e-12 and abs(busy["saved_hours"] - (0.8 - 8.2 / 11.5)) < 1e-12


def test_title_only_nodes_cost_their_own_tokens(bench_module, repo_root, monkeypatch):
    monkeypatch.syspath_prepend(str(repo_root / "bench"))
    scale_run = bench_module("scale_run")
    big = {"papers": 1000, "nodes": 1820, "title_only": 920}
    tokens, split = scale_run.embed_tokens(big, 1.82)
    assert abs(tokens - (0.9 * scale_run.TOKENS_PER_PAPER + 0.92 * scale_run.TITLE_ONLY_TOKENS)) < 1e-9
    assert "0.92 title-only" in split
    # a rule that keeps fewer cited-only papers takes them off the title-only nodes
    assert abs(scale_run.embed_tokens(big, 1.3)[0] - (0.9 * 232 + 0.4 * scale_run.TITLE_ONLY_TOKENS)) < 1e-9
    # a size measured before title-only papers were counted: every node a full paper
    assert scale_run.embed_tokens({"papers": 1000, "nodes": 1820}, 1.82)[0] == 1.82 * scale_run.TOKENS_PER_PAPER


def test_titles_only_keeps_the_papers_and_drops_their_abstracts(bench_module, repo_root, monkeypatch):
    monkeypatch.syspath_prepend(str(repo_root / "bench"))
    gpu = bench_module("gpu_throughput")
    ids, titles, abstracts, what = gpu.bench_texts(300, False)
    ids2, titles2, abstracts2, what2 = gpu.bench_texts(300, True)
    assert (ids2, titles2) == (ids, titles) and what == "titles + abstracts" and what2 == "titles only"
    assert all(a for a in abstracts) and abstracts2 == [None] * 300
