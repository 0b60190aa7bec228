"""Subject fields (importance.ingest.fields): the shipped MeSH and arXiv lookups, the MeSH category rule
(major topics, check tags, V/Z/M left out), arXiv archives, and the lookups read from an installed
wheel and from the zip the Spark job ships to executors."""
from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from importance.ingest.fields import (NON_SUBJECT_LETTERS, arxiv_archive, arxiv_fields, descriptor_categories,
                                      mesh_fields, mesh_table)
from importance.ingest.spark import package_zip

# Real lines of NLM's 2017MeshTree.txt (tree number, descriptor UI, name).
TREE_LINES = """\
C04\tD009369\tNeoplasms
C04.588\tD009371\tNeoplasms by Site
C04.588.180\tD001943\tBreast Neoplasms
C17\tD017437\tSkin and Connective Tissue Diseases
C17.800\tD012871\tSkin Diseases
C17.800.090\tD001943\tBreast Neoplasms
B01\tD056890\tEukaryota
B01.050\tD000818\tAnimals
Z01\tD005842\tGeographic Locations
Z01.107.567.875\tD014481\tUnited States
"""
BUILDER = Path(__file__).resolve().parents[3] / "tools" / "build_mesh_categories.py"


def _build(tree_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    src = tmp_path / "tree.txt"
    src.write_text("\ufeffTree Number\tDesc Ui\tTerm\n" + tree_text, encoding="utf-8")
    return subprocess.run([sys.executable, "-P", str(BUILDER), str(src), "--out", str(tmp_path / "out.tsv.gz")],
                          capture_output=True, text=True)


def test_builder_on_real_tree_lines_and_the_shipped_table_agrees(tmp_path):
    r = _build(TREE_LINES, tmp_path)
    assert r.returncode == 0, r.stderr
    text = gzip.decompress((tmp_path / "out.tsv.gz").read_bytes()).decode()
    rows = [line.split("\t") for line in text.splitlines()]
    assert rows[0][0].startswith("# MeSH") and "National Library of Medicine" in rows[0][0]
    body = [r for r in rows if not r[0].startswith("#")]
    assert [r for r in body if r[0] == "category"] == [
        ["category", c, n] for c, n in [("B01", "Eukaryota"), ("C04", "Neoplasms"),
                                        ("C17", "Skin and Connective Tissue Diseases"), ("Z01", "Geographic Locations")]]
    desc = {r[1]: (r[2], r[3]) for r in body if r[0] == "descriptor"}
    assert desc["D001943"] == ("Breast Neoplasms", "C04,C17") and desc["D014481"] == ("United States", "Z01")
    assert len(desc) == 9
    # The shipped table holds the same facts for these descriptors.
    t = mesh_table()
    for ui, (name, cats) in desc.items():
        assert set(cats.split(",")) <= set(t.by_ui[ui]) and t.by_name[name.casefold()] == t.by_ui[ui]
    assert t.category_names["C04"] == "Neoplasms" and t.category_names["D12"] == "Amino Acids, Peptides, and Proteins"
    assert len(t.category_names) == 118 and len(t.by_ui) == 28470
    assert all(c in t.category_names for cats in t.by_ui.values() for c in cats)


def test_builder_stops_on_a_malformed_line(tmp_path):
    r = _build(TREE_LINES + "C04.588.999\tnot-a-ui\tBroken\n", tmp_path)
    assert r.returncode != 0 and "line 12" in r.stderr and not (tmp_path / "out.tsv.gz").exists()
    r = _build("C04.588\tD009371\tNeoplasms by Site\n", tmp_path)  # C04 itself missing: no name for it
    assert r.returncode != 0 and "['C04']" in r.stderr


def test_shipped_table_is_the_builders_output_of_the_2017_tree(repo_root, shared_data, tmp_path):
    tree = shared_data / "mesh-tree-2017" / "2017MeshTree.txt"
    assert tree.exists(), f"{tree} is missing from the shared data"
    r = subprocess.run([sys.executable, "-P", str(BUILDER), str(tree), "--out", str(tmp_path / "m.tsv.gz")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m.tsv.gz").read_bytes() == (repo_root / "importance/ingest/data/mesh_categories.tsv.gz").read_bytes()


def _d(name, major=False, ui=None, trees=()):
    return {"ui": ui, "name": name, "major": major, "tree_numbers": list(trees)}


def test_descriptor_categories_by_trees_ui_or_name():
    # Own tree numbers win (PubMed CSV); else UI; else name, case-insensitively; V/Z/M never count.
    assert descriptor_categories(_d("x", trees=["C04.588.180", "C17.800.090", "C04.1"])) == ["C04", "C17"]
    assert descriptor_categories(_d("wrong name", ui="D001943")) == ["C04", "C17"]
    assert descriptor_categories(_d("BREAST NEOPLASMS ")) == ["C04", "C17"]
    assert descriptor_categories(_d("Breast Neoplasms", ui="D999999999")) == ["C04", "C17"]  # unknown UI: by name
    assert descriptor_categories(_d("United States")) == []           # Z01
    assert descriptor_categories(_d("Patients")) == []                # M01
    assert descriptor_categories(_d("Clinical Study")) == []          # V03
    assert descriptor_categories(_d("No Such Descriptor")) == []
    assert NON_SUBJECT_LETTERS == frozenset("VZM")


def test_mesh_fields_major_topics_check_tags_and_fallback():
    asthma, budesonide = _d("Asthma", True, "D001249"), _d("Budesonide", True, "D019819")
    adult, humans = _d("Adult", False, "D000328"), _d("Humans", True, "D006801")
    usa, lung = _d("United States", True, "D014481"), _d("Lung", False, "D008168")
    # Major descriptors only; Asthma is C08 and C20; Humans is a check tag even when flagged major.
    assert mesh_fields([humans, asthma, lung, budesonide, adult]) == [
        "Respiratory Tract Diseases", "Immune System Diseases", "Polycyclic Compounds"]
    # No major descriptor with a subject category (only Geographicals, a check tag): all descriptors.
    assert mesh_fields([usa, humans, lung, adult]) == ["Respiratory System"]
    assert mesh_fields([_d("Lung"), _d("Asthma")]) == ["Respiratory System", "Respiratory Tract Diseases",
                                                        "Immune System Diseases"]
    assert mesh_fields([humans, _d("Female"), adult, usa]) == [] and mesh_fields([]) == []


def test_arxiv_archives():
    assert arxiv_archive("astro-ph.SR") == "Astrophysics"
    assert arxiv_archive("hep-th") == "High Energy Physics - Theory"
    assert arxiv_archive("physics.chem-ph") == "Physics"
    assert arxiv_archive("math.MP") == "Mathematical Physics"           # alias of math-ph
    assert arxiv_archive("cs.NA") == "Mathematics"                      # alias of math.NA
    assert arxiv_archive("alg-geom") == "Mathematics" and arxiv_archive("cmp-lg") == "Computer Science"
    assert arxiv_archive("supr-con") == "Condensed Matter" and arxiv_archive("arxiv") is None
    assert arxiv_fields("hep-th math-ph math.MP nlin.SI") == (
        ["High Energy Physics - Theory", "Mathematical Physics", "Nonlinear Sciences"], [])
    assert arxiv_fields(["cs.CL", "cs.LG", "foo.BAR"]) == (["Computer Science"], ["foo.BAR"])
    assert arxiv_fields(None) == ([], []) and arxiv_fields("") == ([], [])


_LOAD = ("import importance.ingest.fields as f; t = f.mesh_table(); a = f.arxiv_table(); "
         "print(f.__file__); print(len(t.by_ui), t.category_names['C10'], a.archive_names['astro-ph'])")


def _python_with(path: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(path)}
    return subprocess.run([sys.executable, "-P", "-c", _LOAD], capture_output=True, text=True, cwd=cwd, env=env)


def test_lookups_load_from_an_installed_wheel_and_from_the_executor_zip(repo_root, tmp_path):
    # A wheel built from the project's packaging files (setup.cfg package_data), unpacked as pip would.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(repo_root / name, src / name)
    for pkg in ("importance", "sciencemap", "encoders", "mapping", "jobs"):
        shutil.copytree(repo_root / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "-w", str(tmp_path / "wheel"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    (whl,) = (tmp_path / "wheel").glob("*.whl")
    names = zipfile.ZipFile(whl).namelist()
    assert {"importance/ingest/data/mesh_categories.tsv.gz", "importance/ingest/data/arxiv_archives.tsv",
            "importance/ingest/data/NOTICE.md"} <= set(names)
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _python_with(site, elsewhere)
    assert r.returncode == 0, r.stderr
    path, facts = r.stdout.splitlines()
    assert path.startswith(str(site)) and facts == "28470 Nervous System Diseases Astrophysics"
    # The zip the Spark job ships to executors (importance.ingest.spark.package_zip): imported from the zip.
    z = package_zip(tmp_path)
    assert "importance/ingest/data/mesh_categories.tsv.gz" in zipfile.ZipFile(z).namelist()
    r = _python_with(z, elsewhere)
    assert r.returncode == 0, r.stderr
    path, facts = r.stdout.splitlines()
    assert path.startswith(str(z)) and facts == "28470 Nervous System Diseases Astrophysics"
