"""The facet classifiers (encoders.facets): a real MiniLM fine-tuned on a sample of SciCite labels five
hand-picked SciCite test sentences; the labelling commands write context_intents and abstract_facets;
the splitter's position rule and its inputs. The full-size figures are bench/facet_signals.py's."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from encoders.facets.classifier import ClassifierSettings, load_classifier, macro_f1, save_classifier, train_classifier
from encoders.facets.intent import INTENTS, label_contexts, read_scicite
from encoders.facets.splitter import (facet_text, fit_position_rule, label_abstracts, placed, position_rule_scores,
                                      read_csabstruct)
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import write_table_atomic

# Five SciCite test sentences with their gold labels (SciBERT's copy of the test split).
HAND_PICKED = [
    ("Landraces are known to be a rich source of genetic diversity for resistance to biotic stresses "
     "(Bansal et al. 2013; Daetwyler et al. 2014).", "background"),
    ("c-Proteobacteria have also been shown to be predominantly associated with efficient tannin or cellulose "
     "degradation into non toxic chemicals [3, 10, 31].", "background"),
    ("For both analyses, we first employ a Monte Carlo sampling technique for modeling the data [6].", "method"),
    ("SRP was determined on filtered water (passed through an ashed Pall A/E filter) with the ascorbic acid method "
     "(Wetzel & Likens, 1991).", "method"),
    ("These results are consistent with those reported in other studies [Herck et al., 1998; Wu et al., 1999].", "result"),
]


@pytest.fixture(scope="module")
def scicite(shared_data):
    return shared_data / "scibert-text-classification" / "sci-cite"


@pytest.fixture(scope="module")
def intent_model(scicite, tmp_path_factory):
    """MiniLM fine-tuned on 1,500 SciCite training sentences, 2 epochs (about two minutes on 2 cores)."""
    train, dev = read_scicite(scicite, "train"), read_scicite(scicite, "dev")[:200]
    s = ClassifierSettings(epochs=2, max_train=1500, max_length=64, seed=0)
    clf, rec = train_classifier("minilm", INTENTS, train, dev, s, device="cpu", log=lambda *_: None)
    out = save_classifier(clf, tmp_path_factory.mktemp("intent") / "model", rec, extra={"task": "citation_intent"})
    return out, rec


def test_hand_picked_sentences_get_their_intent(intent_model):
    path, rec = intent_model
    assert all(t in {s for s, _ in HAND_PICKED} for t, _ in HAND_PICKED)
    assert rec.n_train == 1500 and rec.best_epoch in (1, 2) and rec.dev["n"] == 200
    clf = load_classifier(path, device="cpu")     # the saved folder, read back
    assert clf.predict([t for t, _ in HAND_PICKED]) == [y for _, y in HAND_PICKED]
    assert rec.dev["macro_f1"] > 0.6              # a sample of 1,500 already learns the task


def test_label_contexts_writes_one_row_per_distinct_sentence(intent_model, tmp_path):
    layout = RunLayout(tmp_path / "run")
    layout.root.mkdir()
    ctx = [t for t, _ in HAND_PICKED]
    rows = {"citing_id": ["a", "a", "a", "b", "b", "b", "b"], "ref_key": list("1234567"), "cited_id": list("xyzxyzw"),
            "section_title": [None] * 7, "section_type": [None] * 7, "section_class": list("IMRIMRO"),
            "position": [0] * 7, "context": [ctx[0], ctx[0], ctx[2], ctx[4], ctx[3], None, ctx[1]]}
    write_table_atomic(pa.table(rows, schema=SCHEMAS["mentions"]), layout.table("mentions"))
    out = label_contexts(layout.root, intent_model[0], device="cpu")
    t = pq.read_table(layout.table("context_intents")).to_pandas()
    assert out["contexts"] == 5 == len(t)       # (a, ctx0) once; the null context is not labelled
    assert out["by_intent"] == t.intent.value_counts().reindex(list(INTENTS), fill_value=0).to_dict()
    assert sum(out["by_intent"].values()) == 5
    got = dict(zip(zip(t.citing_id, t.context), t.intent))
    assert got[("a", ctx[2])] == "method" and got[("b", ctx[4])] == "result" and got[("b", ctx[1])] == "background"
    np.testing.assert_allclose(t[["p_background", "p_method", "p_result"]].sum(axis=1), 1.0, atol=1e-5)
    with pytest.raises(UserError, match="not a saved sentence classifier"):
        label_contexts(layout.root, tmp_path, device="cpu")


def test_macro_f1_by_hand():
    m, per, cm = macro_f1([0, 0, 1, 2, 2], [0, 1, 1, 2, 0], 3)
    assert cm.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 1]]
    assert per == pytest.approx([0.5, 2 / 3, 2 / 3]) and m == pytest.approx((0.5 + 4 / 3) / 3)


def test_csabstruct_facets_and_the_position_rule(shared_data):
    train = read_csabstruct(shared_data / "csabstruct", "train")
    test = read_csabstruct(shared_data / "csabstruct", "test")
    assert len(train) == 1668 and len(test) == 226
    flat = [f for _, fs in train for f in fs]
    # background + objective -> background, other -> None (CSAbstruct's counts: 3,615 + 1,325; 350)
    assert flat.count("background") == 3615 + 1325 and flat.count(None) == 350 and flat.count("method") == 3621
    cut = fit_position_rule(train)
    assert 0 < cut[0] <= cut[1] < 1
    r = position_rule_scores(test, cut)
    assert r["n"] == 1349 - 61 and 0.4 < r["accuracy"] < 0.9   # position decides much, not all
    assert placed(["A.", "B.", "C."], "[SEP]") == ["1/3 [SEP] A.", "2/3 [SEP] B.", "3/3 [SEP] C."]
    assert facet_text("T", ["A.", "B.", "C."], ["background", "method", "method"], "method", "[SEP]") == "T [SEP] B. C."
    assert facet_text("T", ["A."], ["background"], "result", "[SEP]") == "T"


def test_label_abstracts_aligns_sentences_and_facets(tmp_path, shared_data):
    train = read_csabstruct(shared_data / "csabstruct", "train")[:40]
    from encoders.facets.splitter import examples
    from sciencemap.contracts import FACETS

    clf, rec = train_classifier("minilm", FACETS, examples(train, "[SEP]"), [], ClassifierSettings(epochs=1, max_length=48),
                                device="cpu", log=lambda *_: None)
    model = save_classifier(clf, tmp_path / "splitter", rec)
    layout = RunLayout(tmp_path / "run")
    layout.root.mkdir()
    papers = {"paper_id": ["p1", "p2", "p3"], "title": ["T1", "T2", "T3"],
              "abstract": ["Cells divide. We used a microscope. Cells divided faster.", None, "One sentence only."]}
    n = 3
    write_table_atomic(pa.table({f.name: papers.get(f.name, [None] * n) for f in SCHEMAS["papers"]},
                                schema=SCHEMAS["papers"]), layout.table("papers"))
    with pytest.raises(UserError, match="importance stage"):
        label_abstracts(layout.root, model, device="cpu")
    out = label_abstracts(layout.root, model, device="cpu", everything=True)
    t = pq.read_table(layout.table("abstract_facets")).to_pylist()
    assert out["abstracts"] == 2 and [r["paper_id"] for r in t] == ["p1", "p3"]
    assert t[0]["sentences"] == ["Cells divide.", "We used a microscope.", "Cells divided faster."]
    assert len(t[0]["facets"]) == 3 and set(t[0]["facets"]) <= set(FACETS) and len(t[1]["facets"]) == 1
    assert json.loads((model / "classifier.json").read_text())["labels"] == list(FACETS)


def test_facet_weight_search_on_the_simplex():
    from encoders.facets.weights import average_precision, search, simplex

    grid = simplex(0.1)
    assert len(grid) == 36 and all(min(w) > 0 and abs(sum(w) - 1) < 1e-9 for w in grid)
    assert (0.1, 0.1, 0.8) in grid and (0.0, 0.5, 0.5) not in grid
    with pytest.raises(UserError, match="must divide 1"):
        simplex(0.3)
    assert average_precision(np.array([0.9, 0.8, 0.7]), np.array([False, True, True])) == pytest.approx((1 / 2 + 2 / 3) / 2)
    # 4 anchors x 6 candidates: only the method cosine ranks the cited candidates first
    rng = np.random.default_rng(0)
    relevant = np.zeros((4, 6), bool)
    relevant[np.arange(4), np.arange(4)] = True
    cos = rng.uniform(-0.2, 0.2, (4, 6, 3))
    cos[..., 1] += relevant * 0.5
    cos[..., 0] += (~relevant) * 0.5            # background points the wrong way
    rows = search(cos, relevant, np.ones((4, 6), bool), 0.1)
    assert rows[0]["map"] == 1.0 and rows[0]["weights"][1] >= 0.5
    assert rows[-1]["weights"][0] == 0.8 and rows[-1]["map"] < 1.0
