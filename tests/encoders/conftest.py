"""What the encoder tests share: real PubMed records from the sample, a run with papers and
triplets tables written by hand, and one torch thread for tiny batches."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from sciencemap.contracts import FACETS, SCHEMAS, TRIPLETS_META_KEY
from sciencemap.layout import RunLayout
from sciencemap.storage import write_table_atomic
from sciencemap.text import split_sentences


@pytest.fixture(scope="module")
def one_thread():
    # Tiny batches gain nothing from intra-op threads, and on a loaded 2-core machine two
    # threads that wait for each other are several times slower than one.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def records(pubmed_records) -> list[dict]:
    """40 PubMed papers (id, title, abstract) from the embedded sample."""
    return pubmed_records(40)


@pytest.fixture(scope="session")
def make_triplet_run():
    """make(root, papers, triplets, meta=None) -> RunLayout with `papers` and `triplets` tables (no
    triplets table for triplets=None);
    triplets are (anchor, positive, negative, kind, split[, facet]) tuples, `meta` the importance stage's
    metadata stamped on the triplets table."""
    def make(root: Path, papers: list[dict], triplets: list[tuple] | None, meta: dict | None = None) -> RunLayout:
        layout = RunLayout(root)
        root.mkdir(parents=True, exist_ok=True)
        cols = {name: [r.get(name) for r in papers] for name in SCHEMAS["papers"].names}
        write_table_atomic(pa.table(cols, schema=SCHEMAS["papers"]), layout.table("papers"))
        if triplets is None:
            return layout
        names = SCHEMAS["triplets"].names
        tbl = pa.table({n: [r[i] if i < len(r) else None for r in triplets] for i, n in enumerate(names)},
                       schema=SCHEMAS["triplets"])
        if meta is not None:
            tbl = tbl.replace_schema_metadata({TRIPLETS_META_KEY: json.dumps(meta).encode()})
        write_table_atomic(tbl, layout.table("triplets"))
        return layout
    return make


@pytest.fixture(scope="session")
def cyclic_run(make_triplet_run):
    """cyclic(root, papers, anchors, train_anchors, hard_step, easy_step) -> RunLayout: anchor i has
    positive i+1 and two triplets, a hard negative i+hard_step and an easy one i+easy_step (indices
    modulo len(papers), as the importance stage writes two triplets sharing a positive); anchors
    below train_anchors are train, the rest val."""
    def build(root: Path, papers: list[dict], anchors: int, train_anchors: int, hard_step: int,
              easy_step: int) -> RunLayout:
        ids = [p["paper_id"] for p in papers]
        n = len(ids)
        rows = []
        for i in range(anchors):
            split = "train" if i < train_anchors else "val"
            rows += [(ids[i], ids[(i + 1) % n], ids[(i + hard_step) % n], "hard", split),
                     (ids[i], ids[(i + 1) % n], ids[(i + easy_step) % n], "easy", split)]
        return make_triplet_run(root, papers, rows)
    return build


@pytest.fixture(scope="session")
def steps_on_fixed_batch():
    """steps(enc, objective, batch, n=4, lr=1e-4) -> (loss before, loss after, gradients reached
    the weights): n real AdamW steps of `objective` on one micro-batch, losses in eval mode."""
    def run(enc, objective, batch, n: int = 4, lr: float = 1e-4):
        def eval_loss() -> float:
            enc.model.eval()
            with torch.inference_mode():
                return float(objective.batch_loss(enc, batch))

        before = eval_loss()
        opt = torch.optim.AdamW(enc.model.parameters(), lr=lr)
        enc.model.train()
        for _ in range(n):
            opt.zero_grad()
            objective.batch_loss(enc, batch).backward()
            opt.step()
        reached = any(q.grad is not None and q.grad.abs().sum() > 0 for q in enc.model.parameters())
        return before, eval_loss(), reached
    return run


@pytest.fixture(scope="session")
def objective_steps():
    """steps(enc, obj, batch, steps=4, follow_schedule=False) -> (loss before, loss after): the objective's loss
    on a fixed batch (eval mode) before and after `steps` AdamW steps of the encoder and the objective's
    trainable parts; follow_schedule: the loop's step (SIGReg's draws) and after_step (an EMA target) too."""
    def run(enc, obj, batch, steps: int = 4, follow_schedule: bool = False) -> tuple[float, float]:
        modules = [enc.model] + [p.module for p in obj.parts.values() if p.trainable]

        def loss() -> float:
            for m in modules:
                m.eval()
            with torch.inference_mode():
                return float(obj.batch_loss(enc, batch))

        before = loss()
        opt = torch.optim.AdamW([q for m in modules for q in m.parameters()], lr=1e-4)
        for m in modules:
            m.train()
        for k in range(steps):
            obj.step_now = k
            opt.zero_grad()
            obj.batch_loss(enc, batch).backward()
            opt.step()
            if follow_schedule:
                obj.after_step(enc, k + 1, steps)
        return before, loss()
    return run


class StepCrash(Exception):
    """What a crash_at hook raises: a kill in the middle of training."""


@pytest.fixture(scope="session")
def crash_at():
    """crash_at(k): an after_step hook of run_train that raises crash_at.error after step k."""
    def make(k):
        def hook(step):
            if step == k:
                raise StepCrash(step)
        return hook
    make.error = StepCrash
    return make


def position_facets(sentences: list[str]) -> list[str]:
    """A stand-in for the abstract splitter's labels: first third background, then method, then result."""
    n = len(sentences)
    return [FACETS[min(2, 3 * i // max(n, 1))] for i in range(n)]


@pytest.fixture(scope="module")
def facet_run(make_triplet_run, records):
    """facet_run(root) -> RunLayout: 12 papers, facet triplets (9 train, a facet each in turn; 2 val),
    one seed triplet, and abstract_facets (split_sentences, position_facets)."""
    papers = records[:12]

    def build(root: Path):
        ids = [p["paper_id"] for p in papers]
        trip = [(ids[i], ids[i + 1], ids[i + 2], "hard" if i % 2 else "easy", "train", FACETS[i % 3]) for i in range(9)]
        trip += [(ids[9], ids[10], ids[11], "hard", "val", "method"), (ids[10], ids[11], ids[0], "easy", "val", "result")]
        trip += [(ids[0], ids[3], ids[5], "hard", "train", None)]   # a seed triplet: no facet objective's
        layout = make_triplet_run(root, papers, trip, {"margin": 1.0})
        sents = [split_sentences([p["abstract"]]) for p in papers]
        write_table_atomic(pa.table({"paper_id": ids, "sentences": sents, "facets": [position_facets(s) for s in sents]},
                                    schema=SCHEMAS["abstract_facets"]), layout.table("abstract_facets"))
        return layout
    build.records = papers
    build.position_facets = position_facets
    return build
