"""The opt-in sections table ([ingest] keep_sections): each top-level section of a paper read in
full, with its class, what decided the class, and its running text as sentences. Real sample
files; the reader level without Spark, then the ingest job on a real local SparkSession."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from importance.ingest.job import IngestConfig, run_ingest
from importance.ingest.readers import parse_file_accounted
from importance.ingest.readers.common import MENTION, SECTION
from importance.ingest.readers.sentences import split_sentences
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout

# (format, sample file, paper id, section position, its title, class, class source, first sentence):
# the first sentences as they stand in the files (JATS <p> text, split here; ScisummNet <S> as marked).
NAMED = [
    ("jats", "elife/elife00007.xml.gz", "doi:10.7554/elife.00007", 0, "Introduction", "I", "sec_type",
     "Plant indirect defenses are traits that disable or remove herbivores by manipulating tri-trophic "
     "interactions to the advantage of the plant (Price et al., 1980)."),
    ("jats", "elife/elife00013.xml.gz", "doi:10.7554/elife.00013", 2, "Discussion", "D", "sec_type",
     "These data reveal that RIF-1, a sulfonolipid produced by the prey bacterium A. machipongonensis, "
     "regulates morphogenesis in its predator, S. rosetta."),
    ("scisummnet", "scisummnet/A88-1019/A88-1019.xml.gz", "acl:a88-1019", 1, "2.", "M", "model",
     "However, the proposed stochastic method is considerably simpler than what Marcus had in mind."),
]


def _records(sample_dir, fmt, rel, **kw):
    path = sample_dir / rel
    return list(parse_file_accounted(fmt, "s", str(path), path.read_bytes(), **kw))


@pytest.mark.parametrize("fmt,rel,pid,pos,title,cls,source,first", NAMED)
def test_a_reader_gives_each_section_with_its_sentences(sample_dir, fmt, rel, pid, pos, title, cls, source, first):
    recs = _records(sample_dir, fmt, rel, sections=True)
    sections = [r for k, r in recs if k == SECTION]
    assert [s["position"] for s in sections] == list(range(len(sections))) and len(sections) >= 4
    s = sections[pos]
    assert (s["paper_id"], s["title"], s["section_class"], s["class_source"]) == (pid, title, cls, source)
    assert s["sentences"][0] == first and len(s["sentences"]) > 3
    # the classes are those of the section's mentions
    ments = [r for k, r in recs if k == MENTION and r.get("position") == pos]
    assert all(m["section_class"] == cls for m in ments)
    # asked for nothing, or a map input (no body read): no section records
    assert not [k for k, _ in _records(sample_dir, fmt, rel) if k == SECTION]
    assert not [k for k, _ in _records(sample_dir, fmt, rel, bodies=False, sections=True) if k == SECTION]


def test_the_splitter_keeps_abbreviations_decimals_and_references_inside_a_sentence():
    assert split_sentences(["Cells grew at 37.5 °C (Fig. 1A), as in Smith et al. (2010). We used e.g. "
                            "the method of ref. 4.", None, "  One more.  "]) == [
        "Cells grew at 37.5 °C (Fig. 1A), as in Smith et al. (2010).", "We used e.g. the method of ref. 4.",
        "One more."]


def test_ingest_writes_the_sections_table_when_asked(spark, sample_dir, tmp_path):
    inputs = [{"path": str(tmp_path / "in" / "elife"), "format": "jats", "source": "elife"},
              {"path": str(tmp_path / "in" / "scisummnet"), "format": "scisummnet", "source": "scisummnet"},
              {"path": str(tmp_path / "in" / "map"), "format": "jats", "source": "map", "role": "map"}]
    for rel in ("elife/elife00007.xml.gz", "elife/elife00013.xml.gz", "elife/elife00011.xml.gz"):
        (tmp_path / "in" / "elife").mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / rel).write_bytes((sample_dir / rel).read_bytes())
    (tmp_path / "in" / "scisummnet" / "A88-1019").mkdir(parents=True)
    (tmp_path / "in" / "scisummnet" / "A88-1019" / "A88-1019.xml.gz").write_bytes(
        (sample_dir / "scisummnet/A88-1019/A88-1019.xml.gz").read_bytes())
    (tmp_path / "in" / "map").mkdir()
    (tmp_path / "in" / "map" / "m.xml.gz").write_bytes((sample_dir / "elife/elife00109.xml.gz").read_bytes())
    layout = RunLayout(tmp_path / "run")
    s = run_ingest(IngestConfig(inputs=inputs, keep_sections=True, shuffle_partitions=2, output_partitions=1),
                   layout, spark=spark)
    assert s["check_input_equals_papers_plus_rejects"]
    t = pq.read_table(layout.table("sections"))
    assert t.schema.names == SCHEMAS["sections"].names
    rows = t.to_pylist()
    # the papers read in full, every section once; none of the map input's paper
    assert {r["paper_id"] for r in rows} == {p for _, _, p, *_ in NAMED} | {"doi:10.7554/elife.00011"}
    assert len({(r["paper_id"], r["position"]) for r in rows}) == len(rows)
    for _, _, pid, pos, title, cls, source, first in NAMED:
        (row,) = [r for r in rows if r["paper_id"] == pid and r["position"] == pos]
        assert (row["title"], row["section_class"], row["class_source"]) == (title, cls, source)
        assert row["sentences"][0] == first

    # without keep_sections the table is not written, and an earlier one is removed
    run_ingest(IngestConfig(inputs=inputs[:1], shuffle_partitions=2, output_partitions=1), layout, spark=spark)
    assert not layout.table("sections").exists()
