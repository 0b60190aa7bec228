"""Reading the `sections` table ([ingest] keep_sections) a paper at a time.

The ingest stage writes it range-partitioned by paper_id and sorted by (paper_id, position) within
each file, so the rows of a paper are contiguous and the files, read in name order, come in paper_id
order: a reader holds one paper's sections at a time, whatever the corpus size. A table that breaks
that order (written by an older ingest) is an error that says to run the ingest again.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.runtime import UserError
from sciencemap.storage import require_table, table_files

COLUMNS = ["paper_id", "position", "title", "section_class", "sentences"]
HINT = "run the ingest stage with [ingest] keep_sections = true"
BATCH_ROWS = 2048

# (heading, section class, sentences, position), in the paper's order
Section = tuple


def paper_sections(path: Path, wanted: set[str] | None = None) -> Iterator[tuple[str, list[Section]]]:
    """(paper_id, its sections in order) for every paper of the table (or of `wanted`), in paper_id order."""
    files = table_files(require_table(path, HINT))
    current, secs, last = None, [], None
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS, columns=COLUMNS):
            t = pa.Table.from_batches([batch])
            ids, pos, heads, classes, sents = (t[c].to_pylist() for c in COLUMNS)
            for pid, p, h, c, s in zip(ids, pos, heads, classes, sents):
                if pid != current:
                    if current is not None and (wanted is None or current in wanted):
                        yield current, secs
                    if last is not None and pid < last:
                        raise UserError(f"{path}: the sections table is not in paper_id order ({pid!r} after "
                                        f"{last!r}); {HINT} again (this version writes it in order)")
                    current, secs, last = pid, [], pid
                elif secs and p is not None and secs[-1][3] is not None and p < secs[-1][3]:
                    raise UserError(f"{path}: the sections of {pid!r} are not in position order; {HINT} again")
                secs.append((h, c, s or [], p))
    if current is not None and (wanted is None or current in wanted):
        yield current, secs


def strip_positions(secs: list) -> list[tuple]:
    """(heading, class, sentences) of each section, as encoders.fulltext.chunks and .pairs read them."""
    return [(h, c, s) for h, c, s, _ in secs]


def section_paper_ids(path: Path) -> set[str]:
    """The papers that have sections (the paper_id column only)."""
    ids: set[str] = set()
    for f in table_files(require_table(path, HINT)):
        ids.update(pq.read_table(f, columns=["paper_id"]).column("paper_id").to_pylist())
    return ids
