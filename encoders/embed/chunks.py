"""The view `chunks` (METHODS.md §8.9): a vector per section chunk, for the paragraph look-up
(`sciencemap lookup --text`). Written by the embed stage for a model trained with a chunk-reading
objective (CoSAEmb) when the run has a `sections` table.

    <run>/embeddings/views/chunks/part-NNNNN.parquet   paper_id, position (the section's), section_class,
                                                        chunk (its index in the section), text, vector
    <run>/embeddings/views/chunks/manifest.json         model hash, dim, shards, papers, chunks, complete

A paper's sections are chunked as in training (encoders.fulltext.chunks, the model's tokenizer with its
tags and max_length). Shards hold PAPERS_PER_SHARD papers in the sections table's order; a shard on
disk is finished (written atomically), so a rerun resumes after the last one; rank r of a torchrun
embeds the shards k with k % world == r.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from sciencemap.contracts import EMBEDDINGS_MANIFEST
from sciencemap.embeddings import shard_name
from sciencemap.layout import RunLayout
from sciencemap.runtime import say
from sciencemap.storage import atomic_file, write_json_atomic

VIEW = "chunks"
PAPERS_PER_SHARD = 2000
FORMAT = "sciencemap.chunks_view/1"


def chunk_schema(dim: int, dtype=pa.float32()) -> pa.Schema:
    return pa.schema([("paper_id", pa.string()), ("position", pa.int32()), ("section_class", pa.string()),
                      ("chunk", pa.int32()), ("text", pa.string()), ("vector", pa.list_(dtype, dim))])


def chunks_dir(layout: RunLayout) -> Path:
    return layout.chunks_view_dir


def paper_chunks(title, secs, tokenizer, max_length: int):
    """(position, section class, k, text) of every chunk of a paper, as training made them."""
    from encoders.fulltext.chunks import chunk_section, section_tag
    from encoders.training.fulltext_table import _PaperCounter

    counter = _PaperCounter(tokenizer)
    counter.prefill([s for _, _, sents, _ in secs for s in sents])
    for heading, cls, sents, pos in secs:
        tag = section_tag(cls, heading)
        if tag is not None:
            for k, text in enumerate(chunk_section(title, tag, sents, counter, max_length)):
                yield pos, cls, k, text


def _titles(layout: RunLayout, ids: set[str]) -> dict:
    from encoders.training.fulltext_table import _papers

    return {pid: title for pid, title, _ in _papers(layout, ids)}


def embed_chunks(layout: RunLayout, enc, model_hash: str, precision_ctx, batch_size: int = 64, rank: int = 0,
                 world: int = 1, restart: bool = False) -> dict:
    """Write (or resume) this rank's shards of the chunks view of the run's sections with `enc`; a
    manifest of another model or max_length means start afresh. Returns the counts."""
    from encoders.fulltext.sections_table import paper_sections, section_paper_ids

    out = chunks_dir(layout)
    manifest_path = out / EMBEDDINGS_MANIFEST
    old = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    if restart or old.get("model_hash") != model_hash or old.get("max_length") != enc.max_length:
        for f in out.glob("part-*.parquet") if out.is_dir() else ():
            f.unlink()
    out.mkdir(parents=True, exist_ok=True)
    ids = sorted(section_paper_ids(layout.table("sections")))
    n_shards = -(-len(ids) // PAPERS_PER_SHARD)
    todo = {k for k in range(n_shards) if k % world == rank and not (out / shard_name(k)).is_file()}
    chunks_now = 0
    for k in sorted(todo):
        wanted = set(ids[k * PAPERS_PER_SHARD:(k + 1) * PAPERS_PER_SHARD])
        titles = _titles(layout, wanted)
        rows = []
        for pid, secs in paper_sections(layout.table("sections"), wanted):
            rows += [(pid, *c) for c in paper_chunks(titles.get(pid), secs, enc.tokenizer, enc.max_length)]
        texts = [r[4] for r in rows]
        with torch.inference_mode(), precision_ctx:
            vectors = enc.encode_ids(enc.token_ids(texts), batch_size) if texts else np.zeros((0, enc.dim), np.float32)
        table = pa.table({
            "paper_id": pa.array([r[0] for r in rows], pa.string()),
            "position": pa.array([r[1] for r in rows], pa.int32()),
            "section_class": pa.array([r[2] for r in rows], pa.string()),
            "chunk": pa.array([r[3] for r in rows], pa.int32()),
            "text": pa.array(texts, pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.astype(np.float32).reshape(-1)), enc.dim),
        }, schema=chunk_schema(enc.dim))
        with atomic_file(out / shard_name(k)) as tmp:
            pq.write_table(table, tmp)
        chunks_now += len(rows)
        say(f"embed: chunks view shard {k + 1}/{n_shards}: {len(rows):,} chunks of {len(wanted):,} papers")
    return {"chunks_embedded_now": chunks_now, "chunk_shards": n_shards,
            "chunk_shards_resumed": n_shards - len(todo) if world == 1 else None, "chunk_papers": len(ids)}


def write_chunks_manifest(layout: RunLayout, enc, model_hash: str, n_shards: int, papers: int) -> dict:
    """Rank 0, after every rank's shards: the view's manifest (complete when every shard is there)."""
    out = chunks_dir(layout)
    done = sorted(k for k in range(n_shards) if (out / shard_name(k)).is_file())
    total = sum(pq.ParquetFile(out / shard_name(k)).metadata.num_rows for k in done)
    record = {"format": FORMAT, "view": VIEW, "model_hash": model_hash, "dim": enc.dim, "max_length": enc.max_length,
              "n_shards": n_shards, "finished_shards": done, "papers": papers, "chunks": total,
              "complete": len(done) == n_shards}
    write_json_atomic(out / EMBEDDINGS_MANIFEST, record)
    return record


def query_vector(layout: RunLayout, text: str, manifest: dict, device: str = "auto") -> np.ndarray:
    """`lookup --text`'s query (entry point sciencemap.query_embedders "chunks"): the paragraph embedded by the
    model that embedded the run's chunks view (checked by its weights' hash), unit length."""
    from encoders.model import load_encoder, model_hash
    from sciencemap.runtime import UserError
    from sciencemap.text import clean_text

    if model_hash(layout.model_dir) != manifest["model_hash"]:
        raise UserError(f"{layout.model_dir} is not the model the chunks view was embedded with; run the embed "
                        "stage again (with --restart) to embed the chunks with it")
    enc = load_encoder(str(layout.model_dir), None, manifest["max_length"], device)
    q = enc.encode_ids(enc.token_ids([clean_text(text)]))[0]
    return q / max(float(np.linalg.norm(q)), 1e-12)
