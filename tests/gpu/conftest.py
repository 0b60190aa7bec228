"""Tests that need a CUDA device: the embed and train jobs and the kNN stage on the GPU, each
compared with the same job on the CPU (`make test-gpu`; `make test` runs them too where there is a
GPU). On a machine without CUDA every test here is skipped, with the reason.

Inputs: real PubMed papers from the sample (titles + abstracts) and triplets chained over them;
the model is the shipped MiniLM with dropout off (training on both devices then sees the same
arithmetic, so losses can be compared), or, where the package is installed without its weights,
the same architecture and tokenizer with seeded random weights.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.storage import write_table_atomic

NO_CUDA = ("no CUDA device here (torch.cuda.is_available() is False): tests/gpu check the GPU paths "
           "against the CPU on a machine with one (make test-gpu)")


@pytest.fixture(autouse=True)
def cuda():
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)


@pytest.fixture(scope="session")
def gpu_model(tmp_path_factory) -> Path:
    """A local model directory: MiniLM (6 layers, 384-d) with dropout 0."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from encoders.model import resolve_model, weight_files
    from sciencemap.runtime import UserError

    src = resolve_model("minilm")
    conf = AutoConfig.from_pretrained(src, local_files_only=True)
    conf.hidden_dropout_prob = conf.attention_probs_dropout_prob = 0.0
    try:
        weight_files(src)
        model = AutoModel.from_pretrained(src, config=conf, local_files_only=True)
    except UserError:   # the package without its weights (a GPU machine's carried copy)
        torch.manual_seed(0)
        model = AutoModel.from_config(conf)
    dest = tmp_path_factory.mktemp("model") / "minilm-nodropout"
    model.save_pretrained(dest)
    AutoTokenizer.from_pretrained(src, local_files_only=True).save_pretrained(dest)
    return dest


@pytest.fixture(scope="session")
def sample_papers(pubmed_records) -> list[dict]:
    """300 real PubMed papers (id, title, abstract) from the embedded sample."""
    return pubmed_records(300)


@pytest.fixture(scope="session")
def make_gpu_run(sample_papers):
    """make(root, triplets=False) -> RunLayout with the papers table (and chained triplets: anchor i,
    positive i+1, negative i+7; the last 16 anchors are val)."""
    def make(root: Path, triplets: bool = False) -> RunLayout:
        layout = RunLayout(root)
        root.mkdir(parents=True, exist_ok=True)
        cols = {name: [p.get(name) for p in sample_papers] for name in SCHEMAS["papers"].names}
        write_table_atomic(pa.table(cols, schema=SCHEMAS["papers"]), layout.table("papers"))
        if triplets:
            ids = [p["paper_id"] for p in sample_papers]
            n = len(ids)
            rows = [(ids[i], ids[(i + 1) % n], ids[(i + 7) % n], "hard", "train" if i < n - 16 else "val")
                    for i in range(n)]
            names = SCHEMAS["triplets"].names
            tbl = pa.table({c: [r[j] if j < len(r) else None for r in rows] for j, c in enumerate(names)},
                           schema=SCHEMAS["triplets"])
            write_table_atomic(tbl, layout.table("triplets"))
        return layout
    return make


@pytest.fixture(scope="session")
def row_cosines():
    """cos(a_i - mean(a), b_i - mean(b)) per row. Centred: mean-pooled vectors share a large common
    direction (with random weights nearly all of it), and raw cosines near 1 would hide a wrong
    vector for a paper; centred, a swapped or damaged row stands out."""
    def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = a - a.mean(0), b - b.mean(0)
        return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return cos
