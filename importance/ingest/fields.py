"""A paper's subject fields (papers.fields, METHODS.md §5.7): MeSH categories and arXiv archives.

The map's main-field and interdisciplinarity overlays count `fields` values, so a field must name a
subject, never an article type or a source. Two lookups ship inside the package (importance/ingest/data/):

- mesh_categories.tsv.gz (tools/build_mesh_categories.py, from NLM's 2017 MeSH tree): descriptor UI
  and name -> the 3-character tree numbers ("categories": C04 Neoplasms, D12 Amino Acids, Peptides,
  and Proteins) and each category's name.
- arxiv_archives.tsv: arXiv archive codes and names (astro-ph Astrophysics), former archives and
  category aliases.

Both are read once per process, from the installed package (a wheel, a checkout, or the zip the
Spark job ships to executors).
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from sciencemap.mesh import CHECK_TAG_UIS, CHECK_TAGS

MESH_FILE, ARXIV_FILE = "mesh_categories.tsv.gz", "arxiv_archives.tsv"
# MeSH tree letters whose categories are not subjects: V Publication Characteristics (article
# types), Z Geographicals (where), M Named Groups (its one category M01 Persons: whom, e.g. age groups).
NON_SUBJECT_LETTERS = frozenset("VZM")
_CHECK_NAMES = frozenset(n.casefold() for n in CHECK_TAGS)


def _data_text(name: str) -> str:
    res = files("importance.ingest") / "data" / name
    try:
        raw = res.read_bytes()
    except FileNotFoundError:
        raise RuntimeError(f"importance/ingest/data/{name} is missing from the installed package "
                           "(setup.cfg [options.package_data] ships it); reinstall sciencemap") from None
    return (gzip.decompress(raw) if name.endswith(".gz") else raw).decode("utf-8")


def _rows(name: str):
    for n, line in enumerate(_data_text(name).splitlines(), 1):
        if line and not line.startswith("#"):
            yield n, line.split("\t")


@dataclass(frozen=True)
class MeshTable:
    category_names: dict[str, str]           # "C04" -> "Neoplasms"
    by_ui: dict[str, tuple[str, ...]]        # "D009369" -> ("C04",)
    by_name: dict[str, tuple[str, ...]]      # "neoplasms" (casefolded) -> ("C04",)


@cache
def mesh_table() -> MeshTable:
    cats, by_ui, by_name = {}, {}, {}
    for n, row in _rows(MESH_FILE):
        if row[0] == "category" and len(row) == 3:
            cats[row[1]] = row[2]
        elif row[0] == "descriptor" and len(row) == 4:
            codes = tuple(row[3].split(","))
            by_ui[row[1]] = codes
            by_name[row[2].casefold()] = codes
        else:
            raise RuntimeError(f"importance/ingest/data/{MESH_FILE} line {n} is malformed: {row!r}")
    return MeshTable(cats, by_ui, by_name)


def is_check_tag(d: dict) -> bool:
    return (d.get("ui") or "") in CHECK_TAG_UIS or (d.get("name") or "").strip().casefold() in _CHECK_NAMES


def descriptor_categories(d: dict, table: MeshTable | None = None) -> list[str]:
    """The subject categories of one MeSH assignment {ui, name, tree_numbers}: from its own tree
    numbers when the record has them (PubMed CSV), else the lookup by UI, else by name (case-
    insensitive). Categories of V, Z and M are left out; an unknown descriptor gives none."""
    t = table or mesh_table()
    trees = [x.strip() for x in d.get("tree_numbers") or [] if x and len(x.strip()) >= 3]
    if trees:
        codes = list(dict.fromkeys(x[:3] for x in trees))
    else:
        codes = t.by_ui.get(d.get("ui") or "") or t.by_name.get((d.get("name") or "").strip().casefold(), ())
    return [c for c in codes if c[0] not in NON_SUBJECT_LETTERS and c in t.category_names]


def mesh_fields(mesh: list[dict]) -> list[str]:
    """A paper's fields from its MeSH assignments: the category names of its major-topic
    descriptors; when none of those gives a subject category (no major flags, as in the PubMed CSV,
    or only e.g. Geographicals), those of all its descriptors. Check tags never count. Names in
    order of first appearance, each once."""
    t = mesh_table()
    kept = [(bool(d.get("major")), cats) for d in mesh or [] if not is_check_tag(d)
            for cats in [descriptor_categories(d, t)] if cats]
    chosen = [cats for major, cats in kept if major] or [cats for _, cats in kept]
    return list(dict.fromkeys(t.category_names[c] for cats in chosen for c in cats))


@dataclass(frozen=True)
class ArxivTable:
    archive_names: dict[str, str]   # "astro-ph" -> "Astrophysics"
    former: dict[str, str]          # "alg-geom" -> "math"
    alias: dict[str, str]           # "math.MP" -> "math-ph"


@cache
def arxiv_table() -> ArxivTable:
    parts: dict[str, dict[str, str]] = {"archive": {}, "former": {}, "alias": {}}
    for n, row in _rows(ARXIV_FILE):
        if len(row) != 3 or row[0] not in parts:
            raise RuntimeError(f"importance/ingest/data/{ARXIV_FILE} line {n} is malformed: {row!r}")
        parts[row[0]][row[1]] = row[2]
    return ArxivTable(parts["archive"], parts["former"], parts["alias"])


def arxiv_archive(category: str) -> str | None:
    """The archive name of one arXiv category ("astro-ph.SR" -> "Astrophysics", "hep-th" ->
    "High Energy Physics - Theory", "alg-geom" -> "Mathematics"); None when unknown."""
    t = arxiv_table()
    c = t.alias.get(category, category)
    archive = c.split(".", 1)[0]
    archive = t.former.get(archive, archive)
    return t.archive_names.get(archive)


def arxiv_fields(categories: str | list[str] | None) -> tuple[list[str], list[str]]:
    """(archive names, unknown categories) of a paper's arXiv categories (a space-separated string
    as in arXiv metadata, or a list), primary category first, each name once."""
    cats = categories.split() if isinstance(categories, str) else [str(c) for c in categories or []]
    names, unknown = [], []
    for c in cats:
        name = arxiv_archive(c.strip())
        if name is None:
            unknown.append(c)
        elif name not in names:
            names.append(name)
    return names, unknown
