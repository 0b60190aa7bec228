"""Look-up (METHODS.md §5.8): the k papers most similar to one paper, as in the seed paper's
Tables 7–8, with each neighbour's topic on the map and its citation links to the paper.

    python jobs/lookup.py --run runs/x --paper-id doi:10.7554/elife.00003 [--k 10] [--json | --tsv]
    python jobs/lookup.py --run runs/x --title "words of the title"

It reads a finished run and writes nothing into it. Each step is one bounded stream, so it works
the same at 33M papers:

- the paper: by id, or by title (`find_by_title`: one pass over the papers table's id, title
  and year columns, Arrow's case-insensitive substring match batch by batch);
- its vector-store row, and later the neighbours' ids: passes over `vectors/ids.parquet`;
- neighbours (`nearest`): exact cosine search, the memory-mapped unit vectors read block by block
  (sciencemap.vectors.rows_per_block, 64 MB) times the paper's vector, keeping a running top k; the paper's own
  row is left out, so k is anything from 1 to n − 1, not bounded by the kNN graph's k;
- topics: the clusters table filtered on (resolution, rows), the topics table on (resolution,
  clusters), at the map's resolution (`map_resolution`);
- citations: one filtered pass over the references table's (citing_id, cited_id) columns for the
  rows where the paper cites or is cited, the link evaluate.py's citation_links counts.

At 33M × 768 float32 the vector pass reads 101 GB and the references pass ~1B rows: minutes,
bound by the disk, in a few hundred MB of memory.
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sciencemap.config import load_toml
from sciencemap.contracts import VECTORS_IDS
from sciencemap.ids import paper_id_of
from sciencemap.layout import RunLayout
from sciencemap.progress import Progress
from sciencemap.runtime import UserError
from sciencemap.storage import dataset, require_dir
from sciencemap.text import clean_text
from sciencemap.vectors import Vectors, iter_blocks, open_vectors, rows_per_block


BATCH_ROWS = 1 << 20
TITLE_WIDTH = 60           # the readable table shortens titles and topic labels; --json/--tsv do not
LABEL_WIDTH = 30
MATCHES_SHOWN = 20         # an ambiguous title search lists this many matches
MATCHES_KEPT = 1000        # per tier, so a one-word query on 33M titles stays small


# ---------------------------------------------------------------- finding the paper

@dataclass
class Match:
    paper_id: str
    title: str
    year: int | None
    tier: int              # 0 = the whole title, 1 = the query as a phrase, 2 = every query word


TIERS = ("whole title", "phrase", "all words")


def _normalised(text: pa.Array) -> pa.Array:
    return pc.utf8_lower(pc.replace_substring_regex(pc.utf8_trim_whitespace(text), r"\s+", " "))


def _whole_words(text: str) -> str:
    """A regex for `text` not inside a longer word ("aging" is not found in "imaging"); the
    boundary is only asked for where the text begins or ends with a word character."""
    edge = lambda c: r"\b" if c.isalnum() or c == "_" else ""  # noqa: E731
    return edge(text[0]) + re.escape(text) + edge(text[-1])


def find_by_title(layout: RunLayout, query: str) -> tuple[list[Match], list[int]]:
    """Papers whose title matches `query` (whole words), case-insensitive and with runs of white
    space as one space, best tier first: (matches, how many distinct papers matched per tier). A paper id
    repeated in the papers table counts once, in its best tier (beyond MATCHES_KEPT matches of a
    tier, which are counted but not kept, a repeat may count twice)."""
    q = " ".join(query.split()).lower()
    if not q:
        raise UserError("--title is empty; give some words of the title")
    words = q.split(" ")
    phrase = _whole_words(q)
    best: dict[str, Match] = {}
    counts = [0, 0, 0]
    for b in dataset(layout.table("papers"), "run the ingest stage first").to_batches(
            columns=["paper_id", "title", "year"], batch_size=BATCH_ROWS):
        norm = _normalised(b.column("title"))
        hit = pc.match_substring_regex(norm, _whole_words(words[0]))
        for w in words[1:]:
            hit = pc.and_(hit, pc.match_substring_regex(norm, _whole_words(w)))
        idx = pc.indices_nonzero(hit.fill_null(False))
        if not len(idx):
            continue
        sub = b.take(idx)
        nsub = norm.take(idx)
        whole = pc.equal(nsub, q).fill_null(False).to_numpy(zero_copy_only=False)
        in_phrase = pc.match_substring_regex(nsub, phrase).fill_null(False).to_numpy(zero_copy_only=False)
        tier = np.where(whole, 0, np.where(in_phrase, 1, 2))
        for pid, title, year, t in zip(sub.column("paper_id").to_pylist(), sub.column("title").to_pylist(),
                                       sub.column("year").to_pylist(), tier.tolist()):
            old = best.get(pid)
            if old is not None and old.tier <= t:
                continue
            if old is not None:
                counts[old.tier] -= 1
            counts[t] += 1
            if old is not None or counts[t] <= MATCHES_KEPT:
                best[pid] = Match(pid, clean_text(title), year, t)
    matches = sorted(best.values(), key=lambda m: (m.tier, len(m.title), m.paper_id))
    return matches, counts


def choose_match(query: str, matches: list[Match], counts: list[int]) -> tuple[Match | None, list[Match]]:
    """The paper a title search means: the only paper of the best tier that has any match (a title
    equal to the query beats titles containing it as a phrase, which beat titles containing its
    words). (paper, []) when that is one paper; (None, the candidates) when it is not."""
    tier = next((t for t in range(len(TIERS)) if counts[t]), None)
    if tier is None:
        raise UserError(f"no paper title contains every word of {query!r} (whole words); try fewer words, "
                        "or use --paper-id")
    if counts[tier] == 1:
        return next(m for m in matches if m.tier == tier), []
    return None, [m for m in matches if m.tier == tier]


# ---------------------------------------------------------------- the vector store's ids

def _id_batches(vec: Vectors):
    off = 0
    for b in pq.ParquetFile(vec.path / VECTORS_IDS).iter_batches(batch_size=BATCH_ROWS, columns=["paper_id"]):
        yield off, b.column(0)
        off += b.num_rows


def find_paper(vec: Vectors, text: str) -> tuple[str, int]:
    """The paper id and vector-store row of a user's id, spelt as the readers spell ids
    (sciencemap.ids.paper_id_of: a bare DOI or PMID gets its scheme, case as the readers write it),
    else exactly as given; a UserError naming the nearest ids when neither is in the store. One
    pass over the ids; the near ones are those sharing the first two thirds of the id."""
    wanted = list(dict.fromkeys([paper_id_of(text), text.strip()]))
    stem = wanted[0][:max(len(wanted[0]) * 2 // 3, min(len(wanted[0]) - 1, 8))]
    found: dict[str, int] = {}
    near: list[str] = []
    for off, col in _id_batches(vec):
        hit = pc.indices_nonzero(pc.is_in(col, value_set=pa.array(wanted, pa.string()))).to_numpy()
        for i, p in zip(hit.tolist(), col.take(pa.array(hit)).to_pylist()):
            found.setdefault(p, off + i)
        if wanted[0] in found:
            break
        if len(near) < 10_000:
            near += col.filter(pc.starts_with(col, stem)).to_pylist()[:10_000]
    for p in wanted:
        if p in found:
            return p, found[p]
    close = difflib.get_close_matches(wanted[0], near, n=3, cutoff=0.8)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    shown = repr(text) + (f" (as an id: {wanted[0]!r})" if wanted[0] != text else "")
    raise UserError(f"paper {shown} is not among the {vec.n:,} papers of this run's vector store; {hint}"
                    "check the id, or find the paper with --title")


def scan_ids(vec: Vectors, rows: np.ndarray, ids: set[str]) -> tuple[dict[int, str], dict[str, int]]:
    """One pass over the ids: the paper id of each of `rows`, and the row of each of `ids` that
    has one."""
    want = np.unique(np.asarray(rows, np.int64))
    value_set = pa.array(sorted(ids), pa.string())
    id_at: dict[int, str] = {}
    row_at: dict[str, int] = {}
    for off, col in _id_batches(vec):
        lo, hi = np.searchsorted(want, [off, off + len(col)])
        if hi > lo:
            got = col.take(pa.array(want[lo:hi] - off)).to_pylist()
            id_at.update(zip(want[lo:hi].tolist(), got))
        if len(value_set):
            hit = pc.indices_nonzero(pc.is_in(col, value_set=value_set)).to_numpy()
            for i, p in zip(hit.tolist(), col.take(pa.array(hit)).to_pylist()):
                row_at.setdefault(p, off + i)
    return id_at, row_at


# ---------------------------------------------------------------- neighbours

def _top(sims: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (similarity descending, then row ascending: ties are decided the same way
    however the rows were blocked)."""
    if len(sims) > k:
        kth = np.partition(sims, len(sims) - k)[len(sims) - k]
        keep = np.flatnonzero(sims >= kth)
        sims, rows = sims[keep], rows[keep]
    order = np.lexsort((rows, -sims))[:k]
    return sims[order], rows[order]


def nearest(vec: Vectors, row: int, k: int, block: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(similarities float32, rows int64) of the k rows most similar to `row` by inner product
    (cosine: the rows are unit vectors), best first, `row` itself left out. Exact: every row is
    compared, block by block."""
    n = vec.n
    if not 1 <= k <= n - 1:
        raise UserError(f"--k must be between 1 and {n - 1:,} (the papers of the vector store but this one); got {k}")
    q = vec.block(row, row + 1)[0]
    best_s, best_r = np.zeros(0, np.float32), np.zeros(0, np.int64)
    with Progress("lookup: similarities", n, "rows") as prog:
        for lo, hi in iter_blocks(n, block or rows_per_block(vec.dim)):
            s = vec.block(lo, hi) @ q
            if lo <= row < hi:
                s[row - lo] = -np.inf
            s, r = _top(s, np.arange(lo, hi, dtype=np.int64), k)
            best_s, best_r = _top(np.concatenate([best_s, s]), np.concatenate([best_r, r]), k)
            prog.advance(hi - lo)
    return best_s, best_r


# ---------------------------------------------------------------- citations, papers, topics

@dataclass
class Citations:
    references: int        # entries in the paper's reference list (resolved or not)
    cited: set[str]        # distinct papers its references resolve to
    citing: set[str]       # distinct papers whose references resolve to it


def citations_of(layout: RunLayout, paper_id: str) -> Citations:
    """One filtered pass over the references table: citing_id cites cited_id (null = unresolved)."""
    refs = dataset(layout.table("references"), "run the ingest stage first")
    x = pa.scalar(paper_id, pa.string())
    flt = (ds.field("citing_id") == x) | (ds.field("cited_id") == x)
    n_refs, cited, citing = 0, set(), set()
    for b in refs.to_batches(columns=["citing_id", "cited_id"], filter=flt, batch_size=BATCH_ROWS):
        for a, c in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
            if a == paper_id:
                n_refs += 1
                if c is not None:
                    cited.add(c)
            if c == paper_id:
                citing.add(a)
    cited.discard(paper_id)   # a paper listing itself is no link to another paper
    citing.discard(paper_id)
    return Citations(n_refs, cited, citing)


def paper_info(layout: RunLayout, ids: set[str]) -> dict[str, tuple[str, int | None, bool]]:
    """(title, year, has a record of its own) of the given papers (a corpus paper, not a title
    known only from a reference list); the first row found for an id repeated in the table."""
    out: dict[str, tuple[str, int | None, bool]] = {}
    papers = dataset(layout.table("papers"), "run the ingest stage first")
    flt = ds.field("paper_id").isin(pa.array(sorted(ids), pa.string()))
    for b in papers.to_batches(columns=["paper_id", "title", "year", "source_file"], filter=flt,
                               batch_size=BATCH_ROWS):
        for p, t, y, f in zip(*(b.column(i).to_pylist() for i in range(4))):
            out.setdefault(p, (clean_text(t), y, f is not None))
    return out


def _recorded_resolution(layout: RunLayout) -> float | None:
    """The map's resolution as the render stage saved it beside the map layout (map_layout.npz;
    only that array of the file is read)."""
    if not layout.map_layout.is_file():
        return None
    with np.load(layout.map_layout, allow_pickle=False) as z:
        return float(z["resolution"]) if "resolution" in z.files else None


def map_resolution(layout: RunLayout, wanted: float | None) -> float | None:
    """The resolution whose topics to show: `wanted` when given, else the map's, as the render
    stage recorded it (map_layout.npz); for runs rendered before it did, the run's config.toml
    [render] map_resolution (0 = the middle one, the render stage's default). None without topics."""
    from mapping.render import choose_resolution

    path = layout.table("topics")
    if not path.exists():
        if wanted:
            raise UserError(f"no topics table in {layout.root}; run the render stage first, or drop --resolution")
        return None
    available = sorted(set(dataset(path).to_table(columns=["resolution"]).column(0).to_pylist()))
    if not wanted:
        recorded = _recorded_resolution(layout)
        if recorded in available:
            return recorded
        cfg = load_toml(layout.config_used) if layout.config_used.is_file() else {}
        wanted = float(cfg.get("render", {}).get("map_resolution", 0.0))
    try:
        return choose_resolution(available, wanted)
    except UserError:
        raise UserError(f"resolution {wanted} has no topics in {path}; "
                        f"use --resolution with one of {available}") from None


def topics_of(layout: RunLayout, resolution: float, rows: list[int]) -> dict[int, tuple[int, str, int, int]]:
    """(cluster, label, members, size) of each given vector row that is clustered at `resolution`:
    members = the topic's nodes in the kNN graph (title-only cited papers included), size = the
    topics table's count, the papers the map shows (METHODS §5.3 `papers_shown`)."""
    clusters = dataset(layout.table("clusters"), "run the cluster stage first")
    flt = (ds.field("resolution") == resolution) & ds.field("row").isin(pa.array(rows, pa.int32()))
    cluster_of = {}
    for b in clusters.to_batches(columns=["row", "cluster"], filter=flt):
        cluster_of.update(zip(b.column(0).to_pylist(), b.column(1).to_pylist()))
    wanted = pa.array(sorted(set(cluster_of.values())), pa.int32())
    flt = (ds.field("resolution") == resolution) & ds.field("cluster").isin(wanted)
    members: dict[int, int] = {}
    for b in clusters.to_batches(columns=["cluster"], filter=flt):
        vc = pc.value_counts(b.column(0))
        for c, k in zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist()):
            members[c] = members.get(c, 0) + k
    topic = {}
    for b in dataset(layout.table("topics")).to_batches(columns=["cluster", "label", "size"], filter=flt):
        for c, lab, size in zip(*(b.column(i).to_pylist() for i in range(3))):
            topic[c] = (clean_text(lab), size)
    return {r: (c, topic.get(c, ("", None))[0], members.get(c, 0), topic.get(c, ("", None))[1])
            for r, c in cluster_of.items()}


# ---------------------------------------------------------------- the look-up

def lookup(layout: RunLayout, paper_id: str, k: int = 10, resolution: float | None = None,
           block: int | None = None) -> dict:
    """The look-up of one paper as a JSON-able dict: the paper, and its k neighbours best first."""
    vec = open_vectors(layout)
    paper_id, row = find_paper(vec, paper_id)
    res = map_resolution(layout, resolution)
    cites = citations_of(layout, paper_id)
    sims, rows = nearest(vec, row, k, block)
    id_at, row_at = scan_ids(vec, rows, cites.cited | cites.citing)
    ids = [id_at[r] for r in rows.tolist()]
    info = paper_info(layout, {paper_id, *ids, *cites.cited, *cites.citing})
    topic = topics_of(layout, res, [row, *rows.tolist()]) if res is not None else {}

    def described(pid: str, r: int) -> dict:
        title, year, _ = info.get(pid, ("", None, False))
        c, label, members, size = topic.get(r, (None, None, None, None))
        return {"paper_id": pid, "title": title, "year": year, "row": r, "cluster": c, "topic": label,
                "topic_members": members, "topic_size": size}

    paper = described(paper_id, row)
    corpus = {p for p, (_, _, rec) in info.items() if rec}
    paper.update({"references": cites.references,
                  "references_in_run": sum(p in row_at for p in cites.cited),
                  "references_in_corpus": sum(p in row_at and p in corpus for p in cites.cited),
                  "cited_by_in_run": sum(p in row_at for p in cites.citing)})
    neighbours = [{"rank": i + 1, **described(p, r), "similarity": float(s),
                   "paper_cites_it": p in cites.cited, "it_cites_paper": p in cites.citing}
                  for i, (p, r, s) in enumerate(zip(ids, rows.tolist(), sims.tolist()))]
    return {"run": str(layout.root), "resolution": res, "k": k, "papers_searched": vec.n - 1,
            "paper": paper, "neighbours": neighbours}


# ---------------------------------------------------------------- output

TSV_COLUMNS = ("rank", "paper_id", "title", "year", "similarity", "cluster", "topic",
               "paper_cites_it", "it_cites_paper")


# ---------------------------------------------------------------- paragraph look-up

SNIPPET_WIDTH = 70


def open_chunks(layout: RunLayout) -> tuple[dict, list]:
    """The chunks view's manifest and shard files; a run without a complete one is a UserError naming the fix."""
    d = layout.chunks_view_dir
    if not (d / "manifest.json").is_file():
        raise UserError(f"{layout.root} has no chunks view: the paragraph look-up needs a model trained with "
                        "[train] objective = \"cosaemb\" on a run with [ingest] keep_sections = true, then the embed stage")
    manifest = json.loads((d / "manifest.json").read_text())
    if not manifest.get("complete"):
        raise UserError(f"{d}: the chunks view is incomplete ({len(manifest['finished_shards'])} of "
                        f"{manifest['n_shards']} shards); run the embed stage again to finish it")
    from sciencemap.embeddings import shard_name

    return manifest, [d / shard_name(k) for k in manifest["finished_shards"]]


def query_embedder(name: str = "chunks"):
    """The function that embeds a query text for a view (entry-point group sciencemap.query_embedders: the
    encoders package provides it; this package does not import it)."""
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="sciencemap.query_embedders") if ep.name == name]
    if not found:
        raise UserError(f"no query embedder {name!r} is installed (entry points sciencemap.query_embedders); "
                        "reinstall the project (pip install -e .)")
    return found[0].load()


def lookup_text(layout: RunLayout, text: str, k: int = 10, device: str = "auto") -> dict:
    """The k section chunks of the run nearest to `text` (cosine), from the chunks view
    (encoders.embed.chunks): the text is embedded with the model that embedded the chunks, then one pass
    over the view's shards keeps a running top k. Each hit: paper, title, section, chunk, similarity, text."""
    if not text or not text.strip():
        raise UserError("--text is empty: give a paragraph to look up")
    if k < 1:
        raise UserError(f"--k {k} must be at least 1")
    manifest, files = open_chunks(layout)
    q = query_embedder("chunks")(layout, text, manifest, device)
    best_s, best = np.zeros(0, np.float32), []
    for f in files:
        t = pq.read_table(f, columns=["paper_id", "position", "section_class", "chunk", "text", "vector"])
        if not t.num_rows:
            continue
        v = t.column("vector").combine_chunks().values.to_numpy().reshape(t.num_rows, -1)
        sims = (v @ q) / np.maximum(np.linalg.norm(v, axis=1), 1e-12)
        top = np.argsort(-sims, kind="stable")[:k]
        rows = t.take(pa.array(top)).drop_columns(["vector"]).to_pylist()
        best_s = np.concatenate([best_s, sims[top].astype(np.float32)])
        best += rows
        keep = np.argsort(-best_s, kind="stable")[:k]
        best_s, best = best_s[keep], [best[i] for i in keep]
    info = paper_info(layout, {r["paper_id"] for r in best})
    hits = [{"rank": i + 1, "similarity": float(s), "paper_id": r["paper_id"],
             "title": info.get(r["paper_id"], ("", None, False))[0], "section_class": r["section_class"],
             "section_position": r["position"], "chunk": r["chunk"], "text": r["text"]}
            for i, (s, r) in enumerate(zip(best_s, best))]
    return {"query": text, "k": k, "chunks_searched": manifest["chunks"], "hits": hits}


def format_text_hits(result: dict, tsv: bool = False) -> str:
    cols = ["rank", "similarity", "paper_id", "section_class", "section_position", "chunk", "title", "text"]
    if tsv:
        return "\n".join(["\t".join(cols)] + ["\t".join(_cell(h[c]) for c in cols) for h in result["hits"]])
    lines = [f"{result['k']} chunks nearest to the text, of {result['chunks_searched']:,}:"]
    for h in result["hits"]:
        lines.append(f"{h['rank']:>3}  {h['similarity']:.4f}  {h['paper_id']}  section {h['section_position']} "
                     f"({h['section_class']}) chunk {h['chunk']}  {_short(h['title'], TITLE_WIDTH)}")
        lines.append(f"       {_short(' '.join(h['text'].split()), SNIPPET_WIDTH + TITLE_WIDTH)}")
    return "\n".join(lines)


def _short(text: str | None, width: int) -> str:
    text = text or ""
    return text if len(text) <= width else text[:width - 1].rstrip() + "…"


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.6f}"
    return " ".join(str(v).split())       # no tabs or newlines inside a TSV cell


def format_tsv(result: dict) -> str:
    lines = ["\t".join(TSV_COLUMNS)]
    lines += ["\t".join(_cell(nb[c]) for c in TSV_COLUMNS) for nb in result["neighbours"]]
    return "\n".join(lines)


def _topic(d: dict, width: int = LABEL_WIDTH) -> str:
    return "" if d["cluster"] is None else f"{d['cluster']} {_short(d['topic'], width)}".strip()


def format_table(result: dict) -> str:
    p = result["paper"]
    res = result["resolution"]
    year = f" ({p['year']})" if p["year"] is not None else ""
    if res is None:
        topic = "no topics table (run the render stage)"
    elif p["cluster"] is None:
        topic = f"not clustered at resolution {res}"
    else:
        shown = "" if p["topic_size"] is None else f", {p['topic_size']:,} of them with a record of their own"
        topic = f"{_topic(p, 80)}  ({p['topic_members']:,} papers in the graph{shown}; resolution {res})"
    head = [f"paper   {p['paper_id']}{year}  {p['title'] or '(no title)'}",
            f"topic   {topic}",
            f"cites   {p['references']:,} references, to {p['references_in_run']:,} papers of the run "
            f"({p['references_in_corpus']:,} with a record of their own); cited by {p['cited_by_in_run']:,} "
            "papers of the run",
            f"the {len(result['neighbours'])} most similar of {result['papers_searched']:,} papers "
            "(exact cosine search); cited = in its references, citing = cites it", ""]
    cols = ["rank", "similarity", "year", "cited", "citing", "topic", "paper_id", "title"]
    rows = [[str(nb["rank"]), f"{nb['similarity']:.4f}", _cell(nb["year"]),
             "yes" if nb["paper_cites_it"] else "", "yes" if nb["it_cites_paper"] else "",
             _topic(nb), nb["paper_id"], _short(nb["title"], TITLE_WIDTH)] for nb in result["neighbours"]]
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    right = {0, 1, 2}

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join(head + [line(cols)] + [line(r) for r in rows])


def format_matches(query: str, candidates: list[Match], count: int) -> str:
    lines = [f"{count:,} papers match {query!r} ({TIERS[candidates[0].tier]}):", ""]
    w = max(len(m.paper_id) for m in candidates[:MATCHES_SHOWN])
    for m in candidates[:MATCHES_SHOWN]:
        lines.append(f"{m.paper_id.ljust(w)}  {_cell(m.year):>4}  {_short(m.title, 80)}")
    if count > MATCHES_SHOWN:
        lines.append(f"... and {count - MATCHES_SHOWN:,} more")
    return "\n".join(lines)


# ---------------------------------------------------------------- command line

# `sciencemap --help` shows it beside the command's name
SUMMARY = ("The k papers most similar to one paper (exact cosine search over the run's vectors), with their topics "
           "and citation links to it.")


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=SUMMARY + " Reads the run, writes nothing.")
    ap.add_argument("--run", required=True, help="a run directory after the knn stage (topics after render)")
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--paper-id", help="the paper's id as the run writes it (doi:10.7554/elife.00003) or as "
                       "printed: a DOI or doi.org link, a PMID, a PMC id, an arXiv id")
    which.add_argument("--title", help="words of its title (case-insensitive); a unique best match is taken, "
                       "several are listed")
    which.add_argument("--text", help="a paragraph: the nearest section chunks of the corpus (needs the chunks "
                       "view: a cosaemb model on a run with sections), with paper, section and similarity")
    ap.add_argument("--k", type=int, default=10, help="neighbours to show (default 10; any up to the papers - 1)")
    ap.add_argument("--resolution", type=float, default=0.0,
                    help="CPM resolution of the topics shown (default 0: the map's)")
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON: the paper and its neighbours, full titles")
    out.add_argument("--tsv", action="store_true", help="tab-separated neighbours, one header line, full titles")
    return ap


def run_lookup(argv: list[str] | None = None, prog: str | None = None) -> dict:
    """Parse the options, look up, print; returns the result."""
    a = parser(prog).parse_args(argv)
    layout = RunLayout(require_dir(a.run, "run directory"))
    if a.text is not None:
        result = lookup_text(layout, a.text, a.k)
        print(json.dumps(result, indent=2) if a.json else format_text_hits(result, a.tsv))
        return result
    paper_id = a.paper_id
    if a.title is not None:
        matches, counts = find_by_title(layout, a.title)
        chosen, candidates = choose_match(a.title, matches, counts)
        if chosen is None:
            count = counts[candidates[0].tier]
            if a.json:
                shown = [vars(m) for m in candidates[:MATCHES_SHOWN]]
                print(json.dumps({"query": a.title, "matches": count, "shown": shown}, indent=2))
            else:
                print(format_matches(a.title, candidates, count))
            raise UserError(f"{count:,} papers match {a.title!r}; choose one with --paper-id")
        paper_id = chosen.paper_id
    result = lookup(layout, paper_id, a.k, a.resolution or None)
    print(json.dumps(result, indent=2) if a.json else format_tsv(result) if a.tsv else format_table(result))
    return result


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """`sciencemap lookup` / jobs/lookup.py: the exit code (a UserError is one line, exit code 2)."""
    from sciencemap.cli import command_main

    return command_main(lambda a: run_lookup(a, prog), argv)
