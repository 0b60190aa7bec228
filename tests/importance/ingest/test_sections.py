import gzip

import numpy as np
import pytest

from importance.ingest.section_model import SectionModel, default_model, features, neighbour_classes, section_number
from importance.ingest.section_training import (DEFAULT_DEV, DEFAULT_HAND, TrainSettings, fit, predict, read_labelled,
                                                training_rows)
from importance.ingest.headings import class_from_heading, class_from_sec_type, heading_kind, known_class
from importance.ingest.sections import appendix_sections, classify_sections, heading_rules_vs_sec_type, macro_f1


@pytest.mark.parametrize("title,cls", [
    ("1 Introduction", "I"), ("2. Related Work", "I"), ("Materials and methods", "M"),
    ("3.1 Experimental Setup", "M"), ("Experimental Results", "R"), ("Results and discussion", "R"),
    ("Discussion and conclusions", "D"), ("IV. Conclusion", "D"), ("Acknowledgements", "O"),
    ("Methods and results", "M"), ("5 Evaluation", "R"), ("A Stochastic Parser", None),
])
def test_heading_rules(title, cls):
    assert class_from_heading(title) == cls


@pytest.mark.parametrize("title,kind", [
    (None, "empty"), ("", "empty"), (" . ", "empty"), ("2.", "numbered"), ("3.1", "numbered"), ("IV.", "numbered"),
    ("4 Experiments", "other"), ("Our Approach", "other"), ("1 Introduction", "keyword"),
    ("Conclusions and Future Work", "keyword"), ("Acknowledgments", "keyword"), ("5 Related work", "keyword"),
])
def test_heading_kind(title, kind):
    assert heading_kind(title) == kind


@pytest.mark.parametrize("title,num", [("3 Our approach", 3), ("2.", 2), ("10.1 Model Estimation", 10),
                                       ("IV. Results", 4), ("Results", None), (None, None), ("A Stochastic", None)])
def test_section_number(title, num):
    assert section_number(title) == num


def test_known_class_order():
    # sec-type first, then a keyword heading; other headings leave the class to the model
    assert known_class("intro", "Something else") == "I"
    assert known_class("materials|methods", None) == "M"
    assert class_from_sec_type("results|discussion") == "R"
    assert known_class(None, "6 Conclusion") == "D"
    # headings that are, as a whole, an unambiguous name of a class fix it too
    assert known_class(None, "4 Experiments") == "R" and known_class(None, "Our Approach.") == "M"
    assert known_class(None, "2.1 Experimental setup") == "M" and known_class(None, "6 Future work") == "D"
    assert known_class(None, "3 Summarization Models") is None  # more than a class name: the model decides
    assert known_class(None, "2.") is None
    four = ["1 Introduction", "2.", "3.", "Something else"]
    assert classify_sections(four, sec_types=[None, None, None, "intro"])[3] == "I"
    assert classify_sections(four[:3] + ["Discussion"])[3] == "D"


def test_neighbour_classes():
    titles = ["1 Introduction", "2.", "3 Our model", "4 Conclusion", "Acknowledgments", None]
    assert neighbour_classes(titles) == [("-", "D"), ("I", "D"), ("I", "D"), ("I", "O"), ("D", "-"), ("O", "-")]


def test_features_cover_heading_text_and_place():
    f = features("3 Our Approach", "In this section we describe the model. " * 40, 2, 6, ("I", "D"))
    assert {"h:our", "h:approach", "hk:other", "num:3", "pos:2", "nb:I", "na:D", "nba:ID"} <= set(f)
    assert "o:in_this_section_we" in f and any(x.startswith("t:") for x in f)  # opening and the rest
    assert "notext" in features(None, "", 0, 3)


def test_appendices_by_place():
    titles = ["1 Introduction", "2 Our model", "3 Conclusion", "Proof of Lemma 2", "Acknowledgments", "Data tables"]
    known = [known_class(None, t) for t in titles]
    assert appendix_sections(titles, known) == [False, False, False, True, False, True]
    # an abstract heading first is not back matter; a known class is never overridden
    titles = ["Abstract", "Methods overview", "2.", "Acknowledgements", "Materials and methods"]
    assert appendix_sections(titles, [known_class(None, t) for t in titles]) == [False] * 4 + [False]
    assert classify_sections(["1 Introduction", "2.", "3 Conclusions", "A. Proofs"])[3] == "O"


def test_non_research_articles_keep_headings_and_position():
    from lxml import etree

    from importance.ingest.readers.jats import is_research_article

    titles = ["Introduction", "The natural history of house mice", "Insights from wild mice", "Conclusions"]
    assert classify_sections(titles, research=False) == ["I", "O", "O", "D"]
    feature = (b'<article article-type="research-article"><front><article-meta><article-categories>'
               b'<subj-group subj-group-type="display-channel"><subject>Feature Article</subject></subj-group>'
               b'</article-categories></article-meta></front></article>')
    assert not is_research_article(etree.fromstring(feature))
    assert is_research_article(etree.fromstring(feature.replace(b"Feature Article", b"Research Article")))
    assert not is_research_article(etree.fromstring(b'<article article-type="review-article"/>'))


def test_without_model_the_position_rule_decides(monkeypatch):
    """The shipped-model loader pointed at a file that is not there: no model, rules and position decide."""
    import importance.ingest.section_model as sm

    monkeypatch.setattr(sm, "MODEL_FILE", "no_such_section_model.npz")
    sm.default_model.cache_clear()
    try:
        assert sm.default_model() is None
        assert classify_sections([None, None, None])[0] == "I"
        assert classify_sections([None, None, None])[2] == "O"
        assert classify_sections(["2.", "3.", "Conclusion"]) == ["I", "O", "D"]
    finally:
        monkeypatch.undo()
        sm.default_model.cache_clear()
    assert sm.default_model() is not None and classify_sections(["2.", "3.", "Conclusion"]) != ["I", "O", "D"]


def _model(classes=("I", "M", "R", "D", "O")):
    """A hand-built model: one feature per class, transitions that forbid going back to I."""
    vocab = [f"w:{c.lower()}x" for c in classes]
    k = len(classes)
    trans = np.zeros((k + 1, k), dtype=np.float32)
    trans[:k, 0] = -50.0      # nothing returns to I
    trans[k, 1:] = -50.0      # a paper starts with I
    return SectionModel(vocab, np.eye(k) * 5.0, np.zeros(k), classes, trans)


def test_decode_follows_the_transitions_and_keeps_fixed_classes():
    m = _model()
    # emissions alone would say I, M, I, R; the sequence cannot return to I, a fixed D stays D
    logp = np.log(np.array([[.9, .025, .025, .025, .025], [.1, .8, .05, .025, .025],
                            [.5, .4, .05, .025, .025], [.1, .1, .7, .05, .05]]))
    assert m.decode(logp, [None, None, None, None]) == ["I", "M", "M", "R"]
    assert m.decode(logp, [None, None, None, "D"]) == ["I", "M", "M", "D"]


def test_save_load_round_trip(tmp_path, repo_root):
    hand = read_labelled(repo_root / DEFAULT_HAND)[:400]
    m = fit(hand, TrainSettings(min_count=2))
    m.transitions = np.log(np.full((6, 5), 0.2, dtype=np.float32))
    m.save(tmp_path / "m.npz")
    back = SectionModel.load(tmp_path / "m.npz")
    assert back.classes == m.classes and back.index == m.index
    assert np.allclose(back.weights, m.weights, atol=2e-3 * np.abs(m.weights).max())
    probe = hand[::7]
    assert [back.predict(s.title, s.text, s.position, s.n_sections) for s in probe] == \
        [m.predict(s.title, s.text, s.position, s.n_sections) for s in probe]


def test_training_is_deterministic_and_masks_headings(repo_root):
    hand = read_labelled(repo_root / DEFAULT_HAND)[:300]
    a, b = fit(hand, TrainSettings(min_count=2)), fit(hand, TrainSettings(min_count=2))
    assert a.index == b.index and np.array_equal(a.weights, b.weights)
    free = [s for s in hand if s.title][:5]
    from dataclasses import replace
    rows = training_rows([replace(s, origin="heading") for s in free])
    assert len(rows) == 2 * len(free)  # free labels are also seen with the heading reduced to its number


def test_shipped_model_on_the_development_set(repo_root):
    """The shipped model on the held-out development set (bench/section_f1.py prints the full
    report): floors a little under the measured figures, so a worse model fails here."""
    model = default_model()
    assert model is not None, "importance/ingest/data/section_model.npz is missing"
    dev = read_labelled(repo_root / DEFAULT_DEV)
    assert len(dev) >= 400 and sum(s.title is None or heading_kind(s.title) != "keyword" for s in dev) >= 200
    truth, pred = [s.label for s in dev], predict(dev)
    hard = [heading_kind(s.title) != "keyword" for s in dev]
    assert macro_f1(truth, pred)["macro_f1"] >= 0.88
    assert macro_f1([t for t, h in zip(truth, hard) if h], [p for p, h in zip(pred, hard) if h])["macro_f1"] >= 0.84


def test_macro_f1_hand_case():
    r = macro_f1(["I", "I", "M", "R"], ["I", "M", "M", "R"])
    # I: p=1 r=.5 f=2/3; M: p=.5 r=1 f=2/3; R: 1 -> macro 7/9
    assert r["macro_f1"] == pytest.approx(7 / 9)


def test_heading_rules_on_elife_sample(repo_root):
    files = sorted((repo_root / "sample/elife").glob("*.xml.gz"))[:60]
    r = heading_rules_vs_sec_type(gzip.decompress(f.read_bytes()) for f in files)
    assert r["n"] > 200 and r["macro_f1"] > 0.9
