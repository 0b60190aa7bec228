"""Facet signal and facet triplets (METHODS.md §8.2): a hand case of the sampler, then real eLife articles
through ingest and the importance stage with each signal."""
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from importance.ingest.job import IngestConfig, run_ingest
from importance.job import ImportanceConfig, run_importance
from importance.triplets import TripletConfig, sample_facet_triplets
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError


def test_facet_sampler_hand_case(spark):
    # Anchor A: m1 (3 method sentences), m2 (1), b1 and b2 (background only; b2 the least important),
    # x (cited in no facet: a sentence in an "O" section). Facet = method.
    rows = [("A", "m1", 1.0, 10, 3, 3), ("A", "m2", 2.0, 20, 1, 2), ("A", "b1", 5.0, 30, 0, 4),
            ("A", "b2", 0.5, 40, 0, 1), ("A", "x", 0.1, 50, 0, 0)]
    pairs = spark.createDataFrame(rows, "citing_id string, cited_id string, importance double, tie_hash long, c int, c_any int")
    papers = spark.createDataFrame([(p, "t") for p in ["A", "m1", "m2", "b1", "b2", "x"] + [f"u{i}" for i in range(40)]],
                                   "paper_id string, title string")
    got = sorted((r.positive_id, r.negative_id, r.negative_kind, r.facet)
                 for r in sample_facet_triplets(pairs, papers, TripletConfig(K=5, H=2, seed=1), "method").collect())
    # positives by count: m1 then m2 (never b1 although it is more important); hard negatives: the least
    # important reference cited for another facet first (b2, then b1); x is no hard negative.
    assert [g[:3] for g in got] == [("m1", "b2", "hard"), ("m2", "b1", "hard")]
    assert {g[3] for g in got} == {"method"}
    # one hard negative left: step 0 hard, step 1 easy (a paper A does not cite)
    got1 = sorted((r.positive_id, r.negative_id, r.negative_kind) for r in sample_facet_triplets(
        pairs.where("cited_id != 'b1'"), papers, TripletConfig(K=5, H=2, seed=1), "method").collect())
    assert got1[0] == ("m1", "b2", "hard") and got1[1][0] == "m2" and got1[1][2] == "easy"
    assert got1[1][1].startswith("u")
    # no positive for a facet: no triplet
    # K bounds the steps; H = 0 takes easy negatives only
    assert sample_facet_triplets(pairs, papers, TripletConfig(K=1, H=2, seed=1), "method").count() == 1
    assert {r.negative_kind for r in sample_facet_triplets(pairs, papers, TripletConfig(K=5, H=0, seed=1), "method").collect()} == {"easy"}
    assert sample_facet_triplets(pairs.withColumn("c", pairs.c * 0), papers, TripletConfig(seed=1), "method").count() == 0


@pytest.fixture(scope="module")
def elife_run(spark, tmp_path_factory, repo_root):
    tmp = tmp_path_factory.mktemp("facets")
    el = tmp / "elife"
    el.mkdir()
    for f in sorted((repo_root / "sample/elife").glob("*.xml.gz"))[:6]:
        shutil.copy(f, el / f.name)
    layout = RunLayout(tmp / "run")
    run_ingest(IngestConfig(inputs=[{"path": str(el), "format": "jats", "source": "elife"}]), layout, spark=spark)
    return layout


def _only_in(mentions, cls: str) -> set:
    """(citing, cited) pairs whose every mention lies in sections of class cls."""
    by_pair = {}
    for c, d, s in zip(mentions["citing_id"], mentions["cited_id"], mentions["section_class"]):
        by_pair.setdefault((c, d), set()).add(s)
    return {k for k, v in by_pair.items() if v == {cls}}


def _facet_rows(layout, facet):
    t = pq.read_table(layout.table("triplets")).to_pandas()
    return t[t.facet == facet]


def test_mentions_keep_the_citing_sentence(elife_run):
    m = pq.read_table(elife_run.table("mentions")).to_pandas()
    assert m.context.notna().all()
    # eLife cites author-year: the sentence holds the citation's text, and is one sentence
    one = m.context.str.contains(r"\b(?:19|20)\d\d\b")
    assert one.mean() > 0.95
    assert (m.context.str.len() <= 600).all() and m.context.str.len().median() > 80


def test_section_signal_method_only_reference_is_a_method_positive(spark, elife_run):
    layout = elife_run
    imp = run_importance(ImportanceConfig(facet_signal="section", K=50, H=2), layout, spark=spark)
    m = pq.read_table(layout.table("mentions"), columns=["citing_id", "cited_id", "section_class"]).to_pydict()
    only_m = _only_in(m, "M")
    method, background = _facet_rows(layout, "method"), _facet_rows(layout, "background")
    mpos = set(zip(method.anchor_id, method.positive_id))
    bpos = set(zip(background.anchor_id, background.positive_id))
    assert only_m & mpos, "a reference cited only in Methods is a method positive"
    assert not only_m & bpos, "and never a background positive"
    # hard negatives of the method facet are cited, but never in Methods
    hard = method[method.negative_kind == "hard"]
    in_m = {(c, d) for c, d, s in zip(m["citing_id"], m["cited_id"], m["section_class"]) if s == "M"}
    cited = set(zip(m["citing_id"], m["cited_id"]))
    assert len(hard) and all((a, n) in cited and (a, n) not in in_m for a, n in zip(hard.anchor_id, hard.negative_id))
    # the seed triplets are untouched (facet null) and the summary counts each facet
    t = pq.read_table(layout.table("triplets")).to_pandas()
    assert (t.facet.isna().sum() == imp["n_triplets"]) and imp["facet_triplets"]["method"]["triplets"] == len(method)
    # same anchor split as the seed triplets
    seed_split = dict(zip(t[t.facet.isna()].anchor_id, t[t.facet.isna()].split))
    assert all(seed_split.get(a, s) == s for a, s in zip(method.anchor_id, method.split))


def test_intent_signal_reads_the_labelled_sentences(spark, elife_run):
    layout = elife_run
    # Label every citing sentence of a Methods section "method" and all others "background": a reference
    # cited only in Methods is then a method positive and never a background one, through the join.
    m = pq.read_table(layout.table("mentions")).to_pandas().dropna(subset=["context"])
    lab = m.groupby(["citing_id", "context"]).section_class.agg(lambda s: "method" if (s == "M").all() else "background")
    lab = lab.reset_index().rename(columns={"section_class": "intent"})
    for f in ("background", "method", "result"):
        lab[f"p_{f}"] = (lab.intent == f).astype("float32")
    shutil.rmtree(layout.table("context_intents"), ignore_errors=True)
    layout.table("context_intents").mkdir()
    pq.write_table(pa.Table.from_pandas(lab, schema=SCHEMAS["context_intents"], preserve_index=False),
                   layout.table("context_intents") / "part-0.parquet")
    run_importance(ImportanceConfig(facet_signal="intent", K=50, H=2), layout, spark=spark)
    ms = pq.read_table(layout.table("mentions"), columns=["citing_id", "cited_id", "section_class"]).to_pydict()
    only_m = _only_in(ms, "M")
    method, background, result = (_facet_rows(layout, f) for f in ("method", "background", "result"))
    assert only_m & set(zip(method.anchor_id, method.positive_id))
    assert not only_m & set(zip(background.anchor_id, background.positive_id))
    assert len(result) == 0   # no sentence was labelled result


def test_intent_signal_without_labels_is_one_clear_error(spark, tmp_path, elife_run):
    layout = RunLayout(tmp_path / "run")
    layout.root.mkdir()
    for t in ("papers", "references", "mentions"):
        shutil.copytree(elife_run.table(t), layout.table(t))
    with pytest.raises(UserError, match="jobs/facets.py intent-label"):
        run_importance(ImportanceConfig(facet_signal="intent"), layout, spark=spark)
