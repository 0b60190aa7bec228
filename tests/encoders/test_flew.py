"""FLeW (encoders.objectives.flew): three facet encoders on facet triplets and facet text, a weighted main
vector. Real MiniLM forward/backward on real PubMed texts (max_length 32)."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from encoders.config import EmbedConfig, TrainConfig
from encoders.model import load_encoder
from encoders.objectives.facet_batches import FacetCollate
from encoders.objectives.flew import FlewObjective, check_weights, item_id
from encoders.objectives.registry import get_objective
from encoders.training.export import load_parts
from encoders.training.loop import read_log, run_train
from sciencemap.contracts import FACETS, SCHEMAS
from sciencemap.runtime import UserError
from sciencemap.storage import write_table_atomic
from sciencemap.text import paper_text, split_sentences

pytestmark = pytest.mark.usefixtures("one_thread")
L = 32


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"objective": "flew", "max_steps": 4, "batch_size": 2, "grad_accum": 2, "max_length": L,
                          "lr": 1e-4, "log_every": 1, "checkpoint_every": 2, "device": "cpu", **kw})


def test_weights_are_refused_unless_positive_and_summing_to_one():
    assert check_weights([]) == pytest.approx([1 / 3] * 3)
    assert check_weights([0.5, 0.3, 0.2]) == [0.5, 0.3, 0.2]
    for bad in ([0.5, 0.5, 0.0], [0.6, 0.3, 0.2], [1.0], [-0.2, 0.6, 0.6], [0.5, 0.25, 0.25, 0.0]):
        with pytest.raises(UserError, match="positive numbers summing to 1"):
            check_weights(bad)


def test_facet_text_and_the_facet_items(tmp_path, facet_run):
    layout = facet_run(tmp_path / "r")
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    obj = get_objective("flew")(_cfg(margin=1.0))
    folder, built = obj.prepare_data(layout, enc)
    data = obj.open_data(folder)
    assert built and data.counts["train_triplets"] == 9 and data.counts["val_triplets"] == 2
    assert data.counts["train_by_facet"] == {"background": 3, "method": 3, "result": 3}
    ids = data.store.items.column("item_id").to_pylist()
    p0 = facet_run.records[1]
    # the method item of a paper holds the title and the abstract's method sentences, nothing else
    sents = split_sentences([p0["abstract"]])
    want = paper_text(p0["title"], " ".join(s for s, f in zip(sents, facet_run.position_facets(sents)) if f == "method"), enc.sep)
    row = ids.index(item_id("method", p0["paper_id"]))
    assert data.tokens(np.array([row]))[0] == enc.token_ids([want])[0]
    # each train row's facet is its anchor's
    batch = FacetCollate(data, enc.tokenizer.pad_token_id, obj._facet_data.row_facets["train"])(list(range(9)))
    assert batch.facets == [FACETS.index(ids[a].split(":", 1)[0]) for a in data.train["a"][:9]]


def test_steps_lower_its_loss_on_a_fixed_batch(tmp_path, facet_run):
    layout = facet_run(tmp_path / "r")
    torch.manual_seed(0)
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    obj = FlewObjective(_cfg(margin=1.0))
    obj.set_up(enc)
    data = obj.open_data(obj.prepare_data(layout, enc)[0])
    batch = obj.collate(data, enc.tokenizer.pad_token_id, 0)(list(range(9)))
    assert sorted(set(batch.facets)) == [0, 1, 2]

    def loss() -> float:
        enc.model.eval()
        for p in obj.parts.values():
            p.module.eval()
        with torch.inference_mode():
            return float(obj.batch_loss(enc, batch))

    before = loss()
    params = list(enc.model.parameters()) + [q for p in obj.parts.values() for q in p.module.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4)
    enc.model.train()
    for step in range(4):
        opt.zero_grad()
        obj.batch_loss(enc, batch).backward()
        if step == 0:   # every facet encoder got gradients from its own rows
            assert all(any(q.grad is not None and q.grad.abs().sum() > 0 for q in m.parameters())
                       for m in [enc.model] + [p.module for p in obj.parts.values()])
        opt.step()
    assert loss() < before


def test_a_killed_run_resumes_bit_identically(tmp_path, facet_run, crash_at):
    from safetensors.torch import load_file

    ref = facet_run(tmp_path / "ref")
    s = run_train(_cfg(), ref)
    assert s["val_after"]["n"] == 2 and {"accuracy_method", "accuracy_result"} <= set(s["val_after"])
    lay = facet_run(tmp_path / "crash")
    with pytest.raises(crash_at.error):
        run_train(_cfg(), lay, after_step=crash_at(3))
    summary = run_train(_cfg(), lay)
    assert summary["resumed_from_step"] == 2
    assert [r["loss"] for r in read_log(lay.train_log) if r["kind"] == "train"] == \
        [r["loss"] for r in read_log(ref.train_log) if r["kind"] == "train"]
    for name in ("model.safetensors", "objective_parts.safetensors"):
        a, b = load_file(str(ref.model_dir / name)), load_file(str(lay.model_dir / name))
        assert a.keys() == b.keys() and [k for k in a if not torch.equal(a[k], b[k])] == []
    parts = load_file(str(ref.model_dir / "objective_parts.safetensors"))
    assert {k.split(".")[0] for k in parts} == {"method", "result"}


def test_export_then_embed_reproduces_the_facet_encoders_and_the_weighted_sum(tmp_path, facet_run):
    from encoders.embed import run_embed
    from encoders.embed.forward import embed_texts
    from sciencemap.embeddings import load_embeddings, load_view, read_manifest

    layout = facet_run(tmp_path / "r")
    run_train(_cfg(max_steps=2, checkpoint_every=0), layout)
    with pytest.raises(UserError, match="summing to 1"):
        run_embed(EmbedConfig(device="cpu", precision="float32", facet_weights=[0.5, 0.5, 0.5]), layout)
    w = [0.5, 0.3, 0.2]
    run_embed(EmbedConfig(device="cpu", shard_size=5, precision="float32", facet_weights=w, restart=True), layout)
    ids, X = load_embeddings(layout)
    vids, keys, V = load_view(layout, "facets")
    V = V.reshape(len(ids), 3, -1)
    assert list(keys[:3]) == list(FACETS) and list(vids[::3]) == list(ids)
    np.testing.assert_allclose(X, np.einsum("f,nfd->nd", np.asarray(w, np.float32), V), atol=1e-5)
    assert read_manifest(layout.embeddings_dir)["vector"]["facet_weights"] == w

    enc = load_encoder(str(layout.model_dir), "mean", max_length=L, device="cpu")
    papers = {r["paper_id"]: r for r in facet_run.records}
    texts = [paper_text(papers[i]["title"], papers[i]["abstract"], enc.sep) for i in ids]
    np.testing.assert_allclose(V[:, 0], embed_texts(enc, texts, precision="float32"), atol=1e-4)
    parts = {f: copy.deepcopy(enc.model) for f in FACETS[1:]}
    load_parts(layout.model_dir, parts)
    for j, f in enumerate(FACETS[1:], 1):
        fenc = copy.copy(enc)
        fenc.model = parts[f].eval()
        np.testing.assert_allclose(V[:, j], embed_texts(fenc, texts, precision="float32"), atol=1e-4)
    # the facet encoders were trained apart: their vectors differ
    assert np.abs(V[:, 1] - V[:, 0]).max() > 1e-3

    # the weight search reads this view, the val anchors and what they cite
    from encoders.facets.weights import search_run, simplex

    refs = {"citing_id": [ids[9], ids[10], ids[10]], "cited_id": [ids[10], ids[11], ids[0]]}
    n = len(refs["citing_id"])
    write_table_atomic(pa.table({f.name: refs.get(f.name, [None] * n) for f in SCHEMAS["references"]},
                                schema=SCHEMAS["references"]), layout.table("references"))
    with pytest.raises(UserError, match="no val triplets"):   # the fixture's val triplets are facet triplets
        search_run(layout.root)
    res = search_run(layout.root, split="train")
    assert tuple(res["best"]["weights"]) in simplex(0.1) and len(res["grid"]) == 36
    assert res["anchors"] == 1 and (layout.root / "facet_weights.json").is_file()


def test_without_facet_triplets_or_facet_text_one_clear_error(tmp_path, make_triplet_run, records):
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    ids = [p["paper_id"] for p in records[:4]]
    layout = make_triplet_run(tmp_path / "seed", records[:4], [(ids[0], ids[1], ids[2], "hard", "train")])
    with pytest.raises(UserError, match="splitter-label"):
        FlewObjective(_cfg(margin=1.0)).prepare_data(layout, enc)
    write_table_atomic(pa.table({"paper_id": ids, "sentences": [[]] * 4, "facets": [[]] * 4},
                                schema=SCHEMAS["abstract_facets"]), layout.table("abstract_facets"))
    with pytest.raises(UserError, match="facet_signal"):
        FlewObjective(_cfg(margin=1.0)).prepare_data(layout, enc)
