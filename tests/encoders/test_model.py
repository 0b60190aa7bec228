"""encoders.model: loading, text and pooling, with real MiniLM forward passes on tiny inputs (max_length 32)."""
from __future__ import annotations

import numpy as np
import pytest

from encoders.model import load_encoder, paper_text, resolve_model
from sciencemap.runtime import UserError


@pytest.fixture
def make_run(tmp_path, make_triplet_run):
    return lambda name, papers, triplets=None: make_triplet_run(tmp_path / name, papers, triplets)


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
