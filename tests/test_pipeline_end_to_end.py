"""The whole pipeline on a small slice of the embedded sample, run the way a user runs it
(a subprocess of jobs/pipeline.py), plus the one-sentence errors users can cause."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

PY = sys.executable
RESOLUTIONS = [0.001, 0.01]
# The map page's research-area layer: shown or not, each shape's area name and outline length.
AREA_LAYER = ("JSON.stringify({visible: __model('area_shapes').visible, area: __model('area_regions').data.area, "
              "points: __model('area_regions').data.xs.map(xs => xs.length)})")


def _slice_of_sample(sample: Path, dest: Path) -> Path:
    """30 eLife articles, 40 ScisummNet papers (sorted ids: linked ones share prefixes), PubMed dev CSV."""
    for sub in ("elife", "scisummnet", "pubmed"):
        (dest / sub).mkdir(parents=True)
    for f in sorted((sample / "elife").glob("*.xml.gz"))[:30]:
        shutil.copy(f, dest / "elife" / f.name)
    for d in sorted((sample / "scisummnet").iterdir())[:40]:
        shutil.copytree(d, dest / "scisummnet" / d.name)
    shutil.copy(sample / "pubmed/dev-data-small.csv.gz", dest / "pubmed")
    return dest


@pytest.fixture(scope="module")
def run_job(repo_root):
    """Run a job script the way a user does: `python jobs/<name>.py ...` from the checkout."""
    def run(args, env=None, timeout=900):
        return subprocess.run([PY, *args], cwd=repo_root, capture_output=True, text=True, timeout=timeout, env=env)
    return run


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, sample_dir, run_job):
    base = tmp_path_factory.mktemp("e2e")
    data = _slice_of_sample(sample_dir, base / "data")
    config = base / "small.toml"
    config.write_text(f"""
[ingest]
inputs = [
  {{ path = "{data / 'elife'}", format = "jats", source = "elife" }},
  {{ path = "{data / 'scisummnet'}", format = "scisummnet", source = "scisummnet" }},
  {{ path = "{data / 'pubmed'}", format = "pubmed_csv", source = "pubmed" }},
]
[train]
max_steps = 2
grad_accum = 1
batch_size = 4
max_length = 32
val_max = 8
[embed]
max_length = 32
shard_size = 2000
[cluster]
resolutions = {RESOLUTIONS}
[render]
width = 600
height = 450
legend_width = 180
""")
    run = base / "run"
    p = run_job(["jobs/pipeline.py", "--config", str(config), "--run", str(run)])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return run, config, p.stdout


def test_every_stage_leaves_its_output(finished_run):
    run, _, _ = finished_run
    for table in ("papers", "references", "mentions", "rejects", "pairs", "weights", "triplets",
                  "edges", "clusters", "topics"):
        assert pq.read_table(run / table).num_rows > 0, table
    for f in ("map.png", "map.html", "report.md", "embeddings/manifest.json"):
        assert (run / f).stat().st_size > 0, f
    from transformers import AutoModel

    model = AutoModel.from_pretrained(run / "model")
    assert model.config.hidden_size == 384


def test_counts_add_up_and_the_report_states_them(finished_run):
    run, _, _ = finished_run
    summary = json.loads((run / "ingest_summary.json").read_text())
    papers = pq.read_table(run / "papers").to_pandas()
    inputs = {"elife": 30, "scisummnet": 40, "pubmed": 200}
    for source, n in inputs.items():
        s = summary["per_source"][source]
        assert s["input_records"] == n
        records = int(((papers.source == source) & papers.source_file.notna()).sum())
        assert records + s["record_rejects"] == n
    report = (run / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| 0.0")]
    assert [float(r.split("|")[1]) for r in rows] == RESOLUTIONS     # one row per resolution
    assert "| elife | train+map | 30 |" in report and "| pubmed | train+map | 200 |" in report
    # the summary opens the report, with this run's own figures
    head = report.split("## Summary\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert report.index("## Summary") < report.index("## Input")
    corpus, encoder, map_, *criteria = head
    records = int((papers.source_file.notna()).sum())
    nodes = pq.read_table(run / "vectors" / "ids.parquet").num_rows if (run / "vectors" / "ids.parquet").exists() else None
    assert corpus.startswith(f"- **Corpus:** {records:,} papers with a record of their own (elife 30, pubmed 200, "
                             "scisummnet 40;")
    assert nodes is None or f"hold {nodes:,} papers" in corpus
    manifest = json.loads((run / "embeddings" / "manifest.json").read_text())
    assert encoder.startswith(f"- **Encoder:** this run's fine-tuned model (weights hash {manifest['model_hash'][:12]}), "
                              f"{manifest['pooling']} pooling over at most 32 tokens")
    assert encoder.endswith("with the triplet objective for 2 steps.")
    assert map_.startswith("- **Map:** Leiden CPM at resolution 0.001: ")   # the middle one of two: the first
    assert criteria and all(c.startswith("- **") for c in criteria)
    assert "Feature set `default`: I, R, D, S; absent: M (methods mentions)" in report
    assert "| first logged |" not in report or "| last logged |" in report


def test_a_second_start_skips_finished_stages(finished_run, run_job):
    run, config, _ = finished_run
    before = (run / "map.png").stat().st_mtime_ns
    p = run_job(["jobs/pipeline.py", "--config", str(config), "--run", str(run)])
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("skipped") == 8
    assert (run / "map.png").stat().st_mtime_ns == before


def _one_sentence_error(p):
    assert p.returncode == 2
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr
    return lines[0]


def test_wrong_input_path_is_one_sentence(tmp_path, run_job):
    p = run_job(["jobs/ingest.py", "--run", str(tmp_path / "r"), "--input", "/no/such/folder:jats:elife"])
    assert "/no/such/folder" in _one_sentence_error(p)


def test_missing_config_file_is_one_sentence(tmp_path, run_job):
    p = run_job(["jobs/pipeline.py", "--run", str(tmp_path / "r"), "--config", str(tmp_path / "nope.toml")])
    assert "nope.toml" in _one_sentence_error(p)


def test_missing_java_is_one_sentence(tmp_path, run_job):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)          # no java anywhere on it
    p = run_job(["jobs/ingest.py", "--run", str(tmp_path / "r")], env=env)
    assert "Java 17" in _one_sentence_error(p)


def test_the_real_map_opens_in_chromium_without_errors(browser, finished_run):
    """At 1400 x 900: no errors, the table rendered, and the labels clear of each other and the legend."""
    from mapping.render import RenderConfig

    run, _, _ = finished_run
    r = browser.open_page(run / "map.html", wait_js=f"({browser.MAP_READY}) && {browser.TABLE_RENDERED}", timeout=60,
                          viewport=(1400, 900), probes={"helpers": browser.MAP_HELPERS, "labels": browser.LABEL_BOXES,
                                                        "regions": AREA_LAYER})
    assert r["ready"], "BokehJS did not render the topic table"
    assert r["errors"] == [], r["errors"]
    areas, shown = browser.check_labels(json.loads(r["probes"]["labels"]), RenderConfig().labels_on_map)
    assert areas, "no research area is labelled on the demo's map"
    # the research areas as a layer of shapes, shown: every area of the run, each a closed outline
    regions = json.loads(r["probes"]["regions"])
    assert regions["visible"] and set(regions["area"]) == set(pq.read_table(run / "areas").column("label").to_pylist())
    assert min(regions["points"]) >= 4
    topics = pq.read_table(run / "topics").to_pandas()
    # the table lists the map's topics largest first: the largest one's label reaches the page
    biggest = topics.sort_values("size").groupby("resolution")["label"].last()
    assert any(label in r["text"] for label in biggest), (list(biggest), r["text"][:500])


def test_the_lookup_table_flags_agree_with_the_references(finished_run, run_job):
    """`jobs/lookup.py` on the finished run, for the eLife paper with the most references resolved
    to papers of the run: its table's cited / citing marks are the references table's links."""
    import pyarrow.compute as pc

    run, _, _ = finished_run
    refs = pq.read_table(run / "references", columns=["citing_id", "cited_id"]).to_pylist()
    on_map = set(pq.read_table(run / "vectors/ids.parquet").column("paper_id").to_pylist())
    elife = pq.read_table(run / "papers", columns=["paper_id"],
                          filters=(pc.field("source") == "elife") & pc.field("source_file").is_valid())
    counts = {p: sum(r["citing_id"] == p and r["cited_id"] in on_map for r in refs)
              for p in elife.column(0).to_pylist()}
    focal = max(sorted(counts), key=counts.get)
    cited = {r["cited_id"] for r in refs if r["citing_id"] == focal}
    citing = {r["citing_id"] for r in refs if r["cited_id"] == focal}
    p = run_job(["jobs/lookup.py", "--run", str(run), "--paper-id", focal, "--k", "100"])
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    h = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    head, rows = lines[h], lines[h + 1:]
    cut = [head.index(c) for c in ("cited", "citing", "topic", "paper_id", "title")]
    ids = [r[cut[3]:cut[4]].strip() for r in rows]
    assert len(ids) == 100 and focal not in ids
    assert [r[cut[0]:cut[1]].strip() == "yes" for r in rows] == [i in cited for i in ids]
    assert [r[cut[1]:cut[2]].strip() == "yes" for r in rows] == [i in citing for i in ids]
    assert any(i in cited for i in ids)          # the check saw at least one link
    assert f"to {len({c for c in cited if c in on_map}):,} papers of the run" in lines[2]


def test_the_explore_notebook_runs_on_the_finished_run(finished_run, run_job):
    """notebooks/execute.py (make demo's last step) runs notebooks/explore_run.ipynb in a real kernel
    on this run and keeps it there with its outputs and an HTML export: every cell runs, the four
    map PNGs and the placed map are shown, Table 6 is rendered, the look-up prints its table and the
    placement places the shipped new papers by the README's recipe."""
    import nbformat

    run, _, _ = finished_run
    p = run_job(["notebooks/execute.py", "--run", str(run)], timeout=1500)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == [str(run / "explore_run.ipynb"), str(run / "explore_run.html")]
    nb = nbformat.read(run / "explore_run.ipynb", as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 5
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", ""))
                     + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "direct citation" in text and "random" in text          # Table 6's columns
    assert "'placed': " in text and (run / "placed_maps" / "map.png").exists()
    placed = pq.read_table(run / "placed").to_pandas()
    assert placed.reason.isna().sum() >= 7                          # the shipped papers, on the map
    html = (run / "explore_run.html").read_text()
    assert html.count("data:image/png;base64,") >= 5 and "<table" in html


def test_the_report_compares_methods_on_the_pubmed_records(finished_run):
    run, _, _ = finished_run
    m = json.loads((run / "metrics.json").read_text())
    mesh = m["comparison"]["mesh"]
    assert mesh["evaluated"] == 200
    rel = {g: d["relative_accuracy"]["mean"] for g, d in mesh["graphs"].items()}
    assert {"encoder", "tfidf", "bm25", "random", "criterion", "encoder + BM25"} <= set(rel)
    assert min(rel, key=rel.get) == "random" and max(rel, key=rel.get) == "criterion"
    assert "subjects" in m["comparison"] and "skipped" in m["comparison"]["subjects"]   # 30 eLife papers < min_papers
    assert (run / "relatedness" / "mesh.png").stat().st_size > 10_000
    assert pq.read_table(run / "relatedness" / "curves.parquet").num_rows == 6 * 16 * 3
    assert "## Methods compared on the same papers" in (run / "report.md").read_text()


def test_the_readme_placement_recipe_places_the_shipped_new_papers(finished_run, run_job, repo_root, tmp_path, browser):
    """README: ingest sample/new_papers into a run of their own, embed with the map's model, place;
    the map's own files stay byte for byte, the placed maps are separate files; vectors of another
    model are refused in one sentence."""
    import hashlib

    from mapping.render import RenderConfig

    run, _, _ = finished_run
    new = tmp_path / "new"
    own = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(run.glob("map*.png")) + [run / "map.html"]}
    for args in (["jobs/ingest.py", "--run", str(new), "--input", "sample/new_papers:jats:elife_new"],
                 ["jobs/embed.py", "--run", str(new), "--model", str(run / "model")]):
        p = run_job(args)
        assert p.returncode == 0, p.stderr[-3000:]
    p = run_job(["jobs/place.py", "--run", str(run), "--new", str(new)])
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(p.stdout)
    shipped = len(list((repo_root / "sample" / "new_papers").glob("*.xml.gz")))
    assert s["papers"] == "corpus" and s["placed"] + s["unplaced"] <= shipped
    assert s["placed"] >= shipped - 1 and s["title_only_not_placed"] > 0
    assert {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in own} == own
    assert sorted(f.name for f in (run / "placed_maps").glob("*.png")) == sorted(f.name for f in own if f.suffix == ".png")
    # placed_maps/map.html in Chromium: the placed papers a layer of their own, shown with its checkbox, the areas
    # drawn, the labels clear of each other and of the legend
    r = browser.open_page(run / "placed_maps" / "map.html", wait_js=browser.MAP_READY, timeout=60, viewport=(1400, 900),
                          probes={"helpers": browser.MAP_HELPERS, "labels": browser.LABEL_BOXES, "regions": AREA_LAYER,
                                  "placed": "JSON.stringify([__model('placed_points').visible, "
                                            "__model('placed').data.x.length, __model('placed_toggle').labels])"})
    assert r["ready"] and r["errors"] == [], r["errors"]
    visible, n_placed, toggle = json.loads(r["probes"]["placed"])
    assert visible and n_placed == s["placed"] and toggle == [f"placed papers ({s['placed']})"]
    assert json.loads(r["probes"]["regions"])["visible"]
    browser.check_labels(json.loads(r["probes"]["labels"]), RenderConfig().labels_on_map)

    other = tmp_path / "other"
    shutil.copytree(new, other, ignore=shutil.ignore_patterns("embeddings", "vectors"))
    p = run_job(["jobs/embed.py", "--run", str(other), "--model", "minilm", "--max-length", "32"])
    assert p.returncode == 0, p.stderr[-3000:]
    p = run_job(["jobs/place.py", "--run", str(run), "--new", str(other)])
    err = p.stderr.strip().splitlines()
    assert p.returncode == 2 and err[-1].startswith(f"error: the new papers in {other} were embedded with ")
    assert f"embed the new papers with the map's: jobs/embed.py --run {other} --model {run / 'model'}" in err[-1]
