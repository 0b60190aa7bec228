"""Draw the top-level sections of the section-classification development set (issue 17).

Reads the public corpora in ../shared/data (ScisummNet 2019, the CL-SciSumm 2018 training set,
the unArXive sample), extracts every paper's top-level sections (heading, index, number of
sections, text) the way the readers see them, draws whole papers with a fixed seed (more papers
whose headings say nothing: empty, a bare number, no IMRaD keyword) and writes one row per section
to a TSV with an empty `label` column, for labelling by reading (data/section_labels/README.md).

    .venv/bin/python tools/section_dev_candidates.py --out /tmp/section_candidates.tsv
"""
from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

from importance.ingest.section_training import (CLSCISUMM_TAR, SCISUMMNET_TAR, UNARXIVE_TAR, read_tsv, scisumm_sections,
                                                unarxive_sections)
from importance.ingest.headings import heading_kind

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TEXT_CHARS = 1500  # what the labellers read; the `text` column holds the whole section


def corpus_pool(corpus: str, papers) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(corpus, paper_id, [(title or "", text)]) of each paper the training readers yield."""
    return [(corpus, pid, [(t or "", x) for t, x in secs]) for pid, secs, _ in papers]


def share(secs, kinds) -> float:
    return sum(heading_kind(t) in kinds for t, _ in secs) / len(secs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=17)
    # papers drawn per corpus: (mostly empty or numbered headings, mostly other non-keyword headings, any)
    ap.add_argument("--scisummnet", type=int, nargs=3, default=(12, 12, 6))
    ap.add_argument("--clscisumm", type=int, nargs=3, default=(0, 10, 4))
    ap.add_argument("--unarxive", type=int, nargs=3, default=(0, 8, 5))
    ap.add_argument("--max-per-paper", type=int, default=12)
    ap.add_argument("--exclude", nargs="*", default=[], help="labelled TSV(s) whose papers are not drawn again")
    a = ap.parse_args(argv)
    pools = {
        "scisummnet": corpus_pool("scisummnet", scisumm_sections(DATA / SCISUMMNET_TAR, "scisummnet", ("Reference_XML",))),
        "clscisumm": corpus_pool("clscisumm", scisumm_sections(DATA / CLSCISUMM_TAR, "clscisumm", ("Citance_XML",))),
        "unarxive": corpus_pool("unarxive", unarxive_sections(DATA / UNARXIVE_TAR)),
    }
    rng = random.Random(a.seed)
    chosen, seen = [], set()
    for f in a.exclude:
        seen |= {r["paper_id"] for r in read_tsv(Path(f))}
    for corpus, pool in pools.items():
        n_bare, n_other, n_any = getattr(a, corpus)
        pool = sorted((p for p in pool if p[1] not in seen), key=lambda p: p[1])
        bare = [p for p in pool if share(p[2], ("empty", "numbered")) >= 0.5]
        pick = rng.sample(bare, min(n_bare, len(bare)))
        other = [p for p in pool if p not in pick and share(p[2], ("empty", "numbered", "other")) >= 0.5]
        pick += rng.sample(other, min(n_other, len(other)))
        rest = [p for p in pool if p not in pick]
        pick += rng.sample(rest, min(n_any, len(rest)))
        for p in pick:
            seen.add(p[1])
        chosen += pick
    rows = []
    for corpus, pid, secs in chosen:
        for i, (title, text) in enumerate(secs):
            if i >= a.max_per_paper and i < len(secs) - 2:  # long papers: the first sections and the last two
                continue
            rows.append({"id": f"{pid}#{i}", "corpus": corpus, "paper_id": pid, "section_index": i,
                         "n_sections": len(secs), "title": title, "heading_kind": heading_kind(title),
                         "label": "", "text": text})
    with open(a.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t", quoting=csv.QUOTE_MINIMAL)
        w.writeheader()
        w.writerows(rows)
    kinds = {}
    for r in rows:
        kinds[(r["corpus"], r["heading_kind"])] = kinds.get((r["corpus"], r["heading_kind"]), 0) + 1
    print(f"{len(rows)} sections of {len(chosen)} papers -> {a.out}")
    for k in sorted(kinds):
        print(f"  {k[0]:<11} {k[1]:<12} {kinds[k]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
