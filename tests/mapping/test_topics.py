"""Topic labels and overlays (METHODS.md §5), and missing titles, abstracts and fields."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mapping.topics import div_star, topic_labels, topic_overlays


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
