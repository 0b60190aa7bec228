"""Topic labels and overlays (METHODS.md §5), and missing titles, abstracts and fields."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mapping.overlays import topic_overlays
from mapping.topics import (central_rows, div, div_star, example_titles, field_matrix, topic_labels,
                            topic_vectors)


def test_interdisciplinarity():
    """DIV and DIV* (METHODS.md §5.4) against hand computations."""
    d = np.array([[0, 1, 0.5], [1, 0, 0.2], [0.5, 0.2, 0]])
    assert div(np.array([7, 0, 0]), d) == 0.0 == div_star(np.array([7, 0, 0]), d)   # one category -> 0
    assert np.isnan(div(np.array([0, 0, 0]), d))            # no categories -> undefined
    # two equally sized, maximally distant categories of N = 3: variety 2/3, balance 1, disparity
    # (d_01 + d_10) / (2 · 1) = 1
    assert div(np.array([3, 3, 0]), d) == pytest.approx(2 / 3)
    assert div_star(np.array([3, 3, 0]), d) == pytest.approx(2.0)
    assert div(np.array([3, 3]), np.array([[0, 1], [1, 0]])) == pytest.approx(1.0)   # N = 2: the maximum
    # three present, counts 1, 2, 3: Gini = 2(1 + 4 + 9)/(3 · 6) − 4/3 = 2/9; disparity = 2(1 + .5 + .2)/6
    assert div(np.array([1, 2, 3]), d) == pytest.approx(1 * (1 - 2 / 9) * (3.4 / 6))
    unbalanced = div(np.array([5, 1, 0]), d)
    assert 0 < unbalanced < 2 / 3                           # Gini > 0 lowers it
    rng = np.random.default_rng(0)
    for _ in range(200):                                    # DIV <= 1 whatever the counts and distances
        n = int(rng.integers(2, 12))
        r = rng.random((n, n))
        dd = np.triu(r, 1) + np.triu(r, 1).T
        counts = rng.integers(0, 5, n) * (rng.random(n) < 0.7)
        v = div(counts, dd)
        assert np.isnan(v) or 0 <= v <= 1
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


# ---------------------------------------------------------------- the scale path equals the old one

def _old_topic_labels(titles, labels, n_words=3):
    """The labels as computed before issue 13: a vectoriser fitted per call (per resolution),
    a Python loop over topics."""
    from sklearn.feature_extraction.text import CountVectorizer

    from mapping.topics import TITLE_STOP_WORDS, membership
    from sciencemap.text import clean_texts

    labels = np.asarray(labels, np.int64)
    n_topics = int(labels.max()) + 1
    cv = CountVectorizer(stop_words=TITLE_STOP_WORDS, binary=True, lowercase=True,
                         token_pattern=r"(?u)\b[^\W\d_][^\W\d_]{2,}\b")
    try:
        P = cv.fit_transform(clean_texts(titles))
    except ValueError:
        return [""] * n_topics
    vocab = np.asarray(cv.get_feature_names_out())
    C = (membership(labels, n_topics).astype(float) @ P).tocsr().astype(float)
    words_per_topic = np.asarray(C.sum(axis=1)).ravel()
    freq = np.asarray(C.sum(axis=0)).ravel()
    idf = np.log1p(words_per_topic.mean() / np.maximum(freq, 1))
    out = []
    for t in range(n_topics):
        row = C.getrow(t)
        if row.nnz == 0:
            out.append("")
            continue
        cnt, cols = row.data, row.indices
        score = cnt / max(words_per_topic[t], 1) * idf[cols]
        order = np.lexsort((vocab[cols], -score, cnt < 2))
        out.append(", ".join(vocab[cols[order[:n_words]]]))
    return out


def _random_titles(n, seed=0):
    rng = np.random.default_rng(seed)
    words = ["protein", "folding", "kinetics", "parser", "syntax", "treebank", "galaxy", "orbit", "neuron",
             "cortex", "Zebrafish", "éclair", "naïve", "tumour", "x1", "of", "the", "study", "alpha", "beta"]
    titles = [" ".join(rng.choice(words, size=rng.integers(0, 7))) for _ in range(n)]
    for i in range(0, n, 11):
        titles[i] = None
    return titles


def test_title_vocabulary_in_batches_is_one_countvectorizer_fit():
    from sklearn.feature_extraction.text import CountVectorizer

    from mapping.topics import TITLE_STOP_WORDS, TITLE_TOKENS, TitleWords
    from sciencemap.text import clean_texts

    docs = clean_texts(_random_titles(500))
    tw = TitleWords()
    for lo in range(0, 500, 37):                     # batches, one of them wordless
        tw.add(docs[lo:lo + 37])
    tw.add(["", "of the"])
    P, vocab = tw.finish()
    cv = CountVectorizer(stop_words=TITLE_STOP_WORDS, binary=True, lowercase=True, token_pattern=TITLE_TOKENS)
    ref = cv.fit_transform(docs + ["", "of the"])
    assert list(vocab) == list(cv.get_feature_names_out())
    assert P.shape == ref.shape and (P != ref).nnz == 0


def test_one_vocabulary_gives_the_labels_of_a_fit_per_resolution():
    """The stage fits the vocabulary once over all titles and reuses it for every resolution,
    including resolutions whose topics cover only some of the papers (-1)."""
    from mapping.topics import label_words, title_words, topic_word_counts

    titles = _random_titles(600, seed=3)
    P, vocab = title_words(titles)                    # once
    rng = np.random.default_rng(1)
    for n_topics in (1, 7, 40, 200):
        labels = rng.integers(0, n_topics, 600)
        labels[rng.random(600) < 0.2] = -1            # papers outside this resolution's topics
        keep = labels >= 0
        got = label_words(topic_word_counts(labels, P, n_topics), vocab, 3)
        want = _old_topic_labels([t for t, k in zip(titles, keep) if k], labels[keep], 3)
        want += [""] * (n_topics - len(want))
        assert got == want
        assert got[: len(want)] == topic_labels([t for t, k in zip(titles, keep) if k], labels[keep], 3) + \
            [""] * (n_topics - int(labels[keep].max()) - 1)


def test_field_matrix_from_arrow_equals_the_python_construction():
    import pyarrow as pa

    from mapping.topics import FieldCollector, field_matrix_arrow

    fields = [["Bio", "CS"], None, [], [" Bio ", "Bio", None, ""], ["Physics"], ["CS"], None, ["Zoo", "Art"]]
    F, cats = field_matrix_arrow(pa.array(fields, pa.list_(pa.string())))
    F0, cats0 = field_matrix([f if f is not None else np.nan for f in fields])
    assert cats == cats0 == ["Art", "Bio", "CS", "Physics", "Zoo"]
    assert (F != F0).nnz == 0 and F.max() == 1
    # in batches, with rows remapped (a permutation, and -1 = not a paper of the map)
    rows = np.array([3, -1, 0, 1, 2, 5, 4, 6])
    fc = FieldCollector()
    fc.add(pa.array(fields[:3], pa.list_(pa.string())), rows[:3])
    fc.add(pa.array(fields[3:], pa.list_(pa.string())), rows[3:])
    G, cats2 = fc.finish(7)
    assert cats2 == cats
    want = np.zeros((7, 5), int)
    for i, r in enumerate(rows):
        if r >= 0:
            want[r] = F0[i].toarray()
    np.testing.assert_array_equal(G.toarray(), want)


def test_topic_vectors_blockwise_from_the_memmap_equal_the_dense_mean(tmp_path):
    from sciencemap.vectors import read_rows

    rng = np.random.default_rng(0)
    X = rng.normal(size=(1001, 24)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    labels = rng.integers(0, 17, 1001)
    labels[::13] = -1
    path = tmp_path / "v.npy"
    np.save(path, X)
    mm = np.load(path, mmap_mode="r")
    np.testing.assert_array_equal(read_rows(mm, 100, 350), X[100:350])
    keep = labels >= 0
    dense = np.zeros((17, 24))
    np.add.at(dense, labels[keep], X[keep].astype(np.float64))
    dense /= np.bincount(labels[keep], minlength=17)[:, None]
    for block in (1, 64, 1000, 5000):
        tv = topic_vectors(mm, labels, block_rows=block)
        assert tv.dtype == np.float64
        np.testing.assert_array_equal(tv, dense)      # exact: float64 sums of float32 values
    # float16 store: the blocks are widened to float32 before summing
    np.save(path, X.astype(np.float16))
    mm16 = np.load(path, mmap_mode="r")
    np.testing.assert_allclose(topic_vectors(mm16, labels, block_rows=100), dense, atol=2e-3)


def test_topic_vectors_and_central_rows_in_threads_equal_one_thread_bit_for_bit(tmp_path):
    """Threads take column slices (topic vectors) or blocks (central rows): every sum gets the same
    additions in the same order, so the results are those of one thread exactly, on values whose
    float64 sums round (not unit vectors, wide magnitudes) and with more threads than columns."""
    rng = np.random.default_rng(4)
    X = (rng.normal(size=(3001, 10)) * np.exp(rng.normal(scale=8, size=(3001, 1)))).astype(np.float32)
    labels = rng.integers(0, 40, 3001)
    labels[::7] = -1
    path = tmp_path / "v.npy"
    np.save(path, X)
    mm = np.load(path, mmap_mode="r")
    one = topic_vectors(mm, labels, block_rows=256)
    eligible = rng.random(3001) < 0.8
    want = central_rows(mm, labels, one, eligible, per_topic=4, block_rows=256)
    assert sum(map(len, want)) == 4 * 40
    for workers in (2, 3, 16):
        np.testing.assert_array_equal(topic_vectors(mm, labels, block_rows=256, workers=workers), one)
        assert central_rows(mm, labels, one, eligible, per_topic=4, block_rows=256, workers=workers) == want
    # a check that could fail: the values are such that the order of the additions shows
    keep = labels >= 0
    other = np.zeros_like(one)
    for i in rng.permutation(np.flatnonzero(keep)):
        other[labels[i]] += X[i].astype(np.float64)
    assert not np.array_equal(other / np.bincount(labels[keep])[:, None], one)


def test_overlays_with_words_in_papers_table_order_equal_the_frame_path():
    """The stage keeps the title words in papers-table order (word_row maps them to vector rows,
    -1 for duplicates and papers without a vector); the overlays equal those of an aligned frame."""
    from mapping.overlays import overlays
    from mapping.topics import PaperData, title_words

    rng = np.random.default_rng(2)
    n = 120
    papers = pd.DataFrame({"title": _random_titles(n, seed=5), "year": rng.integers(1990, 2020, n).astype(float),
                           "fields": [[f"F{k}" for k in rng.choice(6, size=rng.integers(0, 3), replace=False)]
                                      for _ in range(n)],
                           "source": rng.choice(["b", "a", "c"], n)})
    labels = rng.integers(0, 9, n)
    labels[rng.random(n) < 0.1] = -1
    ref = topic_overlays(papers[labels >= 0].reset_index(drop=True), labels[labels >= 0])
    data = PaperData.from_frame(papers)
    perm = rng.permutation(n)                          # papers table order != row order
    P, vocab = title_words(list(papers["title"].iloc[perm]) + ["protein protein folding"])
    data.words, data.vocab, data.word_row = P, vocab, np.r_[perm, -1]
    got = overlays(data, labels)
    pd.testing.assert_frame_equal(got, ref)


def test_papers_without_fields_take_their_neighbours_most_similar_field(tmp_path):
    import pyarrow as pa
    import scipy.sparse as sp

    from sciencemap.storage import write_table_atomic
    from mapping.topics import infer_fields

    # categories 0, 1; rows 0-2 have fields; 3 and 4 have none; 5 has none and only neighbour 4
    F = sp.csr_matrix(np.array([[1, 0], [0, 1], [0, 1], [0, 0], [0, 0], [0, 0]]))
    edges = pa.table({"src": pa.array([3, 3, 3, 4, 5], pa.int32()), "dst": pa.array([0, 1, 2, 0, 4], pa.int32()),
                      "similarity": pa.array([0.9, 0.4, 0.4, 0.7, 0.8], pa.float32()),
                      "rank": pa.array([1, 2, 3, 1, 1], pa.int16())})
    write_table_atomic(edges, tmp_path / "edges")
    targets = np.ones(6, bool)
    G, n = infer_fields(tmp_path / "edges", F, targets)
    # row 3: field 0 (0.9) beats field 1 (0.4 + 0.4); row 4: field 0; row 5 via row 4, in round 2
    assert G.toarray().tolist() == [[1, 0], [0, 1], [0, 1], [1, 0], [1, 0], [1, 0]] and n == 3
    G1, n1 = infer_fields(tmp_path / "edges", F, targets, rounds=1)
    assert n1 == 2 and G1[5].nnz == 0
    G0, n0 = infer_fields(tmp_path / "edges", F, np.array([1, 1, 1, 0, 1, 1], bool))
    assert G0[3].nnz == 0 and n0 == 2                       # only the target rows are filled



def test_a_label_never_names_a_word_and_its_plural():
    """"cells, cell" was an eLife area's label: a word whose plural or singular is already in the
    label gives way to the next-ranked word; words that merely end in s are not plurals."""
    from mapping.topics import pick_labels, plural_twins

    assert all(plural_twins(a, b) for a, b in [("cells", "cell"), ("virus", "viruses"), ("antibodies", "antibody"),
                                                ("gene", "genes")])
    assert not any(plural_twins(a, b) for a, b in [("glass", "class"), ("cell", "cellss"), ("study", "studied"),
                                                    ("mass", "mas"), ("virus", "viru"), ("cell", "cell")])
    assert pick_labels(["cells, cell, signaling, wnt", "virus, hiv, viruses", "a, b", ""], 3) == \
        ["cells, signaling, wnt", "virus, hiv", "a, b", ""]
    titles = ["Cells divide", "Stem cells", "The cell cycle", "Cell cycle arrest", "Cell division in cells",
              "Galaxy orbits", "Galaxy orbit"]
    labels = topic_labels(titles, np.array([0, 0, 0, 0, 0, 1, 1]), n_words=2)
    words = labels[0].split(", ")
    assert len(words) == 2 and not ({"cell", "cells"} <= set(words)), labels
    assert labels[1] in ("galaxy, orbit", "galaxy, orbits"), labels


def test_distinct_labels_keep_the_first_and_tell_the_rest_apart():
    """Two eLife areas were both "cell, signaling": the research areas' labels are told apart by the
    next-ranked words, the first area (the largest) keeping its own."""
    from mapping.topics import label_words, membership, pick_labels, title_words

    assert pick_labels(["cell, signaling, kinase", "cell, signaling, wnt, notch", "cell, signaling",
                        "virus, hiv", ""], 2, distinct=True) == \
        ["cell, signaling", "cell, wnt", "cell, signaling", "virus, hiv", ""]
    titles = ["Cell signaling by kinase", "Cell signaling", "Cell signaling in wnt", "Cell signaling",
              "Virus entry", "Virus budding"]
    P, vocab = title_words(titles)
    C = (membership(np.array([0, 0, 1, 1, 2, 2]), 3) @ P).tocsr()
    plain = label_words(C, vocab, 2)
    assert plain[0] == plain[1] == "cell, signaling"             # alike without the rule
    assert label_words(C, vocab, 2, distinct=True) == [plain[0], "cell, wnt", plain[2]]
