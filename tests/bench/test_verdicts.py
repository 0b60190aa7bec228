"""bench/verdicts.py, the one way every bench script reports its targets (its verdict logic, also for
the scripts whose runs are too large or need data or devices a CI machine lacks: stages_vs_ref,
refstrings_unarxive, scisumm_ingest, embed_throughput), and the quality experiment's cache: keys
that change with the code and the input files, and a table that marks the rows read from it."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest


@pytest.fixture(scope="module")
def verdicts(bench_module):
    return bench_module("verdicts")   # (it and quality_experiment import no sibling)


def test_lines_and_exit_codes(verdicts, capsys):
    v = verdicts.Verdicts()
    v.at_least("speed", 4.2, 5.0, "{:.1f}x")
    v.at_most("peak", 1.2, 1.5, "{:.2f}")
    v.check("identical", True, "12 rows compared")
    v.not_checked("resume", "one query block")
    assert v.finish() == 1 and v.finish(no_fail=True) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:7] == ["", "verdicts:", "  speed: 4.2x (target >= 5.0x): MISSED", "  peak: 1.20 (target <= 1.50): met",
                       "  identical: met (12 rows compared)", "  resume: not checked (one query block)",
                       "1 MISSED, 1 not checked: exit 1"]
    assert out[-1] == "1 MISSED, 1 not checked: exit 0 (--no-fail)"
    assert [x["status"] for x in v.as_json()] == ["MISSED", "met", "met", "not checked"]


def test_a_missing_figure_is_never_met(verdicts):
    v = verdicts.Verdicts()
    nan = v.at_least("recall", float("nan"), 0.95, reason="index flat: not measured")
    none = v.at_most("ratio", None, 1.2)
    assert (nan.status, none.status) == ("not checked", "not checked")
    assert nan.line() == "recall (target >= 0.95): not checked (index flat: not measured)"
    assert none.reason == "no figure was measured" and v.exit_code() == 1


def test_every_target_met_exits_0_and_no_verdict_at_all_fails(verdicts, capsys):
    import numpy as np

    v = verdicts.Verdicts()
    v.at_least("rate", np.float32(2.0), 2.0)     # NumPy scalars are figures too; the bound is inclusive
    v.check("same", True)
    assert v.finish() == 0 and capsys.readouterr().out.endswith("all 2 met: exit 0\n")
    assert verdicts.Verdicts().finish() == 1 and "no target was checked: exit 1" in capsys.readouterr().out


def test_no_fail_is_one_option_for_every_script(verdicts):
    import argparse

    ap = argparse.ArgumentParser()
    verdicts.Verdicts.add_arguments(ap)
    assert ap.parse_args(["--no-fail"]).no_fail and not ap.parse_args([]).no_fail


# ---------------------------------------------------------------- the quality experiment's cache

@pytest.fixture(scope="module")
def quality(bench_module):
    return bench_module("quality_experiment")


def test_code_hash_changes_with_the_code_it_names(quality, tmp_path):
    (tmp_path / "mapping").mkdir()
    (tmp_path / "mapping" / "scidocs.py").write_text("MAP = 1\n")
    (tmp_path / "other.py").write_text("x = 1\n")
    before = quality.code_hash(("mapping/*.py",), tmp_path)
    (tmp_path / "other.py").write_text("x = 2\n")               # not in the set: the key stays
    assert quality.code_hash(("mapping/*.py",), tmp_path) == before
    (tmp_path / "mapping" / "scidocs.py").write_text("MAP = 2\n")
    assert quality.code_hash(("mapping/*.py",), tmp_path) != before
    assert {"bench/quality_experiment.py", "mapping/*.py", "sciencemap/*.py"} <= set(quality.EVAL_CODE)
    assert set(quality.BASELINE_CODE) <= set(quality.EVAL_CODE)
    assert quality.code_hash(quality.EVAL_CODE) != quality.code_hash(quality.BASELINE_CODE)


def test_files_hash_changes_when_a_table_is_rewritten(quality, tmp_path):
    table = tmp_path / "papers"
    table.mkdir()
    (table / "part-00000.parquet").write_bytes(b"abc")
    link = tmp_path / "linked"
    link.symlink_to(table)                                       # the runs link tables: followed
    before = quality.files_hash(link)
    assert before == quality.files_hash(table)
    st = (table / "part-00000.parquet").stat()
    os.utime(table / "part-00000.parquet", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert quality.files_hash(link) != before
    assert quality.files_hash(tmp_path / "missing") != quality.files_hash(table)
    assert set(quality.eval_inputs(tmp_path)) >= {tmp_path / "shared" / "papers", tmp_path / "pubmed" / "papers",
                                                 tmp_path / "h2" / "triplets", tmp_path / "h2" / "pairs"}


def report_args() -> SimpleNamespace:
    return SimpleNamespace(H=[0, 2], objectives=["triplet"], seeds=[0, 1], granularities=[20.0], sample=True,
                           steps=5, batch_size=8, lr=2e-5, max_length=128, model="minilm", K=5, data_seed=0,
                           max_queries=200, max_rel=5, n_neg=25, curve_points=4, g_range=[10.0, 200.0],
                           leiden_seeds=[0], min_graded=3, margin=1.0, in_batch_scale=20.0)


def test_the_table_marks_the_rows_read_from_the_cache(quality, tmp_path):
    figures = {"cite_map": 0.5, "cite_ndcg": 0.6, "cite_queries": 10, "cite-ft_queries": 5, "imp_queries": 3}
    per_model = {n: dict(figures) for n in ("base", "H=0 seed=0", "H=2 seed=0", "H=0 seed=1", "H=2 seed=1")}
    md = quality.report(report_args(), tmp_path, per_model, {}, {}, None, {"base", "H=2 seed=0"})
    rows = {r.split(" | ")[0].lstrip("| "): r.split(" | ")[1:3] for r in md.splitlines() if r.startswith("| ")}
    assert rows["model"] == ["models", "cached"]
    assert rows["base (minilm, untuned)"] == ["1", "1"]
    assert rows["H=0 (SPECTER-style)"] == ["2", "0"]
    assert rows["H=2 (importance-aware)"] == ["2", "1"]
    assert rows["H=2 − H=0 (paired by seed)"] == ["2", "1"]
    assert "'cached': how many of the row's models" in md


def test_objectives_bring_their_ablations_and_variants_train_their_base_objective(quality):
    assert quality.expand_objectives(["triplet", "unifar", "flew"]) == ["triplet", "unifar", "unifar_nokl", "flew"]
    assert quality.expand_objectives(["unifar"], ablations=False) == ["unifar"]
    assert quality.expand_objectives(["triplet", "flew"]) == ["triplet", "flew"]
    assert quality.expand_objectives(["triplet", "cosaemb", "scijepa", "section_cl"]) == \
        ["triplet", "cosaemb", "cosaemb_equal", "scijepa", "scijepa_l0", "section_cl"]
    assert quality.base_objective("unifar_nokl") == "unifar" and quality.is_facet_objective("unifar_nokl")
    assert quality.base_objective("scijepa_l0") == "scijepa" and quality.is_fulltext_objective("cosaemb_equal")
    assert not quality.is_facet_objective("triplet") and not quality.is_fulltext_objective("flew")
    assert quality.trained_on_cosine("unifar_nokl") and not quality.trained_on_cosine("flew")
    assert quality.trained_on_cosine("scijepa_l0") and quality.trained_on_cosine("section_cl")
    assert not quality.trained_on_cosine("cosaemb")


def test_flew_weights_are_picked_on_one_half_and_reported_on_the_other(quality):
    """Only the method facet's vectors tell a query's cited papers from the rest: the search must put
    the most weight on it, and on the other half those weights must beat equal ones."""
    import numpy as np

    rng = np.random.default_rng(0)
    n_q, per_q, dim = 60, 12, 16
    ids, vecs, qrels = [], [], {}
    for i in range(n_q):
        q = f"q{i}"
        centre = rng.normal(size=dim)
        ids.append(q)
        vecs.append(np.stack([rng.normal(size=dim), centre, rng.normal(size=dim)]))
        qrels[q] = {}
        for j in range(per_q):
            c, rel = f"{q}c{j}", j < 3
            method = centre + 2.0 * rng.normal(size=dim) if rel else rng.normal(size=dim)
            ids.append(c)
            vecs.append(np.stack([rng.normal(size=dim), method, rng.normal(size=dim)]))
            qrels[q][c] = int(rel)
    idx = {p: i for i, p in enumerate(ids)}
    res = quality.flew_weight_search(qrels, idx, np.stack(vecs))
    assert res["pick_queries"] + res["report_queries"] == n_q and min(res["pick_queries"], res["report_queries"]) > 15
    w = res["weights"]
    assert w[1] == max(w) and w[1] >= 0.6 and abs(sum(w) - 1) < 1e-9
    assert res["report_map"] > res["report_map_equal"] + 0.05
