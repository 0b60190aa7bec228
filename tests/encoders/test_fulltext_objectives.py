"""The full-text objectives (METHODS.md §8.9, §8.10): CoSAEmb (section chunks, graded margins), SciJEPa
(within-paper prediction, EMA target, SIGReg) and section_cl (InfoNCE on the same pairs). Real MiniLM
forward and backward passes on real PubMed texts; the sections table is written by hand from each
paper's abstract sentences (one section a class, the sentences rotated), so that every paper has
several sections of several chunks at max_length 48."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from encoders.config import EmbedConfig, TrainConfig
from encoders.fulltext.chunks import SPECIAL_TOKENS, abstract_text, add_special_tokens
from encoders.model import load_encoder
from encoders.objectives.cosaemb import graded_triplet_loss, row_levels
from encoders.objectives.registry import get_objective
from encoders.training.export import load_parts
from encoders.training.fulltext_table import LEVELS, is_chunk
from encoders.training.loop import read_log, run_train
from sciencemap.contracts import MODEL_CARD, SCHEMAS, SPLIT_TRAIN, SPLIT_VAL
from sciencemap.runtime import UserError
from sciencemap.storage import write_table_atomic
from sciencemap.text import paper_text, split_sentences

pytestmark = pytest.mark.usefixtures("one_thread")
L = 48
CLASSES = [("Introduction", "I"), ("Related work", "I"), ("Materials and methods", "M"), ("Results", "R"),
           ("Discussion", "D"), ("Acknowledgements", "O")]


def _cfg(objective: str, **kw) -> TrainConfig:
    return TrainConfig(**{"objective": objective, "max_steps": 4, "batch_size": 3, "grad_accum": 2, "max_length": L,
                          "log_every": 1, "checkpoint_every": 2, "device": "cpu", "val_max": 16, "lr": 1e-4,
                          "jepa_lr": 1e-4, **kw})


@pytest.fixture(scope="module")
def fulltext_run(make_triplet_run, records):
    """fulltext_run(root) -> RunLayout: 16 papers, seed triplets (anchors 0-11 train, 12-13 val), and a
    sections table: six sections a paper (I, I related work, M, R, D, O), each the abstract's sentences
    rotated by its place."""
    papers = [r for r in records if len(split_sentences([r["abstract"]])) >= 4][:16]
    ids = [p["paper_id"] for p in papers]

    def build(root: Path):
        n = len(ids)
        trip = []
        for i in range(14):
            split = SPLIT_TRAIN if i < 12 else SPLIT_VAL
            trip += [(ids[i], ids[(i + 1) % n], ids[(i + 3) % n], "hard", split),
                     (ids[i], ids[(i + 1) % n], ids[(i + 7) % n], "easy", split)]
        layout = make_triplet_run(root, papers, trip, {"margin": 1.0})
        rows = []
        for p in sorted(papers, key=lambda p: p["paper_id"]):     # the table's order (ingest writes it so)
            sents = split_sentences([p["abstract"]])
            for pos, (heading, cls) in enumerate(CLASSES):
                rows.append((p["paper_id"], pos, heading, cls, "heading", sents[pos % len(sents):] + sents[:pos % len(sents)]))
        write_table_atomic(pa.table(dict(zip(SCHEMAS["sections"].names, map(list, zip(*rows)))), schema=SCHEMAS["sections"]),
                           layout.table("sections"))
        return layout
    build.papers = papers
    build.held = set(ids[12:14])
    return build


@pytest.fixture(scope="module")
def base_enc():
    return load_encoder("minilm", "mean", max_length=L, device="cpu")


def _objective(name, enc, **kw):
    obj = get_objective(name)(_cfg(name, **kw))
    obj.set_up(enc)
    return obj


def _paper(item: str) -> str:
    """The paper of an item id: "c:<paper>:<section>:<k>" or "a:<paper>" (paper ids hold colons)."""
    return item[2:].rsplit(":", 2)[0] if is_chunk(item) else item[2:]


# ---------------------------------------------------------------- CoSAEmb

def test_cosaemb_rows_by_level_and_nothing_of_a_held_out_paper_is_trained(tmp_path, fulltext_run):
    layout = fulltext_run(tmp_path / "r")
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    obj = _objective("cosaemb", enc)
    data = obj.open_data(obj.prepare_data(layout, enc)[0])
    counts = data.counts
    assert counts["papers_with_sections"] == 16 and counts["held_out_papers"] == 2
    assert counts["sections_by_class"] == {"D": 16, "I": 32, "M": 16, "O": 16, "R": 16}
    assert set(counts["chunks_by_class"]) == {"I", "M", "R", "D"}       # class O is left out
    tok = data.tokens
    for split, d in (("train", data.train), ("val", data.val)):
        a, p, n = (data.paper_ids(d[c]) for c in ("a", "p", "n"))
        for ai, pi, ni, kind in zip(a, p, n, d["kind"]):
            level = LEVELS[row_levels([ai], [pi])[0]]
            assert level == (kind if kind in ("local", "global") else "inter")
            assert _paper(ni) != _paper(ai)
            if level == "local":     # chunk k -> chunk k+1 of the same section, another paper's chunk
                pa_, sa, ka = ai[2:].rsplit(":", 2)
                pp, sp, kp = pi[2:].rsplit(":", 2)
                assert (pa_, sa, int(ka) + 1) == (pp, sp, int(kp)) and is_chunk(ni)
            elif level == "global":  # a section's first chunk -> its own abstract, another's abstract
                assert ai.endswith(":0") and pi == "a:" + _paper(ai) and ni.startswith("a:")
            if split == "train" and level != "inter":
                assert not {_paper(ai), _paper(pi), _paper(ni)} & fulltext_run.held
            elif split == "train":   # a seed triplet: split by its anchor (its positive may be a held-out paper's abstract)
                assert _paper(ai) not in fulltext_run.held
            elif level != "inter":
                assert _paper(ai) in fulltext_run.held
    assert counts["rows_available"]["local"]["val"] > 0 and counts["rows_available"]["global"]["val"] == 2 * 5
    # every chunk within max_length, tags as single special tokens
    lengths = data.store.lengths()
    assert lengths.max() <= L
    met = enc.tokenizer.convert_tokens_to_ids("[MET]")
    items = data.paper_ids(np.arange(len(lengths)))
    row = next(r for r, i in enumerate(items) if i.endswith(":2:0"))     # a methods section's first chunk
    assert met in tok(np.asarray([row]))[0]


def test_cosaemb_shares_thin_the_train_rows(tmp_path, fulltext_run):
    layout = fulltext_run(tmp_path / "r")
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    every = json.loads((_objective("cosaemb", enc).prepare_data(layout, enc)[0] / "meta.json").read_text())
    obj = _objective("cosaemb", enc, cosaemb_shares=[1, 1, 2])   # another store (the older one is removed)
    data = obj.open_data(obj.prepare_data(layout, enc)[0])
    by = data.counts["train_by_level"]
    inter = data.counts["rows_available"]["inter"]["train"]
    assert by == {"inter": inter, "global": inter, "local": 2 * inter}
    assert every["counts"]["train_by_level"]["local"] > 2 * inter and every["counts"]["train_by_level"]["inter"] == inter
    with pytest.raises(UserError, match="cosaemb_shares"):
        get_objective("cosaemb").check(_cfg("cosaemb", cosaemb_shares=[1, 1]))
    with pytest.raises(UserError, match="cosaemb_margins"):
        get_objective("cosaemb").check(_cfg("cosaemb", cosaemb_margins=[1, -2, 3]))


def test_graded_margins_row_by_row_against_a_hand_computation():
    g = torch.Generator().manual_seed(0)
    a, p, n = (torch.randn(6, 5, generator=g) for _ in range(3))
    ids_a = ["a:x", "a:y", "c:x:1:0", "c:y:2:0", "c:x:1:0", "c:z:3:4"]
    ids_p = ["a:q", "a:r", "a:x", "a:y", "c:x:1:1", "c:z:3:5"]
    levels = row_levels(ids_a, ids_p)
    assert levels == [0, 0, 1, 1, 2, 2]
    obj = get_objective("cosaemb")(TrainConfig(objective="cosaemb"))
    from encoders.objectives.batches import TripletBatch
    batch = TripletBatch(ids_a, ids_p, ["a:w"] * 6, [""] * 6, [""] * 6, [""] * 6)
    hand = []
    for i in range(6):
        m = (1.0, 2.0, 3.0)[levels[i]]
        hand.append(max(0.0, float(((a[i] - p[i]) ** 2).sum()) - float(((a[i] - n[i]) ** 2).sum()) + m))
    assert float(obj.loss(a, p, n, batch)) == pytest.approx(np.mean(hand), rel=1e-6)
    equal = get_objective("cosaemb")(TrainConfig(objective="cosaemb", cosaemb_margins=[1, 1, 1]))
    hand_eq = [max(0.0, float(((a[i] - p[i]) ** 2).sum()) - float(((a[i] - n[i]) ** 2).sum()) + 1) for i in range(6)]
    assert float(equal.loss(a, p, n, batch)) == pytest.approx(np.mean(hand_eq), rel=1e-6)
    assert float(graded_triplet_loss(a, a, a + 100, torch.full((6,), 3.0))) == 0.0


def test_cosaemb_steps_lower_its_loss_on_a_fixed_batch(tmp_path, fulltext_run, objective_steps):
    layout = fulltext_run(tmp_path / "r")
    torch.manual_seed(0)
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    # margins large enough that every row of the batch counts (MiniLM's raw vectors are far apart)
    obj = _objective("cosaemb", enc, cosaemb_margins=[40, 60, 80])
    data = obj.open_data(obj.prepare_data(layout, enc)[0])
    kinds = list(data.train["kind"])
    rows = [kinds.index("local"), kinds.index("global"), kinds.index("hard"), kinds.index("easy")]
    batch = obj.collate(data, enc.tokenizer.pad_token_id, 0)(rows)
    assert batch.levels == [2, 1, 0, 0]
    before, after = objective_steps(enc, obj, batch, follow_schedule=True)
    assert after < before


def test_cosaemb_tokens_are_added_once_saved_and_read_by_embed_and_the_chunk_view(tmp_path, fulltext_run):
    from encoders.embed import run_embed
    from encoders.embed.chunks import chunks_dir
    from sciencemap.embeddings import load_embeddings
    from mapping.lookup import lookup_text

    layout = fulltext_run(tmp_path / "r")
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    vocab = len(enc.tokenizer)
    s = run_train(_cfg("cosaemb", checkpoint_every=0), layout, encoder=enc)
    assert s["steps"] == 4 and s["val_after"]["accuracy_local"] is not None
    assert len(enc.tokenizer) == vocab + len(SPECIAL_TOKENS)
    assert add_special_tokens(enc.tokenizer, enc.model) == 0           # a second time adds none
    saved = load_encoder(str(layout.model_dir), None, max_length=L, device="cpu")
    assert len(saved.tokenizer) == vocab + len(SPECIAL_TOKENS)
    assert saved.model.get_input_embeddings().num_embeddings == len(saved.tokenizer)
    assert saved.tokenizer.tokenize("[TTL] x [MET] y") == ["[TTL]", "x", "[MET]", "y"]
    card = json.loads((layout.model_dir / MODEL_CARD).read_text())
    assert card["objective"]["settings"] == {"cosaemb_margins": [1.0, 2.0, 3.0], "cosaemb_shares": []}

    # export -> embed: the main vector is the abstract view, read with the saved tags; the chunk view beside
    summary = run_embed(EmbedConfig(device="cpu", shard_size=7, precision="float32"), layout)
    assert summary["chunks"] > 16 * 4 and "chunks" in summary["views"]
    ids, X = load_embeddings(layout)
    papers = {p["paper_id"]: p for p in fulltext_run.papers}
    texts = [abstract_text(papers[i]["title"], papers[i]["abstract"], enc.sep) for i in ids]
    enc.model.eval()
    np.testing.assert_allclose(X, enc.encode_ids(enc.token_ids(texts)), atol=1e-4)
    import pyarrow.parquet as pq
    view = pa.concat_tables([pq.read_table(f) for f in sorted(chunks_dir(layout).glob("part-*.parquet"))]).to_pandas()
    assert set(view["section_class"]) == {"I", "M", "R", "D"} and view["paper_id"].nunique() == 16
    some = view.sample(5, random_state=0)
    np.testing.assert_allclose(np.stack(some["vector"]), enc.encode_ids(enc.token_ids(list(some["text"]))), atol=1e-4)
    # a rerun resumes (no shard embedded again); the look-up finds a chunk's own text first
    again = run_embed(EmbedConfig(device="cpu", shard_size=7, precision="float32"), layout)
    assert again["chunks_embedded_now"] == 0 and again["chunks"] == summary["chunks"]
    probe = view.iloc[11]
    res = lookup_text(layout, probe["text"], k=3, device="cpu")
    # the fixture's sections repeat sentences under other tags: the chunk is among the equal best, all of its paper
    keys = [(h["paper_id"], h["section_position"], h["chunk"]) for h in res["hits"]]
    assert (probe["paper_id"], probe["position"], probe["chunk"]) in keys
    assert {h["paper_id"] for h in res["hits"]} == {probe["paper_id"]} and res["chunks_searched"] == len(view)
    hit = res["hits"][0]
    assert hit["similarity"] == pytest.approx(1.0, abs=1e-4) and hit["title"] == papers[probe["paper_id"]]["title"]


def test_the_paragraph_lookup_needs_a_chunks_view(tmp_path, fulltext_run):
    from mapping.lookup import run_lookup

    layout = fulltext_run(tmp_path / "r")
    with pytest.raises(UserError, match="no chunks view"):
        run_lookup(["--run", str(layout.root), "--text", "spindle checkpoint"])


# ---------------------------------------------------------------- SciJEPa and section_cl

def test_pairs_by_rule_and_nothing_of_a_held_out_paper_is_trained(tmp_path, fulltext_run):
    layout = fulltext_run(tmp_path / "r")
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    obj = _objective("scijepa", enc)
    data = obj.open_data(obj.prepare_data(layout, enc)[0])
    c = data.counts
    assert c["tasks_by_rule"]["class"] == {"abstract_method": 16, "method_conclusion": 16}
    assert c["tasks_by_rule"]["position"] == {"abstract_method": 16, "method_conclusion": 16}
    assert c["train_by_task"] == {"abstract_method": 14, "method_conclusion": 14} and c["val_triplets"] == 4
    for d, held in ((data.train, False), (data.val, True)):
        for a, p in zip(data.paper_ids(d["a"]), data.paper_ids(d["p"])):
            assert (a[2:] in fulltext_run.held) == held and a[2:] == p[2:]
            assert (a[:2], p[:2]) in (("h:", "m:"), ("m:", "d:"))
    # the class rule's method is the M section, its conclusion the D one
    papers = {p["paper_id"]: p for p in fulltext_run.papers}
    pid = data.paper_ids(data.train["p"][:1])[0][2:]
    sents = split_sentences([papers[pid]["abstract"]])
    m = 2 % len(sents)
    assert data.tokens(data.train["p"][:1])[0] == enc.token_ids([" ".join(sents[m:] + sents[:m])])[0]


def test_scijepa_ema_target_takes_no_gradient_and_follows_the_formula(fulltext_run, tmp_path):
    layout = fulltext_run(tmp_path / "r")
    torch.manual_seed(0)
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    obj = _objective("scijepa", enc)
    data = obj.open_data(obj.prepare_data(layout, enc)[0])
    batch = obj.collate(data, enc.tokenizer.pad_token_id, 0)([0, 1, 2, 3])
    target = obj.parts["target"].module
    assert not any(q.requires_grad for q in target.parameters())
    # the predictor starts as the identity
    x = torch.randn(5, enc.dim)
    assert torch.equal(obj.parts["predictor"].module(x), x)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    params = [q for q in enc.model.parameters()] + list(obj.parts["predictor"].module.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    obj.batch_loss(enc, batch).backward()
    assert all(q.grad is None for q in target.parameters())
    opt.step()
    obj.after_step(enc, 1, 10)
    m = obj.decay(1, 10)
    assert obj.decay(0, 10) == pytest.approx(0.996) and obj.decay(10, 10) == pytest.approx(0.999)
    assert 0.996 < m < 0.999 and obj.decay(5, 10) == pytest.approx(0.9975)
    online = dict(enc.model.named_parameters())
    for name, t in target.named_parameters():
        torch.testing.assert_close(t, m * before[name] + (1 - m) * online[name].detach(), rtol=0, atol=1e-6)


def test_scijepa_and_section_cl_steps_lower_their_loss_and_sigreg_counts(fulltext_run, tmp_path, objective_steps):
    layout = fulltext_run(tmp_path / "r")
    for name in ("scijepa", "section_cl"):
        torch.manual_seed(0)
        enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
        obj = _objective(name, enc)
        data = obj.open_data(obj.prepare_data(layout, enc)[0])
        batch = obj.collate(data, enc.tokenizer.pad_token_id, 0)(list(range(6)))
        assert len(batch) == 6 and batch.input_ids.shape[0] == 12      # contexts and targets, no negative
        if name == "scijepa":
            no_reg = get_objective(name)(_cfg(name, jepa_lambda=0.0))
            no_reg._parts, no_reg._running = obj._parts, {}
            with torch.no_grad():
                enc.model.eval()
                assert float(obj.batch_loss(enc, batch)) > float(no_reg.batch_loss(enc, batch))
        before, after = objective_steps(enc, obj, batch, follow_schedule=True)
        assert after < before, name


def test_scijepa_resumes_exactly_after_a_kill_and_each_branch_embeds_as_trained(tmp_path, fulltext_run, crash_at):
    from safetensors.torch import load_file

    from encoders.embed import run_embed
    from sciencemap.embeddings import load_embeddings

    ref = fulltext_run(tmp_path / "ref")
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    s = run_train(_cfg("scijepa"), ref, encoder=enc)
    assert s["val_after"]["n"] == 4 and "geometry_uniformity" in s["val_after"]
    card = json.loads((ref.model_dir / MODEL_CARD).read_text())
    assert card["objective"]["parts"]["predictor"]["lr"] == 1e-4 and not card["objective"]["parts"]["target"]["trainable"]
    lay = fulltext_run(tmp_path / "crash")
    with pytest.raises(crash_at.error):
        run_train(_cfg("scijepa"), lay, after_step=crash_at(3))
    assert run_train(_cfg("scijepa"), lay)["resumed_from_step"] == 2
    assert [r["loss"] for r in read_log(lay.train_log) if r["kind"] == "train"] == \
        [r["loss"] for r in read_log(ref.train_log) if r["kind"] == "train"]
    for name in ("model.safetensors", "objective_parts.safetensors"):
        a, b = load_file(str(ref.model_dir / name)), load_file(str(lay.model_dir / name))
        assert [k for k in a if not torch.equal(a[k], b[k])] == []

    # export -> embed, each branch, against the trained online encoder (still in memory) and the exported parts
    obj = get_objective("scijepa")(_cfg("scijepa"))
    obj.set_up(enc)
    load_parts(ref.model_dir, {n: p.module for n, p in obj.parts.items()})
    papers = {p["paper_id"]: p for p in fulltext_run.papers}
    outs = {}
    for branch in ("online", "predictor", "target"):
        run_embed(EmbedConfig(device="cpu", shard_size=7, precision="float32", branch=branch, restart=True), ref)
        ids, X = load_embeddings(ref)
        tokens = enc.token_ids([paper_text(papers[i]["title"], papers[i]["abstract"], enc.sep) for i in ids])
        np.testing.assert_allclose(X, obj.branch_vectors(enc, tokens, branch), atol=1e-4)
        outs[branch] = X
    assert not np.allclose(outs["online"], outs["target"]) and not np.allclose(outs["online"], outs["predictor"])
    with pytest.raises(UserError, match="branch"):
        run_embed(EmbedConfig(model="minilm", device="cpu", branch="target"), fulltext_run(tmp_path / "plain"))


def test_fulltext_objectives_need_the_sections_table(tmp_path, make_triplet_run, records):
    layout = make_triplet_run(tmp_path / "r", records[:4], [(records[0]["paper_id"], records[1]["paper_id"],
                                                              records[2]["paper_id"], "hard", "train")])
    for name in ("cosaemb", "scijepa", "section_cl"):
        with pytest.raises(UserError, match="keep_sections"):
            run_train(_cfg(name), layout)


@pytest.mark.parametrize("objective", ["cosaemb", "section_cl"])
def test_a_killed_run_resumes_bit_identically(tmp_path, fulltext_run, crash_at, objective):
    """CoSAEmb resumes with its added tags (the resized embeddings are in the checkpoint), section_cl as any."""
    from safetensors.torch import load_file

    kw = {"cosaemb_margins": [40.0, 60.0, 80.0]} if objective == "cosaemb" else {}   # rows with a loss to follow
    ref = fulltext_run(tmp_path / "ref")
    run_train(_cfg(objective, **kw), ref)
    lay = fulltext_run(tmp_path / "crash")
    with pytest.raises(crash_at.error):
        run_train(_cfg(objective, **kw), lay, after_step=crash_at(3))
    assert run_train(_cfg(objective, **kw), lay)["resumed_from_step"] == 2
    losses = [r["loss"] for r in read_log(ref.train_log) if r["kind"] == "train"]
    assert [r["loss"] for r in read_log(lay.train_log) if r["kind"] == "train"] == losses and max(losses) > 0
    a, b = load_file(str(ref.model_dir / "model.safetensors")), load_file(str(lay.model_dir / "model.safetensors"))
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
