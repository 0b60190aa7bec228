"""Rebuild importance/ingest/data/mesh_categories.tsv.gz from NLM's MeSH tree file (a developer tool, never
run by the pipeline).

Input: a "Tree Number<TAB>Desc Ui<TAB>Term" file such as ../shared/data/mesh-tree-2017/2017MeshTree.txt
(UTF-8, optionally with a BOM). Output, tab-separated, gzip (mtime 0, so a rebuild from the same
input gives the same bytes):

    # comment lines (notice, provenance)
    category    C04        Neoplasms              (a 3-character tree number and its descriptor's name)
    descriptor  D009369    Neoplasms    C04       (UI, name, its categories, comma-separated)

A descriptor's categories are the first 3 characters of each of its tree numbers, in order of first
appearance. Which categories count as subjects is decided by importance.ingest.fields, not here.

    python tools/build_mesh_categories.py ../shared/data/mesh-tree-2017/2017MeshTree.txt
"""
import argparse
import gzip
import hashlib
import io
import re
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "importance" / "data" / "mesh_categories.tsv.gz"
NOTICE = ("MeSH (Medical Subject Headings) is produced by the U.S. National Library of Medicine (NLM) "
          "and is free to use under NLM's terms and conditions; this file is derived from NLM's MeSH tree file.")
TREE = re.compile(r"^[A-Z]\d{2}(\.\d{3})*$")
UI = re.compile(r"^D\d{6,9}$")


def read_tree(path: Path) -> tuple[dict[str, str], dict[str, str], dict[str, list[str]]]:
    """(category code -> name, UI -> name, UI -> categories) from the tree file; a malformed line
    stops the build with its line number (a half-read MeSH would silently lose fields)."""
    cats, names, ui_cats = {}, {}, {}
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    if not lines or lines[0].split("\t")[:3] != ["Tree Number", "Desc Ui", "Term"]:
        raise SystemExit(f"{path}: expected the header 'Tree Number<TAB>Desc Ui<TAB>Term'")
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not TREE.match(parts[0]) or not UI.match(parts[1]) or not parts[2].strip():
            raise SystemExit(f"{path} line {n}: not 'tree number<TAB>UI<TAB>name': {line[:100]!r}")
        tree, ui, name = parts[0], parts[1], parts[2].strip()
        if names.setdefault(ui, name) != name:
            raise SystemExit(f"{path} line {n}: {ui} named both {names[ui]!r} and {name!r}")
        if len(tree) == 3:
            cats[tree] = name
        code = tree[:3]
        if code not in ui_cats.setdefault(ui, []):
            ui_cats[ui].append(code)
    missing = sorted({c for cs in ui_cats.values() for c in cs} - set(cats))
    if missing:
        raise SystemExit(f"{path}: categories without a descriptor of their own: {missing}")
    return cats, names, ui_cats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree_file", type=Path)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    cats, names, ui_cats = read_tree(a.tree_file)
    sha = hashlib.sha256(a.tree_file.read_bytes()).hexdigest()
    buf = io.StringIO()
    buf.write(f"# {NOTICE}\n# Source: {a.tree_file.name} (sha256 {sha}); built by tools/build_mesh_categories.py\n")
    for code in sorted(cats):
        buf.write(f"category\t{code}\t{cats[code]}\n")
    for ui in sorted(names):
        buf.write(f"descriptor\t{ui}\t{names[ui]}\t{','.join(ui_cats[ui])}\n")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as gz:
        gz.write(buf.getvalue().encode("utf-8"))
    print(f"{a.out}: {len(cats)} categories, {len(names)} descriptors, {a.out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
