"""bench/gpu_throughput.py: its CPU dry run goes through every timed part (bare compiled forward,
the embed job, training at the seed recipe and at batch 64), and without a GPU the real run stops
with an error instead of measuring the CPU."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch


def test_dry_run_times_every_part(tmp_path, repo_root):
    out = tmp_path / "figures.json"
    p = subprocess.run([sys.executable, "bench/gpu_throughput.py", "--dry-run", "--docs", "64", "--json", str(out)],
                       cwd=repo_root, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "dry run" in p.stdout and "not a measurement" in p.stdout
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == ["bare compiled forward", "embed job (loop: feed + forward + writes)", "embed job (whole call)",
                          "training, seed recipe 8 x 4", "training, batch 64"]
    assert all(r["tokens_per_s"] > 0 and r["hours_33M"] > 0 for r in rows.values())
    embed = rows["embed job (loop: feed + forward + writes)"]
    assert embed["ratio_to_bare"] == pytest.approx(embed["tokens_per_s"] / rows["bare compiled forward"]["tokens_per_s"])
    assert "64 papers" in p.stdout and "MFU" in p.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the real benchmark would run")
def test_without_a_gpu_the_real_run_fails_loudly(repo_root):
    p = subprocess.run([sys.executable, "bench/gpu_throughput.py"], cwd=repo_root, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2 and "does not fall back to the CPU" in p.stderr and not p.stdout
