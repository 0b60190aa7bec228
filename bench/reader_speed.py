"""A reader's CPU cost per paper and per reference, against the bare parse of the same input (issue 27).

Ingest's Python half is the readers: at 33M papers every microsecond a reference costs about
0.3 CPU-hours (≈ 1B references). This parses S2ORC JSON Lines the way an ingest task does
(importance.ingest.job's _write_partition: the reader, then the staged Parquet records) and, in
the same run, json.loads alone over the same lines: the floor any Python reader of this format
pays. The ratio reader / floor is what the reader adds; CPU time, the least of --repeat
alternating passes of each (one pass's CPU time wanders by up to 40 % on a shared machine).

Input: --input (S2ORC or unarXive JSON Lines, or with --format jats JATS XML files; a file or
folder), else a generated corpus (bench/synthetic.py write_input_corpus, --papers, 10 % with full
text) written under --work. The floor is json.loads of every line for JSON Lines and lxml's parse
of every file for XML (the column header says which), gzipped files unpacked first as the readers do.
Per role (map: no bodies, the map corpus; train: bodies, sections classified, mentions; no
sections table, as `[ingest] keep_sections` defaults) it prints papers,
references, CPU-ms a paper, CPU-µs a reference, and the ratio to the floor.

Verdict (exit 1 on a miss, --no-fail: 0): the map role's reader / floor <= --target-ratio.

    .venv/bin/python bench/reader_speed.py
    .venv/bin/python bench/reader_speed.py --input /tmp/unarxive --format unarxive --no-fail
    .venv/bin/python bench/reader_speed.py --input /tmp/elife --format jats --no-fail
"""
from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from pathlib import Path

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path


class FileRow:
    """A file's row as an ingest task sees it (the path as a file: URI, its input's index: the task
    reads the file itself), and the content for the bare parse's floor."""

    input = 0  # the index of its input's settings

    def __init__(self, path: Path):
        self.path = path.absolute().as_uri()
        self.content = path.read_bytes()


def files_of(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")) if path.is_dir() else [path]


def settle() -> None:
    """The same garbage-collector state before each timed pass: what earlier passes and imports
    left alive is moved out of the collector's sight (it would otherwise tax the later pass)."""
    gc.collect()
    gc.freeze()


XML_FORMATS = ("jats",)
# (the verdict's name of the floor, its column header)
FLOORS = {"xml": ("lxml parse", "lxml CPU s"), "json": ("json.loads", "json CPU s")}


def parse_floor(rows: list[FileRow], fmt: str) -> float:
    """CPU seconds of the bare parse: lxml over every file (XML formats), else json.loads over
    every non-blank line."""
    from lxml import etree

    from importance.ingest.readers.common import decompress

    settle()
    t = time.process_time()
    for r in rows:
        content = decompress(r.path, r.content)  # gunzip as the readers do
        if fmt in XML_FORMATS:
            etree.fromstring(content)
        else:
            for line in content.splitlines():
                if line.strip():
                    json.loads(line)
    return time.process_time() - t


def read(rows: list[FileRow], fmt: str, bodies: bool) -> tuple[float, dict]:
    """CPU seconds of the reader and the staged writes (an ingest task's own function), and the
    records per kind."""
    from importance.ingest import staged_records
    from importance.ingest.job import _internal_schemas, _write_partition

    schemas = staged_records.arrow_schemas(_internal_schemas())
    with tempfile.TemporaryDirectory() as root:
        staged_records.prepare(Path(root), schemas)
        settle()
        t = time.process_time()
        counts = next(_write_partition(root, schemas, [(fmt, "bench", bodies, not bodies)], False, 0, rows))
        cpu = time.process_time() - t
    kinds: dict[str, int] = {}
    for (_source, kind), n in counts.items():
        kinds[kind] = kinds.get(kind, 0) + n
    return cpu, kinds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", type=Path, help="S2ORC/unarXive JSON Lines (default: a generated corpus)")
    ap.add_argument("--format", default="s2orc")
    ap.add_argument("--papers", type=int, default=20_000, help="the generated corpus' size")
    ap.add_argument("--work", type=Path, default=Path("/tmp/reader_speed"), help="where the generated corpus is kept")
    ap.add_argument("--repeat", type=int, default=3, help="passes of each, alternating; the least counts")
    ap.add_argument("--target-ratio", type=float, default=10.5, help="map role: reader CPU / the floor's CPU at most")
    Verdicts.add_arguments(ap)
    args = ap.parse_args(argv)

    if args.input:
        inputs = {"map": files_of(args.input), "train": files_of(args.input)}
    else:
        import synthetic  # bench/synthetic.py

        stamp = args.work / f"n{args.papers}" / "generated.json"
        if not stamp.is_file():
            info = synthetic.write_input_corpus(stamp.parent, args.papers, fulltext_share=0.1, seed=0)
            stamp.write_text(json.dumps(info))
        inputs = {role: files_of(stamp.parent / role) for role in ("map", "train")}

    verdicts = Verdicts()
    floor_name, floor_column = FLOORS["xml" if args.format in XML_FORMATS else "json"]
    print(f"{'role':<6} {'papers':>8} {'refs':>9} {'reader CPU s':>12} {floor_column:>10} "
          f"{'ms/paper':>9} {'µs/ref':>7} {'ratio':>6}")
    for role, files in inputs.items():
        rows = [FileRow(f) for f in files]
        read(rows[:1], args.format, role == "train")   # imports, the section model and caches: not timed
        # CPU time on this shared machine wanders by up to 40 % from one pass to the next: the two
        # passes alternate --repeat times and each keeps its least (the least disturbed pass)
        floors, cpus = [], []
        for _ in range(args.repeat):
            floors.append(parse_floor(rows, args.format))
            cpu, kinds = read(rows, args.format, role == "train")
            cpus.append(cpu)
        floor, cpu = min(floors), min(cpus)
        papers, refs = kinds.get("paper", 0), kinds.get("ref", 0)
        ratio = cpu / floor if floor else float("nan")
        print(f"{role:<6} {papers:>8,} {refs:>9,} {cpu:>12.2f} {floor:>10.2f} "
              f"{1e3 * cpu / max(papers, 1):>9.3f} {1e6 * cpu / max(refs, 1):>7.1f} {ratio:>6.2f}", flush=True)
        if role == "map":
            verdicts.at_most(f"map role: reader CPU / {floor_name} CPU", ratio, args.target_ratio, "{:.2f}")
    return verdicts.finish(args.no_fail)


if __name__ == "__main__":
    raise SystemExit(main())
