"""The bench scripts' verdicts, run on small cases: each script with a target, given a target out of
its reach (or, where it needs a GPU, on a machine without one), exits non-zero and prints the
MISSED line; a target it cannot check is a "not checked (<reason>)" line and fails the run too;
--no-fail prints the same lines and exits 0. The figures themselves are not asserted: only the
verdicts, the exit codes and where a projection is written."""
from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq

FIGURE = r"[\d,.]+%?x?"   # a printed figure: 0.83, 1,234, 35.0%, 5.3x


def bench(repo_root, script: str, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"bench/{script}", *map(str, args)], cwd=repo_root, capture_output=True,
                          text=True, timeout=timeout)


def verdict(p: subprocess.CompletedProcess, name: str, status: str, target: str | None = None) -> str:
    """The one verdict line of `name` with `status` (met, MISSED, not checked (...)); fails naming the output.
    With a `target`, the line holds it, after the figure (none when not checked)."""
    figure = "" if target is None else rf" \(target {re.escape(target)}\)"
    if target is not None and status != "not checked":
        figure = f": {FIGURE}{figure}"
    pattern = rf"^  {re.escape(name)}{figure}: {re.escape(status)}( \(.*\))?$"
    lines = [m.group(0) for m in re.finditer(pattern, p.stdout, re.M)]
    assert len(lines) == 1, f"no single line /{pattern}/ in:\n{p.stdout[-4000:]}\n{p.stderr[-3000:]}"
    return lines[0]


def summary(p: subprocess.CompletedProcess) -> tuple[int, int, int]:
    """(MISSED, not checked, exit code) from the script's last line."""
    m = re.search(r"^(\d+) MISSED, (\d+) not checked: exit (\d)", p.stdout, re.M)
    assert m, p.stdout[-3000:] + p.stderr[-3000:]
    return int(m[1]), int(m[2]), int(m[3])


def test_knn_scale_misses_an_unreachable_speed_and_does_not_pass_a_skipped_resume_check(repo_root, tmp_path):
    out = tmp_path / "knn.json"
    p = bench(repo_root, "knn_scale.py", "--n", 3000, "--dim", 32, "--fields", 5, "--centres", 30, "--rank", 8,
              "--queries", 200, "--run", tmp_path / "run", "--target-speed", 1e9, "--target-peak", 1e9, "--out", out)
    assert p.returncode == 1, p.stderr[-3000:]
    verdict(p, "speed vs exact search (projected exact time / measured stage time)", "MISSED", ">= 1000000000.0x")
    verdict(p, "peak RSS / raw float32 vectors", "met", "<= 1000000000.00x")
    # 3,000 rows are one query block: the kill/resume check cannot run, and says so
    line = verdict(p, "kill/resume: edges identical to the uninterrupted run's", "not checked")
    assert "the check needs >= 3" in line
    figures = json.loads(out.read_text())
    assert "exact_s_extrapolated" not in figures and figures["projected_exact_s"] > 0
    assert "queries/s" in figures["projection_basis"]
    assert [v["status"] for v in figures["verdicts"]].count("MISSED") == summary(p)[0]


def test_leiden_scale_misses_an_unreachable_ratio(repo_root):
    p = bench(repo_root, "leiden_scale.py", "--nodes", 3000, "--edges", 30000, "--community", 50,
              "--target-ratio", 0)
    assert p.returncode == 1, p.stderr[-3000:]
    verdict(p, "stage without igraph construction / bare Leiden, CPU s", "MISSED", "<= 0.00")
    verdict(p, "bare Leiden gives the stage's partition quality", "met")
    assert summary(p)[0] >= 1


def test_leiden_scale_warm_mode_prints_both_sweeps_and_misses_an_unreachable_speedup(repo_root):
    p = bench(repo_root, "leiden_scale.py", "--warm", "--nodes", 3000, "--edges", 30000, "--community", 50,
              "--target-warm", 1000)
    assert p.returncode == 1, p.stderr[-3000:]
    verdict(p, "warm-start sweep speed-up (wall)", "MISSED", ">= 1000.00x")
    verdict(p, "warm-start CPM quality short of independent, worst resolution", "met", "<= 0.50%")
    assert p.stdout.count("CPM quality independent") == 5 and "refinement inside" in p.stdout


def test_leiden_scale_engines_mode_prints_three_sweeps_and_misses_an_unreachable_speedup(repo_root):
    p = bench(repo_root, "leiden_scale.py", "--engines", "--nodes", 3000, "--edges", 30000, "--community", 50,
              "--workers", 2, "--target-engine", 1000)
    assert p.returncode == 1, p.stderr[-3000:]
    verdict(p, "networkit sweep speed-up (wall) against igraph with 2 workers", "MISSED", ">= 1000.00x")
    assert re.search(r"^  networkit Leiden CPM quality short of igraph, worst resolution: [\d.]+% \(target <= 0\.50%\): "
                     r"(met|MISSED)$", p.stdout, re.M), p.stdout[-3000:]
    assert p.stdout.count("CPM quality igraph") == 10 and p.stdout.count("Leiden's CPM quality igraph") == 5
    for label in ("igraph, 2 workers: sweep", "networkit, 1 thread: sweep", "networkit, 2 threads: sweep"):
        assert label in p.stdout


def test_leiden_scale_merge_mode_measures_the_merge_in_a_child_and_misses_an_unreachable_memory_ratio(repo_root):
    p = bench(repo_root, "leiden_scale.py", "--merge", "--nodes", 3000, "--edges", 30000, "--community", 50,
              "--target-merge-memory", 0, "--target-merge", 1e6)
    assert p.returncode == 1, p.stderr[-3000:]
    verdict(p, "merge peak memory / the graph arrays and membership", "MISSED", "<= 0.00")
    verdict(p, "merge / Leiden, CPU s", "met", "<= 1000000.0000")
    assert re.search(r"^Leiden \(igraph, gamma 0\.03, \d iterations\): .* [\d,]+ below 5$", p.stdout, re.M), p.stdout


def test_feed_throughput_compares_with_references_of_the_same_run(repo_root, tmp_path):
    out = tmp_path / "feed.json"
    p = bench(repo_root, "feed_throughput.py", "--elife-repeat", 0, "--triplets", 2000, "--titles-repeat", 1,
              "--target-vs-dataloader", 1e6, "--json", out)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "eLife corpus left out (--elife-repeat 0)" in p.stdout
    verdict(p, "sample: embed feed / a plain DataLoader, tokens per CPU-s", "MISSED", ">= 1000000.00x")
    # a reachable timing target: its verdict is printed, whichever it is (no test asserts a speed)
    assert re.search(r"^  sample: embed feed / the tokenizer's batch call, tokens per CPU-s: [\d.]+x "
                     r"\(target >= 0\.50x\): (met|MISSED)$", p.stdout, re.M), p.stdout[-3000:]
    assert re.search(r"^reference, the tokenizer's batch call: .* tokens/s per core$", p.stdout, re.M)
    assert re.search(r"^reference, a plain DataLoader \(\d+ workers, 128 texts a batch\): .* tokens/s per core$",
                     p.stdout, re.M)
    # the 16-core figure is a projection, printed and written as one
    assert "16 cores:" not in p.stdout
    assert re.search(r"M tokens/s on 16 cores, projected \(basis: per-core tokens/s measured here x 16 cores\)",
                     p.stdout)
    sample = json.loads(out.read_text())["corpora"]["sample"]
    assert set(sample["projected_tokens_per_s_16_cores"]) == {"embed feed", "training feed, micro-batches of 64",
                                                              "training feed, micro-batches of 8"}
    assert sample["projection_basis"] == "per-core tokens/s measured here x 16 cores"
    # title-only papers (a map's cited-only ones): the embed feed only, its documents a tenth as long
    titles = json.loads(out.read_text())["corpora"]["titles only"]
    assert set(titles["projected_tokens_per_s_16_cores"]) == {"embed feed"}
    verdict(p, "titles only: embed feed / a plain DataLoader, tokens per CPU-s", "MISSED", ">= 1000000.00x")
    means = [int(m) for m in re.findall(r"^embed feed: [\d,]+ docs, [\d,]+ real tokens \(mean (\d+)\)", p.stdout, re.M)]
    assert len(means) == 2 and means[1] < min(40, means[0]), means   # a title: ~20-26 tokens on real data


def faiss_gpus() -> int:
    from mapping.knn import gpu_count

    return gpu_count()


def test_knn_gpu_check_fails_loudly_without_a_gpu(repo_root):
    p = bench(repo_root, "knn_gpu_check.py", "--n", 2000, "--target-recall", 1.01)
    assert p.returncode == 1, p.stderr[-3000:]
    if faiss_gpus() == 0:   # this machine: nothing can be compared, and the run says so
        verdict(p, "FAISS sees a GPU", "MISSED")
        verdict(p, "exact search: the GPU's neighbour lists are the CPU's (tie swaps accepted)", "not checked")
        assert summary(p) == (1, 4, 1)
    else:                   # a GPU machine: the recall target is out of reach
        verdict(p, "FAISS sees a GPU", "met")
        verdict(p, "GPU ivf_sq8 recall@k", "MISSED", ">= 1.0100")


def test_no_fail_prints_the_same_verdicts_and_exits_0(repo_root):
    p = bench(repo_root, "knn_gpu_check.py", "--n", 2000, "--target-recall", 1.01, "--no-fail")
    assert p.returncode == 0, p.stderr[-3000:]
    if faiss_gpus() == 0:
        verdict(p, "FAISS sees a GPU", "MISSED")
    else:
        verdict(p, "GPU ivf_sq8 recall@k", "MISSED", ">= 1.0100")
    assert re.search(r"^\d+ MISSED, \d+ not checked: exit 0 \(--no-fail\)$", p.stdout, re.M)


def test_html_scale_misses_an_unreachable_page_size(repo_root, shared_data, tmp_path):
    p = bench(repo_root, "html_scale.py", "--n", 200, "--old-n", 0, "--max-mb", 0.001, "--out", tmp_path)
    assert p.returncode == 1, p.stderr[-3000:]
    verdict(p, "new page size, MB (10^6 bytes)", "MISSED", "<= 0.001")
    # the browser checks ran (met) where Chromium is installed, and say why not where it is not
    statuses = re.findall(r"^  the page.* (met|MISSED|not checked)(?: \(.*\))?$", p.stdout, re.M)
    assert len(statuses) == 6 and len(set(statuses)) == 1 and statuses[0] in ("met", "not checked")
    if os.environ.get("CI"):   # CI must have run them
        assert statuses[0] == "met", p.stdout[-3000:]


def test_importance_scale_misses_an_unreachable_ratio_and_one_size_is_not_flat_memory(repo_root, tmp_path):
    p = bench(repo_root, "importance_scale.py", "--sizes", 2000, "--ratio-from", 1000, "--target-ratio", 0.01,
              "--root", tmp_path)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    line = re.findall(r"^  [\d,]+ mentions: full job / bare reference time: [\d.]+ \(target <= 0.01\): MISSED$",
                      p.stdout, re.M)
    assert len(line) == 1, p.stdout[-3000:]
    verdict(p, "Python driver peak RSS (full job), largest size / smallest", "not checked", "<= 1.100")
    assert summary(p) == (1, 1, 1)


def test_mapping_chain_misses_an_unreachable_peak(repo_root, tmp_path):
    out = tmp_path / "chain.json"
    p = bench(repo_root, "mapping_chain.py", "--n", 2000, "--dim", 16, "--resolutions", 0.01, "--layout", "pca",
              "--run", tmp_path / "run", "--target-peak-gib", 0.01, "--out", out)
    assert p.returncode == 1, p.stderr[-3000:]
    verdict(p, "largest stage peak RSS, GiB", "MISSED", "<= 0.01")
    assert json.loads(out.read_text())["verdicts"][0]["status"] == "MISSED"


def tiny_elife_tar(repo_root, dest):
    """A tar of five of the sample's eLife articles, laid out as the shared eLife tar (.xml members)."""
    with tarfile.open(dest, "w:gz") as tar:
        for f in sorted((repo_root / "sample" / "elife").glob("*.xml.gz"))[:5]:
            data = gzip.decompress(f.read_bytes())
            info = tarfile.TarInfo(f.name[:-len(".gz")])
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dest


def test_section_f1_misses_an_unreachable_target(repo_root, test_data, tmp_path):
    p = bench(repo_root, "section_f1.py", "--elife-tar", tiny_elife_tar(repo_root, tmp_path / "elife.tar.gz"),
              "--pmc-dir", test_data, "--target-dev", 1.01, "--show-errors", 0)
    assert p.returncode == 1, p.stderr[-3000:]
    verdict(p, "development set, macro-F1 over all", "MISSED", ">= 1.0100")
    verdict(p, "eLife + PMC pooled, macro-F1 (sec-type hidden)", "met", ">= 0.9700")


def test_section_f1_without_the_jats_data_is_not_checked_and_fails(repo_root, test_data, tmp_path):
    missing = tmp_path / "no-such.tar.gz"
    p = bench(repo_root, "section_f1.py", "--elife-tar", missing, "--pmc-dir", test_data, "--target-dev", 0,
              "--target-uninformative", 0, "--show-errors", 0)
    assert p.returncode == 1, p.stderr[-3000:]
    line = verdict(p, "eLife + PMC pooled, macro-F1 (sec-type hidden)", "not checked", ">= 0.9700")
    assert line.endswith(f"({missing} not found)")
    assert summary(p) == (0, 1, 1)


def fake_run(root, triplets: int):
    """A finished run as compare_runs.py reads it: metrics.json, weights and four counted tables."""
    root.mkdir()
    (root / "metrics.json").write_text(json.dumps({"mesh_accuracy": {"resolutions": [
        {"resolution": 0.01, "clusters_total": 7, "granularity": 50.0, "accuracy": 0.3}]}}))
    for name, rows in (("papers", 5), ("pairs", 4), ("triplets", triplets), ("edges", 9)):
        (root / name).mkdir()
        pq.write_table(pa.table({"x": list(range(rows))}), root / name / "part-00000.parquet")
    (root / "weights").mkdir()
    pq.write_table(pa.table({"feature": ["I", "R"], "weight": [0.4, 0.6], "mean": [0.1, 0.2], "std": [0.01, 0.02],
                             "entropy": [0.9, 0.8]}), root / "weights" / "part-00000.parquet")
    return root


def test_compare_runs_misses_on_a_difference(repo_root, tmp_path):
    a, b, c = fake_run(tmp_path / "a", 3), fake_run(tmp_path / "b", 3), fake_run(tmp_path / "c", 4)
    same = bench(repo_root, "compare_runs.py", a, b)
    assert same.returncode == 0, same.stderr[-3000:]
    verdict(same, f"{b}: headline figures identical to {a}'s", "met")
    differ = bench(repo_root, "compare_runs.py", a, b, c)
    assert differ.returncode == 1, differ.stderr[-3000:]
    assert verdict(differ, f"{c}: headline figures identical to {a}'s", "MISSED").endswith("(different: counts)")


def test_evaluate_scale_checks_the_figures_bit_for_bit(repo_root, tmp_path):
    p = bench(repo_root, "evaluate_scale.py", "--n", 3000, "--ref-n", 3000, "--work", tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    verdict(p, "at n=3,000: the new code's figures equal the reference's, bit for bit", "met")


def test_embed_throughput_misses_when_the_forward_cannot_compile(repo_root):
    """Without a C++ compiler inductor cannot build the CPU forward: the job falls back to eager, and
    the benchmark's compiled figures would measure something else, so its checks are MISSED."""
    env = dict(os.environ, CXX="/nonexistent/c++", TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    p = subprocess.run([sys.executable, "bench/embed_throughput.py", "--n", "32", "--rounds", "1"], cwd=repo_root,
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stderr[-3000:]
    # bf16 compute is measured only on a CPU with native bf16 (the bench says which it found)
    native = re.search(r"CPU native bf16: (True|False)", p.stdout)
    assert native, p.stdout[-3000:]
    precisions = ("float32", "bfloat16") if native[1] == "True" else ("float32",)
    for precision in precisions:
        assert "InvalidCxxCompiler" in verdict(p, f"{precision}: the torch.compile forward compiled", "MISSED")
    assert ("bfloat16: the torch.compile" in p.stdout) == (native[1] == "True")
    assert summary(p) == (len(precisions), 0, 1)


def test_rerank_speed_misses_an_unreachable_speedup(repo_root, tmp_path):
    p = bench(repo_root, "rerank_speed.py", "--n", 4000, "--dim", 64, "--queries", 600, "--rounds", 1,
              "--work", tmp_path, "--target-speedup", 1e6)
    assert p.returncode == 1, p.stderr[-3000:]
    for dtype in ("float32", "float16"):
        verdict(p, f"{dtype}: both re-ranks give the same lists (ties aside)", "met")
        verdict(p, f"{dtype}: bulk re-rank / per-row reads, time a query", "MISSED", ">= 1000000.00x")
    assert summary(p) == (2, 0, 1)


def test_knn_real_checks_a_runs_recall_against_an_independent_exact_search(repo_root, tmp_path):
    """--run: the stage's recall@k beside an independent exact search; a target out of reach is MISSED."""
    import numpy as np

    from mapping.knn import KnnConfig, run_knn
    from sciencemap.contracts import embeddings_schema
    from sciencemap.layout import RunLayout

    rng = np.random.default_rng(0)
    X = (rng.normal(size=(8, 24))[rng.integers(0, 8, 1200)] + 0.5 * rng.normal(size=(1200, 24))).astype(np.float32)
    layout = RunLayout(tmp_path / "r")
    layout.embeddings_dir.mkdir(parents=True)
    pq.write_table(pa.table({"paper_id": [f"p:{i}" for i in range(len(X))],
                             "vector": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 24)},
                            schema=embeddings_schema(24)), layout.embeddings_dir / "part-00000.parquet")
    s = run_knn(KnnConfig(k=10, index="ivf_sq8", recall_queries=300), layout)
    p = bench(repo_root, "knn_real.py", "--run", layout.root, "--queries", 400, "--target-recall", 1.01)
    assert p.returncode == 1, p.stderr[-3000:]
    verdict(p, "the stage's recall@10", "MISSED", ">= 1.0100")
    line = verdict(p, "|the stage's recall - independent exact search's|", "met", "<= 0.0100")
    assert f"the stage's {s['recall_at_k']} on 300 queries" in p.stdout, (line, p.stdout)


def test_ingest_roles_misses_an_unreachable_ratio(repo_root, tmp_path):
    elife = tmp_path / "elife"
    elife.mkdir()
    for p in sorted((repo_root / "sample" / "elife").glob("*.xml.gz"))[:3]:
        (elife / p.name).write_bytes(p.read_bytes())
    p = bench(repo_root, "ingest_roles.py", "--input", elife, "--run", tmp_path / "run", "--target-ratio", 1e9)
    assert p.returncode == 1, p.stderr[-3000:]
    verdict(p, "train time / map time", "MISSED", ">= 1000000000.00")
    for name in ("same corpus papers (ids)", "same references (citing, key, cited)", "no mention from the map role"):
        verdict(p, name, "met")
    assert summary(p) == (1, 0, 1)


def test_ingest_profile_splits_the_cpu_and_misses_on_tables_that_differ(repo_root, test_data, tmp_path):
    """One real ingest under the profiler: its CPU by thread kind and its Spark writes are printed,
    the thread sample covers the measured CPU, and a run whose tables differ is a miss."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "p.jsonl").write_bytes((test_data / "unarxive-4.jsonl").read_bytes())
    config = tmp_path / "ingest.toml"
    config.write_text(f'[ingest]\ninputs = [{{ path = "{tmp_path / "in"}", format = "unarxive", source = "ua" }}]\n')
    other = tmp_path / "other"
    (other / "papers").mkdir(parents=True)
    pq.write_table(pa.table({"paper_id": ["not:this"]}), other / "papers" / "part-0.parquet")
    p = bench(repo_root, "ingest_profile.py", "--config", config, "--run", tmp_path / "run", "--same-as", other)
    assert p.returncode == 1, p.stderr[-3000:]
    for kind in ("JVM: Spark tasks", "JVM: JIT compiler", "Python: readers (Spark workers)", "Python: the driver"):
        assert re.search(rf"^  {re.escape(kind)} +{FIGURE} s +{FIGURE}$", p.stdout, re.M), (kind, p.stdout)
    for table in ("papers", "references"):
        assert re.search(rf"^  write \.{table}\.tmp-\w+ +{FIGURE}s +{FIGURE}s", p.stdout, re.M), (table, p.stdout)
    verdict(p, "the thread sample sees >= 90% of the measured CPU", "met")
    line = verdict(p, f"every table equals {other}'s", "MISSED")
    assert "papers" in line and "references (in one run only)" in line
    assert summary(p) == (1, 0, 1)
    profile = json.loads((tmp_path / "run" / "profile.json").read_text())
    assert profile["cpu_s"] > 0 and sum(profile["threads"].values()) >= 0.9 * profile["cpu_s"]


def test_ingest_profile_compares_large_tables_as_multisets_in_spark(spark, repo_root, bench_module, tmp_path,
                                                                   monkeypatch):
    """Past ARROW_ROWS rows the tables are compared by Spark (exceptAll both ways): the same rows in
    another order and other files are equal; a changed row, or a row twice where it was once, is not."""
    monkeypatch.syspath_prepend(str(repo_root / "bench"))   # it imports verdicts
    prof = bench_module("ingest_profile")
    monkeypatch.setattr(prof, "ARROW_ROWS", 0)

    def run(name, *parts):
        for i, rows in enumerate(parts):
            (tmp_path / name / "references").mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"citing_id": [r[0] for r in rows], "ref_key": [r[1] for r in rows],
                                     "authors": [[{"name": r[0]}] for r in rows]}),
                           tmp_path / name / "references" / f"part-{i}.parquet")
        return tmp_path / name

    a = run("a", [("p1", "b1"), ("p1", "b2")], [("p2", "b1")])
    same = run("same", [("p2", "b1"), ("p1", "b2"), ("p1", "b1")])
    changed = run("changed", [("p2", "b1"), ("p1", "b2"), ("p1", "b3")])
    twice = run("twice", [("p2", "b1"), ("p1", "b2"), ("p1", "b1"), ("p1", "b1")])
    assert prof.same_tables(a, same) == []
    assert prof.same_tables(a, changed) == ["references (rows)"]
    assert prof.same_tables(a, twice) == ["references (rows)"]


def test_reader_speed_misses_an_unreachable_ratio(repo_root, tmp_path):
    """The S2ORC reader against json.loads on a small generated corpus: both roles print their
    row, and a reader no slower than json.loads (ratio <= 0.5) is out of reach."""
    p = bench(repo_root, "reader_speed.py", "--papers", 400, "--work", tmp_path, "--target-ratio", 0.5)
    assert p.returncode == 1, p.stderr[-3000:]
    for role in ("map", "train"):
        assert re.search(rf"^{role} +[\d,]+ +[\d,]+ +{FIGURE} +{FIGURE}", p.stdout, re.M), (role, p.stdout)
    verdict(p, "map role: reader CPU / json.loads CPU", "MISSED", "<= 0.50")
    assert summary(p) == (1, 0, 1)


def test_scale_run_goes_ingest_to_evaluate_and_misses_an_unreachable_budget(repo_root, tmp_path):
    """The whole pipeline on 1,500 generated papers with references: every stage prints its line,
    the 2M peak target is not checked at this size, and a projected budget of 0 hours is missed."""
    # every stage as its own process (minutes here, more under load): the timeout only guards against a hang
    p = bench(repo_root, "scale_run.py", "--sizes", 1500, "--root", tmp_path / "scale", "--target-hours", 0,
              "--json", tmp_path / "scale" / "figures.json", timeout=900)
    assert p.returncode == 1, p.stderr[-3000:] + p.stdout[-3000:]
    for stage in ("ingest", "importance", "knn", "cluster", "render", "evaluate"):
        assert re.search(rf"1,500 {stage} +[0-9.]+ s +CPU", p.stdout), stage
    verdict(p, "stage peaks at 2M papers", "not checked", "<= 12.0 GiB")
    verdict(p, "projected 33M run, hours", "MISSED", "<= 0.00")
    # the figures again from the JSON, nothing run: the same projection, the commit they were measured at
    figures = tmp_path / "scale" / "figures.json"
    p = bench(repo_root, "scale_run.py", "--sizes", "--sizes-from", figures, "--root", tmp_path / "again",
              "--target-hours", 0, "--json", tmp_path / "again" / "figures.json")
    assert p.returncode == 1, p.stderr[-3000:] + p.stdout[-3000:]
    first = json.loads(figures.read_text())
    again = json.loads((tmp_path / "again" / "figures.json").read_text())
    assert re.search(r"1,500 papers, measured at commit [0-9a-f]{7}", p.stdout), p.stdout[-2000:]
    assert [r["hours"] for r in again["projection"]] == [r["hours"] for r in first["projection"]]
    assert not (tmp_path / "again" / "n1500").exists()  # nothing was run
    # an interrupted run goes on: the stages in the JSON are kept, the others run in the same run directory
    partial = dict(first, complete=False)
    partial["sizes"] = [dict(first["sizes"][0], stages={k: v for k, v in first["sizes"][0]["stages"].items()
                                                        if k not in ("render", "evaluate")})]
    figures.write_text(json.dumps(partial))
    (tmp_path / "scale" / "n1500" / "run" / "map.png").unlink()
    p = bench(repo_root, "scale_run.py", "--sizes", 1500, "--root", tmp_path / "scale", "--target-hours", 0,
              "--json", figures, "--resume", "--ingest-by-role")
    assert p.returncode == 1, p.stderr[-3000:] + p.stdout[-3000:]
    for stage in ("ingest", "importance", "knn", "cluster"):
        assert re.search(rf"1,500 {stage} .*\(measured earlier, at [0-9a-f]{{7}}", p.stdout), stage
    for stage in ("render", "evaluate"):
        assert re.search(rf"1,500 {stage} +[0-9.]+ s +CPU .*load [0-9.]+ -> [0-9.]+$", p.stdout, re.M), stage
    # each corpus ingested alone: their corpus papers add up to the whole ingest's, their CPU splits its row
    alone = {role: int(re.search(rf"1,500 ingest {role} +[0-9.]+ s +CPU .* ([0-9,]+) corpus papers$", p.stdout,
                                 re.M).group(1).replace(",", "")) for role in ("map", "train")}
    whole = json.loads((tmp_path / "scale" / "n1500" / "run" / "ingest_summary.json").read_text())
    assert 0 < alone["train"] < alone["map"]
    assert alone["map"] + alone["train"] == sum(d["papers_corpus"] for d in whole["per_source"].values())
    ingest_row = next(r for r in json.loads(figures.read_text())["projection"] if r["stage"] == "ingest")
    split = [ingest_row["by_role"][role]["hours"] for role in ("map", "train")]
    assert min(split) > 0 and abs(sum(split) - ingest_row["hours"]) < 1e-9
    assert re.search(r"^  map corpus +[0-9.]+ +of the row: [0-9]+% of the two corpora's CPU", p.stdout, re.M)
    resumed = json.loads(figures.read_text())
    assert resumed["complete"] and set(resumed["sizes"][0]["stages"]) == set(first["sizes"][0]["stages"])
    assert resumed["sizes"][0]["stages"]["knn"] == first["sizes"][0]["stages"]["knn"]
    assert (tmp_path / "scale" / "n1500" / "run" / "map.png").is_file()  # render ran again, in place
    # fewer cited-only papers mapped: the stages on the map's nodes shrink, ingest and importance do not
    p = bench(repo_root, "scale_run.py", "--sizes", "--sizes-from", figures, "--root", tmp_path / "scale",
              "--target-hours", 0, "--cited-only-min-citations", 2, "--json", tmp_path / "again" / "min2.json")
    m = re.search(r"cited_only_min_citations = 2 .*: ([0-9,]+) mapped corpus papers \+ ([0-9,]+) cited-only, against "
                  r"([0-9,]+) cited-only at 1 .*: the map's nodes x ([0-9.]+)", p.stdout)
    assert m, p.stdout[-3000:]
    corpus, at2, at1 = (int(g.replace(",", "")) for g in m.groups()[:3])
    scale = float(m.group(4))
    assert 0 < at2 < at1 and abs(scale - (corpus + at2) / (corpus + at1)) < 1e-3
    min2 = {r["stage"]: r["hours"] for r in json.loads((tmp_path / "again" / "min2.json").read_text())["projection"]}
    base = {r["stage"]: r["hours"] for r in resumed["projection"]}
    assert min2["ingest"] == base["ingest"] and min2["importance"] == base["importance"]
    assert all(min2[s] < base[s] for s in ("knn", "cluster", "render", "evaluate", "embed"))
    # other settings than those measured: refused, nothing run
    p = bench(repo_root, "scale_run.py", "--sizes", 1500, "--root", tmp_path / "scale", "--ef-search", 64,
              "--json", figures, "--resume")
    assert p.returncode != 0 and "measured with other inputs or settings" in p.stderr, p.stderr[-2000:]


def test_reader_speed_reads_jats_against_lxml(repo_root, tmp_path):
    """JATS input (three gzipped eLife samples): the floor is lxml's parse of the unpacked files,
    both roles print their row, and the verdict names that floor."""
    elife = tmp_path / "elife"
    elife.mkdir()
    for p in sorted((repo_root / "sample" / "elife").glob("*.xml.gz"))[:3]:
        (elife / p.name).write_bytes(p.read_bytes())
    p = bench(repo_root, "reader_speed.py", "--input", elife, "--format", "jats", "--repeat", 1,
              "--target-ratio", 1e9)
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.search(r"^role +papers +refs +reader CPU s +lxml CPU s", p.stdout, re.M), p.stdout
    for role in ("map", "train"):
        assert re.search(rf"^{role} +3 +[\d,]+ +{FIGURE} +{FIGURE}", p.stdout, re.M), (role, p.stdout)
    verdict(p, "map role: reader CPU / lxml parse CPU", "met", "<= 1000000000.00")
    assert re.search(r"^all 1 met: exit 0$", p.stdout, re.M), p.stdout[-3000:]
