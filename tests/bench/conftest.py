"""What the bench scripts' tests share."""
from __future__ import annotations

import importlib.util
import sys

import pytest


@pytest.fixture(scope="session")
def bench_module(repo_root):
    """Loads a bench script as a module by its name (bench/ is no package). A script that imports a
    sibling (`from verdicts import ...`) needs bench/ on the import path: the caller puts it there."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"sciencemap_bench_{name}", repo_root / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module   # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    return load
