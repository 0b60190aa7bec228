"""Objectives that own parts beside the encoder (encoders.objectives.base.Part), shown by the
worked example `ema_head`: a trainable head at its own learning rate and an EMA target that is
saved but not trained. Real MiniLM forward/backward on real PubMed texts (max_length 32)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from encoders.config import TrainConfig
from encoders.model import load_encoder
from encoders.objectives import ema_head
from encoders.objectives.registry import get_objective
from encoders.training.checkpoints import load_checkpoint
from encoders.training.export import PARTS_FILE, load_parts
from encoders.training.loop import read_log, run_train
from sciencemap.contracts import MODEL_CARD

pytestmark = pytest.mark.usefixtures("one_thread")
L = 32


@pytest.fixture(scope="module")
def run_of(make_triplet_run, records):
    def build(root: Path):
        """12 papers: 8 train triplets, 2 val."""
        ids = [p["paper_id"] for p in records[:12]]
        trip = [(ids[i], ids[i + 1], ids[i + 2], "hard" if i % 2 else "easy", "train") for i in range(8)]
        trip += [(ids[9], ids[10], ids[11], "hard", "val"), (ids[10], ids[11], ids[0], "easy", "val")]
        return make_triplet_run(root, records[:12], trip, {"margin": 0.5})
    build.records = records[:12]
    return build


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"objective": "ema_head", "max_steps": 4, "batch_size": 2, "grad_accum": 2,
                          "max_length": L, "lr": 1e-4, "log_every": 1, "checkpoint_every": 2, "device": "cpu", **kw})


def _exported(model_dir: Path) -> dict[str, torch.Tensor]:
    return {**load_file(str(model_dir / "model.safetensors")),
            **{f"parts/{k}": v for k, v in load_file(str(model_dir / PARTS_FILE)).items()}}


def test_registry_names_it_and_the_decay_rises_to_one():
    cls = get_objective("ema_head")
    assert cls is ema_head.EmaHeadObjective
    obj = cls(TrainConfig(margin=1.0))
    assert obj.decay(0, 10) == pytest.approx(ema_head.EMA_DECAY[0])
    assert obj.decay(10, 10) == pytest.approx(ema_head.EMA_DECAY[1])
    assert obj.decay(3, 10) < obj.decay(7, 10)


def test_parts_train_checkpoint_export_and_the_target_follows_by_ema(tmp_path, run_of):
    layout = run_of(tmp_path / "r")
    enc = load_encoder("minilm", "mean", max_length=L, device="cpu")
    start = {k: v.detach().clone() for k, v in enc.model.state_dict().items()}
    summary = run_train(_cfg(keep_final_checkpoint=True), layout, encoder=enc)
    assert summary["steps"] == 4 and summary["objective"] == "ema_head"

    card = json.loads((layout.model_dir / MODEL_CARD).read_text())["objective"]
    assert card["name"] == "ema_head" and card["settings"] == {"margin": 0.5, "normalize": False}
    assert card["parts"]["head"] == {"trainable": True, "parameters": 2 * (384 * 384 + 384), "lr": ema_head.HEAD_LR}
    assert card["parts"]["target"]["trainable"] is False

    # Its own validation figure beside the triplet ones, logged before and after training.
    vals = [r for r in read_log(layout.train_log) if r["kind"] == "val"]
    assert [r["step"] for r in vals] == [0, 2, 4] and all(-1 <= r["val_predict_cosine"] <= 1 for r in vals)
    assert vals[0]["val_predict_cosine"] != vals[-1]["val_predict_cosine"] and "accuracy" in summary["val_after"]

    # The optimizer holds the head in groups of their own, at the head's rate on the run's schedule.
    state = load_checkpoint(layout.checkpoints_dir / "step-00000002")
    groups = state["optimizer"]["param_groups"]
    assert [g["initial_lr"] for g in groups] == [1e-4, 1e-4, ema_head.HEAD_LR, ema_head.HEAD_LR]
    assert set(state["parts"]) == {"head", "target"}

    # Export: the encoder as the model, head and target beside it, read back by load_parts.
    out = _exported(layout.model_dir)
    head = torch.nn.Sequential(torch.nn.Linear(384, 384), torch.nn.GELU(), torch.nn.Linear(384, 384))
    load_parts(layout.model_dir, {"head": head})
    torch.testing.assert_close(head[0].weight, out["parts/head.0.weight"], rtol=0, atol=0)
    # The target is neither the start nor the trained encoder: each step moved it 1 - decay of the way.
    name = "embeddings.word_embeddings.weight"
    trained, target, before = out[name], out[f"parts/target.{name}"], start[name]
    assert not torch.equal(target, before) and not torch.equal(target, trained)
    assert (target - before).abs().max() < (trained - before).abs().max()


def test_a_killed_run_resumes_bit_identically(tmp_path, run_of, crash_at):
    ref = run_of(tmp_path / "ref")
    run_train(_cfg(), ref)
    lay = run_of(tmp_path / "crash")
    with pytest.raises(crash_at.error):
        run_train(_cfg(), lay, after_step=crash_at(3))
    summary = run_train(_cfg(), lay)
    assert summary["resumed_from_step"] == 2
    assert [r["loss"] for r in read_log(lay.train_log) if r["kind"] == "train"] == \
        [r["loss"] for r in read_log(ref.train_log) if r["kind"] == "train"]
    a, b = _exported(ref.model_dir), _exported(lay.model_dir)
    assert a.keys() == b.keys() and any(k.startswith("parts/head.") for k in a)
    assert [k for k in a if not torch.equal(a[k], b[k])] == []


def test_embed_writes_the_main_vector_and_the_head_view(tmp_path, run_of):
    from encoders.embed import EmbedConfig, run_embed
    from encoders.embed.forward import embed_texts
    from encoders.model import paper_text
    from sciencemap.embeddings import load_embeddings, load_view, read_manifest, view_names

    layout = run_of(tmp_path / "r")
    run_train(_cfg(max_steps=2, checkpoint_every=0), layout)
    summary = run_embed(EmbedConfig(device="cpu", shard_size=5, precision="float32", workers=2), layout)  # feed processes
    assert summary["views"] == ["head"] and summary["shards"] == 3

    ids, X = load_embeddings(layout)
    assert view_names(layout) == ["head"]
    vids, keys, H = load_view(layout, "head")
    assert list(vids) == list(ids) and set(keys) == {"head"} and H.shape == X.shape
    assert np.array_equal(load_embeddings(layout, view="head")[1], H)
    manifest = read_manifest(layout.embeddings_dir)
    assert manifest["vector"]["objective"] == "ema_head" and manifest["views"] == {"head": {"keys": ["head"], "dim": 384}}
    assert read_manifest(layout.embeddings_dir / "views" / "head")["complete"]

    # The main vector is the encoder's, as without views; the view is the exported head applied to it.
    enc = load_encoder(str(layout.model_dir), "mean", max_length=L, device="cpu")
    papers = {r["paper_id"]: r for r in run_of.records}
    mine = embed_texts(enc, [paper_text(papers[i]["title"], papers[i]["abstract"], enc.sep) for i in ids], precision="float32")
    np.testing.assert_allclose(X, mine, atol=1e-4)
    head = torch.nn.Sequential(torch.nn.Linear(384, 384), torch.nn.GELU(), torch.nn.Linear(384, 384))
    load_parts(layout.model_dir, {"head": head})
    with torch.no_grad():
        np.testing.assert_allclose(H, head(torch.from_numpy(X)).numpy(), atol=1e-5)
    with pytest.raises(Exception, match="no view 'facets'"):
        load_embeddings(layout, view="facets")

    # The mapping stages' vector store holds the main vectors, one row a paper, views apart.
    from sciencemap.vectors import ensure_vectors, unit_rows

    store = ensure_vectors(layout)
    assert list(store.ids()) == list(ids)
    np.testing.assert_allclose(np.asarray(store.X), unit_rows(X), atol=1e-6)


def test_torchrun_two_processes_train_the_parts(tmp_path, run_of, repo_root):
    """DistributedDataParallel over the encoder and the trainable head (gloo, 2 processes): the run
    finishes, rank 0 exports the parts, and the EMA target has moved with the trained encoder."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    layout = run_of(tmp_path / "ddp")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}", "--",
           "jobs/train.py", "--run", str(layout.root), "--objective", "ema_head", "--max-steps", "2",
           "--batch-size", "2", "--grad-accum", "1", "--max-length", str(L), "--log-every", "1",
           "--checkpoint-every", "0", "--device", "cpu"]
    p = subprocess.run(cmd, cwd=repo_root, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads(p.stdout[p.stdout.index("{"):])          # printed by rank 0 only
    assert summary["world_size"] == 2 and summary["steps"] == 2 and summary["objective"] == "ema_head"
    exported = _exported(layout.model_dir)
    start = load_encoder("minilm", "mean", max_length=L, device="cpu").model.state_dict()
    name = "embeddings.word_embeddings.weight"
    assert not torch.equal(exported[f"parts/target.{name}"], start[name])
    assert {k.split(".")[0] for k in exported if k.startswith("parts/")} == {"parts/head", "parts/target"}
