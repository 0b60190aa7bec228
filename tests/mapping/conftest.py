"""Small synthetic runs for the mapping tests: clustered unit vectors + a papers table.

The tests get the builders as fixtures (`make_run`, `clustered_vectors`): under pytest's importlib
import mode test folders are not importable modules."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sciencemap.contracts import SCHEMAS, embeddings_schema
from sciencemap.layout import RunLayout
from sciencemap.storage import write_table_atomic

WORDS = [["neuron", "cortex", "synapse"], ["protein", "folding", "chaperone"], ["parser", "treebank", "syntax"],
         ["tumour", "chemotherapy", "oncology"], ["bacteria", "antibiotic", "resistance"], ["galaxy", "stellar", "orbit"]]
SOURCES = ["elife", "pubmed", "scisummnet"]


def _clustered_vectors(n_clusters: int, per: int, dim: int, noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, dim))
    labels = np.repeat(np.arange(n_clusters), per)
    X = centres[labels] + noise * rng.normal(size=(len(labels), dim))
    return X.astype(np.float32), labels


def _write_embeddings(layout: RunLayout, ids, X, shards: int = 2) -> None:
    layout.embeddings_dir.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(ids)), shards)):
        vec = pa.FixedSizeListArray.from_arrays(pa.array(X[part].ravel(), pa.float32()), X.shape[1])
        t = pa.table({"paper_id": pa.array([ids[j] for j in part], pa.string()), "vector": vec},
                     schema=embeddings_schema(X.shape[1]))
        pq.write_table(t, layout.embeddings_dir / f"part-{i:05d}.parquet")


def _make_run(root, n_clusters=6, per=40, dim=32, noise=0.3, seed=0, evil_title=None) -> tuple[RunLayout, np.ndarray]:
    """A run dir with `papers` (titles from cluster-specific words, fields, years, MeSH on the
    pubmed ones) and embeddings. Returns (layout, true labels)."""
    layout = RunLayout(root)
    X, labels = _clustered_vectors(n_clusters, per, dim, noise, seed)
    n = len(labels)
    ids = [f"p:{i}" for i in range(n)]
    rng = np.random.default_rng(seed + 1)
    rows = []
    for i in range(n):
        c = labels[i]
        w = WORDS[c % len(WORDS)]
        title = f"{w[i % 3]} {w[(i + 1) % 3]} in model {i}"
        if evil_title and i == 0:
            title = evil_title
        src = SOURCES[i % 3]
        mesh = []
        if src == "pubmed":
            mesh = [{"ui": None, "name": f"Topic{c}", "major": True, "tree_numbers": [f"A{c:02d}.001"]},
                    {"ui": None, "name": f"Topic{c}child", "major": False, "tree_numbers": [f"A{c:02d}.001.{i % 2}"]},
                    {"ui": None, "name": "Humans", "major": False, "tree_numbers": ["B01.050"]}]
        rows.append({"paper_id": ids[i], "title": title, "abstract": None, "authors": [], "year": int(2000 + c + rng.integers(0, 3)),
                     "venue": None, "fields": [f"Field{c % 4}"] + ([f"Field{(c + 1) % 4}"] if i % 5 == 0 else []), "keywords": [],
                     "mesh": mesh, "source": src, "has_fulltext": True,
                     # every 7th paper is known only as a cited title (no record file of its own)
                     "source_file": None if i % 7 == 6 else f"{src}/{i}.xml"})
    write_table_atomic(pa.Table.from_pylist(rows, schema=SCHEMAS["papers"]), layout.table("papers"))
    _write_embeddings(layout, ids, X)
    return layout, labels



@pytest.fixture(scope="session")   # a pure builder: module-scoped runs may use it
def make_run():
    """make_run(root, n_clusters=6, per=40, dim=32, noise=0.3, seed=0, evil_title=None) -> (layout, labels)"""
    return _make_run


@pytest.fixture
def clustered_vectors():
    """clustered_vectors(n_clusters, per, dim, noise, seed=0) -> (X float32, true labels)"""
    return _clustered_vectors


def _generated_topics(n: int, seed: int = 0, words_per_title: tuple[int, int] = (6, 28)):
    """n map topics as the render stage hands them to the HTML map: a topics frame (cluster, size,
    label, x, y, main_field, mean_year, interdisciplinarity; some years and DIVs missing) and three
    example titles per topic, of pseudo-words drawn Zipf-like from a 4,000-word vocabulary."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = sorted({"".join(rng.choice(letters, rng.integers(3, 11))) for _ in range(4500)})[:4000]
    p = 1.0 / np.arange(1, len(vocab) + 1)
    p /= p.sum()
    fields = [f"Field {w}" for w in rng.choice(vocab, 40, replace=False)]
    fp = 1.0 / np.arange(1, 41)
    examples, labels = [], []
    for _ in range(n):
        ex = [" ".join(rng.choice(vocab, rng.integers(*words_per_title), p=p)).capitalize() for _ in range(3)]
        words = sorted({w for t in ex for w in t.lower().split()})
        labels.append(", ".join(rng.choice(words, 3, replace=False)))
        examples.append(ex)
    year = rng.normal(2008, 6, n)
    year[rng.random(n) < 0.02] = np.nan
    div = rng.beta(0.8, 5, n)
    div[rng.random(n) < 0.03] = np.nan
    topics = pd.DataFrame({"cluster": np.arange(n, dtype=np.int32),
                           "size": np.maximum(5, rng.lognormal(5, 1, n)).astype(np.int32), "label": labels,
                           "x": rng.normal(0, 5, n).astype(np.float32), "y": rng.normal(0, 5, n).astype(np.float32),
                           "main_field": rng.choice(fields, n, p=fp / fp.sum()), "mean_year": year.astype(np.float32),
                           "interdisciplinarity": div.astype(np.float32)})
    return topics, examples


@pytest.fixture
def generated_topics():
    """generated_topics(n, seed=0, words_per_title=(6, 28)) -> (topics DataFrame, examples: 3 titles per topic)"""
    return _generated_topics


@pytest.fixture(scope="session")
def real_vectors(pubmed_records) -> tuple[list[str], np.ndarray]:
    """(ids, vectors) of real papers: the shipped MiniLM's mean-pooled vectors (max_length 64) of the
    800 PubMed titles and abstracts of the sample's train file. Real embeddings are harder for approximate search
    than generated clusters: the kNN tuning is tested on these."""
    from encoders.embed.forward import embed_texts
    from encoders.model import load_encoder, paper_text

    papers = pubmed_records(800)
    enc = load_encoder("minilm", "mean", max_length=64, device="cpu")
    X = embed_texts(enc, [paper_text(p["title"], p["abstract"]) for p in papers], precision="float32")
    return [p["paper_id"] for p in papers], X


@pytest.fixture
def real_vector_run(tmp_path, real_vectors) -> RunLayout:
    """A run whose embeddings are real_vectors (no papers table: the knn stage reads only embeddings)."""
    layout = RunLayout(tmp_path / "real")
    _write_embeddings(layout, *real_vectors)
    return layout
