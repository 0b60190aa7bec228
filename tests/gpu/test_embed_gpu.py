"""The embed job on CUDA (the job's own defaults: bf16, its batch shape, eager and compiled) gives
the CPU's float32 vectors within bf16 rounding, paper by paper."""
from __future__ import annotations

import numpy as np

from encoders.config import EmbedConfig
from encoders.embed import run_embed
from sciencemap.embeddings import load_embeddings

# bf16 keeps 8 bits of mantissa: pooled vectors stay within centred cosine 0.98 of float32 (measured
# figures are printed); float32 on the GPU (TF32 matmuls allowed) within 0.999.
MIN_COSINE_BF16 = 0.98
MIN_COSINE_FP32 = 0.999


def test_embed_on_cuda_matches_the_cpu(tmp_path, make_gpu_run, gpu_model, sample_papers, row_cosines):
    base = {"model": str(gpu_model), "max_length": 128, "shard_size": 100}
    cpu = make_gpu_run(tmp_path / "cpu")
    s_cpu = run_embed(EmbedConfig(**base, device="cpu", precision="float32", compile="off"), cpu)
    ids, ref = load_embeddings(cpu)
    assert s_cpu["papers"] == len(sample_papers) == len(ids)
    # the floor can fail: every paper given its neighbour's vector falls far below it
    assert row_cosines(np.roll(ref, 1, axis=0), ref).max() < MIN_COSINE_BF16

    for name, kw, floor in [("bf16 eager", {}, MIN_COSINE_BF16),
                            ("bf16 compiled", {"compile": "on"}, MIN_COSINE_BF16),
                            ("float32", {"precision": "float32", "compile": "off"}, MIN_COSINE_FP32)]:
        run = make_gpu_run(tmp_path / name.replace(" ", "_"))
        s = run_embed(EmbedConfig(**base, device="cuda", **kw), run)
        assert s["device"].startswith("cuda"), s
        assert s["compiled"] is (kw.get("compile") == "on") and s["compile_failed"] is None, s
        got_ids, got = load_embeddings(run)
        assert list(got_ids) == list(ids)
        cos = row_cosines(got, ref)
        print(f"{name}: centred cosine to CPU float32 min {cos.min():.5f}, mean {cos.mean():.5f}")
        assert cos.min() >= floor, (name, float(cos.min()))
