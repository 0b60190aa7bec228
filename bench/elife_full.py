"""Ingest + importance on the full eLife set (all research articles of the shared tar).

Selects the `research-article` files (1,600 of 1,979) from an extracted directory (or extracts the
shared tar to --xml-dir first), hard-links them into <run>/input/, runs the ingest and importance
stages in one local[2] Spark session and prints: ingest counts, the resolution rate per source,
Table 3, pairs, triplet count and the share of hard negatives, and wall times per stage.

    .venv/bin/python bench/elife_full.py --xml-dir /tmp/elife_full_xml --run /tmp/elife_full_run
    (add --skip-ingest to re-run only the importance stage on the run's ingest tables)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tarfile
import time
from pathlib import Path

from sciencemap.layout import RunLayout
from importance.ingest.job import IngestConfig, run_ingest
from importance.job import ImportanceConfig, run_importance
from importance.ingest.spark import get_spark

TAR = Path("/work/shared/data/elife-articles/elife-articles-6c97171-xml.tar.gz")
TYPE = re.compile(rb'<article[^>]*\barticle-type="([^"]+)"')


def research_files(xml_dir: Path) -> list[Path]:
    out = []
    for f in sorted(xml_dir.glob("*.xml")):
        with f.open("rb") as fh:
            m = TYPE.search(fh.read(4096))
        if m and m.group(1) == b"research-article":
            out.append(f)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--xml-dir", default="/tmp/elife_full_xml")
    ap.add_argument("--run", default="/tmp/elife_full_run")
    ap.add_argument("--tar", default=str(TAR))
    ap.add_argument("--shuffle-partitions", type=int, default=8)
    ap.add_argument("--skip-ingest", action="store_true", help="reuse the run's ingest tables")
    a = ap.parse_args(argv)
    xml_dir, run = Path(a.xml_dir), Path(a.run)
    if not any(xml_dir.glob("*.xml")):
        xml_dir.mkdir(parents=True, exist_ok=True)
        with tarfile.open(a.tar) as t:
            t.extractall(xml_dir, filter="data")
    files = research_files(xml_dir)
    inp = run / "input"
    if not a.skip_ingest:
        shutil.rmtree(inp, ignore_errors=True)
        inp.mkdir(parents=True)
        for f in files:
            try:
                os.link(f, inp / f.name)
            except OSError:
                shutil.copy(f, inp / f.name)
    print(f"research articles: {len(files)} (of {len(list(xml_dir.glob('*.xml')))} files)")
    layout = RunLayout(run)
    t0 = time.time()
    spark = get_spark(app="elife-full", shuffle_partitions=a.shuffle_partitions)
    t_start = time.time() - t0
    t1 = time.time()
    if a.skip_ingest and layout.ingest_summary.exists():
        ing = json.loads(layout.ingest_summary.read_text())
    else:
        ing = run_ingest(IngestConfig(inputs=[{"path": str(inp), "format": "jats", "source": "elife"}],
                                      shuffle_partitions=a.shuffle_partitions), layout, spark=spark)
    t_ing = time.time() - t1
    print("ingest per source:", json.dumps(ing["per_source"], indent=1))
    t2 = time.time()
    imp = run_importance(ImportanceConfig(shuffle_partitions=a.shuffle_partitions), layout, spark=spark)
    t_imp = time.time() - t2
    print("resolution rate per source:", json.dumps(imp["resolution_rate_per_source"]))
    print(f"pairs {imp['n_pairs']}, citing papers {imp['n_citing_papers']}, self-citation pairs "
          f"{imp['share_self_citation_pairs']}, zero-importance pairs {imp['share_zero_importance_pairs']}")
    print(f"triplets {imp['n_triplets']} ({imp['triplets_by_kind_split']}), share of hard negatives "
          f"{imp['share_hard_negatives']}, anchors with triplets {imp['n_anchors_with_triplets']}")
    print(f"wall: spark start {t_start:.1f}s, ingest {t_ing:.1f}s, importance {t_imp:.1f}s "
          f"(inside importance: {imp['timings']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
