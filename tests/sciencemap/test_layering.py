"""The package layering of issue 12, read from the source: `sciencemap` imports none of the stage
packages; each stage package imports only itself and `sciencemap`; no Python file edits the
import path; no runtime module finds the repository from its own file's location."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

STAGE_PACKAGES = ("importance", "encoders", "mapping")
PROJECT = ("sciencemap", *STAGE_PACKAGES)


def _project_imports(path: Path) -> set[str]:
    """Top-level project packages that a module imports (anywhere in it, lazy imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {n.split(".")[0] for n in names if n.split(".")[0] in PROJECT}
    return found


def _modules(repo_root: Path, package: str) -> list[Path]:
    files = sorted((repo_root / package).rglob("*.py"))
    assert files, f"no modules under {package}/"
    return files


@pytest.mark.parametrize("package", PROJECT)
def test_each_package_imports_only_itself_and_the_core(repo_root, package):
    allowed = {"sciencemap"} | ({package} if package != "sciencemap" else set())
    wrong = {str(f.relative_to(repo_root)): sorted(_project_imports(f) - allowed)
             for f in _modules(repo_root, package)}
    assert not {f: w for f, w in wrong.items() if w}


def test_the_import_reader_sees_lazy_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\ndef g():\n    from mapping.knn import run_knn\n    import encoders.model as m\n")
    assert _project_imports(f) == {"mapping", "encoders"}


def _tracked_python(repo_root: Path) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=repo_root, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [repo_root / f for f in out.stdout.split()]


def test_no_python_file_edits_the_import_path(repo_root):
    needle = "sys." + "path"          # spelled apart, so this file does not match itself
    hits = [str(f.relative_to(repo_root)) for f in _tracked_python(repo_root)
            if f.exists() and needle in f.read_text()]
    assert not hits


def test_no_runtime_module_locates_the_repository_from_its_own_file(repo_root):
    needle = "parents" + "["
    hits = [f"{f.relative_to(repo_root)}:{i}" for package in (*PROJECT, "jobs")
            for f in _modules(repo_root, package)
            for i, line in enumerate(f.read_text().splitlines(), 1) if needle in line]
    assert not hits
