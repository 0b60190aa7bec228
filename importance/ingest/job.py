"""Ingest stage: input files -> papers, references, mentions, rejects, warnings, files (+ ingest_summary.json),
and sections when asked (`keep_sections`).

Files are read by executors (Spark lists them, binaryFile without its content; each task's Python
reads its files by path and runs the pure-Python readers); the driver only sees small aggregates.
Every file under an input root is one row of `files`: parsed, rejected, auxiliary (read with
other files) or skipped, with the reason. The executors give the row of each file they read; the
driver lists the input roots (metadata only) and adds the files Spark does not read (names the
format's glob does not match, hidden names, empty files), so the per-source check files found =
parsed + rejected + skipped + auxiliary covers every file, not only those recognised.
Papers kept after lenient recovery of a damaged file have a row in `warnings`.
Every input record ends in `papers` or `rejects`:
- record level (a JATS file, a ScisummNet paper XML, a CSV row): parsed paper or reject;
- citance level (ScisummNet, CL-SciSumm): in-corpus citance -> references + mentions, else reject;
  citances landing on the same citing sentence for the same cited paper are one mention (the
  others are rejected as duplicates); citances are counted under their own source;
- item level: references without any id, title or raw string, in-text citations to unknown references.
Duplicate paper ids: a full-text row first, then the row from the smallest (source_file, ord) is
kept, the others rejected; within one file the reader has already rejected a repeated id (s2orc),
so a kept row's (paper_id, source_file) picks its references and mentions alone.

Roles (an input's `role`: "train", "map" or "train+map", the default): a "train" input is read in
full (sections, mentions: its papers are citing papers of importance pairs and triplet anchors); a
"map" input gives papers (title, abstract, metadata) and reference lists only, bodies unread
(has_fulltext false); a paper is embedded and mapped (`mapped`) when its input's role has "map".
Cited-only papers (unresolved references, resolve.cited_only_papers) are mapped when at least
`cited_only_min_citations` mapped corpus papers cite them; below that, one cited by a full-text
paper stays a papers row with mapped = false (a triplet positive needs its title), the others are
left out of papers (their references keep the cited_id).
"""
from __future__ import annotations

import fnmatch
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from sciencemap.config import setting
from sciencemap.contracts import FILE_STATUSES, SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import write_json_atomic

from importance.ingest.readers.common import DUPLICATE_REASON
from importance.ingest.spark import (AUTO, InputSize, SizeTally, SparkSettings, arrow_to_spark_type, auto_int,
                                     spark_for_stage, to_spark_schema, total_size, write_spark_table)

# Relative input paths are read from the working directory (make demo runs from the checkout).
DEFAULT_INPUTS = [
    {"path": "sample/elife", "format": "jats", "source": "elife"},
    {"path": "sample/scisummnet", "format": "scisummnet", "source": "scisummnet"},
    {"path": "sample/pubmed", "format": "pubmed_csv", "source": "pubmed"},
]
OUTSIDE_REASON = "citing paper outside corpus"
CITED_MISSING_REASON = "cited paper not in corpus"
DANGLING_REASON = "in-text citation to an unknown reference"
DUPLICATE_CITANCE_REASON = "duplicate citance (same citing sentence and cited paper as another citance)"
HIDDEN_FILE_REASON = "hidden file: Spark does not read names starting with '.' or '_'"
EMPTY_FILE_REASON = "empty file"
SKIPPED_LISTED = 50  # skipped files named in ingest_summary.json (and the report); the files table has all
WARNINGS_LISTED = 20
ROLES = ("train", "map", "train+map")
DEFAULT_ROLE = "train+map"


def input_role(spec: dict) -> str:
    """An input's role (module docstring); an unknown one is a user error."""
    role = spec.get("role", DEFAULT_ROLE)
    if role not in ROLES:
        raise UserError(f"ingest input {spec.get('path')} has role {role!r}; set role to one of: "
                        f"{', '.join(ROLES)} (the default)")
    return role


def reads_bodies(spec: dict) -> bool:
    return "train" in input_role(spec)


def is_mapped(spec: dict) -> bool:
    return "map" in input_role(spec)


def parse_input(spec: str) -> dict:
    """`--input PATH:FORMAT:SOURCE[:ROLE]` as an [ingest] inputs entry (a 4th part is a role when
    the part before the source is a known format, so a path may still hold ':')."""
    import argparse

    from importance.ingest.readers import FORMATS

    parts = spec.rsplit(":", 3)
    if len(parts) == 4 and parts[1] in FORMATS:
        entry = {"path": parts[0], "format": parts[1], "source": parts[2], "role": parts[3]}
        try:
            input_role(entry)
        except UserError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return entry
    parts = spec.rsplit(":", 2)
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{spec!r} must read PATH:FORMAT:SOURCE[:ROLE], e.g. sample/elife:jats:elife "
                                         "or sample/pubmed:pubmed_csv:pubmed:map")
    return {"path": parts[0], "format": parts[1], "source": parts[2]}


@dataclass
class IngestConfig(SparkSettings):  # Spark settings: importance/ingest/spark.py, docs/spark.md
    inputs: list[dict] = setting(help="PATH:FORMAT:SOURCE[:ROLE], repeatable; replaces the configured inputs; "
                                      "ROLE: train, map or train+map (default)",
                                 factory=lambda: [dict(x) for x in DEFAULT_INPUTS], parse=parse_input, append=True,
                                 flags=("--input",))
    read_partitions: int | str = setting(AUTO, "partitions of the parsed input (few on small corpora: per-task "
                                               "Python start-up dominates); auto = one per max_partition_bytes "
                                               "of input, at least 2 per task slot", parse=auto_int)
    output_partitions: int = setting(0, "files per written table; 0 = one per GB of input, at least 2")
    keep_sections: bool = setting(False, "also write the sections table: each top-level section of the full-text "
                                         "papers read in full (title, class, what decided it, its text as "
                                         "sentences; METHODS.md §1.5)")
    cited_only_min_citations: int = setting(1, "a cited-only paper (a reference no corpus paper matches) is "
                                               "mapped when at least this many mapped corpus papers cite it; "
                                               "1 = all, 0 = none")


def _internal_schemas():
    from pyspark.sql import types as T

    S, L = T.StringType(), T.LongType()
    author = arrow_to_spark_type(SCHEMAS["papers"].field("authors").type)
    paper = to_spark_schema("papers")
    paper = T.StructType(paper.fields + [T.StructField("ord", L), T.StructField("title_norm", S),
                                         T.StructField("alt_ids", T.ArrayType(S))])
    ref = T.StructType([T.StructField(n, t) for n, t in [
        ("citing_id", S), ("ref_key", S), ("title", S), ("authors", author), ("year", T.IntegerType()),
        ("doi", S), ("pmid", S), ("hint_id", S), ("title_norm", S), ("raw", S), ("source_file", S)]])
    mention = T.StructType([T.StructField(n, t) for n, t in [
        ("citing_id", S), ("ref_key", S), ("section_title", S), ("section_type", S),
        ("section_class", S), ("position", T.IntegerType()), ("context", S), ("source_file", S)]])
    reject = T.StructType([T.StructField(n, S) for n in
                           ("source_file", "record_id", "stage", "reason", "source", "level")])
    section = T.StructType([T.StructField(n, t) for n, t in [
        ("paper_id", S), ("position", T.IntegerType()), ("title", S), ("section_class", S), ("class_source", S),
        ("sentences", T.ArrayType(S)), ("source_file", S)]])
    sentence = T.StructType([T.StructField(n, t) for n, t in [
        ("paper_id", S), ("ord", L), ("key", S), ("section_title", S), ("section_class", S),
        ("position", T.IntegerType()), ("source_file", S)]])
    citance = T.StructType([T.StructField(n, t) for n, t in [
        ("citing_id", S), ("cited_id", S), ("ref_key", S), ("authors", author), ("key", S),
        ("prefix", S), ("suffix", S), ("record_id", S), ("source_file", S), ("source", S), ("context", S)]])
    return {"paper": paper, "ref": ref, "mention": mention, "reject": reject, "sentence": sentence, "section": section,
            "citance": citance, "warning": to_spark_schema("warnings"), "file": to_spark_schema("files")}


def input_settings(spec: dict) -> tuple[str, str, bool, bool]:
    """What a reader needs of one input: (format, source, read bodies, mapped)."""
    return spec.get("format"), spec.get("source"), reads_bodies(spec), is_mapped(spec)


def _parse_rows(settings: list[tuple[str, str, bool, bool]], sections: bool, rows):
    """(kind, record) of every file row (path, input: its index in `settings`); a file that cannot
    be read is one whole-file reject (readers.common.read_input_file)."""
    from importance.ingest.readers import PAPER, parse_file_accounted
    from importance.ingest.readers.common import read_input_file

    for row in rows:
        fmt, source, bodies, mapped = settings[row.input]
        data, read_error = read_input_file(row.path)
        for kind, rec in parse_file_accounted(fmt, source, row.path, data, bodies=bodies, sections=sections,
                                              read_error=read_error):
            if kind == PAPER:
                rec["mapped"] = mapped
            yield kind, rec


def resolve_input_path(path: str) -> Path:
    p = Path(path).absolute()  # relative to the working directory
    if not p.exists():
        raise UserError(f"ingest input {path} does not exist (relative paths are read from the working "
                        f"directory, {Path.cwd()}); fix the path in the [ingest] inputs setting")
    return p


def _glob_patterns(glob: str) -> list[str]:
    """Expand one level of Hadoop {a,b} alternatives for fnmatch."""
    import re

    m = re.search(r"\{([^}]*)\}", glob)
    if not m:
        return [glob]
    return [glob[:m.start()] + alt + glob[m.end():] for alt in m.group(1).split(",")]


def spark_skips_name(name: str) -> bool:
    """Names Spark's file sources do not read, as files or as folders on the way: hidden ('.x'),
    '_x' unless it holds '=' (a partition folder) or is Parquet's _metadata, and '*._COPYING_'."""
    if name.startswith(("_metadata", "_common_metadata")):
        return False
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


def file_uri(path: str | Path) -> str:
    """A local path as Spark spells it in binaryFile's `path` column (file:/a/b%20c.xml)."""
    from urllib.parse import quote

    return "file:" + quote(str(Path(path).absolute()), safe="/=@!$&'()*+,;:~")


@dataclass
class InputListing:
    """One input root, listed by the driver (metadata only). found: every file under it; unread:
    (uri, bytes, reason) of the files Spark's reader will not see (not matching the format's glob,
    hidden names); empty: zero-length files the glob matches (Spark's file sources skip them too);
    read: the size of the files the reader gets (what the Spark settings are derived from)."""

    source: str
    fmt: str
    found: int = 0
    unread: list = field(default_factory=list)
    empty: list = field(default_factory=list)
    read: SizeTally = field(default_factory=lambda: SizeTally("input files"))


def list_input(spec: dict) -> InputListing:
    """Every file under the input root, by one os.walk; only the files the reader will not see are
    kept (the others report themselves through the executors' file records)."""
    from importance.ingest.readers import FORMATS

    fmt = spec["format"]
    glob = spec.get("glob", FORMATS[fmt].glob)
    patterns = _glob_patterns(glob)
    root = resolve_input_path(spec["path"])
    out = InputListing(spec.get("source"), fmt)
    walk = [(str(root.parent), [root.name])] if root.is_file() else ((d, names) for d, _, names in os.walk(root))
    for folder, names in walk:
        rel = Path(folder).relative_to(root).parts if not root.is_file() else ()
        hidden = next((part for part in rel if spark_skips_name(part)), None)
        for name in names:
            out.found += 1
            full = os.path.join(folder, name)
            try:
                size = os.stat(full).st_size
            except OSError:  # vanished or a broken link: still one file found, listed as not read
                size = 0
            if hidden:
                reason = f"in hidden folder {hidden!r}: Spark does not read names starting with '.' or '_'"
            elif spark_skips_name(name) and not root.is_file():
                reason = HIDDEN_FILE_REASON
            elif not any(fnmatch.fnmatchcase(name, q) for q in patterns):
                reason = f"not a {fmt} input (name does not match {glob})"
            else:
                out.read.add(full, size)
                if size == 0:
                    out.empty.append(file_uri(full))
                continue
            out.unread.append((file_uri(full), size, reason))
    return out


def _listed_records(listing: InputListing) -> list:
    """The driver's records for the files no executor reads: skipped ones, and empty ones (a
    record reject each, as an executor would have made)."""
    from importance.ingest.readers.common import FILE, reject

    def file_row(uri, size, status, reason, record_rejects=0):
        return FILE, {"path": uri, "source": listing.source, "format": listing.fmt, "status": status,
                      "bytes": size, "reason": reason, "papers": 0, "record_rejects": record_rejects,
                      "citances": 0, "warnings": 0}

    out = [file_row(uri, size, "skipped", reason) for uri, size, reason in listing.unread]
    for uri in listing.empty:
        out += [reject(uri, uri.rsplit("/", 1)[-1], EMPTY_FILE_REASON, listing.source),
                file_row(uri, 0, "rejected", EMPTY_FILE_REASON, record_rejects=1)]
    return out


def check_format(fmt) -> None:
    """An unknown input format is a user error naming the known ones (checked before Spark starts)."""
    from importance.ingest.readers import FORMATS, known_formats

    if fmt not in FORMATS:
        raise UserError(f"ingest input format {fmt!r} is unknown; set format to one of: {known_formats()}")


def input_size(inputs: list[dict], listings: list[InputListing] | None = None) -> InputSize:
    """Bytes and files the readers get, by listing (what the Spark settings are derived from);
    from `listings` when the inputs were listed already."""
    return total_size((x.read.size() for x in listings or [list_input(spec) for spec in inputs]), "input files")


def read_inputs(spark, inputs: list[dict], partitions: int | None = None):
    """One DataFrame of the input files (path, input: the index of its spec in `inputs`) in at most
    `partitions` partitions (default 2 per task slot). binaryFile lists them and packs them into
    read tasks by size; without its `content` column it reads no file (the tasks' Python does:
    _parse_rows). Parsing them is one Python pass per partition (stage_inputs): a coalesce or
    union after a Python step would send every record through the JVM to a second Python worker."""
    from pyspark.sql import functions as F

    from importance.ingest.readers import FORMATS

    frames = []
    for i, spec in enumerate(inputs):
        fmt, source = spec.get("format"), spec.get("source")
        check_format(fmt)
        if not source:
            raise UserError(f"ingest input {spec.get('path')} needs a source name (e.g. 'elife')")
        p = resolve_input_path(spec["path"])
        reader = spark.read.format("binaryFile").option("pathGlobFilter", spec.get("glob", FORMATS[fmt].glob))
        if p.is_dir():
            reader = reader.option("recursiveFileLookup", "true")
        frames.append(reader.load(str(p)).select("path", F.lit(i).alias("input")))
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    # Few, larger partitions: per-task Python start-up dominates on small corpora.
    n = partitions or 2 * spark.sparkContext.defaultParallelism
    return df.coalesce(max(1, min(df.rdd.getNumPartitions(), n)))


def _write_partition(root: str, schemas: dict, settings: list, sections: bool, index: int, rows):
    from importance.ingest.staged_records import write_records

    yield write_records(root, schemas, f"part-{index:05d}", _parse_rows(settings, sections, rows))


def stage_inputs(spark, inputs: list[dict], root: Path, partitions: int | None = None,
                 listings: list | None = None, sections: bool = False) -> dict:
    """Parse every input on the executors into Parquet per record kind under `root`
    (importance.ingest.staged_records), with the driver's records of the files no executor reads
    (`listings`, one per input: list_input). Returns the records as parsed, before dedup and
    joins: {source: {paper, citance, reject:record, ...}}."""
    from importance.ingest import staged_records

    schemas = staged_records.arrow_schemas(_internal_schemas())
    staged_records.prepare(root, schemas)
    files = read_inputs(spark, inputs, partitions)
    settings = [input_settings(spec) for spec in inputs]
    parts = files.rdd.mapPartitionsWithIndex(partial(_write_partition, str(root), schemas, settings, sections)).collect()
    listed = [rec for i, spec in enumerate(inputs) for rec in _listed_records(listings[i] if listings else list_input(spec))]
    parts.append(staged_records.write_records(str(root), schemas, "listed", listed))
    return staged_records.merge_counts(parts)


# of_kept_rows: up to this many dropped duplicate paper rows are broadcast (id and file: ≈ 130 B a
# row in the heap, ≈ 26 MB); more go to a join with the kept rows
DROPPED_ROWS_BROADCAST = 200_000


def stash_frame(spark, staged: Path, df, name: str):
    """df written once under the stash beside `staged` (stage_inputs' folder) and read back: later
    plans start from the Parquet files."""
    path = str(Path(staged).parent / "stash" / name)
    df.write.mode("overwrite").option("compression", "zstd").parquet(path)  # as the staged records: less disk
    return spark.read.parquet(path)


def of_kept_rows(ranked, tables: list, broadcast_limit: int | None = None) -> list:
    """Each (DataFrame, id column) of `tables` (a paper's references, mentions, sentences or
    sections, with their source_file) without the rows of the paper rows the dedup dropped
    (`ranked`: every paper row, _rn = 1 the kept one), matched by (id, source_file).

    The readers give a paper's references, mentions, sentences and sections with its paper record
    in the same file, or none of them (tests/importance/ingest/readers/test_common.py), so leaving
    out those of the dropped rows keeps those of the kept rows. The dropped rows are few in most
    corpora (none: no join at all), and an anti join with them broadcast moves no wide row. A join
    with every kept row, which Spark broadcasts only while the corpus is small (at 250k papers, not
    at 2M), sorts and shuffles the reference rows twice more (the wide rows and the resolution's
    candidate keys) beside the resolution's own shuffle; it is used past `broadcast_limit` dropped
    rows (DROPPED_ROWS_BROADCAST)."""
    from pyspark.sql import functions as F

    limit = DROPPED_ROWS_BROADCAST if broadcast_limit is None else broadcast_limit
    dropped = ranked.where("_rn > 1").select("paper_id", "source_file")
    n = dropped.count()
    if n == 0:
        rows, how = None, None
    elif n <= limit:
        rows, how = F.broadcast(dropped), "left_anti"
    else:
        rows, how = ranked.where("_rn = 1").select("paper_id", "source_file"), "left_semi"
    out = []
    for df, col in tables:
        df = df.where(F.col(col).isNotNull() & F.col("source_file").isNotNull())  # as a join on them would
        out.append(df if rows is None else
                   df.join(rows.withColumnRenamed("paper_id", col), [col, "source_file"], how).select(df.columns))
    return out


def build_tables(spark, staged, cited_only_min_citations: int = 1) -> dict:
    """The ingest logic on DataFrames: dedup, citances, resolution, over the parsed records staged
    under `staged` (stage_inputs). Returns DataFrames (lazy). The deduplicated corpus, the resolved
    references and the cited-only papers, which most outputs join, are written once beside `staged`
    and read back: otherwise every output (and every count of the summary) would plan and run the
    dedup window and the resolution again, and no step holds them in the JVM heap (caching them
    there ran a 3 GB heap out of memory at 2M papers)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from importance.ingest.authors import author_keys_spark
    from importance.ingest.resolve import resolve_references

    schemas = _internal_schemas()
    # Each record kind as written by the readers (stage_inputs); read again where several joins use it.
    dfs = {kind: spark.read.schema(schema).parquet(str(Path(staged) / kind)) for kind, schema in schemas.items()}

    stash = partial(stash_frame, spark, staged)

    # Duplicate paper ids: keep a full-text row (its mentions count) first, then the first by
    # (source_file, ord), reject the others; mapped when any of its inputs is mapped.
    by_id = Window.partitionBy("paper_id")
    w = by_id.orderBy(F.desc("has_fulltext"), "source_file", "ord")
    ranked = stash(dfs["paper"].withColumns({"_rn": F.row_number().over(w), "_mapped": F.max("mapped").over(by_id)}),
                   "ranked_papers")
    papers = ranked.where("_rn = 1").withColumn("mapped", F.col("_mapped")).drop("_rn", "_mapped")
    dups = ranked.where("_rn > 1").select("source_file", F.col("paper_id").alias("record_id"),
                                          F.lit("ingest").alias("stage"), F.lit(DUPLICATE_REASON).alias("reason"),
                                          "source", F.lit("record").alias("level"))
    # the references, mentions, sentences and sections of the kept row of each paper (a duplicate's go with it)
    refs, ments, sents, sections = of_kept_rows(ranked, [(dfs["ref"], "citing_id"), (dfs["mention"], "citing_id"),
                                                         (dfs["sentence"], "paper_id"), (dfs["section"], "paper_id")])
    sections = sections.select(SCHEMAS["sections"].names)

    # ScisummNet citances: in-corpus citing paper -> reference + mention; otherwise reject.
    cits = dfs["citance"]
    corpus = papers.select("paper_id")
    cit_ok = (cits.join(corpus.withColumnRenamed("paper_id", "citing_id"), "citing_id", "left_semi")
                  .join(corpus.withColumnRenamed("paper_id", "cited_id"), "cited_id", "left_semi"))
    cit_out = cits.join(corpus.withColumnRenamed("paper_id", "citing_id"), "citing_id", "left_anti")
    cit_nocited = (cits.join(corpus.withColumnRenamed("paper_id", "citing_id"), "citing_id", "left_semi")
                       .join(corpus.withColumnRenamed("paper_id", "cited_id"), "cited_id", "left_anti"))
    rej_cols = lambda df, reason: df.select("source_file", "record_id", F.lit("ingest").alias("stage"),  # noqa: E731
                                            F.lit(reason).alias("reason"), "source", F.lit("citance").alias("level"))
    cit_rejects = rej_cols(cit_out, OUTSIDE_REASON).unionByName(rej_cols(cit_nocited, CITED_MISSING_REASON))

    # Authors of a ScisummNet paper are known only where it appears as a citing paper.
    known = cits.where(F.size("authors") > 0).groupBy(F.col("citing_id").alias("paper_id")).agg(
        F.min_by("authors", F.col("record_id")).alias("_authors"))
    papers = papers.join(known, "paper_id", "left").withColumn(
        "authors", F.when((F.size(F.coalesce("authors", F.array())) == 0) & F.col("_authors").isNotNull(),
                          F.col("_authors")).otherwise(F.col("authors"))).drop("_authors")
    # read by the resolution, both papers tables, the references table and the summary: computed once
    papers = stash(papers, "corpus")

    cit_refs = cit_ok.groupBy("citing_id", "ref_key").agg(
        F.min("source_file").alias("source_file"), F.min("cited_id").alias("hint_id")).select(
        "citing_id", "ref_key", F.lit(None).cast("string").alias("title"),
        F.lit(None).cast(schemas["ref"]["authors"].dataType).alias("authors"),
        F.lit(None).cast("int").alias("year"), F.lit(None).cast("string").alias("doi"),
        F.lit(None).cast("string").alias("pmid"), "hint_id", F.lit(None).cast("string").alias("title_norm"),
        F.lit(None).cast("string").alias("raw"), "source_file")
    # Section of a citance: the first sentence of the citing paper that contains the citance's first or
    # last 40 letters, or that (if >= 40 letters long) lies inside the citance.
    c, s = cit_ok.alias("c"), sents.alias("s")
    cond = (F.col("c.citing_id") == F.col("s.paper_id")) & (
        (F.instr("s.key", F.col("c.prefix")) > 0) | (F.instr("s.key", F.col("c.suffix")) > 0)
        | ((F.length("s.key") >= 40) & (F.instr("c.key", F.col("s.key")) > 0)))
    matched = (c.join(s, cond).groupBy("c.source", "c.record_id").agg(F.min_by(
        F.struct("s.section_title", "s.section_class", "s.position", "s.ord"), F.col("s.ord")).alias("m")))
    cit_all = cit_ok.join(matched, ["source", "record_id"], "left")
    # One in-text citation per citing sentence and cited paper: citances that land on the same
    # sentence (a sentence listed twice in one set, several annotators of one CL-SciSumm citance, or
    # a citing paper in both ScisummNet and CL-SciSumm) are one mention; the others are rejected as
    # duplicates, so the counts add up. A citance placed in no sentence is compared by its text key.
    sentence = F.when(F.col("m").isNotNull(), F.concat(F.lit("s"), F.col("m.ord").cast("string"))).otherwise(
        F.concat(F.lit("k"), F.col("key")))
    cit_all = cit_all.withColumn("_sentence", sentence)
    first = F.row_number().over(Window.partitionBy("citing_id", "cited_id", "_sentence").orderBy("source", "record_id"))
    cit_all = cit_all.withColumn("_dup", F.col("_sentence").isNotNull() & (first > 1))
    cit_ments = cit_all.where(~F.col("_dup")).select(
        "citing_id", "ref_key", F.col("m.section_title").alias("section_title"),
        F.lit(None).cast("string").alias("section_type"),
        F.coalesce(F.col("m.section_class"), F.lit("O")).alias("section_class"),
        F.col("m.position").alias("position"), "context", "source_file", F.col("m").isNotNull().alias("_matched"),
        F.col("source").alias("_citance_source"))
    cit_rejects = cit_rejects.unionByName(rej_cols(cit_all.where("_dup"), DUPLICATE_CITANCE_REASON))
    # A citance of a citing paper whose body was not read ("map" input) is a citation link only.
    fulltext_citing = papers.where("has_fulltext").select(F.col("paper_id").alias("citing_id"))
    cit_body_ments = cit_ments.join(fulltext_citing, "citing_id", "left_semi")

    # one entry per (citing_id, ref_key) already: the readers' contract (parse_file_accounted), and the
    # kept row of a duplicate paper is the only one with its (citing_id, source_file)
    refs_all = refs.unionByName(cit_refs)
    refs_res, cited_only, ref_rejects = resolve_references(refs_all, papers, cited_only_min_citations, stash)
    cited_only = stash(cited_only, "cited_only")   # an aggregate over the unresolved references: once
    ments_all = ments.unionByName(cit_body_ments.drop("_matched", "_citance_source"))
    # a mention's citing paper had its body read (the readers give mentions only then; a citance's is
    # joined with the full-text papers above): only those papers' references (a tenth of them in a
    # run of a map corpus beside a training corpus) meet the mentions, here and in the dangling rejects
    body_refs = refs_res.where("citing_fulltext").select("citing_id", "ref_key", "cited_id")
    ments_res = ments_all.join(body_refs, ["citing_id", "ref_key"], "left")
    dangling = ments_res.where(F.col("cited_id").isNull()).join(
        papers.select(F.col("paper_id").alias("citing_id"), "source"), "citing_id", "left").select(
        "source_file", F.concat_ws("#", "citing_id", "ref_key").alias("record_id"), F.lit("ingest").alias("stage"),
        F.lit(DANGLING_REASON).alias("reason"), "source", F.lit("item").alias("level"))
    mentions_out = ments_res.where(F.col("cited_id").isNotNull())

    paper_cols = SCHEMAS["papers"].names
    pschema = to_spark_schema("papers")
    cast = lambda df: df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in pschema.fields])  # noqa: E731
    keyed = lambda df: df.withColumns(author_keys_spark(F.col("authors")))  # noqa: E731
    papers_out = cast(keyed(papers)).unionByName(cast(keyed(cited_only.where("kept"))))
    rejects = (dfs["reject"].unionByName(dups).unionByName(cit_rejects)
               .unionByName(ref_rejects).unionByName(dangling))
    return {"papers": papers_out, "corpus": papers, "references": refs_res, "mentions": mentions_out,
            "rejects": rejects, "citance_mentions": cit_ments, "cited_only": cited_only, "paper_cols": paper_cols,
            "warnings": dfs["warning"], "files": dfs["file"], "sections": sections}


def summarise(t: dict, parsed: dict, found: dict | None = None, roles: dict | None = None) -> dict:
    """Small per-source aggregates (collected: one row per source/reason, never per record).
    `found`: files under each source's input roots, by listing (list_input); `roles`: each
    source's input role(s) (source_roles). Cited-only papers count under their source (that of
    their first citing reference): mapped, not mapped (kept as triplet positives) or left out."""
    from pyspark.sql import functions as F

    per: dict[str, dict] = {}

    def slot(src):
        return per.setdefault(src or "unknown", {"input_records": 0, "papers_corpus": 0, "papers_fulltext": 0,
                                                 "papers_mapped": 0, "papers_title_only": 0, "cited_only_mapped": 0,
                                                 "cited_only_not_mapped": 0, "cited_only_left_out": 0,
                                                 "references": 0, "references_resolved": 0,
                                                 "mentions": 0, "rejects": {}, "record_rejects": 0,
                                                 "files": {"found": 0, **{k: 0 for k in FILE_STATUSES}},
                                                 "warnings": 0})

    for src_name, n in (found or {}).items():
        slot(src_name)["files"]["found"] = n
    for src_name, role in (roles or {}).items():
        slot(src_name)["role"] = role
    for r in t["files"].groupBy("source", "status").count().collect():
        slot(r.source)["files"][r.status] = r["count"]
    for r in t["warnings"].groupBy("source").count().collect():
        slot(r.source)["warnings"] = r["count"]

    for r in t["corpus"].groupBy("source").agg(F.count("*").alias("n"),
                                               F.sum(F.col("has_fulltext").cast("int")).alias("ft"),
                                               F.sum(F.col("mapped").cast("int")).alias("m")).collect():
        slot(r.source).update(papers_corpus=r.n, papers_fulltext=int(r.ft or 0), papers_mapped=int(r.m or 0))
    for r in t["papers"].where(~F.col("has_fulltext") & F.col("source_file").isNull()).groupBy("source").count().collect():
        slot(r.source)["papers_title_only"] = r["count"]
    outcome = (F.when(F.col("mapped"), "cited_only_mapped").when(F.col("kept"), "cited_only_not_mapped")
               .otherwise("cited_only_left_out"))
    for r in t["cited_only"].groupBy("source", outcome.alias("outcome")).count().collect():
        slot(r.source)[r.outcome] = r["count"]
    for r in t["rejects"].groupBy("source", "level", "reason").count().collect():
        d = slot(r.source)
        d["rejects"][r.reason] = d["rejects"].get(r.reason, 0) + r["count"]
        if r.level == "record":
            d["record_rejects"] += r["count"]
        if r.level == "citance":
            d["citance_rejects"] = d.get("citance_rejects", 0) + r["count"]
    src = t["corpus"].select(F.col("paper_id").alias("citing_id"), "source")
    ft = t["corpus"].where("has_fulltext").select(F.col("paper_id").alias("cited_id"), F.lit(True).alias("_ft"))
    for r in (t["references"].join(src, "citing_id").join(ft, "cited_id", "left").groupBy("source")
              .agg(F.count("*").alias("n"), F.sum(F.col("_ft").isNotNull().cast("int")).alias("res"))).collect():
        slot(r.source).update(references=r.n, references_resolved=int(r.res or 0))
    for r in t["mentions"].join(src, "citing_id").groupBy("source").count().collect():
        slot(r.source)["mentions"] = r["count"]
    # citances are counted under their own source (the citing paper may be in the corpus via another)
    for r in (t["citance_mentions"].groupBy(F.col("_citance_source").alias("source"))
              .agg(F.count("*").alias("n"), F.sum(F.col("_matched").cast("int")).alias("m"))).collect():
        d = slot(r.source)
        d["citances_in_corpus"] = r.n
        d["citance_section_match_rate"] = round((r.m or 0) / r.n, 4) if r.n else None
    for src_name, d in per.items():
        p = parsed.get(src_name, {})
        # Input records = what the readers produced (a paper or a record reject each), before dedup.
        d["input_records"] = p.get("paper", 0) + p.get("reject:record", 0)
        d["check_input_equals_papers_plus_rejects"] = d["input_records"] == d["papers_corpus"] + d["record_rejects"]
        if p.get("citance") or p.get("reject:citance"):
            d["input_citances"] = p.get("citance", 0) + p.get("reject:citance", 0)
            d["check_citances"] = d["input_citances"] == d.get("citances_in_corpus", 0) + d.get("citance_rejects", 0)
        d["resolution_rate"] = round(d["references_resolved"] / d["references"], 4) if d["references"] else None
        d["check_title_only_equals_cited_only_kept"] = (
            d["papers_title_only"] == d["cited_only_mapped"] + d["cited_only_not_mapped"])
        f = d["files"]
        d["check_files_found_equals_accounted"] = f["found"] == sum(f[k] for k in FILE_STATUSES)
    return per


def listed_files(t: dict, per_source: dict) -> dict:
    """The first skipped files (path, source, reason) and the first warnings, for the report; the
    totals are the per-source counts."""
    from pyspark.sql import functions as F

    skipped = t["files"].where(F.col("status") == "skipped")
    first = skipped.orderBy("path").limit(SKIPPED_LISTED).select("path", "source", "reason").collect()
    by_reason = (skipped.groupBy("source", "reason").count().orderBy(F.desc("count"), "source", "reason")
                 .limit(SKIPPED_LISTED).collect())
    warns = (t["warnings"].orderBy("source_file", "record_id").limit(WARNINGS_LISTED)
             .select("source_file", "record_id", "source", "warning").collect())
    return {"skipped_files": {"total": sum(d["files"]["skipped"] for d in per_source.values()),
                              "by_reason": [r.asDict() for r in by_reason],
                              "first": [r.asDict() for r in first]},
            "warnings": {"total": sum(d["warnings"] for d in per_source.values()),
                         "first": [r.asDict() for r in warns]}}


def check_inputs(cfg: IngestConfig) -> None:
    """Formats known and paths present: checked before Spark starts, so a typo is one sentence."""
    if not cfg.inputs:
        raise UserError("ingest has no inputs; list at least one {path, format, source} in [ingest] inputs")
    if cfg.cited_only_min_citations < 0:
        raise UserError(f"[ingest] cited_only_min_citations is {cfg.cited_only_min_citations}; set it to 0 "
                        "(no cited-only paper mapped) or more (1 = every one)")
    for spec in cfg.inputs:
        check_format(spec.get("format"))
        input_role(spec)
        resolve_input_path(spec.get("path", ""))


def source_roles(inputs: list[dict]) -> dict[str, str]:
    """Each source's role; a source read by inputs of different roles lists them ("map, train")."""
    roles: dict[str, set] = {}
    for spec in inputs:
        roles.setdefault(spec.get("source"), set()).add(input_role(spec))
    return {src: ", ".join(sorted(r)) for src, r in roles.items()}


def cited_only_totals(per_source: dict) -> dict:
    """Cited-only papers over all sources: mapped + not mapped + left out = all (the summary's)."""
    keys = ("cited_only_mapped", "cited_only_not_mapped", "cited_only_left_out")
    out = {k.removeprefix("cited_only_"): sum(d.get(k, 0) for d in per_source.values()) for k in keys}
    return {"all": sum(out.values()), **out}


def run_ingest(cfg: IngestConfig, layout: RunLayout, spark=None, size: InputSize | None = None,
               listings: list[InputListing] | None = None) -> dict:
    """The ingest stage; `listings` (list_input of each input) and `size` when the caller listed
    the inputs already: each input root is walked once."""
    t0 = time.time()
    check_inputs(cfg)
    listings = listings or [list_input(spec) for spec in cfg.inputs]
    spark, used = spark_for_stage(cfg, size or input_size(cfg.inputs, listings), "ingest", spark)
    found: dict[str, int] = {}
    for listing in listings:
        found[listing.source] = found.get(listing.source, 0) + listing.found
    staged = layout.ingest_work_dir / "parsed"
    parsed = stage_inputs(spark, cfg.inputs, staged, used.value("read_partitions"), listings, cfg.keep_sections)
    t = build_tables(spark, staged, cfg.cited_only_min_citations)
    root = Path(layout.root)
    root.mkdir(parents=True, exist_ok=True)
    # rejects keep their source and level (not table columns) for the counts
    t["rejects"] = stash_frame(spark, staged, t["rejects"], "rejects")
    files = used.value("output_partitions")
    # papers in paper_id order (range partitions, one file each): the vector rows, the kNN graph and
    # Leiden's node numbering then follow the ids, not how Spark happened to partition the run
    t["papers"] = t["papers"].repartitionByRange(files, "paper_id").sortWithinPartitions("paper_id")
    for name in ("papers", "references", "mentions", "rejects", "warnings", "files"):
        write_spark_table(t[name], layout.table(name), name, partitions=None if name == "papers" else files)
        if name != "rejects":  # the counts read the table as written, not its plan again
            t[name] = spark.read.parquet(str(layout.table(name)))
    if cfg.keep_sections:
        # in (paper_id, position) order, a paper's sections in one file: readers stream a paper at a time
        # (encoders.fulltext.sections_table.paper_sections)
        ordered = t["sections"].repartitionByRange(files, "paper_id").sortWithinPartitions("paper_id", "position")
        write_spark_table(ordered, layout.table("sections"), "sections", partitions=None)
    else:   # a sections table of an earlier ingest would not match these papers
        shutil.rmtree(layout.table("sections"), ignore_errors=True)
    per_source = summarise(t, parsed, found, source_roles(cfg.inputs))
    listed = listed_files(t, per_source)
    shutil.rmtree(layout.ingest_work_dir, ignore_errors=True)
    bad = {s: d for s, d in per_source.items()
           if not (d["check_input_equals_papers_plus_rejects"] and d.get("check_citances", True))}
    unaccounted = [s for s, d in per_source.items() if not d["check_files_found_equals_accounted"]]
    summary = {"per_source": per_source, "cited_only": cited_only_totals(per_source),
               "check_input_equals_papers_plus_rejects": not bad,
               "check_files_found_equals_accounted": not unaccounted, **listed,
               "seconds": round(time.time() - t0, 2), "config": asdict(cfg), "spark": used.record()}
    write_json_atomic(layout.ingest_summary, summary)
    return summary
