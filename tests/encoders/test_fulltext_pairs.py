"""SciJEPa's prediction pairs (encoders.fulltext.pairs) by section class and by position."""
from __future__ import annotations

import pytest

from encoders.fulltext.pairs import method_and_conclusion, section_pairs

# an eLife-like paper: Methods last, a Discussion before it
ELIFE = [("Introduction", "I", ["Cells divide.", "We ask how fast."]),
         ("Results", "R", ["Anaphase took 4 min."]),
         ("Discussion", "D", ["The checkpoint sets the pace."]),
         ("Materials and methods", "M", ["We imaged 120 cells.", "Frames every 2 min."])]
# a conference paper: no heading names a method, no Discussion
ACL = [("1 Introduction", "I", ["Parsing is hard."]),
       ("2 Our parser", "M", ["A shift-reduce parser."]),
       ("3 Experiments", "R", ["F1 of 91."]),
       ("4 Acknowledgements", "O", ["Thanks."])]


def test_class_rule_finds_methods_wherever_they_stand_and_falls_back_to_results():
    assert method_and_conclusion(ELIFE, "class") == ("We imaged 120 cells. Frames every 2 min.",
                                                      "The checkpoint sets the pace.")
    assert method_and_conclusion(ACL, "class") == ("A shift-reduce parser.", "F1 of 91.")


def test_position_rule_reads_headings_then_positions():
    # headings name both sections in eLife
    assert method_and_conclusion(ELIFE, "position") == ("We imaged 120 cells. Frames every 2 min.",
                                                         "The checkpoint sets the pace.")
    # no heading names them: the second section, and the last one (here the acknowledgements: the rule's flaw)
    assert method_and_conclusion(ACL, "position") == ("A shift-reduce parser.", "Thanks.")
    with pytest.raises(ValueError, match="unknown pair rule"):
        method_and_conclusion(ACL, "heading")


def test_pairs_are_one_task_each_and_skip_empty_sides():
    pairs = section_pairs("Anaphase timing", "We time anaphase.", ELIFE)
    assert pairs == [("abstract_method", "Anaphase timing [SEP] We time anaphase.",
                      "We imaged 120 cells. Frames every 2 min."),
                     ("method_conclusion", "We imaged 120 cells. Frames every 2 min.", "The checkpoint sets the pace.")]
    no_method = [s for s in ELIFE if s[1] != "M"]
    assert section_pairs("T", "A.", no_method) == []
    assert [t for t, _, _ in section_pairs(None, "A.", ELIFE)] == ["abstract_method", "method_conclusion"]
    assert section_pairs(None, None, ELIFE)[0][0] == "method_conclusion"
