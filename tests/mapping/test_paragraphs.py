"""Paragraph retrieval (mapping.evaluation.paragraphs): recall@k of a same-paper chunk and of an
other-section chunk of it, from neighbour lists written by hand, and the dense and BM25 neighbour
lists on inputs whose order is known."""
from __future__ import annotations

import numpy as np
import pytest

from mapping.evaluation.paragraphs import bm25_topk, dense_topk, paragraph_recall

# chunks 0-2: paper A (sections 1, 1, 2); 3-4: paper B (section 1, 1); 5: paper C (alone)
PAPER = ["A", "A", "A", "B", "B", "C"]
SECTION = [1, 1, 2, 1, 1, 1]


def test_recall_of_same_paper_and_other_section_by_hand():
    neighbours = {0: [1, 3, 2], 1: [3, 4, 0], 2: [5, 0, 1], 3: [5, 0, 4], 4: [3, 0, 1], 5: [0, 1, 2]}
    src = np.repeat(list(neighbours), 3)
    dst = np.concatenate(list(neighbours.values()))
    r = paragraph_recall(src, dst, PAPER, SECTION)
    # same paper: queries 0-4 (C has no other chunk). @1: 0 (1), 4 (3) -> 2/5; @3: 0, 1 (0 at 3rd), 2, 3 (4), 4 -> 5/5
    assert r["queries_same_paper"] == 5 and r["recall@1_same_paper"] == pytest.approx(2 / 5)
    assert r["recall@3_same_paper"] == pytest.approx(1.0)
    # other section: only paper A has two sections: queries 0, 1, 2. @1: none; @3: 0 (2), 2 (0) -> 2/3; 1 has 0 only (same section)
    assert r["queries_other_section"] == 3 and r["recall@1_other_section"] == 0.0
    assert r["recall@3_other_section"] == pytest.approx(2 / 3)
    assert (r["chunks"], r["papers"]) == (6, 3)
    # only paper B's queries counted (they still rank every chunk): 3 -> [5, 0, 4], 4 -> [3, 0, 1]
    b = paragraph_recall(src, dst, PAPER, SECTION, queries=np.array(PAPER) == "B")
    assert b["queries_same_paper"] == 2 and b["recall@1_same_paper"] == 0.5 and b["recall@3_same_paper"] == 1.0
    assert b["queries_other_section"] == 0 and b["recall@1_other_section"] is None


def test_a_short_list_misses_what_it_lacks():
    r = paragraph_recall(np.array([0, 1]), np.array([1, 0]), ["A", "A", "B"], [1, 2, 1])
    assert r["recall@1_same_paper"] == 1.0 and r["recall@1_other_section"] == 1.0
    r = paragraph_recall(np.array([0]), np.array([2]), ["A", "A", "B"], [1, 2, 1])
    assert r["recall@3_same_paper"] == 0.0      # query 1 has no neighbours at all, query 0 only the wrong one


def test_dense_topk_is_cosine_order_without_the_query_itself():
    X = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0], [2, 0.1]], float)
    src, dst, sim = dense_topk(X, 2)
    assert src.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert dst.reshape(5, 2).tolist() == [[4, 1], [4, 0], [1, 4], [2, 1], [0, 1]]
    assert sim[0] == pytest.approx(2 / np.hypot(2, 0.1))


def test_bm25_topk_ranks_shared_rare_words_first():
    texts = ["spindle checkpoint anaphase timing", "checkpoint anaphase delay in cells", "ribosome assembly in yeast",
             "yeast ribosome biogenesis", "spindle checkpoint"]
    src, dst, _ = bm25_topk(texts, 2)
    first = {s: d for s, d in zip(src[::-1], dst[::-1])}      # the last written for a src is its best: reverse
    assert first[2] == 3 and first[3] == 2 and first[4] == 0
    assert 0 not in dst[src == 0]
