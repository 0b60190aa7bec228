"""Topics (clusters at one resolution): vectors, labels and overlays (METHODS.md §5).

- Topic vector = mean of its papers' (unit) vectors.
- Label = the topic's most distinctive title words, class-based TF-IDF: a word's share of the
  topic's title words times log(1 + average words per topic / the word's corpus frequency);
  each title counts a word once; words used by at least two of the topic's titles come first.
- main_field = most frequent `fields` value of its papers (ties alphabetical); if none of its
  papers has a field, its most frequent `source`.
- mean_year over papers with a year (NaN when none).
- Interdisciplinarity = DIV* (Leydesdorff, Wagner & Bornmann 2019) over the `fields` categories
  of the topic's papers: n_c · (1 − Gini) · Σ_{k≠l} d_kl, sum over ORDERED pairs of present
  categories (each unordered pair counted twice), Gini over the present categories' paper counts
  (a paper with several fields counts once for each), d_kl = 1 − cosine of the categories'
  co-occurrence profiles (row k of FᵀF, F = paper × category 0/1 over the whole corpus; two
  categories never sharing a paper have d = 1). 0 when n_c = 1; NaN when no paper has a field.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

from sciencemap.text import clean_text, clean_texts

TITLE_STOP_WORDS = sorted(ENGLISH_STOP_WORDS | {
    "study", "studies", "analysis", "using", "based", "effect", "effects", "role", "new", "via",
    "use", "novel", "approach", "results", "method", "methods", "data", "model", "models",
    "evidence", "case", "report", "review", "associated", "association", "different", "high",
})


def membership(labels: np.ndarray, n_topics: int | None = None) -> sp.csr_matrix:
    """Topic × paper 0/1 matrix."""
    labels = np.asarray(labels, np.int64)
    n_topics = int(labels.max()) + 1 if n_topics is None else n_topics
    return sp.csr_matrix((np.ones(len(labels)), (labels, np.arange(len(labels)))), shape=(n_topics, len(labels)))


def topic_vectors(X: np.ndarray, labels: np.ndarray) -> np.ndarray:
    M = membership(labels)
    sizes = np.asarray(M.sum(axis=1)).ravel()
    return np.asarray(M @ X) / np.maximum(sizes, 1)[:, None]


def topic_labels(titles: list[str | None], labels: np.ndarray, n_words: int = 3) -> list[str]:
    """Top distinctive title words per topic (class-based TF-IDF), joined by ', '."""
    labels = np.asarray(labels, np.int64)
    n_topics = int(labels.max()) + 1
    docs = clean_texts(titles)  # a missing title (None, NaN, pd.NA) is a title without words
    cv = CountVectorizer(stop_words=TITLE_STOP_WORDS, binary=True, lowercase=True,
                         token_pattern=r"(?u)\b[^\W\d_][^\W\d_]{2,}\b")
    try:
        P = cv.fit_transform(docs)
    except ValueError:  # no words at all
        return [""] * n_topics
    vocab = np.asarray(cv.get_feature_names_out())
    C = (membership(labels, n_topics) @ P).tocsr().astype(float)    # topic × word counts
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


def _gini(x: np.ndarray) -> float:
    x = np.sort(np.asarray(x, float))
    n = len(x)
    if n <= 1 or x.sum() == 0:
        return 0.0
    i = np.arange(1, n + 1)
    return float(2 * (i * x).sum() / (n * x.sum()) - (n + 1) / n)


def category_disparity(F: sp.csr_matrix) -> np.ndarray:
    """d_kl = 1 − cosine between categories' co-occurrence profiles (rows of FᵀF)."""
    C = (F.T @ F).toarray().astype(float)
    norms = np.linalg.norm(C, axis=1)
    Cn = C / np.where(norms > 0, norms, 1.0)[:, None]
    return np.clip(1.0 - Cn @ Cn.T, 0.0, 1.0)


def div_star(counts: np.ndarray, disparity: np.ndarray) -> float:
    """DIV* = n_c · (1 − Gini) · Σ_{k≠l} d_kl over the present categories (ordered pairs)."""
    present = np.flatnonzero(np.asarray(counts) > 0)
    n_c = len(present)
    if n_c == 0:
        return float("nan")
    if n_c == 1:
        return 0.0
    d = disparity[np.ix_(present, present)]
    return float(n_c * (1 - _gini(np.asarray(counts)[present])) * (d.sum() - np.trace(d)))


def _field_list(fl) -> list[str]:
    """A paper's `fields` cell as clean names: a list or array of names (a lone string is one
    name); None, and the NaN a reindex puts in for a paper without metadata, are no field."""
    if isinstance(fl, (str, bytes)):
        return [clean_text(fl)] if clean_text(fl) else []
    if not hasattr(fl, "__iter__"):
        return []
    return [c for c in clean_texts(fl) if c]


def field_matrix(fields: list) -> tuple[sp.csr_matrix, list[str]]:
    """Paper × category 0/1 matrix from the `fields` lists."""
    fields = [_field_list(fl) for fl in fields]
    cats = sorted({f for fl in fields for f in fl})
    col = {c: i for i, c in enumerate(cats)}
    rows, cols = [], []
    for r, fl in enumerate(fields):
        for c in set(fl):
            rows.append(r)
            cols.append(col[c])
    F = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(fields), len(cats)))
    return F, cats


def topic_overlays(papers: pd.DataFrame, labels: np.ndarray, n_words: int = 3) -> pd.DataFrame:
    """Per topic: cluster, size, label, main_field, mean_year, interdisciplinarity.

    `papers` rows align with `labels` and have columns title, year, fields, source."""
    labels = np.asarray(labels, np.int64)
    n_topics = int(labels.max()) + 1
    M = membership(labels, n_topics)
    size = np.asarray(M.sum(axis=1)).ravel().astype(np.int64)
    F, cats = field_matrix(list(papers["fields"]))
    disparity = category_disparity(F) if cats else np.zeros((0, 0))
    TC = (M @ F).toarray() if cats else np.zeros((n_topics, 0))
    # main field, falling back to the most frequent source
    src = pd.Series(papers["source"].fillna("unknown").to_numpy(), dtype=object)
    top_src = (pd.DataFrame({"t": labels, "s": src}).groupby(["t", "s"]).size().reset_index(name="n")
               .sort_values(["t", "n", "s"], ascending=[True, False, True]).drop_duplicates("t").set_index("t")["s"])
    main = []
    for t in range(n_topics):
        if TC.shape[1] and TC[t].max() > 0:
            main.append(cats[int(np.argmax(TC[t]))])  # argmax takes the first = alphabetical on ties
        else:
            main.append(str(top_src.get(t, "unknown")))
    year = pd.to_numeric(papers["year"], errors="coerce").to_numpy(dtype=float)
    has = ~np.isnan(year)
    ysum = np.bincount(labels[has], weights=year[has], minlength=n_topics)
    ycnt = np.bincount(labels[has], minlength=n_topics)
    mean_year = np.where(ycnt > 0, ysum / np.maximum(ycnt, 1), np.nan)
    inter = np.array([div_star(TC[t], disparity) if cats else np.nan for t in range(n_topics)])
    return pd.DataFrame({"cluster": np.arange(n_topics, dtype=np.int32), "size": size.astype(np.int32),
                         "label": topic_labels(list(papers["title"]), labels, n_words),
                         "main_field": main, "mean_year": mean_year.astype(np.float32),
                         "interdisciplinarity": inter.astype(np.float32)})


def example_titles(titles: list, X: np.ndarray, labels: np.ndarray, topic_vecs: np.ndarray,
                   per_topic: int = 3) -> list[list[str]]:
    """The titles of the papers closest (cosine) to their topic's mean vector."""
    labels = np.asarray(labels, np.int64)
    tv = topic_vecs / np.maximum(np.linalg.norm(topic_vecs, axis=1, keepdims=True), 1e-12)
    score = np.einsum("ij,ij->i", X, tv[labels])
    titles = clean_texts(titles)
    has_title = np.array([bool(t) for t in titles], dtype=bool)
    order = np.lexsort((-score, ~has_title, labels))  # by topic, titled first, most central first
    out: list[list[str]] = [[] for _ in range(len(tv))]
    for i in order:
        t = labels[i]
        if len(out[t]) < per_topic and has_title[i]:
            out[t].append(titles[i])
    return out
