"""Topic labels and overlays (METHODS.md §5), and missing titles, abstracts and fields."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mapping.topics import (div_star, example_titles, field_matrix, topic_labels, topic_overlays,
                            topic_vectors)


def test_interdisciplinarity():
    d = np.array([[0, 1, 0.5], [1, 0, 0.2], [0.5, 0.2, 0]])
    assert div_star(np.array([7, 0, 0]), d) == 0.0          # one category -> 0
    assert np.isnan(div_star(np.array([0, 0, 0]), d))       # no categories -> undefined
    assert div_star(np.array([3, 3, 0]), d) == pytest.approx(2 * 1.0 * 2)   # n_c·(1−0)·(1+1)
    unbalanced = div_star(np.array([5, 1, 0]), d)
    assert 0 < unbalanced < 4                               # Gini > 0 lowers it
    papers = pd.DataFrame({"title": ["a b", "c d", "e f", "g h"], "year": [2000, 2002, None, 2010],
                           "fields": [["Bio"], ["Bio"], ["Bio", "CS"], ["CS"]], "source": ["x"] * 4})
    ov = topic_overlays(papers, np.array([0, 0, 1, 1]))
    assert ov.loc[0, "interdisciplinarity"] == 0.0 and ov.loc[0, "main_field"] == "Bio"
    assert ov.loc[1, "interdisciplinarity"] > 0
    assert ov.loc[0, "mean_year"] == pytest.approx(2001) and ov.loc[1, "mean_year"] == pytest.approx(2010)


def test_labels_are_distinctive_title_words():
    titles = ["Protein folding kinetics", "Chaperone protein folding", "Folding of protein domains",
              "Treebank parser for syntax", "Syntax parser evaluation", "A treebank of syntax"]
    labels = topic_labels(titles, np.array([0, 0, 0, 1, 1, 1]), n_words=2)
    assert set(labels[0].split(", ")) == {"folding", "protein"}
    assert set(labels[1].split(", ")) == {"syntax", "parser"} or set(labels[1].split(", ")) == {"syntax", "treebank"}


def _papers_with_gaps() -> pd.DataFrame:
    """Two topics; titles and fields missing in every way a pyarrow, pandas 2 or pandas 3 column
    (or a reindex over papers without metadata) can spell it."""
    return pd.DataFrame({
        "title": ["Protein folding kinetics", None, np.nan, pd.NA, "  ", "Folding of protein domains",
                  "Treebank parser for syntax", np.nan, "Syntax parser evaluation"],
        "year": [2001, None, np.nan, 2003, 2004, 2005, 2010, np.nan, 2012],
        "fields": [["Bio"], None, np.nan, np.array(["Bio", None, ""], dtype=object), [], "Bio",
                   ["CS"], np.nan, np.array(["CS"], dtype=object)],
        "source": ["x", None, np.nan, "x", "x", "x", "y", None, "y"]})


def test_missing_titles_and_fields_never_crash_the_overlays():
    papers = _papers_with_gaps()
    labels = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1])
    ov = topic_overlays(papers, labels, n_words=2)
    assert set(ov.loc[0, "label"].split(", ")) == {"folding", "protein"}
    assert set(ov.loc[1, "label"].split(", ")) == {"parser", "syntax"}
    assert not any(w in lab for lab in ov["label"] for w in ("nan", "none", "<na>"))
    assert list(ov["main_field"]) == ["Bio", "CS"]
    assert ov.loc[0, "interdisciplinarity"] == 0.0 and ov.loc[1, "interdisciplinarity"] == 0.0
    assert list(ov["size"]) == [6, 3]
    assert ov.loc[0, "mean_year"] == pytest.approx((2001 + 2003 + 2004 + 2005) / 4)
    F, cats = field_matrix(list(papers["fields"]))
    assert cats == ["Bio", "CS"] and F.sum(axis=1).A1.tolist() == [1, 0, 0, 1, 0, 1, 1, 0, 1]


def test_example_titles_skip_missing_ones():
    papers = _papers_with_gaps()
    labels = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1])
    X = np.ones((9, 2), np.float32)
    X[1:5, 1] = 5.0                                      # the untitled papers are the most central
    tv = topic_vectors(X, labels)
    ex = example_titles(list(papers["title"]), X, labels, tv, per_topic=3)
    assert sorted(ex[0]) == ["Folding of protein domains", "Protein folding kinetics"]
    assert sorted(ex[1]) == ["Syntax parser evaluation", "Treebank parser for syntax"]
    assert topic_labels([None, np.nan, pd.NA], np.array([0, 0, 1])) == ["", ""]
