"""Ingest of the ScisummNet 2019 and CL-SciSumm 2018 training data (issue 3): malformed files end in
`rejects` with the parser's reason, every other file is ingested, and the counts add up.

Extracts both tars of ../shared/data/cl-scisumm into --cache (once), runs the ingest stage on them
in one local Spark session and prints, per source: input records (papers + record rejects as the
readers produced them), papers, record rejects with their reasons (each rejected file named),
citances and their rejects, references, mentions and the ingest's own checks.

    .venv/bin/python bench/scisumm_ingest.py [--cache /tmp/scisumm_cache] [--run /tmp/scisumm_run]

A verdict line per source (met or MISSED): input records = papers + record rejects (and, where
the source has citances, input citances = in-corpus + rejected); exit 1 when any is missed
(--no-fail: 0).
"""
from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
from pathlib import Path

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

# the shared data folder beside this checkout (bench scripts run from a checkout)
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cl-scisumm"
TARS = {"scisummnet": ("scisummnet-2019.tar.gz", "data/Training-Set-2019/Task1/From-ScisummNet-2019"),
        "clscisumm": ("training-set-2018-40topics.tar.gz", "data/Training-Set-2019/Task1/From-Training-Set-2018")}


def extract(cache: Path) -> dict[str, Path]:
    out = {}
    for fmt, (tar, sub) in TARS.items():
        dest = cache / fmt
        if not (dest / sub).exists():
            tmp = cache / f"{fmt}.tmp"
            tmp.mkdir(parents=True, exist_ok=True)
            with tarfile.open(DATA / tar) as t:
                t.extractall(tmp, filter="data")
            tmp.rename(dest)
        out[fmt] = dest / sub
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default="/tmp/scisumm_cache")
    ap.add_argument("--run", default="/tmp/scisumm_run")
    Verdicts.add_arguments(ap)
    a = ap.parse_args(argv)
    import pyarrow.parquet as pq

    from sciencemap.layout import RunLayout
    from importance.ingest.job import IngestConfig, run_ingest

    dirs = extract(Path(a.cache))
    files = {fmt: sum(1 for p in d.rglob("*") if p.is_file()) for fmt, d in dirs.items()}
    print(f"extracted: {json.dumps({k: str(v) for k, v in dirs.items()})}; files on disk {files}")
    layout = RunLayout(Path(a.run))
    t = time.time()
    s = run_ingest(IngestConfig(inputs=[{"path": str(d), "format": fmt, "source": fmt} for fmt, d in dirs.items()]),
                   layout)
    print(f"ingest done in {time.time() - t:.1f} s")
    rej = pq.read_table(layout.table("rejects")).to_pandas()
    verdicts = Verdicts()
    for src, d in sorted(s["per_source"].items()):
        verdicts.check(f"{src}: input records = papers + record rejects",
                       bool(d["check_input_equals_papers_plus_rejects"]))
        if "check_citances" in d:
            verdicts.check(f"{src}: input citances = in-corpus + rejected", bool(d["check_citances"]))
        print(f"\n== {src}")
        for k in ("input_records", "papers_corpus", "papers_fulltext", "record_rejects", "input_citances",
                  "citances_in_corpus", "references", "references_resolved", "mentions", "citance_section_match_rate"):
            if k in d:
                print(f"{k:<28} {d[k]}")
        print(f"{'rejects by reason':<28} {json.dumps(d['rejects'])}")
        print(f"check input records = papers + record rejects: {d['check_input_equals_papers_plus_rejects']}"
              + (f"; input citances = in-corpus + rejected: {d['check_citances']}" if "check_citances" in d else ""))
        mine = rej[rej.source_file.str.contains(str(dirs[src]), regex=False)]
        for reason, g in mine.groupby("reason"):
            if len(g) <= 20:  # the file-level rejects: name each file
                for f, rid in sorted(zip(g.source_file, g.record_id)):
                    print(f"  {reason}: {'/'.join(f.rsplit('/', 3)[-3:])} ({rid})")
    print(f"\nRESULT counts add up for every source: {s['check_input_equals_papers_plus_rejects']}")
    verdicts.check("every source: input records = papers + record rejects",
                   bool(s["check_input_equals_papers_plus_rejects"]))
    return verdicts.finish(a.no_fail)


if __name__ == "__main__":
    sys.exit(main())
