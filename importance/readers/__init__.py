"""Input readers: bytes of one input file -> `(kind, dict)` records matching sciencemap.contracts.

Pure Python (lxml, csv, json), so they run on Spark executors and in tests without Spark.
`parse_file(fmt, source, path, data)` dispatches on the format name used by IngestConfig.
"""
from __future__ import annotations

from typing import Iterator

from importance.readers import clscisumm, jats, medline_text, medline_xml, pubmed_csv, s2orc, scisummnet
from importance.readers.common import BadRecord, reject

FORMATS = {"jats": jats.parse, "scisummnet": scisummnet.parse, "pubmed_csv": pubmed_csv.parse,
           "s2orc": s2orc.parse, "unarxive": s2orc.parse, "medline_xml": medline_xml.parse,
           "medline_text": medline_text.parse, "clscisumm": clscisumm.parse}
# Which file names each format reads inside an input folder (Hadoop glob syntax).
GLOBS = {"jats": "*.{xml,nxml,xml.gz,nxml.gz}", "scisummnet": "*.{xml,xml.gz,json,json.gz}",
         "pubmed_csv": "*.{csv,csv.gz}", "s2orc": "*.{jsonl,jsonl.gz,json,json.gz}",
         "unarxive": "*.{jsonl,jsonl.gz,json,json.gz}", "medline_xml": "*.{xml,xml.gz}",
         "medline_text": "*.{txt,txt.gz,medline,nbib}",
         "clscisumm": "*.xml"}  # annotation files are read beside the Citance_XML files


def known_formats() -> str:
    return ", ".join(sorted(FORMATS))


def parse_file(fmt: str, source: str, path: str, data: bytes) -> Iterator[tuple[str, dict]]:
    """Parse one file; any failure of the whole file becomes one reject record, never an exception."""
    try:
        yield from FORMATS[fmt](path, data, source)
    except BadRecord as e:
        yield reject(path, _file_record_id(path), str(e), source)
    except Exception as e:  # a parser bug or odd input must not kill the whole job
        yield reject(path, _file_record_id(path), f"unreadable: {type(e).__name__}: {e}"[:500], source)


def _file_record_id(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]
