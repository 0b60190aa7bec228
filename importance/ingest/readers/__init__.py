"""Input readers: bytes of one input file -> `(kind, dict)` records matching sciencemap.contracts.

Pure Python (lxml, csv, json), so they run on Spark executors and in tests without Spark.
`parse_file(fmt, source, path, data)` dispatches on the format name used by IngestConfig;
`parse_file_accounted` adds one `file` record saying what became of the file (the files table).
`bodies=False` (a "map" input, importance.ingest.job): the readers of full-text formats give the paper
(has_fulltext false) and its reference list, and neither read the body nor classify sections.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from importance.ingest.readers import clscisumm, jats, medline_text, medline_xml, pubmed_csv, s2orc, scisummnet
from importance.ingest.readers.common import CITANCE, FILE, PAPER, REF, REJECT, WARNING, BadRecord, reject

@dataclass(frozen=True)
class Format:
    """One input format: its reader, the file names it reads inside an input folder (Hadoop glob
    syntax), whether its papers have a body (the reader takes `bodies`) and whether its reader gives
    the sections table's records when asked (`sections`)."""
    parse: Callable
    glob: str
    bodies: bool = False
    sections: bool = False


FORMATS = {
    "jats": Format(jats.parse, "*.{xml,nxml,xml.gz,nxml.gz}", bodies=True, sections=True),
    "scisummnet": Format(scisummnet.parse, "*.{xml,xml.gz,json,json.gz}", bodies=True, sections=True),
    "pubmed_csv": Format(pubmed_csv.parse, "*.{csv,csv.gz}"),
    "s2orc": Format(s2orc.parse, "*.{jsonl,jsonl.gz,json,json.gz}", bodies=True, sections=True),
    "unarxive": Format(s2orc.parse, "*.{jsonl,jsonl.gz,json,json.gz}", bodies=True, sections=True),
    "medline_xml": Format(medline_xml.parse, "*.{xml,xml.gz}"),
    "medline_text": Format(medline_text.parse, "*.{txt,txt.gz,medline,nbib}"),
    # annotation files (.txt, .csv) are read beside the Citance_XML files, and each is also given
    # to the reader itself, which accounts for its rows and marks it auxiliary
    "clscisumm": Format(clscisumm.parse, "*.{xml,txt,csv}", bodies=True),
}


def known_formats() -> str:
    return ", ".join(sorted(FORMATS))


def parse_file(fmt: str, source: str, path: str, data: bytes, bodies: bool = True,
               sections: bool = False) -> Iterator[tuple[str, dict]]:
    """Parse one file; any failure of the whole file becomes one reject record, never an exception.
    `sections` (with bodies): also each paper's top-level sections with their sentences."""
    try:
        f = FORMATS[fmt]
        if f.sections and bodies and sections:
            yield from f.parse(path, data, source, bodies=True, sections=True)
        elif f.bodies:
            yield from f.parse(path, data, source, bodies=bodies)
        else:
            yield from f.parse(path, data, source)
    except BadRecord as e:
        yield _whole_file_reject(path, str(e) or "unreadable (no reason given)", source)
    except Exception as e:  # a parser bug or odd input must not kill the whole job
        yield _whole_file_reject(path, f"unreadable: {type(e).__name__}: {e}"[:500], source)


def _whole_file_reject(path: str, reason: str, source: str) -> tuple[str, dict]:
    kind, rec = reject(path, _file_record_id(path), reason, source)
    rec["whole_file"] = True  # read by parse_file_accounted only (not a column of any table)
    return kind, rec


def parse_file_accounted(fmt: str, source: str, path: str, data: bytes,
                         bodies: bool = True, sections: bool = False,
                         read_error: str | None = None) -> Iterator[tuple[str, dict]]:
    """parse_file's records, then one `file` record (contracts "files"): status parsed | rejected |
    skipped | auxiliary, the input records it gave, and the reason where it is not simply parsed.
    `read_error` (common.read_input_file's reason): the file could not be read; it is rejected whole.

    rejected = the whole file failed and gave no paper or citance; a file that gave records and then
    failed (a MEDLINE file cut mid-way) is parsed, with the failure as its reason.

    A reference key its paper already gave is dropped (the first entry wins): the ingest joins
    references and mentions on (citing_id, ref_key) and relies on one entry per key, which the
    readers give (one entry per key in jats, one row of a paper id per file in s2orc); held here, it
    needs no deduplication over all references in Spark. A paper's references come together, so
    only the current paper's keys are held (a JSONL shard of 100k papers would hold millions)."""
    counts = {"papers": 0, "record_rejects": 0, "citances": 0, "warnings": 0}
    declared, failure, citance_records = None, None, 0
    ref_paper, ref_keys = None, set()
    records = (parse_file(fmt, source, path, data, bodies, sections) if read_error is None
               else [_whole_file_reject(path, read_error, source)])
    for kind, rec in records:
        if kind == FILE:
            declared = rec
            continue
        if kind == REF:
            if rec["citing_id"] != ref_paper:
                ref_paper, ref_keys = rec["citing_id"], set()
            if rec["ref_key"] in ref_keys:
                continue
            ref_keys.add(rec["ref_key"])
        elif kind == PAPER:
            counts["papers"] += 1
        elif kind == CITANCE:
            counts["citances"] += 1
            citance_records += 1
        elif kind == WARNING:
            counts["warnings"] += 1
        elif kind == REJECT:
            if rec.get("whole_file"):
                failure = rec["reason"]
            if rec.get("level") == "record":
                counts["record_rejects"] += 1
            elif rec.get("level") == "citance":
                counts["citances"] += 1
        yield kind, rec
    if declared is not None:
        status, reason = declared["status"], declared["reason"]
        counts.update({k: v for k, v in declared.items() if k in counts})
    elif failure is not None and not (counts["papers"] or citance_records):
        status, reason = "rejected", failure
    else:
        status, reason = "parsed", failure
    yield FILE, {"path": path, "source": source, "format": fmt, "status": status,
                 "bytes": len(data) if data is not None else 0, "reason": reason, **counts}


def _file_record_id(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]
