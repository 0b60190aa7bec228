"""The item store objectives train on (encoders.training.item_store): texts tokenized once by item
id, rows beside them, one cache folder per kind and inputs. Real MiniLM tokenizer."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from encoders.model import load_encoder, token_ids
from encoders.training.item_store import ITEMS, ROWS, open_store, prepare, write_items, write_rows


@pytest.fixture(scope="module")
def tokenizer():
    return load_encoder("minilm", "mean", max_length=16, device="cpu").tokenizer


def _builder(tokenizer, texts):
    def build(tmp):
        row_of = write_items(tmp / ITEMS, texts, tokenizer, 16)
        write_rows(tmp / ROWS, pa.table({"a": pa.array([row_of["s1"], row_of["p1"]], pa.int32())}))
        return {"items": len(row_of)}
    return build


def test_items_are_tokenized_once_by_id_and_cached_per_kind(tmp_path, tokenizer):
    texts = [("p1", "Ribosome profiling of yeast"), ("s1", "Methods. We grew cells."), ("p1", "a second text"),
             ("empty", None), ("s2", "Results follow.")]
    folder, built = prepare(tmp_path, "chunks", {"v": 1}, _builder(tokenizer, texts))
    assert built and folder.name.startswith("chunks-")
    store = open_store(folder)
    assert store.ids(np.arange(3)) == ["p1", "s1", "s2"]           # first text of an id wins; no text, no item
    assert store.tokens(np.array([1])) == token_ids(tokenizer, ["Methods. We grew cells."], 16)
    assert store.lengths().tolist() == [len(t) for t in store.tokens(np.arange(3))]
    assert store.rows.column("a").to_pylist() == [1, 0] and store.meta == {"inputs": {"v": 1}, "items": 3}

    assert prepare(tmp_path, "chunks", {"v": 1}, _builder(tokenizer, texts)) == (folder, False)   # reused
    other, built = prepare(tmp_path, "triplets", {"v": 1}, _builder(tokenizer, texts))
    assert built and other != folder and folder.is_dir()            # another kind keeps its own cache
    newer, built = prepare(tmp_path, "chunks", {"v": 2}, _builder(tokenizer, texts))
    assert built and not folder.exists() and other.is_dir()         # the same kind keeps only the newest


def test_a_failed_build_leaves_no_folder(tmp_path, tokenizer):
    def broken(tmp):
        write_items(tmp / ITEMS, [("a", "text")], tokenizer, 16)
        raise RuntimeError("killed")
    with pytest.raises(RuntimeError):
        prepare(tmp_path, "chunks", {"v": 1}, broken)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("chunks-")]
