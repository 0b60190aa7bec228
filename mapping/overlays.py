"""Map overlays, one declaration each: what a topic's value is (computed from its papers), the
topics-table column and type, and how the maps show it (PNG legend or colour bar, palette, number
formats, HTML switch label). The topics and areas tables, the overlay PNGs (mapping.render), the
HTML map's switch, hover and table (mapping.html_map) and placement (which redraws the map) read
OVERLAYS and nothing else; adding an overlay is one `Overlay` in that list (METHODS.md §5.3).

An overlay's `per_topic(groups)` returns one value per topic from `TopicGroups`: the papers' data
(mapping.topics.PaperData; `columns` holds any papers-table column an overlay names in
`paper_column`, read per vector row by mapping.io.load_row_meta), their topic labels and the
topic × paper membership. Values are floats (NaN = none) for a "value" overlay, drawn through a
palette with a colour bar; strings (None = none) for a "category" overlay, drawn with a legend of
the most common categories (the HTML map holds one category overlay: the first).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import scipy.sparse as sp

from mapping.topics import (PaperData, _div_present, _row_argmax_first, category_disparity, label_words, membership,
                            topic_word_counts)


@dataclass
class TopicGroups:
    """The papers of one clustering as an overlay sees them: row i of `data` has topic labels[i]
    (-1 = in no topic); `shared` caches what several overlays compute (the topic × field counts)."""
    data: PaperData
    labels: np.ndarray
    n_topics: int
    shared: dict = field(default_factory=dict)

    def __post_init__(self):
        self.labels = np.asarray(self.labels)
        self.keep = self.labels >= 0
        self.M = membership(self.labels, self.n_topics)

    def mean(self, values: np.ndarray) -> np.ndarray:
        """Per topic, the mean of a per-paper float over its papers that have one (NaN = none)."""
        v = np.asarray(values, np.float64)
        has = self.keep & ~np.isnan(v)
        lab = self.labels[has].astype(np.int64)
        total = np.bincount(lab, weights=v[has], minlength=self.n_topics)
        count = np.bincount(lab, minlength=self.n_topics)
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)

    def field_counts(self) -> tuple[sp.csr_matrix, np.ndarray]:
        """(topic × field paper counts, field disparity over the topics' papers), computed once."""
        if "fields" not in self.shared:
            F = self.data.fields
            Fk = F if self.keep.all() else F[np.flatnonzero(self.keep)]
            if Fk.nnz > 0:
                TC = (self.M @ F).tocsr()
                TC.sum_duplicates()
                TC.eliminate_zeros()
                TC.sort_indices()
                self.shared["fields"] = (TC, category_disparity(Fk))
            else:
                self.shared["fields"] = (sp.csr_matrix((self.n_topics, F.shape[1]), dtype=np.int32), None)
        return self.shared["fields"]


@dataclass(frozen=True)
class Overlay:
    name: str                                   # map_<name>.png, the HTML switch's value
    column: str                                 # the topics and areas tables' column
    type: pa.DataType                           # its Arrow type
    per_topic: Callable[[TopicGroups], np.ndarray | list]
    title: str                                  # the PNG's legend or colour-bar heading
    label: str                                  # the HTML switch, hover and table heading
    kind: str = "value"                         # "value" (colour bar) or "category" (legend)
    palette: str = "viridis"                    # a matplotlib colour map (value overlays)
    bar_digits: int = 3                         # decimals on the PNG colour bar
    digits: int = 3                             # decimals in the HTML hover and table
    paper_column: str | None = None             # a papers-table column the overlay reads per paper


def main_field(g: TopicGroups) -> list:
    """The most frequent `fields` value of the topic's papers (ties: the first category); None when
    none of its papers has a field (a source or an article type is not a subject)."""
    TC, _ = g.field_counts()
    return [g.data.categories[c] if c >= 0 else None for c in _row_argmax_first(TC).tolist()]


def mean_year(g: TopicGroups) -> np.ndarray:
    return g.mean(g.data.year)


def interdisciplinarity(g: TopicGroups) -> np.ndarray:
    """DIV over the fields of the topic's papers (METHODS.md §5.4); NaN when none has a field."""
    TC, disparity = g.field_counts()
    out = np.full(g.n_topics, np.nan)
    if disparity is None:
        return out
    ip, ix, dat = TC.indptr, TC.indices, TC.data
    for t in range(g.n_topics):
        a, b = ip[t], ip[t + 1]
        if b > a:
            present = ix[a:b]
            out[t] = _div_present(dat[a:b].astype(np.float64), disparity[np.ix_(present, present)],
                                  disparity.shape[0])
    return out


OVERLAYS: list[Overlay] = [
    Overlay("field", "main_field", pa.string(), main_field, "topic main field (papers)", "main field",
            kind="category"),
    Overlay("year", "mean_year", pa.float32(), mean_year, "topic mean publication year", "mean year",
            palette="viridis", bar_digits=0, digits=1),
    Overlay("interdisciplinarity", "interdisciplinarity", pa.float32(), interdisciplinarity,
            "topic interdisciplinarity DIV", "interdisciplinarity (DIV)", palette="plasma", bar_digits=3, digits=3),
]


def overlay_fields() -> list[pa.Field]:
    return [pa.field(ov.column, ov.type) for ov in OVERLAYS]


def topics_schema(base: pa.Schema) -> pa.Schema:
    """A table's contract (sciencemap.contracts: topics, areas) with one column per overlay."""
    return pa.schema(list(base) + overlay_fields())


def paper_columns() -> list[str]:
    """The papers-table columns the overlays read besides year and fields."""
    return [ov.paper_column for ov in OVERLAYS if ov.paper_column]


def overlays(data: PaperData, labels: np.ndarray, n_words: int = 3, n_topics: int | None = None,
             distinct_labels: bool = False) -> pd.DataFrame:
    """Per topic: cluster, size, label, then one column per overlay. `labels` (int, -1 = in no
    topic) aligns with the rows of `data`. distinct_labels: no two labels alike (the research
    areas' two-word labels; mapping.topics.pick_labels)."""
    labels = np.asarray(labels)
    keep = labels >= 0
    if n_topics is None:
        n_topics = int(labels[keep].max()) + 1 if keep.any() else 0
    g = TopicGroups(data, labels, n_topics)
    size = np.bincount(labels[keep].astype(np.int64), minlength=n_topics)
    if data.word_row is None:
        word_labels = labels
    else:
        wr = np.asarray(data.word_row)
        word_labels = np.full(len(wr), -1, np.int64)
        ok = wr >= 0
        word_labels[ok] = labels[wr[ok]]
    out = {"cluster": np.arange(n_topics, dtype=np.int32), "size": size.astype(np.int32),
           "label": label_words(topic_word_counts(word_labels, data.words, n_topics), data.vocab, n_words,
                                distinct=distinct_labels)}
    for ov in OVERLAYS:
        values = ov.per_topic(g)
        out[ov.column] = (np.asarray(values, np.float64).astype(ov.type.to_pandas_dtype())
                          if pa.types.is_floating(ov.type) else values)
    return pd.DataFrame(out)


def topic_overlays(papers: pd.DataFrame | PaperData, labels: np.ndarray, n_words: int = 3) -> pd.DataFrame:
    """`overlays` of a frame with columns title, year, fields, source (and any overlay's
    paper_column), rows aligned with `labels`; or of PaperData."""
    data = papers if isinstance(papers, PaperData) else PaperData.from_frame(papers, paper_columns())
    return overlays(data, labels, n_words)
