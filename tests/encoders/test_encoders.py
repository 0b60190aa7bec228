"""Real MiniLM forward/backward passes on tiny inputs (max_length 32)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from encoders.embed import EmbedConfig, load_embeddings, run_embed
from encoders.losses import TripletLoss
from encoders.model import load_encoder, paper_text, resolve_model
from encoders.train import TrainConfig, run_train, triplet_vectors

from importance.contracts import SCHEMAS, RunLayout
from importance.runtime import UserError, write_table_atomic

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


def test_triplet_loss_decreases_on_fixed_batch(pubmed_records):
    torch.manual_seed(0)
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    r = pubmed_records
    # Negatives are near-copies of the anchor: the untrained loss is large.
    a = [paper_text(x["title"], x["abstract"]) for x in r[:4]]
    p = [paper_text(x["title"], x["abstract"]) for x in r[4:8]]
    n = [x["title"] for x in r[:4]]
    loss_fn = TripletLoss(margin=1.0)

    def eval_loss():
        enc.model.eval()
        with torch.inference_mode():
            return float(loss_fn(*triplet_vectors(enc, a, p, n)))

    before = eval_loss()
    assert before > 0
    opt = torch.optim.AdamW(enc.model.parameters(), lr=1e-4)
    enc.model.train()
    for _ in range(4):
        opt.zero_grad()
        loss = loss_fn(*triplet_vectors(enc, a, p, n))
        loss.backward()
        opt.step()
    assert any(q.grad is not None and q.grad.abs().sum() > 0 for q in enc.model.parameters())
    after = eval_loss()
    assert after < before * 0.9, (before, after)


def _train_run(make_run, records, name="r"):
    papers = records[:12] + [{"paper_id": "x:empty", "title": None, "abstract": None}]
    ids = [p["paper_id"] for p in records[:12]]
    trip = [(ids[i], ids[i + 1], ids[i + 2], "hard" if i % 2 else "easy", "train") for i in range(8)]
    trip += [(ids[9], ids[10], ids[11], "hard", "val"), (ids[10], ids[11], ids[0], "easy", "val"),
             (ids[0], ids[1], "x:empty", "easy", "train")]  # no text -> dropped
    return make_run(name, papers, trip)


def test_run_train_saves_a_model_that_reloads(make_run, pubmed_records, encoder):
    from transformers import AutoModel

    layout = _train_run(make_run, pubmed_records)
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    cfg = TrainConfig(max_steps=3, batch_size=4, max_length=L, log_every=1, lr=5e-5, device="cpu")
    summary = run_train(cfg, layout, encoder=enc)
    assert summary["train_triplets"] == 8 and summary["dropped_no_text"] == 1
    assert summary["val_before"]["n"] == 2 and 0 <= summary["val_after"]["accuracy"] <= 1
    log = [json.loads(line) for line in layout.train_log.read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3]
    assert all(np.isfinite(r["loss"]) and r["lr"] >= 0 for r in log)
    lrs = [r["lr"] for r in log]  # 3 steps: no warm-up step, then linear decay
    assert lrs[0] == pytest.approx(5e-5) and lrs[0] > lrs[1] > lrs[2] > 0

    meta = json.loads((layout.model_dir / "sciencemap.json").read_text())
    assert meta["pooling"] == "mean" and meta["steps"] == 3
    assert (layout.model_dir / "model.safetensors").is_file()
    assert not list(layout.root.glob(".model.tmp-*"))

    texts = [paper_text(r["title"], r["abstract"], "[SEP]") for r in pubmed_records[:3]]
    mine = enc.encode(texts)
    reloaded = AutoModel.from_pretrained(layout.model_dir, local_files_only=True).eval()
    batch = enc.tokenizer(texts, padding="longest", truncation=True, max_length=L, return_tensors="pt")
    with torch.inference_mode():
        h = reloaded(**batch).last_hidden_state
    m = batch["attention_mask"].unsqueeze(-1).float()
    np.testing.assert_allclose(((h * m).sum(1) / m.sum(1)).numpy(), mine, atol=1e-5)
    # The tuned weights really differ from the base model.
    base = encoder.encode(texts)
    assert np.abs(base - mine).max() > 1e-4
    # sentence-transformers loads it too (no Normalize module: raw vectors).
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(layout.model_dir), device="cpu", local_files_only=True)
    st.max_seq_length = L
    np.testing.assert_allclose(st.encode(texts, convert_to_numpy=True), mine, atol=1e-4)


def test_empty_train_split_is_a_user_error(make_run, pubmed_records):
    ids = [p["paper_id"] for p in pubmed_records[:3]]
    layout = make_run("e", pubmed_records[:3], [(ids[0], ids[1], ids[2], "hard", "val")])
    with pytest.raises(UserError, match="no usable train triplets"):
        run_train(TrainConfig(max_length=L, device="cpu"), layout)


def _papers(records):
    # 8 real papers + one with no text at all: 8 embedded, in shards of 3 -> 3 shards.
    return records[:8] + [{"paper_id": "x:none", "title": "  ", "abstract": None}]


def _cfg(**kw):
    return EmbedConfig(**{"model": "minilm", "batch_size": 2, "max_length": L, "shard_size": 3,
                          "device": "cpu", **kw})


def test_embed_twice_gives_identical_vectors(make_run, pubmed_records):
    a = make_run("a", _papers(pubmed_records))
    summary = run_embed(_cfg(), a)
    assert summary["papers"] == 8 and summary["skipped"] == 1 and summary["shards"] == 3
    assert summary["skipped_papers"] == [{"paper_id": "x:none", "reason": "no title and no abstract"}]
    ids1, m1 = load_embeddings(a)
    ids2, m2 = load_embeddings(run_embed(_cfg(restart=True), a)["embeddings_dir"])
    assert ids1 == ids2 and m1.dtype == np.float32 and m1.shape == (8, 384)
    assert np.array_equal(m1, m2)
    manifest = json.loads((a.embeddings_dir / "manifest.json").read_text())
    assert manifest["complete"] and manifest["finished_shards"] == [0, 1, 2]
    assert len(manifest["model_hash"]) == 64 and manifest["input"]["n_papers"] == 8
    # Re-running a finished job embeds nothing.
    assert run_embed(_cfg(), a)["embedded_now"] == 0


class Crash(Exception):
    pass


def _crash_after_first(k, n_done):
    if n_done == 1:
        raise Crash


def test_resume_after_crash_equals_uninterrupted_run(make_run, pubmed_records):
    ref = make_run("ref", _papers(pubmed_records))
    run_embed(_cfg(), ref)
    ref_ids, ref_m = load_embeddings(ref)

    lay = make_run("crash", _papers(pubmed_records))
    with pytest.raises(Crash):
        run_embed(_cfg(), lay, after_shard=_crash_after_first)
    assert sorted(p.name for p in lay.embeddings_dir.glob("part-*")) == ["part-00000.parquet"]
    with pytest.raises(UserError, match="incomplete"):
        load_embeddings(lay)
    summary = run_embed(_cfg(), lay)
    assert summary["shards_resumed"] == 1 and summary["embedded_now"] == 5
    ids, m = load_embeddings(lay.root)
    assert sorted(ids) == sorted(set(ids)) == sorted(p["paper_id"] for p in pubmed_records[:8])
    assert ids == ref_ids and np.array_equal(m, ref_m)
    # Same as embedding each text directly (sorted by length, so order differs from input).
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    by_id = {p["paper_id"]: paper_text(p["title"], p["abstract"]) for p in pubmed_records[:8]}
    np.testing.assert_allclose(enc.encode([by_id[i] for i in ids]), m, atol=1e-5)


def test_resume_refuses_changed_input(make_run, pubmed_records):
    papers = _papers(pubmed_records)
    lay = make_run("chg", papers)
    with pytest.raises(Crash):
        run_embed(_cfg(), lay, after_shard=_crash_after_first)
    changed = [dict(p) for p in papers]
    changed[0]["abstract"] = "A different abstract."
    write_papers(lay, changed)
    with pytest.raises(UserError, match="different input papers"):
        run_embed(_cfg(), lay)
    with pytest.raises(UserError, match="different max_length"):
        run_embed(EmbedConfig(model="minilm", max_length=16, shard_size=3, device="cpu"), lay)
    assert run_embed(_cfg(restart=True), lay)["embedded_now"] == 8


def test_float16_shards(make_run, pubmed_records):
    lay = make_run("f16", pubmed_records[:4])
    run_embed(_cfg(dtype="float16", shard_size=10), lay)
    t = pq.read_table(lay.embeddings_dir / "part-00000.parquet")
    assert str(t.schema.field("vector").type.value_type) == "halffloat"
    ids, m = load_embeddings(lay)
    assert m.dtype == np.float32 and m.shape == (4, 384) and np.isfinite(m).all()


def test_embed_cli_crash_hook_and_missing_model(make_run, pubmed_records):
    lay = make_run("cli", _papers(pubmed_records))
    env = dict(os.environ, SCIENCEMAP_EMBED_CRASH_AFTER="1")
    cmd = [sys.executable, "jobs/embed.py", "--run", str(lay.root), "--shard-size", "3",
           "--max-length", str(L), "--device", "cpu"]
    # Default model = the run's trained model, which does not exist yet: one-line error, exit 2.
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "run jobs/train.py first" in p.stderr
    p = subprocess.run(cmd + ["--model", "minilm"], cwd=REPO, env=env, capture_output=True, text=True)
    assert p.returncode != 0 and "test hook" in p.stderr
    manifest = json.loads((lay.embeddings_dir / "manifest.json").read_text())
    assert manifest["finished_shards"] == [0] and not manifest["complete"]


def test_cls_pooling_and_grad_accum_carry_into_embed(make_run, pubmed_records):
    layout = _train_run(make_run, pubmed_records, "cls")
    cfg = TrainConfig(pooling="cls", grad_accum=2, batch_size=2, max_steps=2, max_length=L,
                      log_every=5, device="cpu")
    summary = run_train(cfg, layout)
    assert summary["steps"] == 2 and np.isfinite(summary["final_loss"])
    assert len(layout.train_log.read_text().splitlines()) == 1  # logged at the last step
    pool_conf = json.loads((layout.model_dir / "1_Pooling" / "config.json").read_text())
    assert pool_conf["pooling_mode_cls_token"] and not pool_conf["pooling_mode_mean_tokens"]
    # Embed with the run's own model (the default) picks up its recorded cls pooling.
    out = run_embed(EmbedConfig(batch_size=4, max_length=L, shard_size=100, device="cpu"), layout)
    manifest = json.loads((layout.embeddings_dir / "manifest.json").read_text())
    assert manifest["pooling"] == "cls" and manifest["model_path"] == str(layout.model_dir.resolve())
    assert out["papers"] == 12 and out["skipped"] == 1
