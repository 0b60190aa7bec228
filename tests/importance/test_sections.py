import gzip

import pytest

from importance.sections import (class_from_heading, class_from_sec_type, classify_section,
                                 heading_rules_vs_sec_type, macro_f1)


@pytest.mark.parametrize("title,cls", [
    ("1 Introduction", "I"), ("2. Related Work", "I"), ("Materials and methods", "M"),
    ("3.1 Experimental Setup", "M"), ("Experimental Results", "R"), ("Results and discussion", "R"),
    ("Discussion and conclusions", "D"), ("IV. Conclusion", "D"), ("Acknowledgements", "O"),
    ("Methods and results", "M"), ("5 Evaluation", "R"), ("A Stochastic Parser", None),
])
def test_heading_rules(title, cls):
    assert class_from_heading(title) == cls


def test_sec_type_then_heading_then_position():
    assert class_from_sec_type("materials|methods") == "M"
    assert class_from_sec_type("results|discussion") == "R"
    assert classify_section("intro", "Something else", 3) == "I"
    assert classify_section(None, "Discussion", 3) == "D"
    assert classify_section(None, None, 0) == "I"
    assert classify_section(None, None, 2) == "O"
    assert classify_section(None, "Termight overview", 5) == "I"


def test_macro_f1_hand_case():
    r = macro_f1(["I", "I", "M", "R"], ["I", "M", "M", "R"])
    # I: p=1 r=.5 f=2/3; M: p=.5 r=1 f=2/3; R: 1 -> macro 7/9
    assert r["macro_f1"] == pytest.approx(7 / 9)


def test_heading_rules_on_elife_sample(repo_root):
    files = sorted((repo_root / "sample/elife").glob("*.xml.gz"))[:60]
    r = heading_rules_vs_sec_type(gzip.decompress(f.read_bytes()) for f in files)
    assert r["n"] > 200 and r["macro_f1"] > 0.9
