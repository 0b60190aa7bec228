"""UniFAR (encoders.objectives.unifar): facet anchors and attention over sentences or tokens, facet
InfoNCE and the KL term, main vector = the unit facet vectors concatenated. Real MiniLM forward and
backward on real PubMed texts (max_length 64)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from encoders.config import EmbedConfig, TrainConfig
from encoders.model import load_encoder, pad_rows
from encoders.objectives.registry import get_objective
from encoders.objectives.unifar import MIN_SENTENCES, UnifarObjective, segments, unifar_text
from encoders.training.export import load_parts
from encoders.training.loop import read_log, run_train
from sciencemap.contracts import FACETS
from sciencemap.text import split_sentences

pytestmark = pytest.mark.usefixtures("one_thread")
L = 64


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"objective": "unifar", "max_steps": 4, "batch_size": 2, "grad_accum": 2, "max_length": L,
                          "lr": 1e-4, "log_every": 1, "checkpoint_every": 2, "device": "cpu", **kw})


@pytest.fixture(scope="module")
def enc():
    return load_encoder("minilm", "mean", max_length=256, device="cpu")


def test_sep_spans_are_the_abstracts_sentences(enc, records):
    p = next(r for r in records if len(split_sentences([r["abstract"]])) >= 4
             and len(enc.token_ids([unifar_text(r["title"], r["abstract"], enc.sep)])[0]) < enc.max_length)
    sents = split_sentences([p["abstract"]])
    ids, mask = pad_rows(enc.token_ids([unifar_text(p["title"], p["abstract"], enc.sep)]), 0)
    seg, n_sent = segments(ids, mask, enc.tokenizer.sep_token_id, enc.tokenizer.cls_token_id)
    ids = ids[0].tolist()
    spans = [[t for t, s in zip(ids, seg[0].tolist()) if s == i] for i in range(int(n_sent[0]) + 1)]
    assert spans[0] == enc.tokenizer(p["title"], add_special_tokens=False)["input_ids"]
    assert int(n_sent[0]) == len(sents)
    assert [enc.tokenizer(s, add_special_tokens=False)["input_ids"] for s in sents] == spans[1:]


def test_token_attention_below_three_sentences(enc, records):
    torch.manual_seed(0)
    obj = UnifarObjective(TrainConfig(objective="unifar"))
    obj.set_up(enc)
    long_p = next(r for r in records if len(split_sentences([r["abstract"]])) >= 5)
    texts = [unifar_text(long_p["title"], long_p["abstract"], enc.sep),
             unifar_text(records[1]["title"], "One finding. Another finding.", enc.sep)]
    ids, mask = pad_rows(enc.token_ids(texts), enc.tokenizer.pad_token_id)
    with torch.no_grad():
        E, attn, n_sent = obj.facet_vectors(enc, ids, mask, training=False)
        assert n_sent.tolist()[1] == 2 < MIN_SENTENCES <= n_sent.tolist()[0]
        rows, w = attn
        assert rows.tolist() == [0] and w.shape == (1, len(FACETS), int(n_sent[0]))
        assert torch.allclose(w.sum(-1), torch.ones(1, len(FACETS)), atol=1e-5)
        # the short paper's facet vectors: its queries attending over its own tokens, by hand
        hidden = enc.model(input_ids=ids, attention_mask=mask).last_hidden_state
        agg, anchors = obj.parts["aggregator"].module, obj.parts["anchors"].module()
        title_tok = (segments(ids, mask, enc.tokenizer.sep_token_id, enc.tokenizer.cls_token_id)[0][1] == 0)
        title = hidden[1][title_tok].mean(0, keepdim=True)
        q = agg.norm(anchors[None] + agg.mlp(torch.cat([anchors[None], title[:, None].expand(-1, 3, -1)], -1)))
        want, _ = agg.attn(q, hidden[1:2], hidden[1:2], key_padding_mask=~mask[1:2].bool())
        assert torch.allclose(E[1], want[0], atol=1e-5)


def test_main_vector_cosine_is_the_mean_facet_cosine():
    obj = UnifarObjective(TrainConfig(objective="unifar"))
    views = {"facets": torch.randn(4, 3, 8)}
    X = obj.main_vector(None, views)
    U = torch.nn.functional.normalize(views["facets"], dim=-1)
    assert torch.allclose(X.norm(dim=-1), torch.ones(4), atol=1e-6)
    for i, j in ((0, 1), (2, 3)):
        assert float(X[i] @ X[j]) == pytest.approx(float((U[i] * U[j]).sum(-1).mean()), abs=1e-6)


def test_steps_lower_its_loss_and_the_kl_term_counts(tmp_path, facet_run, objective_steps):
    layout = facet_run(tmp_path / "r")
    torch.manual_seed(0)
    enc = load_encoder("minilm", "mean", max_length=256, device="cpu")   # long enough for >= 3 sentences
    obj = get_objective("unifar")(_cfg(max_length=256))
    obj.set_up(enc)
    data = obj.open_data(obj.prepare_data(layout, enc)[0])
    batch = obj.collate(data, enc.tokenizer.pad_token_id, 0)(list(range(9)))
    assert sorted(set(batch.facets)) == [0, 1, 2] and len(batch.sentence_facets) == 27
    with torch.no_grad():
        _, attn, _ = obj.facet_vectors(enc, *batch.inputs(enc.device).values(), training=False)
    assert attn is not None and len(attn[0]) > 0   # papers read by their sentences
    no_kl = UnifarObjective(_cfg(unifar_kl=False, max_length=256))
    no_kl._parts, no_kl._running = obj._parts, {}
    with torch.no_grad():
        assert float(obj.batch_loss(enc, batch)) > float(no_kl.batch_loss(enc, batch))

    before, after = objective_steps(enc, obj, batch)
    assert after < before


def test_a_killed_run_resumes_bit_identically_and_embed_reproduces_it(tmp_path, facet_run, crash_at):
    from safetensors.torch import load_file

    from encoders.embed import run_embed
    from sciencemap.embeddings import load_embeddings, load_view, read_manifest

    ref = facet_run(tmp_path / "ref")
    s = run_train(_cfg(), ref)
    assert s["val_after"]["n"] == 2
    card = json_card(ref)
    assert card["objective"]["parts"]["aggregator"]["lr"] == 5e-5 and card["objective"]["parts"]["anchors"]["lr"] == 1e-4
    lay = facet_run(tmp_path / "crash")
    with pytest.raises(crash_at.error):
        run_train(_cfg(), lay, after_step=crash_at(3))
    assert run_train(_cfg(), lay)["resumed_from_step"] == 2
    assert [r["loss"] for r in read_log(lay.train_log) if r["kind"] == "train"] == \
        [r["loss"] for r in read_log(ref.train_log) if r["kind"] == "train"]
    for name in ("model.safetensors", "objective_parts.safetensors"):
        a, b = load_file(str(ref.model_dir / name)), load_file(str(lay.model_dir / name))
        assert [k for k in a if not torch.equal(a[k], b[k])] == []

    # export -> embed: the facet view is the exported encoder + parts on title [SEP] sentences
    run_embed(EmbedConfig(device="cpu", shard_size=5, precision="float32"), ref)
    ids, X = load_embeddings(ref)
    _, keys, V = load_view(ref, "facets")
    V = V.reshape(len(ids), 3, -1)
    assert X.shape[1] == 3 * V.shape[2] and read_manifest(ref.embeddings_dir)["dim"] == X.shape[1]
    enc = load_encoder(str(ref.model_dir), "mean", max_length=L, device="cpu")
    obj = UnifarObjective(_cfg())
    obj.set_up(enc)
    load_parts(ref.model_dir, {n: p.module for n, p in obj.parts.items()})
    papers = {r["paper_id"]: r for r in facet_run.records}
    ids_tok = enc.token_ids([unifar_text(papers[i]["title"], papers[i]["abstract"], enc.sep) for i in ids])
    t, m = pad_rows(ids_tok, enc.tokenizer.pad_token_id)
    with torch.no_grad():
        mine = obj.facet_vectors(enc, t, m, training=False)[0].numpy()
    np.testing.assert_allclose(V, mine, atol=1e-4)
    U = mine / np.linalg.norm(mine, axis=2, keepdims=True)
    np.testing.assert_allclose(X, U.reshape(len(ids), -1) / np.sqrt(3), atol=1e-5)


def json_card(layout) -> dict:
    import json

    from sciencemap.contracts import MODEL_CARD
    return json.loads((layout.model_dir / MODEL_CARD).read_text())


def test_copy_of_parts_is_not_shared():
    # build() gives each run its own modules (a deep copy would share nothing either way)
    enc = copy.copy(load_encoder("minilm", "mean", max_length=32, device="cpu"))
    a, b = UnifarObjective(TrainConfig()).build(enc), UnifarObjective(TrainConfig()).build(enc)
    assert a["anchors"].module.vectors is not b["anchors"].module.vectors


def _questions(path, papers, extra=()):
    """Questions made of the first sentence of six papers' abstracts (two questions for paper 0), plus
    `extra` (question_id, question, paper_id) rows."""
    import pyarrow as pa

    from sciencemap.contracts import SCHEMAS
    from sciencemap.storage import write_table_atomic

    rows = [(f"q{i}", split_sentences([p["abstract"]])[0], p["paper_id"]) for i, p in enumerate(papers[:6])]
    rows += [("q0b", "What does " + papers[0]["title"] + " show?", papers[0]["paper_id"]), *extra]
    write_table_atomic(pa.table(dict(zip(SCHEMAS["questions"].names, map(list, zip(*rows)))), schema=SCHEMAS["questions"]),
                       path)
    return rows


def test_question_document_loss_rows_join_training_and_lower_their_loss(tmp_path, facet_run, objective_steps):
    from encoders.training.facet_table import QUESTION_ITEM

    layout = facet_run(tmp_path / "r")
    qpath = tmp_path / "questions"
    rows = _questions(qpath, facet_run.records, extra=[("q_lost", "A paper we do not have?", "no-such-paper")])
    torch.manual_seed(0)
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    obj = get_objective("unifar")(_cfg(unifar_questions=str(qpath)))
    obj.set_up(enc)
    folder, _ = obj.prepare_data(layout, enc)
    meta = __import__("json").loads((folder / "meta.json").read_text())
    assert meta["counts"]["question_rows"] == len(rows) - 1 and meta["counts"]["question_rows_dropped_no_paper"] == 1
    data = obj.open_data(folder)
    facets = obj._facet_data.row_facets["train"]
    q_rows = [i for i, f in enumerate(facets) if f < 0]
    assert len(q_rows) == len(rows) - 1 and len(facets) == 9 + len(q_rows)   # 9 facet triplets + the questions
    batch = obj.collate(data, enc.tokenizer.pad_token_id, 0)(q_rows[:4] + [0, 1])
    item = data.store.items.column("item_id").to_pylist()
    assert all(item[a].startswith(QUESTION_ITEM) for a in batch.anchor_ids[:4]) and batch.facets[:4] == [-1] * 4
    assert item[batch.anchor_ids[0]] == QUESTION_ITEM + "q0" and item[batch.positive_ids[0]] == facet_run.records[0]["paper_id"]
    assert data.train["kind"][q_rows].tolist() == ["question"] * len(q_rows)

    off = UnifarObjective(_cfg(unifar_questions=str(qpath), unifar_qd_weight=0.0))
    off._parts, off._running = obj._parts, {}
    docs_only = obj.collate(data, enc.tokenizer.pad_token_id, 0)([0, 1])
    for m in [enc.model] + [p.module for p in obj.parts.values()]:
        m.eval()
    with torch.no_grad():
        # weight 0: only the facet rows' loss, scaled by their share of the micro-batch (2 of 6)
        assert float(off.batch_loss(enc, batch)) == pytest.approx(float(obj.batch_loss(enc, docs_only)) * 2 / 6, rel=1e-4)
        assert float(obj.batch_loss(enc, batch)) > float(off.batch_loss(enc, batch))

    only_q = obj.collate(data, enc.tokenizer.pad_token_id, 0)(q_rows)
    before, after = objective_steps(enc, obj, only_q)
    assert after < before


def test_question_rows_train_end_to_end_and_change_the_item_store(tmp_path, facet_run):
    layout = facet_run(tmp_path / "r")
    qpath = tmp_path / "questions"
    _questions(qpath, facet_run.records)
    run_train(_cfg(unifar_questions=str(qpath), max_steps=2, checkpoint_every=0), layout)
    losses = [r["loss"] for r in read_log(layout.train_log) if r["kind"] == "train"]
    assert len(losses) == 2 and all(np.isfinite(losses))
    stores = sorted(p.name for p in layout.train_tokens_dir.iterdir())
    run_train(_cfg(max_steps=2, checkpoint_every=0), facet_run(tmp_path / "plain"))
    assert len(stores) == 1 and stores != sorted(p.name for p in (tmp_path / "plain" / "train_tokens").iterdir())
    with pytest.raises(Exception, match="no Parquet table"):
        run_train(_cfg(unifar_questions=str(tmp_path / "nowhere"), max_steps=2), facet_run(tmp_path / "bad"))
