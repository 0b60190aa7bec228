"""Ingest of one full-text input as "train" and as "map" (issue 27): what skipping the bodies saves.

The input (default: the 1,979 eLife JATS articles of ../shared/data/elife-articles, extracted to
--xml-dir once; without the shared data, the repo's sample/elife; or --input with --format) is
ingested twice in one local Spark session after an untimed warm-up ingest of the same input (JVM
start-up and the file cache are charged to neither): once with role "train" (bodies read, sections
classified, mentions) and once with role "map" (title, abstract, metadata and reference lists).
Prints per role: wall time of run_ingest, papers/s, papers, references, mentions; then the ratio
train time / map time.

Verdicts (exit 1 on a miss, --no-fail: 0): map is faster, train / map >= --target-ratio (1.0);
the two roles give the same papers and the same references (counts, and the same paper ids); the
map role gives no mention; the ingest's own checks hold for both.

    .venv/bin/python bench/ingest_roles.py [--xml-dir /tmp/elife_roles_xml] [--run /tmp/ingest_roles]
    .venv/bin/python bench/ingest_roles.py --input ../shared/unarxive_jsonl --format unarxive
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import time
from pathlib import Path

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parents[1]
ELIFE_TAR = REPO.parent / "shared" / "data" / "elife-articles" / "elife-articles-6c97171-xml.tar.gz"


def default_input(xml_dir: Path) -> Path:
    """The shared eLife articles (extracted once), else the repo's sample."""
    if not ELIFE_TAR.exists():
        return REPO / "sample" / "elife"
    if not any(xml_dir.glob("*.xml")):
        tmp = xml_dir.with_name(xml_dir.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with tarfile.open(ELIFE_TAR) as t:
            t.extractall(tmp, filter="data")
        shutil.rmtree(xml_dir, ignore_errors=True)
        tmp.rename(xml_dir)
    return xml_dir


def ingest(spark, path: Path, fmt: str, role: str, run: Path, partitions: int) -> tuple[float, dict, dict]:
    """One ingest: its seconds, its summary, and what it wrote (corpus paper ids, reference rows,
    the number of mentions)."""
    import pyarrow.parquet as pq

    from importance.ingest.job import IngestConfig, run_ingest
    from sciencemap.layout import RunLayout

    shutil.rmtree(run, ignore_errors=True)
    layout = RunLayout(run)
    cfg = IngestConfig(inputs=[{"path": str(path), "format": fmt, "source": fmt, "role": role}],
                       shuffle_partitions=partitions)
    t0 = time.perf_counter()
    s = run_ingest(cfg, layout, spark=spark)
    seconds = time.perf_counter() - t0
    papers = pq.read_table(layout.table("papers"), columns=["paper_id", "source_file"]).to_pandas()
    refs = pq.read_table(layout.table("references"), columns=["citing_id", "ref_key", "cited_id"]).to_pandas()
    tables = {"corpus papers": set(papers.paper_id[papers.source_file.notna()]),
              "references": set(map(tuple, refs.to_numpy().tolist())),
              "mentions": sum(pq.read_metadata(f).num_rows for f in layout.table("mentions").glob("*.parquet"))}
    return seconds, s, tables


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", help="a folder or file of full-text records (default: eLife, see above)")
    ap.add_argument("--format", default="jats", help="its format (jats, s2orc, unarxive, scisummnet, clscisumm)")
    ap.add_argument("--xml-dir", default="/tmp/elife_roles_xml", help="where the shared eLife tar is extracted")
    ap.add_argument("--run", default="/tmp/ingest_roles", help="scratch run folders (one per role)")
    ap.add_argument("--shuffle-partitions", type=int, default=4)
    ap.add_argument("--target-ratio", type=float, default=1.0, help="train time / map time at least this")
    Verdicts.add_arguments(ap)
    a = ap.parse_args(argv)
    from importance.ingest.spark import get_spark

    path = Path(a.input) if a.input else default_input(Path(a.xml_dir))
    n_files = sum(1 for p in path.rglob("*") if p.is_file()) if path.is_dir() else 1
    print(f"input: {path} ({a.format}, {n_files:,} files)")
    spark = get_spark(app="ingest-roles", master="local[2]", shuffle_partitions=a.shuffle_partitions)
    run = Path(a.run)
    ingest(spark, path, a.format, "map", run / "warm-up", a.shuffle_partitions)
    shutil.rmtree(run / "warm-up", ignore_errors=True)
    out = {}
    for role in ("train", "map"):
        seconds, s, tables = ingest(spark, path, a.format, role, run / role, a.shuffle_partitions)
        n = len(tables["corpus papers"])
        out[role] = (seconds, s, tables)
        print(f"{role:<5}: {seconds:7.1f} s, {n / seconds:8.1f} papers/s; {n:,} papers, "
              f"{len(tables['references']):,} references, {tables['mentions']:,} mentions")
    (t_train, s_train, train), (t_map, s_map, mapped) = out["train"], out["map"]
    ratio = t_train / t_map
    print(f"train / map wall time: {ratio:.2f}")

    v = Verdicts()
    v.at_least("train time / map time", ratio, a.target_ratio, "{:.2f}")
    v.check("same corpus papers (ids)", train["corpus papers"] == mapped["corpus papers"],
            f"{len(train['corpus papers']):,} vs {len(mapped['corpus papers']):,}")
    v.check("same references (citing, key, cited)", train["references"] == mapped["references"],
            f"{len(train['references']):,} vs {len(mapped['references']):,}")
    v.check("no mention from the map role", mapped["mentions"] == 0, f"{mapped['mentions']:,}")
    for role, s in (("train", s_train), ("map", s_map)):
        v.check(f"{role}: ingest checks (records, files)",
                bool(s["check_input_equals_papers_plus_rejects"] and s["check_files_found_equals_accounted"]))
    return v.finish(a.no_fail)


if __name__ == "__main__":
    sys.exit(main())
