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
