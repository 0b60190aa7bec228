"""Triplet fine-tuning: real MiniLM forward/backward on real PubMed texts (max_length 32, few steps)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from encoders.training.checkpoints import load_checkpoint
from encoders.config import TrainConfig
from encoders.embed import EmbedConfig, run_embed
from encoders.model import load_encoder, paper_text
from encoders.objectives.batches import TripletBatch
from encoders.objectives.triplet import TripletObjective
from encoders.objectives.validation import retrieval_metrics
from encoders.training.triplet_table import data_digest, open_tokens, prepare_tokens
from encoders.training.loop import read_log, run_train
from encoders.training.feed import RankSampler, micro_batches, shard_order
from sciencemap.contracts import MODEL_CARD
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError

L = 32
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="session")
def small_run(make_triplet_run, records):
    def build(root: Path, meta: dict | None = None) -> RunLayout:
        """12 papers: 8 train triplets, 2 val, one triplet whose negative has no text (dropped)."""
        papers = records[:12] + [{"paper_id": "x:empty", "title": None, "abstract": None}]
        ids = [p["paper_id"] for p in records[:12]]
        trip = [(ids[i], ids[i + 1], ids[i + 2], "hard" if i % 2 else "easy", "train") for i in range(8)]
        trip += [(ids[9], ids[10], ids[11], "hard", "val"), (ids[10], ids[11], ids[0], "easy", "val"),
                 (ids[0], ids[1], "x:empty", "easy", "train")]
        return make_triplet_run(root, papers, trip, meta)
    return build


@pytest.fixture(scope="session")
def forty_run(cyclic_run, records):
    """40 papers: anchors 0-29 train (2 triplets each), 30-35 val (2 each: one hard, one easy)."""
    return lambda root: cyclic_run(root, records, anchors=36, train_anchors=30, hard_step=7, easy_step=19)


def state(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def test_triplet_loss_decreases_on_fixed_batch(records, steps_on_fixed_batch):
    torch.manual_seed(0)
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    a = [paper_text(x["title"], x["abstract"]) for x in records[:4]]
    p = [paper_text(x["title"], x["abstract"]) for x in records[4:8]]
    n = [x["title"] for x in records[:4]]  # near-copies of the anchors: large untrained loss
    objective = TripletObjective(TrainConfig(margin=1.0))
    batch = TripletBatch(["a"] * 4, ["p"] * 4, ["n"] * 4, a, p, n)
    before, after, reached = steps_on_fixed_batch(enc, objective, batch)
    assert before > 0 and reached and after < before * 0.9, (before, after)


def test_seed_recipe_defaults():
    cfg = TrainConfig()
    assert (cfg.lr, cfg.batch_size, cfg.grad_accum, cfg.epochs, cfg.warmup_ratio, cfg.max_length,
            cfg.max_steps) == (2e-5, 8, 4, 2, 0.1, 256, 0)
    with pytest.raises(UserError, match="grad_accum"):
        run_train(TrainConfig(grad_accum=0), RunLayout(Path("/nonexistent")))


def test_shard_order_splits_each_epoch_between_ranks():
    one = shard_order(10, seed=3, epoch=1)
    assert sorted(one) == list(range(10))
    assert not np.array_equal(one, shard_order(10, seed=3, epoch=2))  # fresh order per epoch
    r0, r1, r2 = (shard_order(10, 3, 1, rank, 3) for rank in range(3))
    assert len(r0) == len(r1) == len(r2) == 4  # padded cyclically, like DistributedSampler
    assert set(r0) | set(r1) | set(r2) == set(range(10))
    assert np.array_equal(np.concatenate([r0, r1, r2]).reshape(3, 4).T.ravel()[:10], one)


def test_tokenized_triplets_give_the_text_paths_batches(tmp_path, records, small_run):
    """The cached token ids, collated per micro-batch, are exactly the tokenizer's padded batch of
    the same triplets' texts (anchors, positives, negatives), in the loop's order; so the first
    losses are the text path's (bench/stages_vs_ref.py compares 20 steps with the earlier loop)."""
    layout = small_run(tmp_path / "tok")
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    folder, built = prepare_tokens(layout, enc.path, enc.tokenizer, L, enc.sep, val_max=128, seed=0)
    assert built and prepare_tokens(layout, enc.path, enc.tokenizer, L, enc.sep, 128, 0) == (folder, False)
    data = open_tokens(folder)
    assert data.counts == {"triplets_total": 11, "dropped_no_text": 1, "train_triplets": 8, "val_triplets": 2}
    text = {r["paper_id"]: paper_text(r["title"], r["abstract"], enc.sep) for r in records[:12]}
    ids = data.paper_ids(np.arange(data.papers.num_rows))
    ai = [ids[r] for r in data.train["a"]]
    assert ai == sorted(ai) and data.digest == data_digest({"ai": ai, "pi": [ids[r] for r in data.train["p"]],
                                                            "ni": [ids[r] for r in data.train["n"]]})
    order = shard_order(8, seed=0, epoch=0)
    seen = 0
    for m, batch in enumerate(micro_batches(data, RankSampler(8, 0), 0, 3, 0, enc.tokenizer.pad_token_id, 0, False)):
        rows = order[3 * m:3 * m + 3]
        texts = [text[ids[data.train[c][r]]] for c in ("a", "p", "n") for r in rows]
        ref = enc.tokenizer(texts, padding="longest", truncation=True, max_length=L, return_tensors="pt")
        assert torch.equal(batch.input_ids, ref["input_ids"]) and torch.equal(batch.attention_mask, ref["attention_mask"])
        assert batch.anchor_ids == data.train["a"][rows].tolist() and batch.tokens == int(ref["attention_mask"].sum())
        seen += len(rows)
    assert seen == 8
    # resume inside an epoch: the loader starts at the given micro-batch
    later = next(micro_batches(data, RankSampler(8, 0), 0, 3, 2, enc.tokenizer.pad_token_id, 0, False))
    assert later.anchor_ids == data.train["a"][order[6:8]].tolist()
    # another max_length is another cache; the old one is removed
    other, built = prepare_tokens(layout, enc.path, enc.tokenizer, 16, enc.sep, 128, 0)
    assert built and other != folder and not folder.exists()
    assert max(len(t) for t in open_tokens(other).tokens(np.arange(12))) == 16


def test_loader_workers_train_the_same_steps(tmp_path, records, small_run):
    """Micro-batches collated by two worker processes: the same losses and weights as in-process."""
    cfg = dict(max_steps=3, batch_size=2, grad_accum=2, max_length=L, lr=1e-4, log_every=1, device="cpu")
    runs = {}
    for workers in (0, 2):
        lay = small_run(tmp_path / f"w{workers}")
        run_train(TrainConfig(**cfg, loader_workers=workers), lay)
        runs[workers] = lay
    losses = [[r["loss"] for r in read_log(runs[w].train_log) if r["kind"] == "train"] for w in (0, 2)]
    assert losses[0] == losses[1] and len(losses[0]) == 3
    a, b = state(runs[0].model_dir), state(runs[2].model_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_retrieval_metrics_filtered_ranking():
    # Anchor a0 at the origin; its positive p0 is 3rd nearest among the candidates, but the nearer
    # one is its other positive p1 (filtered out), so p0 ranks 2nd.
    ids = ["a0", "p0", "p1", "n0", "n1"]
    vec = torch.tensor([[0.0], [3.0], [1.0], [2.0], [9.0]])
    index = {k: i for i, k in enumerate(ids)}
    data = {"ai": ["a0", "a0", "a0"], "pi": ["p0", "p1", "p0"], "ni": ["n0", "n1", "n1"]}
    m = retrieval_metrics(vec, index, data, TripletObjective(TrainConfig(margin=1.0)).score_matrix)
    assert m["pairs"] == 2 and m["candidates"] == 4
    assert m["mrr"] == pytest.approx((1 / 2 + 1) / 2)  # p0 rank 2 (n0 is nearer), p1 rank 1
    assert m["recall@1"] == pytest.approx(0.5) and m["recall@5"] == 1.0


def test_run_train_saves_a_model_that_reloads(tmp_path, records, small_run):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    layout = small_run(tmp_path / "r", meta={"K": 5, "H": 2, "margin": 0.5})
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    base = enc.encode([paper_text(r["title"], r["abstract"], "[SEP]") for r in records[:3]])
    cfg = TrainConfig(max_steps=3, batch_size=4, grad_accum=1, max_length=L, log_every=1, lr=5e-5,
                      device="cpu")
    summary = run_train(cfg, layout, encoder=enc)
    assert summary["train_triplets"] == 8 and summary["dropped_no_text"] == 1
    assert summary["margin"] == 0.5  # taken from the triplets' metadata
    assert summary["val_before"]["n"] == 2 and 0 <= summary["val_after"]["accuracy"] <= 1
    log = read_log(layout.train_log)
    train = [r for r in log if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert all(np.isfinite(r["loss"]) and r["lr"] >= 0 for r in train)
    lrs = [r["lr"] for r in train]  # 3 steps: no warm-up step, then linear decay
    assert lrs[0] == pytest.approx(5e-5) and lrs[0] > lrs[1] > lrs[2] > 0

    meta = json.loads((layout.model_dir / MODEL_CARD).read_text())
    assert meta["pooling"] == "mean" and meta["steps"] == 3 and meta["config"]["margin"] == 0.5
    assert meta["objective"] == {"name": "triplet", "settings": {"margin": 0.5, "normalize": False}, "score": "-L2"}
    assert (layout.model_dir / "model.safetensors").is_file()
    assert not list(layout.root.glob(".model.tmp-*"))

    texts = [paper_text(r["title"], r["abstract"], "[SEP]") for r in records[:3]]
    mine = enc.encode(texts)
    reloaded = AutoModel.from_pretrained(layout.model_dir, local_files_only=True).eval()
    batch = enc.tokenizer(texts, padding="longest", truncation=True, max_length=L, return_tensors="pt")
    with torch.inference_mode():
        h = reloaded(**batch).last_hidden_state
    m = batch["attention_mask"].unsqueeze(-1).float()
    np.testing.assert_allclose(((h * m).sum(1) / m.sum(1)).numpy(), mine, atol=1e-5)
    assert np.abs(base - mine).max() > 1e-4  # the tuned weights really differ from the base model
    st = SentenceTransformer(str(layout.model_dir), device="cpu", local_files_only=True)
    st.max_seq_length = L
    np.testing.assert_allclose(st.encode(texts, convert_to_numpy=True), mine, atol=1e-4)


def test_full_epochs_log_validation_metrics_and_curve(tmp_path, records, forty_run):
    layout = forty_run(tmp_path / "ep")
    # 60 train triplets, micro-batch 8, accumulation 4: ceil(ceil(60/8)/4) = 2 steps per epoch.
    cfg = TrainConfig(epochs=2, batch_size=8, grad_accum=4, max_length=L, lr=5e-5, log_every=1,
                      checkpoint_every=0, device="cpu")
    summary = run_train(cfg, layout)
    assert summary["steps"] == 4 and summary["steps_per_epoch"] == 2 and summary["margin"] == 1.0
    log = read_log(layout.train_log)
    vals = [r for r in log if r["kind"] == "val"]
    assert [r["step"] for r in vals] == [0, 2, 4]  # before, end of epoch 1, end of epoch 2
    assert [r["epoch"] for r in vals] == [0, 1, 2]
    for r in vals:
        assert r["val_n"] == 12 and r["val_pairs"] == 6 and r["val_candidates"] >= 6
        for key in ("val_loss", "val_accuracy", "val_accuracy_hard", "val_accuracy_easy", "val_mrr",
                    "val_recall@1", "val_recall@5"):
            assert r[key] is not None and np.isfinite(r[key]), key
        assert 0 < r["val_mrr"] <= 1 and r["val_recall@1"] <= r["val_recall@5"]
    assert summary["val_after"]["mrr"] == vals[-1]["val_mrr"]
    # Warm-up (10% of 4 steps = 0 steps) then linear decay to zero.
    assert [r["lr"] for r in log if r["kind"] == "train"] == pytest.approx([5e-5, 3.75e-5, 2.5e-5, 1.25e-5])
    png = layout.train_curve_png
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_resume_after_crash_equals_uninterrupted_run(tmp_path, records, small_run, crash_at):
    cfg = TrainConfig(max_steps=4, batch_size=2, grad_accum=2, max_length=L, lr=1e-4, log_every=1,
                      checkpoint_every=2, device="cpu")
    ref = small_run(tmp_path / "ref")
    ref_summary = run_train(cfg, ref)
    assert not ref.checkpoints_dir.exists()  # removed once the model is saved

    lay = small_run(tmp_path / "crash")
    with pytest.raises(crash_at.error):
        run_train(cfg, lay, after_step=crash_at(3))
    assert [p.name for p in lay.checkpoints_dir.iterdir()] == ["step-00000002"]
    assert max(r["step"] for r in read_log(lay.train_log)) == 3
    summary = run_train(cfg, lay)
    assert summary["resumed_from_step"] == 2
    log = read_log(lay.train_log)
    assert [r["step"] for r in log if r["kind"] == "train"] == [1, 2, 3, 4]  # step 3 once, redone
    ref_log = read_log(ref.train_log)
    np.testing.assert_allclose([r["loss"] for r in log if r["kind"] == "train"],
                               [r["loss"] for r in ref_log if r["kind"] == "train"], rtol=1e-5)
    a, b = state(ref.model_dir), state(lay.model_dir)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)
    assert summary["val_after"]["loss"] == pytest.approx(ref_summary["val_after"]["loss"], rel=1e-4)

    # Other settings: the old checkpoint is not resumed from.
    lay2 = small_run(tmp_path / "other")
    with pytest.raises(crash_at.error):
        run_train(cfg, lay2, after_step=crash_at(3))
    other = run_train(TrainConfig(**{**cfg.__dict__, "lr": 5e-5}), lay2)
    assert other["resumed_from_step"] == 0


def test_empty_train_split_is_a_user_error(tmp_path, records, make_triplet_run):
    ids = [p["paper_id"] for p in records[:3]]
    layout = make_triplet_run(tmp_path / "e", records[:3], [(ids[0], ids[1], ids[2], "hard", "val")])
    with pytest.raises(UserError, match="no usable train triplets"):
        run_train(TrainConfig(max_length=L, device="cpu"), layout)


def test_cls_pooling_and_grad_accum_carry_into_embed(tmp_path, records, small_run):
    layout = small_run(tmp_path / "cls")
    cfg = TrainConfig(pooling="cls", grad_accum=2, batch_size=2, max_steps=2, max_length=L,
                      log_every=5, device="cpu")
    summary = run_train(cfg, layout)
    assert summary["steps"] == 2 and np.isfinite(summary["final_loss"])
    assert [r["step"] for r in read_log(layout.train_log) if r["kind"] == "train"] == [2]
    pool_conf = json.loads((layout.model_dir / "1_Pooling" / "config.json").read_text())
    assert pool_conf["pooling_mode_cls_token"] and not pool_conf["pooling_mode_mean_tokens"]
    # Embed with the run's own model (the default) picks up its recorded cls pooling.
    # ... and its training length (max_length 0 = the model card's).
    out = run_embed(EmbedConfig(batch_size=4, shard_size=100, device="cpu"), layout)
    manifest = json.loads((layout.embeddings_dir / "manifest.json").read_text())
    assert manifest["pooling"] == "cls" and manifest["model_path"] == str(layout.model_dir.resolve())
    assert manifest["max_length"] == L and out["max_length"] == L
    assert out["papers"] == 12 and out["skipped"] == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_processes_gloo(tmp_path, records, forty_run, repo_root):
    from transformers import AutoModel

    layout = forty_run(tmp_path / "ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SCIENCEMAP_TRAIN_CRASH_AFTER": ""}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={_free_port()}", "--", "jobs/train.py", "--run", str(layout.root),
           "--max-steps", "3", "--batch-size", "4", "--grad-accum", "2", "--max-length", str(L),
           "--log-every", "1", "--checkpoint-every", "2", "--keep-final-checkpoint", "--device", "cpu"]
    p = subprocess.run(cmd, cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads(p.stdout[p.stdout.index("{"):])  # printed by rank 0 only
    assert summary["world_size"] == 2 and summary["steps"] == 3
    # 60 triplets / 2 ranks = 30 each; micro-batches of 4 -> 8; accumulation 2 -> 4 steps per epoch.
    assert summary["steps_per_epoch"] == 4
    log = read_log(layout.train_log)
    assert [r["step"] for r in log if r["kind"] == "train"] == [1, 2, 3]  # one writer
    assert [r["step"] for r in log if r["kind"] == "val"] == [0, 3]
    assert [c.name for c in layout.checkpoints_dir.iterdir()] == ["step-00000002"]
    ck = load_checkpoint(layout.checkpoints_dir / "step-00000002")
    assert len(ck["rng"]) == 2 and ck["step"] == 2  # every rank's RNG state
    model = AutoModel.from_pretrained(layout.model_dir, local_files_only=True)
    assert model.config.hidden_size == 384
    assert (layout.train_curve_png).is_file()
    assert not list(layout.root.glob(".*tmp*"))


def test_gradient_checkpointing_and_compile_train_the_same_steps(tmp_path, records, small_run):
    """The options for large batches and long GPU runs change how the steps are computed, not what
    they compute: recomputed activations (dropout replayed) give the same losses; the compiled model
    and length-bucketed forwards (whose dropout draws other masks: compared without dropout) the
    same up to float rounding."""
    from encoders.model import resolve_model

    no_dropout = tmp_path / "no-dropout"
    no_dropout.mkdir()
    src = resolve_model("minilm")
    for f in src.iterdir():
        if f.is_file() and f.name != "config.json":
            (no_dropout / f.name).symlink_to(f)
    conf = json.loads((src / "config.json").read_text())
    (no_dropout / "config.json").write_text(json.dumps({**conf, "hidden_dropout_prob": 0.0,
                                                         "attention_probs_dropout_prob": 0.0}))
    cfg = dict(max_steps=2, batch_size=2, grad_accum=1, max_length=L, lr=1e-4, log_every=1, device="cpu")
    losses = {}
    for name, extra in (("plain", {}), ("ckpt", {"gradient_checkpointing": True}),
                        ("plain0", {"model": str(no_dropout)}), ("compiled0", {"model": str(no_dropout), "compile": True}),
                        ("bucketed0", {"model": str(no_dropout), "bucket_tokens": 40})):
        lay = small_run(tmp_path / name)
        run_train(TrainConfig(**cfg, **extra), lay)
        losses[name] = [r["loss"] for r in read_log(lay.train_log) if r["kind"] == "train"]
    assert len(losses["plain"]) == 2 and losses["plain"] != losses["plain0"]
    np.testing.assert_allclose(losses["ckpt"], losses["plain"], rtol=1e-6)
    np.testing.assert_allclose(losses["compiled0"], losses["plain0"], rtol=1e-4)
    # length buckets (here forwards of <= 40 padded tokens) regroup the forwards, not the batch
    np.testing.assert_allclose(losses["bucketed0"], losses["plain0"], rtol=1e-5)
