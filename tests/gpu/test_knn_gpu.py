"""The knn stage with gpu = "require" (FAISS GPU indexes) gives the CPU's exact neighbour lists on
the GPU-embedded sample, ties aside, with the database resident on the GPU (added in tiles); the
GPU IVF tunes nprobe to the target like the CPU's."""
from __future__ import annotations

import numpy as np
import pytest

from encoders.config import EmbedConfig
from encoders.embed import run_embed
from sciencemap.storage import read_table

# GPU and CPU inner products round differently in the last bits: a swap of two neighbours whose
# similarities differ by less than this is a tie, not a difference.
TIE = 1e-5


def neighbour_lists(layout):
    t = read_table(layout.table("edges"))
    src, dst, sim, rank = (t.column(c).to_numpy() for c in ("src", "dst", "similarity", "rank"))
    order = np.lexsort((rank, src))
    return src[order], dst[order], sim[order]


def test_knn_on_the_gpu_matches_the_cpu(tmp_path, make_gpu_run, gpu_model):
    faiss = pytest.importorskip("faiss")
    from mapping.knn import KnnConfig, gpu_count, run_knn

    if gpu_count() == 0:
        pytest.skip(f"FAISS {faiss.__version__} here sees no GPU ("
                    + ("a faiss-cpu build: `make install-gpu` installs faiss-gpu" if
                       not hasattr(faiss, "StandardGpuResources") else "GPU build, but no device") + ")")
    run = make_gpu_run(tmp_path / "run")
    run_embed(EmbedConfig(model=str(gpu_model), device="cuda", max_length=128), run)
    cpu = run_knn(KnnConfig(k=20, index="flat", gpu="never"), run)
    src_c, dst_c, sim_c = neighbour_lists(run)
    gpu = run_knn(KnnConfig(k=20, index="flat", gpu="require", db_block=97), run)   # uploaded in tiles of 97 rows
    src_g, dst_g, sim_g = neighbour_lists(run)
    assert gpu["gpu"] is True and cpu["gpu"] is False and gpu["edges"] == cpu["edges"]
    assert gpu["gpu_storage"] == "float32"              # 300 x 384 fits: float32, resident
    assert np.array_equal(src_c, src_g)
    differ = dst_c != dst_g
    # every differing slot holds the same similarity on both devices (a tie swap), within TIE
    assert np.abs(sim_c - sim_g).max() <= TIE
    print(f"{cpu['edges']} edges, {int(differ.sum())} slots swapped within ties")
    assert differ.mean() < 0.01
    ivf = run_knn(KnnConfig(k=20, index="ivf_sq8", gpu="require", target_recall=0.95, recall_queries=200), run)
    assert ivf["gpu"] is True and ivf["tuning"]["tuned"] and ivf["tuning"]["steps"][-1]["recall_low"] >= 0.95
