"""The package layering, read from the source: `sciencemap` imports none of the stage packages;
each stage package imports only itself and `sciencemap`; no module imports another that imports it
back, directly or round a longer loop (imports inside functions count: they only put the cycle off
to run time); no Python file edits the import path; no runtime module finds the repository from its
own file's location."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

STAGE_PACKAGES = ("importance", "encoders", "mapping")
PROJECT = ("sciencemap", *STAGE_PACKAGES)


def _module_names(root: Path, packages) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the named packages."""
    out = {}
    for package in packages:
        for f in sorted((root / package).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    """Every import statement of a module, at any depth, except under `if TYPE_CHECKING:` (never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _imported(name: str, path: Path, node, modules: dict) -> set[str]:
    """The project modules an import statement runs: the module named (`from p import m` names the
    submodule m when there is one) and the packages above it that the importing module is not in
    (importing a.b.c runs a/__init__ and a/b/__init__ first)."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = name.split(".")[:len(name.split(".")) - node.level + (path.name == "__init__.py")]
            base = ".".join(parts + ([base] if base else []))
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    out = set()
    for t in targets:
        while t and t not in modules:
            t = t.rpartition(".")[0]
        while t:
            if t != name and not name.startswith(t + "."):
                out.add(t)
            t = t.rpartition(".")[0]
    return out


def import_graph(root: Path, packages=PROJECT) -> dict[str, set[str]]:
    """module -> the project modules it imports (lazy imports included)."""
    modules = _module_names(root, packages)
    return {m: set().union(*(_imported(m, f, n, modules) for n in _import_nodes(ast.parse(f.read_text(), str(f)))))
            for m, f in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import loops: each strongly connected set of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


@pytest.fixture(scope="module")
def project_graph(repo_root):
    return import_graph(repo_root)


@pytest.mark.parametrize("package", PROJECT)
def test_each_package_imports_only_itself_and_the_core(project_graph, package):
    allowed = {"sciencemap"} | ({package} if package != "sciencemap" else set())
    wrong = {m: sorted(d for d in deps if d.split(".")[0] not in allowed)
             for m, deps in project_graph.items() if m.split(".")[0] == package}
    assert any(m.split(".")[0] == package for m in project_graph)
    assert not {m: w for m, w in wrong.items() if w}


def test_no_module_imports_round_a_loop(project_graph):
    assert not import_cycles(project_graph)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_walk_finds_a_loop_held_apart_by_a_lazy_import(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import g\n",
        "pkg/b.py": "def g():\n    from pkg import c\n",
        "pkg/c.py": "import os\nfrom . import a\n",
        "pkg/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import g\n",
        "pkg/sub/__init__.py": "from pkg.d import x\n",
        "pkg/sub/e.py": "from pkg.sub import f\n",
        "pkg/sub/f.py": "",
    })
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.b"] == {"pkg.c"}                      # the import inside the function
    assert graph["pkg.c"] == {"pkg.a"}                      # a relative import
    assert graph["pkg.d"] == set()                          # type-checking imports never run
    assert graph["pkg.sub.e"] == {"pkg.sub.f"}              # its own package's __init__ is running already
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    _write(tmp_path, {"pkg/c.py": "import os\n"})
    assert import_cycles(import_graph(tmp_path, ["pkg"])) == []


def test_the_walk_sees_a_cross_stage_import_and_the_packages_it_runs(tmp_path):
    _write(tmp_path, {"mapping/__init__.py": "", "mapping/x.py": "def g():\n    import encoders.model as m\n",
                      "encoders/__init__.py": "", "encoders/model.py": ""})
    assert import_graph(tmp_path, ["mapping", "encoders"])["mapping.x"] == {"encoders.model", "encoders"}


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
            for f in _module_names(repo_root, [package]).values()
            for i, line in enumerate(f.read_text().splitlines(), 1) if needle in line]
    assert not hits
