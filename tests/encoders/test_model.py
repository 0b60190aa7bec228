"""encoders.model: loading, text and pooling, with real MiniLM forward passes on tiny inputs (max_length 32)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from encoders.model import load_encoder, paper_text, resolve_model

from sciencemap.contracts import SCHEMAS

from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import write_table_atomic

REPO = Path(__file__).resolve().parents[2]
PUBMED = REPO / "sample" / "pubmed" / "train-data-small.csv.gz"


@pytest.fixture(scope="session")
def pubmed_records() -> list[dict]:
    df = pd.read_csv(PUBMED, usecols=["Title", "abstractText", "pmid"], nrows=40)
    return [{"paper_id": f"pmid:{r.pmid}", "title": r.Title, "abstract": r.abstractText}
            for r in df.itertuples()]


def write_papers(layout: RunLayout, rows: list[dict]) -> None:
    cols = {name: [r.get(name) for r in rows] for name in SCHEMAS["papers"].names}
    write_table_atomic(pa.table(cols, schema=SCHEMAS["papers"]), layout.table("papers"))


def write_triplets(layout: RunLayout, rows: list[tuple]) -> None:
    names = SCHEMAS["triplets"].names
    cols = {n: [r[i] for r in rows] for i, n in enumerate(names)}
    write_table_atomic(pa.table(cols, schema=SCHEMAS["triplets"]), layout.table("triplets"))


@pytest.fixture
def make_run(tmp_path):
    def make(name: str, papers: list[dict], triplets: list[tuple] | None = None) -> RunLayout:
        layout = RunLayout(tmp_path / name)
        layout.root.mkdir(parents=True)
        write_papers(layout, papers)
        if triplets is not None:
            write_triplets(layout, triplets)
        return layout
    return make


L = 32


@pytest.fixture(scope="module")
def encoder():
    return load_encoder("minilm", "mean", max_length=L, device="cpu")


def test_resolve_model_default_and_missing(tmp_path):
    assert (resolve_model("minilm") / "model.safetensors").is_file()
    with pytest.raises(UserError, match="does not exist"):
        resolve_model(tmp_path / "nope")
    with pytest.raises(UserError, match="config.json"):
        resolve_model(tmp_path)


def test_paper_text_is_none_safe():
    assert paper_text("T", "A", "[SEP]") == "T [SEP] A"
    assert paper_text(None, "A") == "A"
    assert paper_text("T", None) == "T"
    assert paper_text(None, "  ") == ""


def test_mean_pooling_ignores_padding(encoder):
    short = "Plakophilin-2 in adherens junctions"
    long = "A much longer text about desmosomes, cadherins and catenins in epithelial cells " * 3
    alone = encoder.encode([short])
    padded = encoder.encode([short, long])
    batch = encoder.tokenize([short, long])
    assert batch["attention_mask"][0].sum() < batch["attention_mask"].shape[1]  # really padded
    np.testing.assert_allclose(alone[0], padded[0], atol=1e-5)
    # The [CLS] pooling differs from the mean: the option is really switched.
    assert not np.allclose(pool_cls(encoder, short), alone[0], atol=1e-3)


def pool_cls(encoder, text):
    encoder.pooling = "cls"
    try:
        return encoder.encode([text])[0]
    finally:
        encoder.pooling = "mean"


# Embedding tests live in tests/encoders/test_embed.py.

# Training tests live in tests/encoders/test_train.py.
