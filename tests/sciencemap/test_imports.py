"""Importing the core and the CPU-only mapping stages loads neither torch nor pyspark (a fresh
interpreter, so nothing another test imported counts)."""
from __future__ import annotations

import json
import subprocess
import sys

LIGHT = ["sciencemap", "sciencemap.pipeline", "sciencemap.cli", "sciencemap.stages", "sciencemap.embeddings",
         "sciencemap.storage", "mapping", "mapping.knn", "mapping.cluster", "mapping.io"]


def _loaded_after(modules: list[str]) -> set[str]:
    code = (f"import importlib, json, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return set(json.loads(p.stdout))


def test_core_and_knn_cluster_import_neither_torch_nor_pyspark():
    loaded = _loaded_after(LIGHT)
    heavy = sorted(m for m in loaded if m.split(".")[0] in ("torch", "pyspark", "transformers"))
    assert not heavy, heavy[:10]


def test_the_check_sees_a_heavy_import():
    assert "torch" in _loaded_after(["encoders.model"])     # the encoder does need torch
