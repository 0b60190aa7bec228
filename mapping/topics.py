"""Topics (clusters at one resolution): vectors, labels, and what the overlays compute from
(mapping.overlays declares them; METHODS.md §5).

- Topic vector = mean of its papers' (unit) vectors.
- Label = the topic's most distinctive title words, class-based TF-IDF: a word's share of the
  topic's title words times log(1 + average words per topic / the word's corpus frequency);
  each title counts a word once; words used by at least two of the topic's titles come first; a
  word whose plural or singular is already in the label is skipped (pick_labels).
- main_field = most frequent `fields` value of its papers (ties alphabetical); null if none of
  its papers has a field (a source name is not a field).
- mean_year over papers with a year (NaN when none).
- Interdisciplinarity = DIV ∈ [0, 1] (Leydesdorff, Wagner & Bornmann 2019) over the `fields`
  categories of the topic's papers: (n_c / N) · (1 − Gini) · Σ_{k≠l} d_kl / (n_c (n_c − 1)), the
  sum over ORDERED pairs of present categories, N the categories on the map, Gini over the present
  categories' paper counts (a paper with several fields counts once for each), d_kl = 1 − cosine
  of the categories' co-occurrence profiles (row k of FᵀF, F = paper × category 0/1 over the whole
  corpus; two categories never sharing a paper have d = 1). 0 when n_c = 1; NaN when no paper has
  a field. DIV* = N · DIV (div_star).

Scale (33M papers, 5 resolutions): the per-paper inputs are sparse matrices and arrays built once
(mapping.io.load_row_meta): the paper × title-word matrix P comes from ONE vocabulary fitted over
all titles (TitleWords, batch by batch) and every resolution only multiplies its membership matrix
into it (topic × word = M @ P); fields are a paper × category matrix built from Arrow list offsets.
Topic vectors are summed block by block from the memory-mapped vectors. What stays per topic is
small and kept in float64 where float32 would change results (the ranking of label words, the
topic means handed to UMAP).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

from sciencemap.text import clean_text, clean_texts
from sciencemap.vectors import read_rows, rows_per_block

TITLE_STOP_WORDS = sorted(ENGLISH_STOP_WORDS | {
    "study", "studies", "analysis", "using", "based", "effect", "effects", "role", "new", "via",
    "use", "novel", "approach", "results", "method", "methods", "data", "model", "models",
    "evidence", "case", "report", "review", "associated", "association", "different", "high",
})
TITLE_TOKENS = r"(?u)\b[^\W\d_][^\W\d_]{2,}\b"


def membership(labels: np.ndarray, n_topics: int | None = None) -> sp.csr_matrix:
    """Topic × paper 0/1 matrix (int32); papers labelled -1 belong to no topic."""
    labels = np.asarray(labels)
    n = len(labels)
    keep = labels >= 0
    if n_topics is None:
        n_topics = int(labels[keep].max()) + 1 if keep.any() else 0
    counts = np.bincount(labels[keep], minlength=n_topics)
    indptr = np.zeros(n_topics + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    idx_t = np.int32 if n < 2**31 else np.int64
    members = np.flatnonzero(keep).astype(idx_t)
    members = members[np.argsort(labels[keep], kind="stable")]   # paper order within a topic
    return sp.csr_matrix((np.ones(len(members), np.int32), members, indptr), shape=(n_topics, n))


# ---------------------------------------------------------------- topic vectors

def _read_block(X, lo, hi) -> np.ndarray:
    return read_rows(X, lo, hi)


def _threads(workers: int):
    """(thread count, a pool of them or None for one): `workers` threads, 0 = one per core."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    workers = workers if workers > 0 else (os.cpu_count() or 1)
    return workers, (ThreadPoolExecutor(workers) if workers > 1 else None)


def topic_vectors(X: np.ndarray, labels: np.ndarray, n_topics: int | None = None, block_rows: int | None = None,
                  progress=None, workers: int = 1) -> np.ndarray:
    """Mean vector per topic (float64, n_topics × d), from X (an array or a memory-mapped store)
    read in blocks of rows; rows labelled -1 are left out.

    Per block: a sparse (topics in the block × rows) membership product with the block widened to
    float64 (memory bounded by the block), added into a float64 topics × d sum. Sums of float32
    values in float64 are exact for unit vectors in practice, so the means (and the UMAP layout
    drawn from them) do not depend on the block size and equal a whole-matrix product;
    summing in float32 changed most of the means' float32 bits. `workers` threads (0 = one per
    core) take a slice of the columns each: every sum gets the same additions in the same order,
    so the means are those of one thread, bit for bit (SciPy's product and NumPy run without the GIL)."""

    labels = np.asarray(labels)
    n, d = X.shape
    keep = labels >= 0
    if n_topics is None:
        n_topics = int(labels[keep].max()) + 1 if keep.any() else 0
    acc = np.zeros((n_topics, d), np.float64)
    step = block_rows or rows_per_block(d, 8)
    width, pool = _threads(workers)
    cuts = np.linspace(0, d, width + 1).astype(int)
    columns = [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    try:
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            lb = labels[lo:hi]
            ok = np.flatnonzero(lb >= 0)
            if len(ok):
                Xb = _read_block(X, lo, hi)
                topics, inv = np.unique(lb[ok], return_inverse=True)
                Mb = sp.csr_matrix((np.ones(len(ok)), (inv.ravel(), ok)), shape=(len(topics), hi - lo))

                def add(cols: tuple[int, int]) -> None:
                    a, b = cols
                    acc[topics, a:b] += Mb @ Xb[:, a:b].astype(np.float64)

                if pool:
                    list(pool.map(add, columns))
                else:
                    add((0, d))
                del Xb
            if progress is not None:
                progress.advance(hi - lo)
    finally:
        if pool:
            pool.shutdown()
    sizes = np.bincount(labels[keep], minlength=n_topics).astype(np.float64)
    return acc / np.maximum(sizes, 1)[:, None]


def central_rows(X: np.ndarray, labels: np.ndarray, topic_vecs: np.ndarray, eligible: np.ndarray,
                 per_topic: int = 3, block_rows: int | None = None, progress=None, workers: int = 1) -> list[list[int]]:
    """Per topic, the eligible rows closest (cosine) to the topic's mean vector, most central first
    (ties in row order). One pass over X in blocks, `workers` threads (0 = one per core) scoring a
    block each; then one sort of the eligible rows."""

    labels = np.asarray(labels)
    n, d = X.shape
    tv = np.asarray(topic_vecs, np.float64)
    tv = tv / np.maximum(np.linalg.norm(tv, axis=1, keepdims=True), 1e-12)
    cand = np.asarray(eligible, bool) & (labels >= 0)
    score = np.zeros(n, np.float64)
    step = block_rows or rows_per_block(d, 8)

    def block_scores(lo: int) -> int:
        hi = min(n, lo + step)
        ok = cand[lo:hi]
        if ok.any():
            Xb = _read_block(X, lo, hi)
            lb = labels[lo:hi]
            score[lo:hi][ok] = np.einsum("ij,ij->i", Xb[ok], tv[lb[ok]])    # disjoint rows a block
        return hi - lo

    width, pool = _threads(workers)
    try:
        # at most the pool's size of blocks at once: each holds its rows
        starts = list(range(0, n, step))
        for s in range(0, len(starts), width):
            done = pool.map(block_scores, starts[s:s + width]) if pool else map(block_scores, starts[s:s + width])
            for rows in done:
                if progress is not None:
                    progress.advance(rows)
    finally:
        if pool:
            pool.shutdown()
    rows = np.flatnonzero(cand)
    rows = rows[np.lexsort((-score[rows], labels[rows]))]      # by topic, most central first; stable
    out: list[list[int]] = [[] for _ in range(len(tv))]
    if not len(rows):
        return out
    lab = labels[rows]
    first = np.r_[True, lab[1:] != lab[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0))
    pick = (np.arange(len(rows)) - start) < per_topic
    for t, r in zip(lab[pick].tolist(), rows[pick].tolist()):
        out[t].append(r)
    return out


def example_titles(titles: list, X: np.ndarray, labels: np.ndarray, topic_vecs: np.ndarray,
                   per_topic: int = 3) -> list[list[str]]:
    """The titles of the papers closest (cosine) to their topic's mean vector."""
    titles = clean_texts(titles)
    has_title = np.fromiter(map(bool, titles), bool, len(titles))
    return [[titles[i] for i in rows] for rows in central_rows(X, labels, topic_vecs, has_title, per_topic)]


# ---------------------------------------------------------------- title words and labels

def _vectorizer() -> CountVectorizer:
    return CountVectorizer(stop_words=TITLE_STOP_WORDS, binary=True, lowercase=True, token_pattern=TITLE_TOKENS)


class TitleWords:
    """The paper × title-word 0/1 matrix with ONE vocabulary, built batch by batch.

    `add(docs)` tokenises a batch (the same CountVectorizer settings as a single fit) and maps its
    words into the growing vocabulary; `finish()` sorts the vocabulary the way CountVectorizer does
    and returns (P, vocab): the same matrix and words as one `fit_transform` over all titles,
    without holding sklearn's per-token Python lists for the whole corpus."""

    def __init__(self):
        self.index: dict[str, int] = {}
        self.indices: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []

    def add(self, docs: list[str]) -> None:
        cv = _vectorizer()
        try:
            Xb = cv.fit_transform(docs).tocsr()
        except ValueError:       # not one word in the batch
            self.indices.append(np.zeros(0, np.int32))
            self.lengths.append(np.zeros(len(docs), np.int64))
            return
        local = np.empty(len(cv.vocabulary_), np.int32)
        for w, j in cv.vocabulary_.items():
            local[j] = self.index.setdefault(w, len(self.index))
        self.indices.append(local[Xb.indices])
        self.lengths.append(np.diff(Xb.indptr).astype(np.int64))

    def finish(self) -> tuple[sp.csr_matrix, np.ndarray]:
        words = sorted(self.index)
        rank = np.empty(len(words), np.int32)
        rank[np.fromiter((self.index[w] for w in words), np.int64, len(words))] = np.arange(len(words), dtype=np.int32)
        indices = rank[np.concatenate(self.indices)] if self.indices else np.zeros(0, np.int32)
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        indptr = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        self.indices, self.lengths = [], []
        P = sp.csr_matrix((np.ones(len(indices), np.int32), indices, indptr), shape=(len(lengths), len(words)))
        P.sort_indices()
        return P, np.asarray(words, dtype=object)


SPARE_WORDS = 4      # ranked words beyond a label's own: to skip a plural twin, to tell labels apart


def title_words(titles) -> tuple[sp.csr_matrix, np.ndarray]:
    """(P, vocab) for a list of titles (missing ones are titles without words)."""
    tw = TitleWords()
    tw.add(clean_texts(titles))
    return tw.finish()


def plural_twins(a: str, b: str) -> bool:
    """One word is the other's plural: cells/cell, viruses/virus, antibodies/antibody (a word ending
    in ss, us or is is no plural: mass, virus, axis)."""
    if len(a) < len(b):
        a, b = b, a
    if a.endswith(("ss", "us", "is")):
        return False
    return a in (b + "s", b + "es") or (b.endswith("y") and a == b[:-1] + "ies")


def pick_labels(ranked: list[str], n_words: int, distinct: bool = False) -> list[str]:
    """Labels of n_words words from each topic's ranked words (", "-joined, best first): a word whose
    plural or singular is already in the label is skipped (no "cells, cell"). distinct: no two
    labels alike; topics in index order, so the first keeps its words; while a label is taken, its
    last word is replaced by the next ranked word (a topic whose words run out keeps a taken label)."""
    out, taken = [], set()
    for r in ranked:
        words, label = (r.split(", ") if r else []), []
        rest = iter(words)
        for w in rest:
            if not any(plural_twins(w, v) for v in label):
                label.append(w)
                if len(label) == n_words:
                    break
        while distinct and label and ", ".join(label) in taken:
            w = next(rest, None)
            if w is None:
                break
            if not any(plural_twins(w, v) for v in label[:-1]):
                label[-1] = w
        out.append(", ".join(label))
        taken.add(out[-1])
    return out


def label_words(C: sp.csr_matrix, vocab: np.ndarray, n_words: int = 3, chunk_nnz: int = 20_000_000,
                distinct: bool = False) -> list[str]:
    """Labels from topic × word counts C (class-based TF-IDF, see the module doc), all topics at once:
    one lexsort of (topic, used by < 2 titles, −score, word) over C's entries, in row chunks; then
    pick_labels over the SPARE_WORDS next-ranked words too (plural twins skipped; `distinct`: no two
    labels alike)."""
    return pick_labels(_ranked_words(C, vocab, n_words + SPARE_WORDS, chunk_nnz), n_words, distinct)


def _ranked_words(C: sp.csr_matrix, vocab: np.ndarray, n_words: int, chunk_nnz: int) -> list[str]:
    """Each topic's n_words best words, ", "-joined (label_words' ranking)."""
    C = C.tocsr()
    C.sum_duplicates()
    n_topics = C.shape[0]
    words_per_topic = np.asarray(C.sum(axis=1), dtype=np.float64).ravel()
    freq = np.asarray(C.sum(axis=0), dtype=np.float64).ravel()
    idf = np.log1p(words_per_topic.mean() / np.maximum(freq, 1)) if n_topics else freq
    out = [""] * n_topics
    indptr = C.indptr
    t0 = 0
    while t0 < n_topics:
        t1 = int(np.searchsorted(indptr, indptr[t0] + chunk_nnz, side="right")) - 1
        t1 = min(n_topics, max(t1, t0 + 1))
        a, b = indptr[t0], indptr[t1]
        cols = C.indices[a:b]
        cnt = C.data[a:b].astype(np.float64)
        row = np.repeat(np.arange(t0, t1), np.diff(indptr[t0:t1 + 1]))
        score = cnt / np.maximum(words_per_topic[row], 1) * idf[cols]
        # the vocabulary is sorted, so its column order is the words' alphabetical order
        order = np.lexsort((cols, -score, cnt < 2, row))
        pos = np.arange(len(order)) - (indptr[row[order]] - a)
        top = order[pos < n_words]
        for t, j in zip(row[top].tolist(), cols[top].tolist()):
            out[t] = vocab[j] if not out[t] else out[t] + ", " + vocab[j]
        t0 = t1
    return out


def topic_word_counts(word_labels: np.ndarray, P: sp.csr_matrix, n_topics: int) -> sp.csr_matrix:
    """Topic × word counts (how many of the topic's titles use the word): M @ P."""
    return (membership(word_labels, n_topics) @ P).tocsr()


def topic_labels(titles: list[str | None], labels: np.ndarray, n_words: int = 3) -> list[str]:
    """Top distinctive title words per topic (class-based TF-IDF), joined by ', '."""
    labels = np.asarray(labels, np.int64)
    n_topics = int(labels.max()) + 1
    P, vocab = title_words(titles)
    return label_words(topic_word_counts(labels, P, n_topics), vocab, n_words)


# ---------------------------------------------------------------- fields and interdisciplinarity

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


def _div_present(counts: np.ndarray, d: np.ndarray, n_categories: int) -> float:
    """DIV (docs/METHODS.md §5.4) from the present categories' counts and their disparity
    submatrix: variety n_c / N × balance (1 − Gini) × disparity (mean d_kl over ordered pairs k ≠ l)."""
    n_c = len(counts)
    if n_c == 0:
        return float("nan")
    if n_c == 1:
        return 0.0
    disparity = (d.sum() - np.trace(d)) / (n_c * (n_c - 1))
    return float(n_c / n_categories * (1 - _gini(counts)) * disparity)


def div(counts: np.ndarray, disparity: np.ndarray) -> float:
    """DIV ∈ [0, 1] of one topic: `counts` its papers per category (N = len(counts), the
    classification's categories), `disparity` the N × N d_kl (category_disparity)."""
    present = np.flatnonzero(np.asarray(counts) > 0)
    return _div_present(np.asarray(counts)[present], disparity[np.ix_(present, present)], len(counts))


def div_star(counts: np.ndarray, disparity: np.ndarray) -> float:
    """DIV* = N · DIV (the variant without variety's division by N) ∈ [0, N]."""
    return len(counts) * div(counts, disparity)


def _field_list(fl) -> list[str]:
    """A paper's `fields` cell as clean names: a list or array of names (a lone string is one
    name); None, and the NaN a reindex puts in for a paper without metadata, are no field."""
    if isinstance(fl, (str, bytes)):
        return [clean_text(fl)] if clean_text(fl) else []
    if not hasattr(fl, "__iter__"):
        return []
    return [c for c in clean_texts(fl) if c]


def field_matrix(fields: list) -> tuple[sp.csr_matrix, list[str]]:
    """Paper × category 0/1 matrix from `fields` cells held as Python objects (a pandas column of
    lists, arrays, strings or missing values; small inputs). The stage builds it from Arrow
    instead (FieldCollector), with the same result."""
    fields = [_field_list(fl) for fl in fields]
    cats = sorted({f for fl in fields for f in fl})
    col = {c: i for i, c in enumerate(cats)}
    rows, cols = [], []
    for r, fl in enumerate(fields):
        for c in set(fl):
            rows.append(r)
            cols.append(col[c])
    F = sp.csr_matrix((np.ones(len(rows), np.int32), (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
                      shape=(len(fields), len(cats)))
    return F, cats


class FieldCollector:
    """The paper × category 0/1 matrix from Arrow `list<string>` columns, batch by batch.

    `add(lists, rows)`: the batch's lists and the matrix row of each (-1 = skip); names are
    stripped, blank and null ones dropped (the rule of `field_matrix`); all by Arrow compute on
    the flattened values and their parent indices, no per-paper Python. `finish(n)` sorts the
    category names and returns (F, categories)."""

    def __init__(self):
        self.index: dict[str, int] = {}
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []

    def add(self, lists: pa.Array | pa.ChunkedArray, rows: np.ndarray | None = None) -> None:
        if isinstance(lists, pa.ChunkedArray):
            lists = lists.combine_chunks()
        if pa.types.is_null(lists.type) or len(lists) == 0:
            return
        parent = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = pc.utf8_trim_whitespace(pc.list_flatten(lists))
        ok = pc.and_(pc.is_valid(flat), pc.greater(pc.utf8_length(flat), 0)).fill_null(False)
        ok = ok.to_numpy(zero_copy_only=False)
        if rows is not None:
            target = np.asarray(rows, np.int64)[parent]
            ok &= target >= 0
        else:
            target = parent
        if not ok.any():
            return
        names = flat.filter(pa.array(ok))
        enc = pc.dictionary_encode(names)
        local = np.array([self.index.setdefault(v, len(self.index)) for v in enc.dictionary.to_pylist()], np.int64)
        self.rows.append(target[ok])
        self.cols.append(local[enc.indices.to_numpy(zero_copy_only=False)])

    def finish(self, n_rows: int) -> tuple[sp.csr_matrix, list[str]]:
        cats = sorted(self.index)
        rank = np.empty(len(cats), np.int64)
        rank[[self.index[c] for c in cats]] = np.arange(len(cats))
        rows = np.concatenate(self.rows) if self.rows else np.zeros(0, np.int64)
        cols = rank[np.concatenate(self.cols)] if self.cols else np.zeros(0, np.int64)
        self.rows, self.cols = [], []
        F = sp.csr_matrix((np.ones(len(rows), np.int32), (rows, cols)), shape=(n_rows, len(cats)))
        F.sum_duplicates()
        F.data[:] = 1                            # a paper naming a field twice counts once
        return F, cats


def infer_fields(edges_path, F: sp.csr_matrix, targets: np.ndarray, rounds: int = 2,
                 batch_size: int = 4_000_000) -> tuple[sp.csr_matrix, int]:
    """Fields for the `targets` rows that have none, from their kNN neighbours (both directions of
    the edges table): the field with the largest summed similarity over the neighbours that have
    fields (ties: the first category). A second round reaches papers whose neighbours had none
    either. Returns (F with the inferred entries, rows given a field)."""
    import pyarrow.parquet as pq

    from sciencemap.storage import table_files

    F = F.tocsr().astype(np.float64)
    n, C = F.shape
    has = np.diff(F.indptr) > 0
    total = 0
    for _ in range(rounds):
        need = np.asarray(targets, bool) & ~has
        if not need.any() or not has.any():
            break
        S = sp.csr_matrix((n, C))
        for f in table_files(edges_path):
            for b in pq.ParquetFile(f).iter_batches(batch_size=batch_size, columns=["src", "dst", "similarity"]):
                src, dst = b.column(0).to_numpy().astype(np.int64), b.column(1).to_numpy().astype(np.int64)
                sim = np.maximum(b.column(2).to_numpy().astype(np.float64), 0.0) + 1e-9
                for a, c in ((src, dst), (dst, src)):
                    ok = need[a] & has[c]
                    if ok.any():
                        S = S + sp.csr_matrix((sim[ok], (a[ok], c[ok])), shape=(n, n)) @ F
        best = _row_argmax_first(S)
        got = np.flatnonzero(need & (best >= 0))
        if not len(got):
            break
        F = (F + sp.csr_matrix((np.ones(len(got)), (got, best[got])), shape=(n, C))).tocsr()
        has[got] = True
        total += len(got)
    F.data[:] = 1
    return F.astype(np.int32), total


def field_matrix_arrow(lists: pa.Array | pa.ChunkedArray) -> tuple[sp.csr_matrix, list[str]]:
    """Paper × category 0/1 matrix of an Arrow list<string> column (row i = list i)."""
    fc = FieldCollector()
    fc.add(lists)
    return fc.finish(len(lists))


# ---------------------------------------------------------------- overlays

@dataclass
class PaperData:
    """Per-paper inputs of the overlays; row i of `fields`, `year`, `source` is paper i (the rows
    the labels refer to). `words` may have its own rows (the papers table's): `word_row` gives each
    one's paper (-1 = none); None = the same rows."""
    fields: sp.csr_matrix
    categories: list[str]
    year: np.ndarray              # float, NaN = no year
    source: np.ndarray            # int code into `sources`, -1 = no source ("unknown")
    sources: list[str]
    words: sp.csr_matrix
    vocab: np.ndarray
    word_row: np.ndarray | None = None
    columns: dict = field(default_factory=dict)   # name -> float per row: papers-table columns overlays read

    @classmethod
    def from_frame(cls, papers: pd.DataFrame, columns=()) -> "PaperData":
        """From a frame with title, year, fields and source (cells of any Python kind), plus the
        named `columns` as floats (NaN = none)."""
        F, cats = field_matrix(list(papers["fields"]))
        P, vocab = title_words(list(papers["title"]))
        src = pd.Series(papers["source"].to_numpy(), dtype=object)
        codes, uniques = pd.factorize(src.where(src.notna(), None))
        return cls(fields=F, categories=cats,
                   year=pd.to_numeric(papers["year"], errors="coerce").to_numpy(dtype=float),
                   source=np.asarray(codes, np.int64), sources=[str(u) for u in uniques], words=P, vocab=vocab,
                   columns={c: pd.to_numeric(papers[c], errors="coerce").to_numpy(dtype=float) for c in columns})


def _row_argmax_first(T: sp.csr_matrix) -> np.ndarray:
    """Per row of a non-negative sparse matrix: the first column holding the row's maximum
    (-1 for an empty row)."""
    T = T.tocsr()
    T.sum_duplicates()
    T.eliminate_zeros()
    T.sort_indices()
    out = np.full(T.shape[0], -1, np.int64)
    nnz = np.diff(T.indptr)
    rows_ne = np.flatnonzero(nnz)
    if not len(rows_ne):
        return out
    rmax = np.maximum.reduceat(T.data, T.indptr[:-1][rows_ne])
    row = np.repeat(np.arange(T.shape[0]), nnz)
    full_max = np.zeros(T.shape[0], T.data.dtype)
    full_max[rows_ne] = rmax
    hit = np.flatnonzero(T.data == full_max[row])
    r_hit, first = np.unique(row[hit], return_index=True)
    out[r_hit] = T.indices[hit[first]]
    return out
