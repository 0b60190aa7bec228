"""The embedding job on real PubMed records with the shipped MiniLM (CPU, max_length 32): streamed
shards, token-budget batches, resume after a crash, refusal on changed model/input, two ranks."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from encoders.embed import (COMPILE_MIN_TOKENS, CompiledForward, EmbedConfig, FeedShape, FeedSpec, PooledForward,
                            inference_forward, pad_batch, plan_input, prepare_chunk, run_embed,
                            token_budget_batches)
from encoders.embed.feed import NOT_MAPPED_REASON
from encoders.model import load_encoder, resolve_model
from sciencemap.contracts import EMBEDDING_SHARD_META_KEY, SCHEMAS
from sciencemap.embeddings import load_embeddings as read_embeddings
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.text import paper_text

L = 32


def papers(records) -> list[dict]:
    """12 real papers with three that must be skipped: no text, a repeat of paper 0 (in a later
    shard than its first row) and a null id. 15 rows -> 5 shards of 3; shard 4 (rows 12-14) holds
    real paper 10, the repeat and paper 11; rows 3-5 include the no-text paper."""
    rows = [dict(r) for r in records[:10]]
    rows.insert(4, {"paper_id": "x:none", "title": "  ", "abstract": None})
    rows.insert(7, {"paper_id": None, "title": "Orphan", "abstract": "No id."})
    rows += [records[10], dict(records[0]), records[11]]
    return rows


def write_papers(layout: RunLayout, rows: list[dict]) -> None:
    """Two Parquet files with row groups of 2: shards cross file and row-group boundaries."""
    d = layout.table("papers")
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("*.parquet"):
        old.unlink()
    half = len(rows) // 2
    for i, part in enumerate((rows[:half], rows[half:])):
        cols = {n: [r.get(n) for r in part] for n in SCHEMAS["papers"].names}
        pq.write_table(pa.table(cols, schema=SCHEMAS["papers"]), d / f"part-{i}.parquet", row_group_size=2)


@pytest.fixture(scope="module")
def enc():
    return load_encoder("minilm", "mean", max_length=L, device="cpu")


@pytest.fixture
def make_run(tmp_path):
    def make(name: str, rows: list[dict]) -> RunLayout:
        layout = RunLayout(tmp_path / name)
        layout.root.mkdir(parents=True)
        write_papers(layout, rows)
        return layout
    return make


def cfg(**kw) -> EmbedConfig:
    base = {"model": "minilm", "batch_size": 4, "max_tokens": 96, "max_length": L, "shard_size": 3,
            "device": "cpu", "precision": "float32"}
    return EmbedConfig(**{**base, **kw})


def expected_ids(records) -> list[str]:
    return [r["paper_id"] for r in records[:12]]


class Crash(Exception):
    pass


def load_embeddings(where) -> tuple[list[str], np.ndarray]:
    """The core reader, ids as a list (it returns an object array) so they compare with ==."""
    ids, vectors = read_embeddings(where)
    return list(ids), vectors


def test_token_budget_batches():
    lengths = [5, 30, 7, 30, 12, 1]
    batches = token_budget_batches(lengths, batch_size=3, max_tokens=64)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert batches[0] == [1, 3]                     # longest first, ties by index; 3 x 30 > 64
    for b in batches:
        assert len(b) <= 3 and len(b) * max(lengths[i] for i in b) <= 64
    assert token_budget_batches([100, 3], 8, 50) == [[0], [1]]   # too long alone: own batch
    assert token_budget_batches([4] * 5, 2, 0) == [[0, 1], [2, 3], [4]]  # no budget: batch_size


def test_batches_cut_at_a_padding_limit_once_large_enough():
    lengths = [100, 95, 60, 58, 57, 10, 10, 9]
    # no limit: the budget alone (8 x 100 <= 1000)
    assert token_budget_batches(lengths, 16, 1000) == [list(range(8))]
    # limit 1.1 from 150 padded tokens: 100, 95 stay together (95 * 1.1 >= 100), 60 starts a batch,
    # 58 and 57 join it; 10 is far shorter, but the 60-batch holds only 180 >= 150 tokens: cut too
    assert token_budget_batches(lengths, 16, 1000, pad_limit=1.1, min_tokens=150) == [[0, 1], [2, 3, 4], [5, 6, 7]]
    # below min_tokens a batch takes shorter documents anyway (small batches would idle a GPU)
    assert token_budget_batches(lengths, 16, 1000, pad_limit=1.1, min_tokens=400) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_plan_finds_cross_file_duplicates(make_run, records):
    lay = make_run("plan", papers(records))
    plan = plan_input(lay.table("papers"))
    assert plan.n_rows == 15 and len(plan.files) == 2
    assert plan.dup_rows.tolist() == [13]
    t = plan.read_rows(5, 10, ["paper_id"])
    assert t["paper_id"].to_pylist() == [r["paper_id"] for r in papers(records)[5:10]]


def test_missing_text_never_crashes_a_shard(tmp_path, enc):
    """Titles and abstracts as other libraries write them: nulls, blanks and a float column of NaN
    (an all-missing abstract column). Rows with no text are skipped with a reason; a missing side
    is left out of the text, never read as "nan" or "None"."""
    d = tmp_path / "papers"
    d.mkdir()
    pq.write_table(pa.table({
        "paper_id": ["a", "b", "c", "d", "e"],
        "title": [None, "", "  ", "Dopamine and reward", "Sleep spindles"],
        "abstract": pa.array([float("nan"), None, float("nan"), float("nan"), None], pa.float64()),
    }), d / "part-0.parquet")
    plan = plan_input(d)
    spec = FeedSpec(plan=plan, tokenizer=enc.tokenizer, max_length=L, sep=enc.sep, shard_size=10,
                    shape=FeedShape(batch_size=4, max_tokens=0, chunk_rows=10))
    chunk = prepare_chunk(spec, 0, 0, 5, True)
    assert chunk.ids == ["d", "e"]
    assert [(s["paper_id"], s["reason"]) for s in chunk.skipped] == [
        ("a", "no title and no abstract"), ("b", "no title and no abstract"), ("c", "no title and no abstract")]
    assert unpadded(chunk) == enc.token_ids(["Dopamine and reward", "Sleep spindles"])


def test_unmapped_papers_are_skipped(tmp_path, enc):
    """mapped false (a "train" input's paper) is skipped with its reason; null is mapped (tables
    written before the column), and a table without the column maps every paper."""
    d = tmp_path / "papers"
    d.mkdir()
    pq.write_table(pa.table({"paper_id": ["a", "b", "c"], "title": ["Dopamine", "Sleep", "Reward"],
                             "abstract": [None, None, None], "mapped": [True, False, None]}), d / "part-0.parquet")
    shape = FeedShape(batch_size=4, max_tokens=0, chunk_rows=10)
    spec = FeedSpec(plan=plan_input(d), tokenizer=enc.tokenizer, max_length=L, sep=enc.sep, shard_size=10, shape=shape)
    chunk = prepare_chunk(spec, 0, 0, 3, True)
    assert chunk.ids == ["a", "c"] and [(s["paper_id"], s["reason"]) for s in chunk.skipped] == [("b", NOT_MAPPED_REASON)]
    pq.write_table(pa.table({"paper_id": ["a", "b"], "title": ["Dopamine", "Sleep"], "abstract": [None, None]}),
                   d / "part-0.parquet")
    spec = FeedSpec(plan=plan_input(d), tokenizer=enc.tokenizer, max_length=L, sep=enc.sep, shard_size=10, shape=shape)
    assert prepare_chunk(spec, 0, 0, 2, True).ids == ["a", "b"]


def unpadded(chunk) -> list[list[int]]:
    """The token ids of a chunk's kept papers in input order, read back from its padded batches."""
    out = [None] * len(chunk.ids)
    for b in chunk.batches:
        for pos, ids, mask in zip(b.positions.tolist(), b.input_ids.tolist(), b.attention_mask.tolist()):
            out[pos] = [t for t, m in zip(ids, mask) if m]
    return out


def test_chunks_bucket_by_length_and_keep_every_paper_once(make_run, records, enc):
    """A shard in chunks of 4 rows: every kept paper in exactly one batch, batches sorted by length
    inside their chunk and within the budget, widths rounded to the pad multiple."""
    lay = make_run("chunks", papers(records))
    plan = plan_input(lay.table("papers"))
    spec = FeedSpec(plan=plan, tokenizer=enc.tokenizer, max_length=L, sep=enc.sep, shard_size=7,
                    shape=FeedShape(batch_size=3, max_tokens=64, chunk_rows=4, pad_multiple=8))
    items = spec.chunks([0, 1, 2])
    assert [(k, lo, hi, last) for k, lo, hi, last in items] == [
        (0, 0, 4, False), (0, 4, 7, True), (1, 7, 11, False), (1, 11, 14, True), (2, 14, 15, True)]
    ids, texts = [], []
    by_id = {r["paper_id"]: paper_text(r["title"], r["abstract"]) for r in records[:12]}
    for it in items:
        chunk = prepare_chunk(spec, *it)
        assert sorted(i for b in chunk.batches for i in b.positions.tolist()) == list(range(len(chunk.ids)))
        for b in chunk.batches:
            assert b.input_ids.shape[1] % 8 == 0 and b.input_ids.shape[0] <= 3
            lengths = b.attention_mask.sum(1).tolist()
            assert lengths == sorted(lengths, reverse=True) and b.tokens == sum(lengths)
            assert len(lengths) == 1 or len(lengths) * max(lengths) <= 64
        assert unpadded(chunk) == enc.token_ids([by_id[i] for i in chunk.ids])
        ids += chunk.ids
    assert ids == expected_ids(records)
    # on CUDA the first chunks are smaller (the model starts sooner): 1/8, 1/4, 1/2, then whole
    ramp = FeedSpec(plan=plan, tokenizer=enc.tokenizer, max_length=L, sep=enc.sep, shard_size=15,
                    shape=FeedShape(batch_size=3, max_tokens=64, chunk_rows=8, ramp=True))
    assert [(lo, hi, last) for _, lo, hi, last in ramp.chunks([0])] == [(0, 1, False), (1, 3, False), (3, 7, False),
                                                                         (7, 15, True)]
    b = pad_batch([[5, 6, 7], [8]], [1, 0], pad_id=0, multiple=4)
    assert b.input_ids.tolist() == [[8, 0, 0, 0], [5, 6, 7, 0]] and b.positions.tolist() == [1, 0]
    assert b.attention_mask.tolist() == [[1, 0, 0, 0], [1, 1, 1, 0]] and b.tokens == 4


def test_feed_workers_and_chunks_write_the_same_vectors(make_run, records, enc):
    """Two feed processes (the CUDA default) write exactly what the in-process feed writes; chunks
    smaller than a shard change only the batches (same papers, vectors within float rounding)."""
    one = make_run("thread", papers(records))
    run_embed(cfg(), one, encoder=enc)
    procs = make_run("procs", papers(records))
    s = run_embed(cfg(workers=2), procs, encoder=enc)
    assert s["feed"]["workers"] == 2 and s["papers"] == 12
    chunked = make_run("chunked", papers(records))
    s = run_embed(cfg(chunk_rows=2, workers=2), chunked, encoder=enc)
    assert s["feed"]["chunk_rows"] == 2 and s["skipped"] == 3
    ids1, m1 = load_embeddings(one)
    ids2, m2 = load_embeddings(procs)
    ids3, m3 = load_embeddings(chunked)
    assert ids1 == ids2 == ids3 == expected_ids(records)
    assert np.array_equal(m1, m2)
    np.testing.assert_allclose(m3, m1, atol=2e-5)
    # the shards' footer records are the same whatever the feed
    for k in range(5):
        r1, r3 = (json.loads(pq.read_schema(x.embeddings_dir / f"part-{k:05d}.parquet").metadata[EMBEDDING_SHARD_META_KEY])
                  for x in (one, chunked))
        assert r1 == r3


def test_embed_twice_identical_input_order_and_skips(make_run, records, enc):
    lay = make_run("a", papers(records))
    s = run_embed(cfg(), lay)  # loads the model itself, as the job does
    assert s["papers"] == 12 and s["input_rows"] == 15 and s["shards"] == 5
    assert s["skipped_by_reason"] == {"no title and no abstract": 1, "null paper_id": 1,
                                      "duplicate paper_id": 1}
    ids1, m1 = load_embeddings(lay)
    assert ids1 == expected_ids(records)            # input order, first row of a duplicate wins
    assert m1.dtype == np.float32 and m1.shape == (12, 384)
    manifest = json.loads((lay.embeddings_dir / "manifest.json").read_text())
    assert manifest["complete"] and manifest["finished_shards"] == [0, 1, 2, 3, 4]
    assert len(manifest["model_hash"]) == 64 and manifest["input"]["n_rows"] == 15
    assert manifest["dim"] == 384 and manifest["pooling"] == "mean" and manifest["dtype"] == "float32"
    assert run_embed(cfg(), lay, encoder=enc)["embedded_now"] == 0   # a finished job embeds nothing
    ids2, m2 = load_embeddings(run_embed(cfg(restart=True), lay, encoder=enc)["embeddings_dir"])
    assert ids1 == ids2 and np.array_equal(m1, m2)
    # Same vectors as the encoder's plain path, one text at a time (no padding at all).
    by_id = {r["paper_id"]: paper_text(r["title"], r["abstract"]) for r in records[:12]}
    direct = np.concatenate([enc.encode([by_id[i]]) for i in ids1])
    np.testing.assert_allclose(m1, direct, atol=2e-5)


def test_resume_after_crash_writes_every_paper_once(make_run, records, enc):
    ref = make_run("ref", papers(records))
    run_embed(cfg(), ref, encoder=enc)
    ref_ids, ref_m = load_embeddings(ref)

    lay = make_run("crash", papers(records))

    def crash(k, n_done):
        if n_done == 2:
            raise Crash

    with pytest.raises(Crash):
        run_embed(cfg(), lay, after_shard=crash, encoder=enc)
    assert sorted(p.name for p in lay.embeddings_dir.glob("part-*")) == ["part-00000.parquet",
                                                                         "part-00001.parquet"]
    with pytest.raises(UserError, match="incomplete"):
        load_embeddings(lay)
    s = run_embed(cfg(), lay, encoder=enc)
    assert s["shards_resumed"] == 2 and s["embedded_now"] == 12 - 5   # shards 0-1 held 5 papers
    ids, m = load_embeddings(lay.root)
    assert len(ids) == len(set(ids)) and ids == ref_ids and np.array_equal(m, ref_m)


def test_resume_refuses_changed_model_or_input(make_run, records, tmp_path, enc):
    rows = papers(records)
    lay = make_run("chg", rows)

    def crash(k, n_done):
        raise Crash

    with pytest.raises(Crash):
        run_embed(cfg(), lay, after_shard=crash, encoder=enc)
    # Another model: the same files, one weight changed.
    import safetensors.torch as st

    src = resolve_model("minilm")
    other = tmp_path / "other-model"
    other.mkdir()
    for f in src.iterdir():
        if f.is_file() and f.name != "model.safetensors":
            (other / f.name).symlink_to(f)
    weights = st.load_file(src / "model.safetensors")
    name = next(n for n in weights if n.endswith("LayerNorm.bias"))
    weights[name] = weights[name] + 0.01
    st.save_file(weights, other / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match="different model_hash"):
        run_embed(cfg(model=str(other)), lay)
    with pytest.raises(UserError, match="different pooling"):
        run_embed(cfg(pooling="cls"), lay)
    with pytest.raises(UserError, match="different max_length"):
        run_embed(cfg(max_length=16), lay)
    changed = [dict(r) for r in rows]
    changed[0]["abstract"] = "A different abstract."
    write_papers(lay, changed)
    with pytest.raises(UserError, match="different input papers"):
        run_embed(cfg(), lay, encoder=enc)
    assert run_embed(cfg(restart=True), lay, encoder=enc)["embedded_now"] == 12
    # the pipeline's call (an earlier stage re-ran): shards of other inputs are replaced, not refused
    write_papers(lay, rows)
    s = run_embed(cfg(), lay, encoder=enc, replace_stale=True)
    assert s["embedded_now"] == 12 and s["tokens_embedded"] > 0
    assert run_embed(cfg(), lay, encoder=enc, replace_stale=True)["embedded_now"] == 0   # matching shards: resumed


def test_float16_and_bf16_outputs(make_run, records, enc):
    lay = make_run("f16", records[:4])
    run_embed(cfg(dtype="float16", shard_size=10), lay, encoder=enc)
    t = pq.read_table(lay.embeddings_dir / "part-00000.parquet")
    assert str(t.schema.field("vector").type.value_type) == "halffloat"
    ids, m = load_embeddings(lay)
    ref = make_run("f32", records[:4])
    run_embed(cfg(shard_size=10), ref, encoder=enc)
    _, m32 = load_embeddings(ref)
    assert m.dtype == np.float32 and m.shape == (4, 384)
    np.testing.assert_allclose(m, m32, atol=2e-3)
    # bf16 compute: different numbers, same directions.
    bf = make_run("bf16", records[:4])
    run_embed(cfg(shard_size=10, precision="bfloat16"), bf, encoder=enc)
    _, mb = load_embeddings(bf)
    cos = (mb * m32).sum(1) / np.linalg.norm(mb, axis=1) / np.linalg.norm(m32, axis=1)
    assert cos.min() > 0.999 and not np.array_equal(mb, m32)


def test_two_ranks_write_the_same_vectors_as_one(make_run, records, enc, repo_root):
    one = make_run("one", papers(records))
    threads = torch.get_num_threads()
    try:  # each rank below runs one thread; kernels split differently over 2 threads (1e-7 apart)
        run_embed(cfg(threads=1), one, encoder=enc)
    finally:
        torch.set_num_threads(threads)
    two = make_run("two", papers(records))
    # the job's own launcher (torch's elastic agent, as torchrun); the train test uses torchrun itself
    cmd = [sys.executable, "jobs/embed.py", "--nproc-per-node", "2", "--run", str(two.root),
           "--model", "minilm", "--batch-size", "4", "--max-tokens", "96", "--max-length", str(L),
           "--shard-size", "3", "--device", "cpu", "--precision", "float32"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "[rank 1/2]" in p.stderr and "tokens/s" in p.stderr
    manifest = json.loads((two.embeddings_dir / "manifest.json").read_text())
    assert manifest["complete"] and manifest["world_size"] == 2
    records_by_shard = {k: pq.read_schema(two.embeddings_dir / f"part-{k:05d}.parquet").metadata
                        for k in range(5)}
    assert len(records_by_shard) == 5
    ids1, m1 = load_embeddings(one)
    ids2, m2 = load_embeddings(two)
    assert ids1 == ids2 and np.array_equal(m1, m2)


def test_cli_crash_hook_then_resume(make_run, records, enc, repo_root):
    lay = make_run("cli", papers(records))
    env = dict(os.environ, SCIENCEMAP_EMBED_CRASH_AFTER="1")
    cmd = [sys.executable, "jobs/embed.py", "--run", str(lay.root), "--shard-size", "3",
           "--max-length", str(L), "--device", "cpu", "--precision", "float32"]
    # Default model = the run's trained model, which does not exist yet: one-line error, exit 2.
    p = subprocess.run(cmd, cwd=repo_root, env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "run jobs/train.py first" in p.stderr
    p = subprocess.run(cmd + ["--model", "minilm"], cwd=repo_root, env=env, capture_output=True, text=True)
    assert p.returncode != 0 and "test hook" in p.stderr
    manifest = json.loads((lay.embeddings_dir / "manifest.json").read_text())
    assert manifest["finished_shards"] == [0] and not manifest["complete"]
    s = run_embed(cfg(), lay, encoder=enc)
    assert s["shards_resumed"] == 1 and s["papers"] == 12
    ids, _ = load_embeddings(lay)
    assert ids == expected_ids(records)


def test_compiled_forward_writes_the_same_vectors(make_run, records, enc):
    """compile "on": torch.compile (inductor, frozen weights) gives the eager vectors; shards of 3
    with batches of at most 4 include single-document batches, which run eager by design."""
    # auto: compile on a CPU only when the tokens to embed pay for it (compiling is lazy: no cost here)
    assert isinstance(inference_forward(enc, "auto", COMPILE_MIN_TOKENS), CompiledForward)
    assert type(inference_forward(enc, "auto", COMPILE_MIN_TOKENS - 1)) is PooledForward
    assert type(inference_forward(enc, "off", 10**12)) is PooledForward
    eager = make_run("eager", papers(records))
    s0 = run_embed(cfg(), eager, encoder=enc)
    assert s0["compiled"] is False            # auto: a few hundred tokens do not pay for a compile
    comp = make_run("compiled", papers(records))
    s1 = run_embed(cfg(compile="on"), comp, encoder=enc)
    assert s1["compiled"] is True and s1["compile_failed"] is None
    ids0, m0 = load_embeddings(eager)
    ids1, m1 = load_embeddings(comp)
    assert ids0 == ids1
    np.testing.assert_allclose(m1, m0, atol=1e-5)
    with pytest.raises(UserError, match="compile 'yes' is unknown"):
        run_embed(cfg(compile="yes"), comp, encoder=enc)


def test_compiled_forward_falls_back_only_on_compile_errors(enc, records, capsys):
    """The compiled call's errors are sorted: a compilation error (here InvalidCxxCompiler, what
    inductor raises without a C++ compiler) falls back to eager, logged once; a runtime error
    propagates unchanged with a note naming the batch; out of memory becomes a UserError that names
    the batch and the settings to lower."""
    from torch._inductor.exc import InvalidCxxCompiler

    from encoders.embed.forward import embed_batches
    from encoders.embed.feed import pad_batch
    from encoders.model import token_ids

    tokens = token_ids(enc.tokenizer, [paper_text(r["title"], r["abstract"]) for r in records[:3]], L)
    batch = pad_batch(tokens, [0, 1, 2], enc.tokenizer.pad_token_id, 1)

    def raising(exc):
        def call(*_):
            raise exc
        return call

    def run(fwd):
        with torch.inference_mode():
            return embed_batches(fwd, [batch], 3, enc.dim, enc.device)

    fwd = CompiledForward(enc.model, "mean")
    fwd.compiled = raising(RuntimeError("CUDA error: an illegal memory access was encountered"))
    with pytest.raises(RuntimeError, match="illegal memory access") as caught:
        run(fwd)
    assert fwd.failed is None and "a batch of 3 documents x" in "".join(caught.value.__notes__)

    fwd.compiled = raising(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    with pytest.raises(UserError, match=r"out of CPU memory embedding a batch of 3 documents x \d+ tokens.*"
                                        r"max_tokens.*batch_size"):
        run(fwd)
    assert fwd.failed is None

    capsys.readouterr()
    fwd.compiled = raising(InvalidCxxCompiler())
    got = run(fwd)
    assert fwd.failed.startswith("InvalidCxxCompiler")
    assert capsys.readouterr().err.count("torch.compile failed (InvalidCxxCompiler") == 1
    np.testing.assert_allclose(got.numpy(), run(PooledForward(enc.model, "mean")).numpy(), atol=1e-6)


def test_compile_failure_falls_back_to_eager(make_run, records, repo_root):
    """Without a working C++ compiler inductor cannot build CPU kernels: the job says so once and
    writes the eager vectors."""
    lay = make_run("nocxx", papers(records))
    env = dict(os.environ, CXX="/nonexistent/c++", TORCHINDUCTOR_FX_GRAPH_CACHE="0",
               TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    cmd = [sys.executable, "jobs/embed.py", "--run", str(lay.root), "--model", "minilm",
           "--shard-size", "3", "--batch-size", "4", "--max-tokens", "96", "--max-length", str(L),
           "--device", "cpu", "--precision", "float32", "--compile", "on"]
    p = subprocess.run(cmd, cwd=repo_root, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr.count("torch.compile failed") == 1
    summary = json.loads(p.stdout)
    assert summary["compiled"] is False and summary["compile_failed"] and summary["papers"] == 12
    ref = make_run("nocxx_ref", papers(records))
    run_embed(cfg(), ref)
    (ids, m), (ids_ref, m_ref) = load_embeddings(lay), load_embeddings(ref)
    assert ids == ids_ref
    np.testing.assert_allclose(m, m_ref, atol=1e-6)


def test_defaults_by_device_and_model(enc):
    """0 / -1 settings resolve by device (a CPU here: today's measured batch shape, the feed in a
    thread) and max_length 0 by model: the untuned MiniLM has no model card, so the training default."""
    from encoders.config import TrainConfig
    from encoders.embed import feed_shape, training_length
    from sciencemap.runtime import Dist

    shape = feed_shape(EmbedConfig(shard_size=500), enc, Dist())
    assert (shape.batch_size, shape.max_tokens, shape.chunk_rows, shape.workers, shape.pad_multiple) == \
        (128, 8192, 500, 0, 1)
    assert training_length("minilm") == TrainConfig().max_length == 256
    shape = feed_shape(EmbedConfig(batch_size=7, max_tokens=99, chunk_rows=3, workers=2), enc, Dist())
    assert (shape.batch_size, shape.max_tokens, shape.chunk_rows, shape.workers) == (7, 99, 3, 2)
