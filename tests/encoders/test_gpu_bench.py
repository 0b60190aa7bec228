"""bench/gpu_throughput.py: its CPU dry run goes through every timed part (bare compiled forward,
the embed job, training at the seed recipe and at batch 64), checks that the embed job ran the
compiled forward, leaves the speed targets not checked (so it exits 1: a dry run never passes for a
measurement), and without a GPU the real run stops with an error instead of measuring the CPU."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch


def test_dry_run_times_every_part(tmp_path, repo_root):
    out = tmp_path / "figures.json"
    p = subprocess.run([sys.executable, "bench/gpu_throughput.py", "--dry-run", "--docs", "64", "--json", str(out)],
                       cwd=repo_root, capture_output=True, text=True, timeout=900)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert "dry run" in p.stdout and "not a measurement" in p.stdout
    figures = json.loads(out.read_text())
    rows = {r["name"]: r for r in figures["rows"]}
    assert list(rows) == ["bare compiled forward", "embed job (loop: feed + forward + writes)", "embed job (whole call)",
                          "embed job after its first batch", "training, seed recipe 8 x 4", "training, batch 64"]
    assert all(r["tokens_per_s"] > 0 and r["projected_hours_33M"] > 0
               and "measured real tokens/s" in r["projection_basis"] for r in rows.values())
    assert not any("hours_33M" in r for r in rows.values())   # only under the projection's own key
    embed = rows["embed job (loop: feed + forward + writes)"]
    assert embed["ratio_to_bare"] == pytest.approx(embed["tokens_per_s"] / rows["bare compiled forward"]["tokens_per_s"])
    assert rows["training, batch 64"]["ratio_to_bare"] is None     # training is not the forward's work
    assert "64 papers (titles + abstracts)" in p.stdout and "MFU" in p.stdout and figures["texts"] == "titles + abstracts"
    assert re.search(r"^\(\*\) projected \(basis: 33M papers x 256 tokens each / the row's measured real tokens/s\)",
                     p.stdout, re.M)
    # the compiled forward is checked for real on the CPU; the GPU targets are not checked, with the reason
    assert re.search(r"^  embed job ran the compiled forward \(compile on\): met$", p.stdout, re.M)
    assert figures["embed_summary"]["compiled"] is True
    # the job ran the graphs the bare forward compiled: its loop holds no compile of its own
    assert re.search(r"^  embed job reused the bare forward's compiled graphs \(none compiled again\): met$", p.stdout, re.M)
    assert figures["graphs_compiled_in_the_embed_job"] == 0 and "; 0 graph(s) compiled in the job)" in p.stdout
    assert figures["embed_summary"]["first_batch_seconds"] > 0   # what bench/scale_run.py adds as the job's start
    unchecked = re.findall(r"^  (.+) \(target >= .+\): not checked \(dry run: a tiny model on the CPU, not a "
                           r"measurement\)$", p.stdout, re.M)
    assert unchecked == ["embed job / bare compiled forward, real tokens/s", "embed job, real tokens/s",
                         "training at batch 64, share of bf16 peak"]
    assert [v["status"] for v in figures["verdicts"]] == ["met", "met", "not checked", "not checked", "not checked"]
    assert re.search(r"^0 MISSED, 3 not checked: exit 1$", p.stdout, re.M)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the real benchmark would run")
def test_without_a_gpu_the_real_run_fails_loudly(repo_root):
    p = subprocess.run([sys.executable, "bench/gpu_throughput.py"], cwd=repo_root, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2 and "does not fall back to the CPU" in p.stderr and not p.stdout


def test_facet_gpu_dry_run_times_both_objectives_and_the_real_run_fails_without_a_gpu(tmp_path, repo_root):
    out = tmp_path / "facet.json"
    p = subprocess.run([sys.executable, "bench/facet_gpu.py", "--dry-run", "--json", str(out)], cwd=repo_root,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {r["objective"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"flew", "unifar"}
    assert all(r["steps_timed"] == 1 and r["steps_per_s"] > 0 and r["real_tokens_per_s"] > 0 for r in rows.values())
    assert "no measurement" in p.stdout
    if not torch.cuda.is_available():
        q = subprocess.run([sys.executable, "bench/facet_gpu.py"], cwd=repo_root, capture_output=True, text=True, timeout=300)
        assert q.returncode == 2 and "no usable CUDA device" in q.stderr


def test_fulltext_gpu_dry_run_times_each_objective_and_the_real_run_fails_without_a_gpu(tmp_path, repo_root):
    out = tmp_path / "fulltext.json"
    p = subprocess.run([sys.executable, "bench/fulltext_gpu.py", "--dry-run", "--json", str(out)], cwd=repo_root,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["objective"], r["micro_batch"]) for r in rows] == [("cosaemb", 8), ("scijepa", 8), ("section_cl", 8),
                                                                  ("scijepa", 16)]
    assert all(r["steps_timed"] == 1 and r["steps_per_s"] > 0 and r["real_tokens_per_s"] > 0 for r in rows)
    assert rows[-1]["sizes_out_of_memory"] == [] and "no measurement" in p.stdout
    if not torch.cuda.is_available():
        q = subprocess.run([sys.executable, "bench/fulltext_gpu.py"], cwd=repo_root, capture_output=True, text=True,
                           timeout=300)
        assert q.returncode == 2 and "no usable CUDA device" in q.stderr


def test_train_profile_dry_run_profiles_a_step_and_the_real_run_fails_without_a_gpu(repo_root):
    p = subprocess.run([sys.executable, "bench/train_profile.py", "--dry-run", "--objectives", "triplet", "--steps", "3",
                        "--rows", "4"], cwd=repo_root, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "triplet:" in p.stdout and "no measurement" in p.stdout
    assert p.stdout.count("Self CPU time total") == 2   # the two tables
    if not torch.cuda.is_available():
        q = subprocess.run([sys.executable, "bench/train_profile.py"], cwd=repo_root, capture_output=True, text=True,
                           timeout=300)
        assert q.returncode == 2 and "no usable CUDA device" in q.stderr
