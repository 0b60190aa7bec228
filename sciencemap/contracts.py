"""The data contracts between stages: table names, columns, Arrow schemas and metadata keys.

The stage packages pass data to each other only as the tables named here, so every column name,
schema and key is spelled once. Tables are Parquet directories inside one run directory
(`runs/<name>/<table>/`, see sciencemap.layout); Spark and pyarrow both read them. Spark schemas
are derived from these Arrow schemas (importance.ingest.spark.to_spark_schema).
"""
from __future__ import annotations

import pyarrow as pa

# Section classes (METHODS.md §1). O = anything else (abstract, legends, acknowledgements...).
SECTION_CLASSES = ("I", "M", "R", "D", "O")
# Citation facets (METHODS.md §8): the intent of a citing sentence, or its section's class as a proxy.
FACETS = ("background", "method", "result")
# Triplet splits, by anchor (Algorithm 1: 80/20).
SPLIT_TRAIN, SPLIT_VAL = "train", "val"

# What became of each file under an input root (the files table; METHODS.md §9).
FILE_STATUSES = ("parsed", "rejected", "skipped", "auxiliary")

SOURCES = ("elife", "scisummnet", "pubmed", "pmc", "medline", "s2orc", "unarxive")

AUTHOR = pa.struct([("family", pa.string()), ("given", pa.string()), ("orcid", pa.string())])
# author_keys, orcid_author_keys (papers, references): normalised author identities derived from
# `authors` once at ingest ("#<orcid>" or "family|i"; importance.ingest.authors explains the pair), so the
# importance job's self-citation feature is set intersections instead of name normalisation.
# keywords (papers): the paper's author keywords as written (JATS author kwd-groups, MEDLINE
# KeywordList / OT), each once (case-insensitively), in order; an empty list where the format has
# none (METHODS.md §5.7). fields are the subject areas; keywords and mesh the finer topics.
# entry_shares_author (references): the entry's own author list shares an author with its citing
# paper, decided once at ingest where both lists are in hand; the importance job re-decides S only
# for references resolved to a full-text corpus paper (whose author list then counts).
# raw (references): the reference string as written, when the input has one (unArXive bib_entry_raw,
# S2ORC raw_text, a JATS mixed-citation's text), else null; `title` holds the title read from it or
# null, never the raw string (METHODS.md §1.2.1).
MESH = pa.struct([
    ("ui", pa.string()),             # descriptor UI (D000818) when known, else null
    ("name", pa.string()),           # descriptor name
    ("major", pa.bool_()),           # major topic flag
    ("tree_numbers", pa.list_(pa.string())),  # e.g. ["B01.050.150"]: gives descendants for IC
])

SCHEMAS: dict[str, pa.Schema] = {
    # One row per paper: corpus papers and title-only cited papers (has_fulltext=false; also corpus
    # papers whose body was not read: PubMed, "map" inputs). mapped: embedded and placed on the map
    # (false: a "train" input's paper, or a cited-only paper under [ingest] cited_only_min_citations
    # kept as a triplet positive; null in tables written before the column: mapped).
    # paper_id is stable and source-prefixed: doi:10.7554/elife.00003, acl:a00-1031, pmid:123.
    "papers": pa.schema([
        ("paper_id", pa.string()), ("title", pa.string()), ("abstract", pa.string()),
        ("authors", pa.list_(AUTHOR)), ("author_keys", pa.list_(pa.string())),
        ("orcid_author_keys", pa.list_(pa.string())),
        ("year", pa.int32()), ("venue", pa.string()),
        ("fields", pa.list_(pa.string())), ("keywords", pa.list_(pa.string())), ("mesh", pa.list_(MESH)),
        ("source", pa.string()), ("has_fulltext", pa.bool_()), ("source_file", pa.string()),
        ("mapped", pa.bool_()),
    ]),
    # One row per entry of a citing paper's reference list.
    "references": pa.schema([
        ("citing_id", pa.string()), ("ref_key", pa.string()), ("cited_id", pa.string()),
        ("title", pa.string()), ("authors", pa.list_(AUTHOR)), ("author_keys", pa.list_(pa.string())),
        ("orcid_author_keys", pa.list_(pa.string())), ("entry_shares_author", pa.bool_()),
        ("year", pa.int32()),
        ("doi", pa.string()), ("pmid", pa.string()), ("raw", pa.string()),
    ]),
    # One row per in-text citation (a mention of a reference inside a section). context: the citing
    # sentence (JATS, S2ORC/unArXive: the sentence around the citation; ScisummNet, CL-SciSumm: the
    # citance), null where the input has none (METHODS.md §8.1).
    "mentions": pa.schema([
        ("citing_id", pa.string()), ("ref_key", pa.string()), ("cited_id", pa.string()),
        ("section_title", pa.string()), ("section_type", pa.string()),
        ("section_class", pa.string()), ("position", pa.int32()), ("context", pa.string()),
    ]),
    # An abstract split into facets (encoders.facets.splitter label; METHODS.md §8.1): its sentences
    # and one facet each (background / method / result).
    "abstract_facets": pa.schema([
        ("paper_id", pa.string()), ("sentences", pa.list_(pa.string())), ("facets", pa.list_(pa.string())),
    ]),
    # Questions a paper answers (user input; UniFAR's question–document loss, [train] unifar_questions,
    # METHODS.md §8.4): one row per (question, relevant paper); a question may have several papers.
    "questions": pa.schema([
        ("question_id", pa.string()), ("question", pa.string()), ("paper_id", pa.string()),
    ]),
    # Citation intent of each distinct citing sentence (encoders.facets.intent label; METHODS.md §8.1).
    "context_intents": pa.schema([
        ("citing_id", pa.string()), ("context", pa.string()), ("intent", pa.string()),
        ("p_background", pa.float32()), ("p_method", pa.float32()), ("p_result", pa.float32()),
    ]),
    # Opt-in ([ingest] keep_sections): each top-level section of a paper read in full, in order.
    # class_source: what decided section_class (sec_type, heading, appendix, model, position);
    # sentences: the section's running text, a sentence an item (METHODS.md §1.5).
    "sections": pa.schema([
        ("paper_id", pa.string()), ("position", pa.int32()), ("title", pa.string()),
        ("section_class", pa.string()), ("class_source", pa.string()), ("sentences", pa.list_(pa.string())),
    ]),
    # Every input record that did not become a row of an output table, with the reason.
    "rejects": pa.schema([
        ("source_file", pa.string()), ("record_id", pa.string()),
        ("stage", pa.string()), ("reason", pa.string()),
    ]),
    # Records kept after lenient recovery of a damaged input (malformed or truncated XML, bytes
    # that are not UTF-8), one row each: what the parser reported and what was kept or lost.
    # record_id is the kept paper's paper_id (or the citance's / annotation file's id).
    "warnings": pa.schema([
        ("source_file", pa.string()), ("record_id", pa.string()), ("source", pa.string()),
        ("stage", pa.string()), ("warning", pa.string()),
    ]),
    # One row per file found under an input root (METHODS.md §9): status parsed | rejected |
    # skipped (not read: not an input of the format, hidden) | auxiliary (read with other files:
    # CL-SciSumm annotation), the reason where it is not plainly parsed, and what it gave:
    # papers and record rejects (= its input records), citances (annotation rows for an
    # auxiliary file), warnings. bytes: its size on disk.
    "files": pa.schema([
        ("path", pa.string()), ("source", pa.string()), ("format", pa.string()), ("status", pa.string()),
        ("reason", pa.string()), ("bytes", pa.int64()), ("papers", pa.int64()), ("record_rejects", pa.int64()),
        ("citances", pa.int64()), ("warnings", pa.int64()),
    ]),
    # One row per (citing, cited) pair with its features and importance (METHODS.md §1).
    "pairs": pa.schema([
        ("citing_id", pa.string()), ("cited_id", pa.string()),
        ("f_I", pa.int32()), ("f_M", pa.int32()), ("f_R", pa.int32()), ("f_D", pa.int32()),
        ("f_O", pa.int32()), ("S", pa.int32()), ("importance", pa.float64()),
        ("tie_hash", pa.int64()),
    ]),
    # The seed paper's Table 3: one row per feature used.
    "weights": pa.schema([
        ("feature", pa.string()), ("mean", pa.float64()), ("std", pa.float64()),
        ("entropy", pa.float64()), ("weight", pa.float64()),
    ]),
    # Algorithm 1 output. negative_kind: "hard" (least important reference) or "easy" (uncited).
    # facet: null for the seed's triplets; background / method / result for the facet triplets
    # ([importance] facet_signal, METHODS.md §8.2), sampled per facet from the same pairs.
    "triplets": pa.schema([
        ("anchor_id", pa.string()), ("positive_id", pa.string()), ("negative_id", pa.string()),
        ("negative_kind", pa.string()), ("split", pa.string()), ("facet", pa.string()),
    ]),
    # Directed kNN lists: each paper's k nearest neighbours by cosine, rank 1 = nearest. src and
    # dst are row numbers of the run's vector store (sciencemap.vectors: `vectors/ids.parquet`
    # names the paper of each row), 14 bytes an edge instead of ~70 with two id strings.
    "edges": pa.schema([
        ("src", pa.int32()), ("dst", pa.int32()), ("similarity", pa.float32()), ("rank", pa.int16()),
    ]),
    # Cluster membership per resolution (CPM resolution gamma); row = the paper's vector-store row.
    "clusters": pa.schema([
        ("paper_id", pa.string()), ("row", pa.int32()), ("resolution", pa.float64()), ("cluster", pa.int32()),
    ]),
    # One row per topic (cluster) per resolution, with its 2-D layout, then one column per map
    # overlay (mapping.overlays declares them: main_field, mean_year, interdisciplinarity).
    # The map's second level (mapping.areas): clusters of the map-resolution topics, the same way.
    "areas": pa.schema([
        ("area", pa.int32()), ("size", pa.int32()), ("topics", pa.int32()), ("label", pa.string()),
        ("x", pa.float32()), ("y", pa.float32())]),
    "topics": pa.schema([
        ("resolution", pa.float64()), ("cluster", pa.int32()), ("size", pa.int32()),
        ("label", pa.string()), ("x", pa.float32()), ("y", pa.float32()),
    ]),
}


def embeddings_schema(dim: int, dtype: pa.DataType = pa.float32()) -> pa.Schema:
    """Embedding shards: paper_id + a fixed-size vector (float32 or float16)."""
    return pa.schema([("paper_id", pa.string()), ("vector", pa.list_(dtype, dim))])


def view_schema(dim: int, dtype: pa.DataType = pa.float32()) -> pa.Schema:
    """Shards of a named view (`embeddings/views/<name>/`, encoders.embed.views): K rows a paper,
    one per key (a facet, a head), in the main shard's paper order."""
    return pa.schema([("paper_id", pa.string()), ("key", pa.string()), ("vector", pa.list_(dtype, dim))])


# ---------------------------------------------------------------- metadata keys and side files

# Parquet key-value metadata on every triplets part file: the sampling settings (K, H, margin,
# feature set, weights...) as JSON, written by the importance stage, read by training.
TRIPLETS_META_KEY = b"sciencemap.triplets"

# The embeddings table: Parquet shards `part-NNNNN.parquet` plus `manifest.json` (sciencemap.embeddings).
EMBEDDINGS_MANIFEST = "manifest.json"
EMBEDDINGS_FORMAT = 2                 # manifest format version
EMBEDDING_SHARD_META_KEY = b"sciencemap"  # per-shard record in each shard file's schema metadata
EMBEDDING_DTYPES = ("float32", "float16")

# The mapping stages' vector store (sciencemap.vectors): a memory-mapped .npy matrix of unit rows,
# the paper id of each row, and a JSON record (rows, dim, dtype, source fingerprint).
VECTORS_MATRIX = "vectors.npy"
VECTORS_IDS = "ids.parquet"
VECTORS_META = "meta.json"
VECTORS_DTYPES = ("float32", "float16")
# Parquet key-value metadata of the edges table: the kNN settings and figures (index, recall@k...).
EDGES_META_KEY = b"sciencemap.knn"

# A saved model directory holds the Hugging Face files plus this card of ours (pooling, base model,
# objective, training settings and validation figures).
MODEL_CARD = "sciencemap.json"

# The training log (`train_log.jsonl`): one JSON object a line, "kind" is one of these: the step
# plan (first line), training loss, validation, what the steps read (last line).
TRAIN_LOG_KINDS = ("plan", "train", "val", "end")
