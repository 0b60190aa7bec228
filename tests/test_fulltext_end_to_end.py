"""The full-text objectives the way a user runs them (issue 31): ingest with `[ingest] keep_sections =
true` and the importance stage on a slice of the embedded sample, then for each of cosaemb, scijepa and
section_cl `jobs/train.py --objective X`, embed, knn, cluster and evaluate as subprocesses; the map's
stages read the main vector unchanged, CoSAEmb's run also gets the chunks view and answers the
paragraph look-up."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

PY = sys.executable
TABLES = ("papers", "references", "mentions", "rejects", "warnings", "files", "sections", "pairs", "weights", "triplets")


@pytest.fixture(scope="module")
def sections_run(tmp_path_factory, sample_dir, repo_root):
    base = tmp_path_factory.mktemp("fulltext")
    for sub in ("elife", "scisummnet", "pubmed"):
        (base / "data" / sub).mkdir(parents=True)
    for f in sorted((sample_dir / "elife").glob("*.xml.gz"))[:8]:
        shutil.copy(f, base / "data" / "elife" / f.name)
    for d in sorted((sample_dir / "scisummnet").iterdir())[:12]:
        shutil.copytree(d, base / "data" / "scisummnet" / d.name)
    shutil.copy(sample_dir / "pubmed/dev-data-small.csv.gz", base / "data" / "pubmed")
    config = base / "fulltext.toml"
    config.write_text(f"""
[ingest]
keep_sections = true
inputs = [
  {{ path = "{base / 'data' / 'elife'}", format = "jats", source = "elife" }},
  {{ path = "{base / 'data' / 'scisummnet'}", format = "scisummnet", source = "scisummnet" }},
  {{ path = "{base / 'data' / 'pubmed'}", format = "pubmed_csv", source = "pubmed" }},
]
[train]
max_steps = 2
grad_accum = 1
batch_size = 4
max_length = 64
val_max = 8
[embed]
max_length = 64
shard_size = 2000
[cluster]
resolutions = [0.001, 0.01]
""")
    run = base / "run"
    p = subprocess.run([PY, "jobs/pipeline.py", "--config", str(config), "--run", str(run), "--to", "importance"],
                       cwd=repo_root, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return run, config


@pytest.mark.parametrize("objective", ["cosaemb", "scijepa", "section_cl"])
def test_train_embed_knn_cluster_evaluate(sections_run, objective, repo_root):
    src, config = sections_run
    run = src.parent / objective
    run.mkdir()
    for t in TABLES:
        (run / t).symlink_to(src / t)
    for f in ("ingest_summary.json", "importance_summary.json"):
        shutil.copy(src / f, run / f)
    for job in (["train", "--objective", objective], ["embed"], ["knn"], ["cluster"], ["evaluate"]):
        p = subprocess.run([PY, f"jobs/{job[0]}.py", "--config", str(config), "--run", str(run), *job[1:]],
                           cwd=repo_root, capture_output=True, text=True, timeout=1200)
        assert p.returncode == 0, f"{job}: " + p.stdout[-3000:] + p.stderr[-3000:]
    card = json.loads((run / "model" / "sciencemap.json").read_text())
    assert card["objective"]["name"] == objective and card["steps"] == 2
    manifest = json.loads((run / "embeddings" / "manifest.json").read_text())
    papers = pq.read_table(src / "papers", columns=["paper_id", "mapped"]).to_pandas()
    assert manifest["complete"] and manifest["dim"] == 384
    assert pq.read_table(run / "clusters").num_rows > 0 and (run / "report.md").stat().st_size > 0
    assert len(papers) > 200
    if objective == "cosaemb":   # the chunks view and the paragraph look-up
        chunks = json.loads((run / "embeddings" / "views" / "chunks" / "manifest.json").read_text())
        sections = pq.read_table(src / "sections", columns=["paper_id"]).column("paper_id").to_pylist()
        assert chunks["complete"] and chunks["papers"] == len(set(sections)) and chunks["chunks"] > chunks["papers"]
        p = subprocess.run([PY, "jobs/lookup.py", "--run", str(run), "--text", "The spindle checkpoint delays anaphase.",
                            "--k", "3", "--json"], cwd=repo_root, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
        hits = json.loads(p.stdout[p.stdout.index("{"):])["hits"]
        assert len(hits) == 3 and hits[0]["similarity"] >= hits[2]["similarity"]
        assert {h["section_class"] for h in hits} <= {"I", "M", "R", "D"}
    else:
        assert not (run / "embeddings" / "views" / "chunks").exists()
