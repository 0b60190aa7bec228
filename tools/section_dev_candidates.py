"""Draw the top-level sections of the section-classification development set (issue 17).

Reads the public corpora in ../shared/data (ScisummNet 2019, the CL-SciSumm 2018 training set,
the unArXive sample), extracts every paper's top-level sections (heading, index, number of
sections, text) the way the readers see them, draws whole papers with a fixed seed (more papers
whose headings say nothing: empty, a bare number, no IMRaD keyword) and writes one row per section
to a TSV with an empty `label` column, for labelling by reading (bench/data/section_dev/README.md).

    .venv/bin/python tools/section_dev_candidates.py --out /tmp/section_candidates.tsv
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import random
import re
import tarfile
from pathlib import Path

from importance.readers.common import BadRecord, parse_xml
from importance.readers.scisummnet import paper_sections
from importance.section_training import read_tsv
from importance.readers.s2orc import top_sections
from importance.sections import heading_kind

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TEXT_CHARS = 1500  # what the labellers read; the `text` column holds the whole section


def scisumm_papers(tar_path: Path, kind: str, corpus: str):
    """(corpus, paper_id, [(title, text)]) of every <PAPER> XML in a `kind` folder of the tar."""
    with tarfile.open(tar_path, "r:gz") as tar:
        for m in tar:
            parts = m.name.split("/")
            if not (m.isfile() and m.name.endswith(".xml") and len(parts) >= 2 and parts[-2] == kind):
                continue
            try:
                root, _ = parse_xml(tar.extractfile(m).read(), "PAPER", keep_truncated=True)
            except BadRecord:  # unreadable files are the readers' rejects, not training data
                continue
            if root is None or root.tag != "PAPER":
                continue
            secs = [(t or "", x) for t, x in paper_sections(root)]
            if secs:
                yield corpus, "acl:" + parts[-1][:-4].lower(), secs


def unarxive_papers(tar_path: Path):
    with tarfile.open(tar_path, "r:gz") as tar:
        for m in tar:
            if m.isfile() and m.name.endswith(".jsonl"):
                for line in io.TextIOWrapper(tar.extractfile(m), encoding="utf-8"):
                    doc = json.loads(line)
                    secs = [(s.title or "", s.text) for s in top_sections(doc.get("body_text") or [])]
                    if secs:
                        yield "unarxive", "arxiv:" + doc["paper_id"], secs


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
    cl = DATA / "cl-scisumm"
    pools = {
        "scisummnet": list(scisumm_papers(cl / "scisummnet-2019.tar.gz", "Reference_XML", "scisummnet")),
        "clscisumm": list(scisumm_papers(cl / "training-set-2018-40topics.tar.gz", "Citance_XML", "clscisumm")),
        "unarxive": list(unarxive_papers(DATA / "unarxive-sample" / "unarXive_data_sample.tar.gz")),
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
