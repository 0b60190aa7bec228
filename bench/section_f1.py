"""Section classification measured: the hand-labelled development set and JATS sec-type (issue 17).

1. eLife research articles (the shared tar, streamed) and the PMC .nxml samples: truth = the
   sec-type of each top-level section whose sec-type maps to a class; prediction =
   importance.ingest.sections.classify_sections on the article's top-level blocks with sec-type hidden
   (headings, text, positions: what the JATS reader does when a section has no sec-type).
2. The development set data/section_labels/dev.tsv.gz (411 top-level sections of 57 ScisummNet,
   CL-SciSumm 2018 and unArXive papers, labelled by reading; never trained on): its sections are
   written to a TSV and classified by the command `sciencemap classify-sections` (its code path,
   importance.ingest.classify), then scored over all, by corpus and by heading kind (empty / numbered /
   other / keyword; "uninformative" = the first three), beside the earlier rules + position.
3. Leave-one-corpus-out (--loco): the model retrained without one corpus's labelled sections (free
   and hand labels; needs ../shared) and scored on that corpus's development sections.

Prints per-class precision / recall / F1 and support, macro-F1 and accuracy, a confusion table
(rows = truth, columns = prediction) and, with --show-errors N, the commonest misses.

Targets (issue 17; --target-dev, --target-uninformative, --target-jats change them): macro-F1 on
the development set >= 0.90 over all and >= 0.85 on uninformative headings; eLife + PMC pooled
>= 0.97. A verdict line each (met, MISSED, or not checked with the reason: the eLife tar or the PMC
folder missing); exit 1 when any is missed or not checked (--no-fail: 0).

    .venv/bin/python bench/section_f1.py [--loco] [--show-errors 15] [--cache /tmp/section_cache]
"""
from __future__ import annotations

import argparse
import csv
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

from lxml import etree

from importance.ingest.classify import classify_table
from importance.ingest.readers.jats import block_text, top_blocks
from importance.ingest.section_training import (DEFAULT_DATA, DEFAULT_DEV, DEFAULT_HAND, ELIFE_TAR, PMC_DIR, TrainSettings,
                                                predict, read_labelled, read_tsv, train)
from importance.ingest.headings import CLASSES, class_from_heading, class_from_sec_type
from importance.ingest.sections import classify_sections, macro_f1
from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parents[1]
PARSER = etree.XMLParser(recover=True, resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)
UNINFORMATIVE = ("empty", "numbered", "other")


def jats_rows(data: bytes, research_only: bool = False):
    """(truth, predicted, title, sec_type) for each top-level section with a mapped sec-type; the
    predictor never sees sec-type."""
    root = etree.fromstring(data, PARSER)
    if root is None or (research_only and root.get("article-type") != "research-article"):
        return []
    blocks = top_blocks(root.find(".//body"))
    if not blocks:
        return []
    titles = [t for t, _, _ in blocks]
    pred = classify_sections(titles, [block_text(els) for _, _, els in blocks])
    return [(class_from_sec_type(st), p, t, st) for (t, st, _), p in zip(blocks, pred) if class_from_sec_type(st)]


def report(name: str, rows, show_errors: int = 0, quiet: bool = False) -> float:
    """rows: (truth, predicted, title, note). Prints the tables; returns macro-F1 over the classes
    present in truth."""
    m = macro_f1([r[0] for r in rows], [r[1] for r in rows], CLASSES)
    per = m["per_class"]
    labelled = [c for c, v in per.items() if v["support"] > 0]
    macro = sum(per[c]["f1"] for c in labelled) / len(labelled) if labelled else float("nan")
    print(f"\n== {name}: {len(rows)} sections ==  macro-F1 {macro:.4f}   accuracy {m['accuracy']:.4f}")
    if quiet:
        return macro
    print(f"{'class':<6}{'precision':>10}{'recall':>9}{'F1':>8}{'support':>9}")
    for c, v in per.items():
        print(f"{c:<6}{v['precision']:>10.4f}{v['recall']:>9.4f}{v['f1']:>8.4f}{v['support']:>9}")
    conf = Counter((t, p) for t, p, *_ in rows)
    cls = [c for c in CLASSES if any(k[0] == c or k[1] == c for k in conf)]
    print("confusion (rows = truth, columns = prediction):")
    print("      " + "".join(f"{c:>7}" for c in cls))
    for t in cls:
        print(f"{t:<6}" + "".join(f"{conf[(t, p)]:>7}" for p in cls))
    if show_errors:
        errs = Counter((t, p, title, note) for t, p, title, note in rows if t != p)
        for (t, p, title, note), n in errs.most_common(show_errors):
            print(f"  miss x{n}: {t} -> {p}  heading={title!r}  ({note})")
    return macro


def jats_corpora(args) -> tuple[list, list]:
    elife, pmc = [], []
    with tarfile.open(args.elife_tar, "r:gz") as tar:
        for m in tar:
            if m.isfile() and m.name.endswith(".xml"):
                elife += jats_rows(tar.extractfile(m).read(), research_only=True)
    for f in sorted(Path(args.pmc_dir).glob("*.nxml")):
        pmc += jats_rows(f.read_bytes())
    return elife, pmc


def dev_rows_by_command(dev_path: Path, tmp: Path) -> list[dict]:
    """The development set through `sciencemap classify-sections`: its rows with section_class."""
    src, out = tmp / "dev_sections.tsv", tmp / "dev_classes.tsv"
    rows = read_tsv(dev_path)
    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["paper_id", "section_index", "n_sections", "title", "text"],
                           delimiter="\t", extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    classify_table(src, out)
    pred = {(r["paper_id"], r["section_index"]): r["section_class"] for r in read_tsv(out)}
    return [dict(r, predicted=pred[(r["paper_id"], r["section_index"])]) for r in rows]


def rules_and_position(title: str | None, position: int) -> str:
    """The classifier before issue 17: heading rules, then an untitled first block is I, else O."""
    return class_from_heading(title) or ("I" if position == 0 else "O")


def dev_report(rows: list[dict], show_errors: int) -> dict:
    def as_rows(rs, key="predicted"):
        return [(r["label"], r[key], r["title"], r["note"]) for r in rs]

    for r in rows:
        r["rules"] = rules_and_position(r["title"] or None, int(r["section_index"]))
    out = {"all": report("development set, all", as_rows(rows), show_errors)}
    for corpus in sorted({r["corpus"] for r in rows}):
        out[corpus] = report(f"development set, {corpus}", as_rows([r for r in rows if r["corpus"] == corpus]))
    for kind in ("empty", "numbered", "other", "keyword"):
        sub = [r for r in rows if r["heading_kind"] == kind]
        out[kind] = report(f"development set, {kind} headings", as_rows(sub), quiet=True)
    hard = [r for r in rows if r["heading_kind"] in UNINFORMATIVE]
    out["uninformative"] = report("development set, empty + numbered + other headings", as_rows(hard))
    for corpus in sorted({r["corpus"] for r in rows}):
        sub = [r for r in hard if r["corpus"] == corpus]
        out[f"uninformative {corpus}"] = report(f"development set, {corpus}, uninformative headings",
                                                as_rows(sub), quiet=True)
    print("\n-- the earlier classifier (heading rules + position) on the same sections --")
    out["rules all"] = report("rules + position, all", as_rows(rows, "rules"), quiet=True)
    out["rules uninformative"] = report("rules + position, uninformative headings", as_rows(hard, "rules"),
                                        quiet=True)
    return out


def loco(args, dev_rows: list[dict]) -> dict:
    """Leave-one-corpus-out: retrain without a corpus, score its development sections."""
    out = {}
    dev = read_labelled(args.dev)
    for corpus in sorted({r["corpus"] for r in dev_rows}):
        t0 = time.time()
        model = train(args.data, REPO / DEFAULT_HAND, args.dev, exclude_corpus=corpus, cache=args.cache,
                      settings=TrainSettings())
        mine = [r for r in dev_rows if r["corpus"] == corpus]
        sections = [s for s in dev if s.corpus == corpus]  # the same rows, as Section records
        pred = dict(zip(((s.paper_id, str(s.position)) for s in sections), predict(sections, model)))
        rows = [(r["label"], pred[(r["paper_id"], r["section_index"])], r["title"], r["note"]) for r in mine]
        out[corpus] = report(f"leave-one-corpus-out: trained without {corpus} ({time.time() - t0:.0f} s)", rows)
        hard = [row for row, r in zip(rows, mine) if r["heading_kind"] in UNINFORMATIVE]
        out[f"{corpus} uninformative"] = report(f"leave-one-corpus-out: {corpus}, uninformative headings", hard,
                                                quiet=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO / DEFAULT_DATA, help="the shared data folder")
    ap.add_argument("--elife-tar", type=Path, default=None)
    ap.add_argument("--pmc-dir", type=Path, default=None)
    ap.add_argument("--dev", type=Path, default=REPO / DEFAULT_DEV)
    ap.add_argument("--loco", action="store_true", help="also leave-one-corpus-out (retrains, minutes)")
    ap.add_argument("--cache", type=Path, default=None, help="folder for parsed training sections (re-runs)")
    ap.add_argument("--show-errors", type=int, default=15)
    ap.add_argument("--target-dev", type=float, default=0.90, help="development set macro-F1 over all, at least")
    ap.add_argument("--target-uninformative", type=float, default=0.85,
                    help="development set macro-F1 on uninformative headings, at least")
    ap.add_argument("--target-jats", type=float, default=0.97, help="eLife + PMC pooled macro-F1, at least")
    Verdicts.add_arguments(ap)
    a = ap.parse_args(argv)
    a.elife_tar = a.elife_tar or a.data / ELIFE_TAR
    a.pmc_dir = a.pmc_dir or a.data / PMC_DIR
    missing = [str(p) for p in (a.elife_tar, a.pmc_dir) if not p.exists()]
    figures = {}
    if missing:
        print(f"eLife / PMC sections not scored: {', '.join(missing)} not found")
    else:
        t0 = time.time()
        elife, pmc = jats_corpora(a)
        print(f"eLife: {len(elife)} labelled sections; PMC: {len(pmc)}; {time.time() - t0:.1f} s")
        rd = sum(1 for *_, st in elife + pmc if st and st.lower().startswith("results|discussion"))
        print(f'"results|discussion" sections: {rd} (scored as R: the leftmost type/keyword wins)')
        figures = {"elife": report("eLife research articles (sec-type hidden)", elife, a.show_errors),
                   "pmc": report("PMC .nxml samples (sec-type hidden)", pmc, a.show_errors)}
        figures["elife+pmc"] = report("eLife + PMC pooled", elife + pmc, quiet=True)
    with tempfile.TemporaryDirectory() as tmp:
        t1 = time.time()
        rows = dev_rows_by_command(a.dev, Path(tmp))
        print(f"\ndevelopment set classified by the command in {time.time() - t1:.1f} s")
    figures.update(dev_report(rows, a.show_errors))
    if a.loco:
        figures.update({f"loco {k}": v for k, v in loco(a, rows).items()})
    print("\nRESULT")
    for k, f1 in figures.items():
        print(f"  {k:<34} macro-F1 {f1:.4f}")
    verdicts = Verdicts()
    verdicts.at_least("development set, macro-F1 over all", figures["all"], a.target_dev, "{:.4f}")
    verdicts.at_least("development set, macro-F1 on uninformative headings", figures["uninformative"],
                      a.target_uninformative, "{:.4f}")
    verdicts.at_least("eLife + PMC pooled, macro-F1 (sec-type hidden)", figures.get("elife+pmc"), a.target_jats,
                      "{:.4f}", reason=f"{', '.join(missing)} not found" if missing else "no labelled section")
    return verdicts.finish(a.no_fail)


if __name__ == "__main__":
    sys.exit(main())
