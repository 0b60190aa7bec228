"""kNN on real vectors: a corpus of >= 500,000 real MiniLM vectors from ../shared/data, embedded once
and cached, and exact search, IVF at the old defaults, IVF tuned and HNSW tuned on the same vectors,
side by side in one run (issue 26).

    .venv/bin/python bench/knn_real.py [--cache DIR]                     # prepare if needed, then compare
    .venv/bin/python bench/knn_real.py --prepare-only [--cache DIR]      # extract + embed (resumable)
    .venv/bin/python bench/knn_real.py --prepare-only --max-texts 3000 --cache /tmp/knn_real_small
    .venv/bin/python bench/knn_real.py --run runs/x                      # check a finished run's kNN graph

Comparison: recall@k (k = 20) of every method against exact search on --queries (2,000) seeded
query rows (seed 7: not the samples the stage tunes and measures on), the exact ground truth by
FAISS's brute-force kernel over database tiles, independent of the stage's own exact search. Exact
search is timed on those queries and its time for all n queries is printed as a projection (exact
cost is linear in the queries). Each method is the knn stage's own search (mapping.knn.knn_edges,
exact_below 0, the method's settings) over all n vectors in a process of its own: build (train +
add), tune, search and total seconds, the speed-up of its whole graph over exact search's, and its
peak RSS. Methods: ivf_sq8 at the old defaults (2√n lists, nprobe 16), ivf_sq8 with 8√n lists
tuned, the stage's default (auto: hnsw_sq8 on a CPU) tuned, hnsw_flat tuned. Verdicts: the tuned default's recall@k >= --target-recall (0.95)
and its speed-up >= --target-speedup (4x). --run RUN: a finished run's own recall@k (edges
metadata) beside an independent exact search on its vector store; verdicts: the stage's recall >=
--target-recall and the two within --agree-within (0.01). Exit 1 when any verdict is missed or not
checked (--no-fail: 0). --sweep: recall@k against ms a query along each index's tuning schedule
on the evaluation queries (IVF-SQ8 at 2, 4 and 8·sqrt(n) lists, hnsw_sq8, hnsw_flat), figures only.

Cache: DIR (default ~/.cache/sciencemap/knn_real, outside the repository) holds

    texts.parquet   one row per text, in vector order: row, source, paper_id, kind, ord, n_words, text
    chunks/         chunk_NNNNN.npy: the unit vectors of texts [k*chunk_rows, (k+1)*chunk_rows),
                    each written to a temporary name and renamed when complete (the resume unit)
    plan.json       what the chunks belong to (texts' hash, model, max_length, precision, chunk_rows):
                    a restart with the same plan continues after the last finished chunk; a
                    different plan is refused (delete chunks/ or use another --cache)
    vectors.npy     the finished n x 384 float32 matrix of unit rows (np.load(..., mmap_mode="r"))
    meta.json       counts by source and kind, model, max_length, precision, seconds, tokens embedded
    embed.log       the log of a background run (nohup ... > DIR/embed.log), by convention

Texts (all from the tars under ../shared/data, read in place):

    elife      elife-articles/*.tar.gz, JATS: the article title; the main <abstract> (kind abstract,
               and its sentences); every <p> of the other abstracts (eLife digest) and of <body>,
               figure/table captions and list items included (kind paragraph, and its sentences).
               A <p>'s text leaves out the block elements nested in it (figures, tables, lists, other
               <p>, which are paragraphs of their own) and maths (MathML, TeX). <back> (references,
               acknowledgements, funding) and <sub-article> (decision letter, author response) are
               left out.
    scisummnet cl-scisumm/scisummnet-2019.tar.gz, Reference_XML/<ACL id>.xml: title (S sid=0), the
               <ABSTRACT>'s sentences joined (abstract) and each of them, and every <S> of the
               <SECTION>s (sentence). These files are sentence-split already and have no paragraphs.
    clscisumm  cl-scisumm/training-set-2018-40topics.tar.gz: Reference_XML and Citance_XML files (same
               format as ScisummNet; lxml recover=True for the malformed ones), each ACL paper once.
               Documents_TXT (plain-text copies of the same papers) is not read.
    unarxive   unarxive-sample/*.tar.gz, JSONL: metadata title, abstract, and every body_text
               paragraph (and its sentences); {{cite:..}}, {{formula:..}}, {{figure:..}},
               {{table:..}} markers are removed, LaTeX left as it is.

    Sections titled References / Bibliography / Acknowledg(e)ments are skipped in every source.

Sentence rule (simple, documented, not perfect): a sentence ends at ".", "!" or "?" (optionally
followed by closing quotes or brackets) followed by white space and then an upper-case letter, a digit
or an opening bracket/quote, unless the word ending in "." is a single letter (an initial: "J.") or
one of ABBREVIATIONS ("et al.", "e.g.", "Fig.", "Eq.", "vs.", ...).

Kept: titles and abstracts of >= 2 words, paragraphs and sentences of >= MIN_WORDS (5) words (this
drops "Figure 1", short headings, bare labels); whitespace is collapsed. All sources together give
about 1.03M such texts in 3,608 papers (measured), more than this bench needs and 1.6x the embedding
time, so whole papers are chosen in a seeded random order (blake2b of seed:source:paper_id, seed 26)
until --max-texts (620,000) texts are kept: every source keeps its share, every chosen paper all its
texts. Exact repeats of a text are kept once: the first in the chosen papers' order, and within a
paper the first in reading order (title, abstract, paragraph, its sentences, ...; a one-sentence
paragraph therefore stays a paragraph). Rows are in extraction order (source, paper, position).

Embedding: the project's default encoder (MiniLM, encoders.model.load_encoder("minilm", "mean",
128, "cpu"), max_length 128: longer paragraphs are truncated to their first 128 tokens), through
encoders.embed.forward.embed_token_ids with inference_forward(enc, "auto", tokens): compiled with
torch.compile when the pass has >= 5M tokens, precision "auto" (bf16 on CPUs with native bf16, else
float32) like the embed job; torch with --threads (2) threads. Vectors are scaled to unit length
(float32) per row.

load_real_vectors(cache) gives the vectors (a memory map) and their texts to the comparison.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from knn_scale import child, vm_hwm  # bench/knn_scale.py; a script's own folder is on its import path
from verdicts import Verdicts

REPO = Path(__file__).resolve().parents[1]

DATA = REPO.parent / "shared" / "data"
DEFAULT_CACHE = Path.home() / ".cache" / "sciencemap" / "knn_real"
MODEL, POOLING, MAX_LENGTH, PRECISION = "minilm", "mean", 128, "auto"
MIN_WORDS, MIN_TITLE_WORDS = 5, 2
CHUNK_ROWS = 16384
MAX_TEXTS, SEED = 620_000, 26
KINDS = ("title", "abstract", "paragraph", "sentence")
TEXT_COLUMNS = ("row", "source", "paper_id", "kind", "ord", "n_words", "text")

# ----------------------------------------------------------------------------------------------
# Text clean-up and the sentence rule
# ----------------------------------------------------------------------------------------------

ABBREVIATIONS = frozenset("""
    al e.g i.e cf vs ca approx fig figs eq eqs eqn eqns ref refs sec sect tab no nos vol pp p resp
    dr mr mrs ms prof st etc viz ibid incl approx min max sp spp var ver suppl
""".split())
# a candidate end: [.!?], closing quotes/brackets, white space, then what may start a sentence
_END = re.compile(r"""[.!?]["'”’)\]]*\s+(?=[A-Z0-9(\["“‘])""")
_WS = re.compile(r"\s+")
_SKIP_SECTION = re.compile(r"^\s*(\d+\.?\s*)?(references?|bibliography|acknowledge?ments?)\b", re.I)
_UNARXIVE_MARKER = re.compile(r"\{\{(cite|formula|figure|table):[^}]*\}\}")


def clean(text: str | None) -> str:
    return _WS.sub(" ", text or "").strip()


def n_words(text: str) -> int:
    return len(text.split())


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph by the module's rule (see the docstring)."""
    out, start = [], 0
    for m in _END.finditer(text):
        if text[m.start()] == ".":
            last = text[start:m.start()].rsplit(None, 1)
            word = last[-1].lstrip("([\"'“‘").lower() if last else ""
            if (len(word) == 1 and word.isalpha()) or word in ABBREVIATIONS:
                continue
        s = text[start:m.end()].strip()
        if s:
            out.append(s)
        start = m.end()
    rest = text[start:].strip()
    if rest:
        out.append(rest)
    return out


# ----------------------------------------------------------------------------------------------
# Readers: each yields (paper_id, kind, text) in order; the caller filters and de-duplicates
# ----------------------------------------------------------------------------------------------

def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


# eLife: elements whose text is not part of the <p> holding them (own paragraphs, or not prose)
_JATS_BLOCKS = frozenset({"p", "fig", "fig-group", "table-wrap", "table-wrap-group", "list", "boxed-text",
                          "supplementary-material", "media", "disp-quote", "disp-formula", "math",
                          "tex-math", "inline-formula", "table", "code", "preformat", "graphic"})


def _jats_text(el) -> str:
    """The text of a <p> without its nested blocks and maths (their tails are kept)."""
    parts = [el.text or ""]
    for child in el:
        if _local(child.tag) not in _JATS_BLOCKS and isinstance(child.tag, str):
            parts.append(_jats_text(child))
        elif not isinstance(child.tag, str):  # comments, processing instructions
            pass
        parts.append(child.tail or "")
    return "".join(parts)


def _jats_paragraphs(el) -> Iterator[str]:
    """Every <p> under el (document order), skipping reference lists and sections titled like them."""
    for p in el.iter("{*}p", "p"):
        skip = False
        anc = p.getparent()
        while anc is not None and anc is not el:
            name = _local(anc.tag)
            if name in ("ref-list", "ref", "table", "sub-article", "back"):
                skip = True
                break
            if name == "sec":
                t = anc.find("title")
                if t is not None and _SKIP_SECTION.match("".join(t.itertext())):
                    skip = True
                    break
            anc = anc.getparent()
        if not skip:
            yield clean(_jats_text(p))


def read_elife(path: Path) -> Iterator[tuple[str, str, str]]:
    from lxml import etree

    parser = etree.XMLParser(recover=True, huge_tree=True, resolve_entities=False, no_network=True)
    with tarfile.open(path) as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".xml"):
                continue
            root = etree.fromstring(tar.extractfile(member).read(), parser)
            if root is None:
                continue
            meta = root.find("front/article-meta")
            if meta is None:
                continue
            doi = meta.findtext("article-id[@pub-id-type='doi']")
            pid = f"doi:{doi.strip().lower()}" if doi else f"elife:{Path(member.name).stem}"
            title = meta.find("title-group/article-title")
            if title is not None:
                yield pid, "title", clean("".join(title.itertext()))
            for ab in meta.findall("abstract"):
                if ab.get("abstract-type") is None:
                    text = " ".join(_jats_paragraphs(ab))
                    yield pid, "abstract", text
                    for s in split_sentences(text):
                        yield pid, "sentence", s
                else:
                    for para in _jats_paragraphs(ab):
                        yield pid, "paragraph", para
                        for s in split_sentences(para):
                            yield pid, "sentence", s
            body = root.find("body")
            if body is not None:
                for para in _jats_paragraphs(body):
                    yield pid, "paragraph", para
                    for s in split_sentences(para):
                        yield pid, "sentence", s


def _acl_paper(data: bytes, acl_id: str) -> Iterator[tuple[str, str, str]]:
    """A ScisummNet / CL-SciSumm <PAPER> file: title, abstract, section sentences."""
    from lxml import etree

    parser = etree.XMLParser(recover=True, huge_tree=True, resolve_entities=False, no_network=True)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError:
        return
    if root is None:
        return
    pid = f"acl:{acl_id.lower()}"
    for s in root.iter("S"):
        if s.get("sid") == "0":
            yield pid, "title", clean("".join(s.itertext()))
            break
    ab = root.find(".//ABSTRACT")
    if ab is not None:
        sents = [clean("".join(s.itertext())) for s in ab.iter("S")]
        yield pid, "abstract", " ".join(x for x in sents if x)
        for s in sents:
            yield pid, "sentence", s
    for sec in root.iter("SECTION"):
        if _SKIP_SECTION.match(sec.get("title") or ""):
            continue
        for s in sec.iter("S"):
            yield pid, "sentence", clean("".join(s.itertext()))


def read_acl_tar(path: Path, folders: tuple[str, ...]) -> Iterator[tuple[str, str, str]]:
    seen: set[str] = set()
    with tarfile.open(path) as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or not member.name.endswith(".xml") or len(parts) < 2 or parts[-2] not in folders:
                continue
            acl_id = Path(member.name).stem
            if acl_id.lower() in seen:      # a citing paper appears under several reference papers
                continue
            seen.add(acl_id.lower())
            yield from _acl_paper(tar.extractfile(member).read(), acl_id)


def read_unarxive(path: Path) -> Iterator[tuple[str, str, str]]:
    with tarfile.open(path) as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".jsonl"):
                continue
            for line in io.TextIOWrapper(tar.extractfile(member), encoding="utf-8"):
                if not line.strip():
                    continue
                doc = json.loads(line)
                meta = doc.get("metadata") or {}
                arxiv = meta.get("id") or doc.get("paper_id")
                pid = f"arxiv:{arxiv}"
                yield pid, "title", clean(meta.get("title"))
                ab = doc.get("abstract")
                ab = ab.get("text") if isinstance(ab, dict) else (ab or meta.get("abstract"))
                ab = clean(_UNARXIVE_MARKER.sub("", ab or ""))
                yield pid, "abstract", ab
                for s in split_sentences(ab):
                    yield pid, "sentence", s
                for para in doc.get("body_text") or []:
                    if _SKIP_SECTION.match(para.get("section") or ""):
                        continue
                    text = clean(_UNARXIVE_MARKER.sub("", para.get("text") or ""))
                    yield pid, "paragraph", text
                    for s in split_sentences(text):
                        yield pid, "sentence", s


def sources(data: Path) -> list[tuple[str, Iterable[tuple[str, str, str]]]]:
    """(source name, reader) for every input under `data`, in extraction order."""
    out = []
    for tar in sorted((data / "elife-articles").glob("*.tar.gz")):
        out.append(("elife", read_elife(tar)))
    cl = data / "cl-scisumm"
    if (cl / "scisummnet-2019.tar.gz").exists():
        out.append(("scisummnet", read_acl_tar(cl / "scisummnet-2019.tar.gz", ("Reference_XML",))))
    if (cl / "training-set-2018-40topics.tar.gz").exists():
        out.append(("clscisumm", read_acl_tar(cl / "training-set-2018-40topics.tar.gz",
                                              ("Reference_XML", "Citance_XML"))))
    for tar in sorted((data / "unarxive-sample").glob("*.tar.gz")):
        out.append(("unarxive", read_unarxive(tar)))
    return out


def keep(kind: str, text: str) -> bool:
    return n_words(text) >= (MIN_TITLE_WORDS if kind in ("title", "abstract") else MIN_WORDS)


def _paper_rank(source: str, pid: str, seed: int) -> bytes:
    return hashlib.blake2b(f"{seed}:{source}:{pid}".encode(), digest_size=8).digest()


def extract(data: Path, max_texts: int | None = MAX_TEXTS, seed: int = SEED):
    """The texts table (pandas) of every source: short texts left out, exact repeats kept once, whole
    papers chosen in a seeded random order until max_texts texts are kept (None or 0: all), rows
    in extraction order (source, then paper, then position in the paper)."""
    import pandas as pd

    papers: dict[tuple[str, str], list[tuple[str, str]]] = {}
    dropped = Counter()
    t0 = time.perf_counter()
    for source, reader in sources(data):
        n0 = sum(len(v) for v in papers.values())
        for pid, kind, text in reader:
            if not keep(kind, text):
                dropped["short"] += 1
                continue
            papers.setdefault((source, pid), []).append((kind, text))
        n1 = sum(len(v) for v in papers.values())
        print(f"extract: {source}: {n1 - n0:,} texts ({time.perf_counter() - t0:.0f} s)", flush=True)
    total = sum(len(v) for v in papers.values())
    order = sorted(papers, key=lambda key: _paper_rank(key[0], key[1], seed))
    seen: set[bytes] = set()
    kept: dict[tuple[str, str], list[tuple[str, str]]] = {}
    n_kept = 0
    for key in order:
        if max_texts and n_kept >= max_texts:
            dropped["papers_not_chosen"] += 1
            dropped["texts_of_papers_not_chosen"] += len(papers[key])
            continue
        rows = []
        for kind, text in papers[key]:
            h = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
            if h in seen:
                dropped["repeat"] += 1
                continue
            seen.add(h)
            rows.append((kind, text))
        kept[key] = rows
        n_kept += len(rows)
    cols = {c: [] for c in TEXT_COLUMNS}
    for key in papers:                       # extraction order
        for i, (kind, text) in enumerate(kept.get(key, ())):
            cols["row"].append(len(cols["row"]))
            cols["source"].append(key[0])
            cols["paper_id"].append(key[1])
            cols["kind"].append(kind)
            cols["ord"].append(i)
            cols["n_words"].append(n_words(text))
            cols["text"].append(text)
    df = pd.DataFrame(cols)
    for c in ("source", "kind"):
        df[c] = df[c].astype("category")
    df["row"] = df["row"].astype(np.int64)
    df["ord"] = df["ord"].astype(np.int32)
    df["n_words"] = df["n_words"].astype(np.int32)
    print(f"extract: {total:,} texts of >= the minimum length in {len(papers):,} papers; kept {len(df):,} texts of "
          f"{len(kept):,} papers (max_texts {max_texts or 'all'}, seed {seed}); left out: {dropped['short']:,} short, "
          f"{dropped['repeat']:,} exact repeats, {dropped['texts_of_papers_not_chosen']:,} texts of "
          f"{dropped['papers_not_chosen']:,} papers not chosen ({time.perf_counter() - t0:.0f} s)", flush=True)
    return df, {**dict(dropped), "texts_available": total, "papers_available": len(papers)}


# ----------------------------------------------------------------------------------------------
# Cache: atomic writes, the plan, resumable chunks
# ----------------------------------------------------------------------------------------------

def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _atomic_json(path: Path, obj) -> None:
    _atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def _atomic_npy(path: Path, arr: np.ndarray) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}.npy")
    with open(tmp, "wb") as f:
        np.save(f, arr)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def texts_table(cache: Path, data: Path, max_texts: int | None, re_extract: bool):
    """texts.parquet of the cache (extracted now when missing or asked for)."""
    import pandas as pd

    path = cache / "texts.parquet"
    if path.exists() and not re_extract:
        df = pd.read_parquet(path)
        print(f"texts: {len(df):,} from {path} (extracted before; --re-extract to redo)", flush=True)
        return df, json.loads((cache / "extract.json").read_text()) if (cache / "extract.json").exists() else {}
    df, dropped = extract(data, max_texts)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    info = {"dropped": dropped, "max_texts": max_texts, "seed": SEED, "data": str(data), "min_words": MIN_WORDS,
            "min_title_words": MIN_TITLE_WORDS}
    _atomic_json(cache / "extract.json", info)
    return df, info


def _counts(df) -> dict:
    by = df.groupby(["source", "kind"], observed=True).size()
    out: dict = {"total": int(len(df)), "by_source": {}, "by_kind": {}, "by_source_kind": {}}
    for (s, k), n in by.items():
        out["by_source_kind"].setdefault(str(s), {})[str(k)] = int(n)
    for s, n in df.groupby("source", observed=True).size().items():
        out["by_source"][str(s)] = int(n)
    for k, n in df.groupby("kind", observed=True).size().items():
        out["by_kind"][str(k)] = int(n)
    out["papers_by_source"] = {str(s): int(n) for s, n in
                               df.groupby("source", observed=True)["paper_id"].nunique().items()}
    return out


def _print_counts(counts: dict) -> None:
    kinds = [k for k in KINDS if k in counts["by_kind"]]
    print(f"{'source':<12}{'papers':>8}" + "".join(f"{k:>11}" for k in kinds) + f"{'total':>11}")
    for s, row in counts["by_source_kind"].items():
        print(f"{s:<12}{counts['papers_by_source'].get(s, 0):>8,}" + "".join(f"{row.get(k, 0):>11,}" for k in kinds)
              + f"{counts['by_source'][s]:>11,}")
    print(f"{'all':<12}{sum(counts['papers_by_source'].values()):>8,}"
          + "".join(f"{counts['by_kind'][k]:>11,}" for k in kinds) + f"{counts['total']:>11,}", flush=True)


def _fmt_s(s: float) -> str:
    s = int(max(s, 0))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def embed_cache(cache: Path, df, texts_hash: str, threads: int, chunk_rows: int, compile_mode: str) -> dict:
    """Embed every chunk not yet on disk (resume), then assemble vectors.npy. Returns the timing."""
    import torch

    from encoders.embed.forward import compile_outcome, embed_token_ids, inference_forward
    from encoders.model import load_encoder, model_hash, resolve_model, resolve_precision

    torch.set_num_threads(threads)
    enc = load_encoder(MODEL, POOLING, MAX_LENGTH, "cpu")
    enc.model.eval()
    precision = resolve_precision(PRECISION, enc.device)
    plan = {"texts_sha256": texts_hash, "n": int(len(df)), "model": MODEL, "model_path": str(resolve_model(MODEL)),
            "model_hash": model_hash(resolve_model(MODEL)), "pooling": POOLING, "max_length": MAX_LENGTH,
            "precision": precision, "chunk_rows": chunk_rows, "dim": enc.dim}
    chunks = cache / "chunks"
    chunks.mkdir(exist_ok=True)
    plan_path = cache / "plan.json"
    if plan_path.exists():
        old = json.loads(plan_path.read_text())
        if old != plan:
            diff = {k: (old.get(k), plan.get(k)) for k in set(old) | set(plan) if old.get(k) != plan.get(k)}
            raise SystemExit(f"{plan_path} belongs to other settings or texts ({diff}); delete {chunks} and "
                             f"{plan_path} or use another --cache")
    else:
        for f in chunks.glob("chunk_*.npy"):   # chunks without a plan are not ours to trust
            f.unlink()
        _atomic_json(plan_path, plan)
    for f in chunks.glob("*.tmp*"):            # leftovers of an interrupted write
        f.unlink()

    n = len(df)
    n_chunks = -(-n // chunk_rows)
    done = {k for k in range(n_chunks) if (chunks / f"chunk_{k:05d}.npy").exists()}
    todo = [k for k in range(n_chunks) if k not in done]
    stats_path = cache / "embed_stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {"seconds": 0.0, "tokens": 0,
                                                                           "texts": 0, "chunks": {}}
    print(f"embed: {n:,} texts in {n_chunks} chunks of {chunk_rows:,}; {len(done)} done before, {len(todo)} to go "
          f"(model {MODEL}, max_length {MAX_LENGTH}, precision {precision}, {threads} threads)", flush=True)
    texts = df["text"]
    forward, outcome = None, {"compiled": False, "compile_failed": None}
    t_run = time.perf_counter()
    run_texts = run_tokens = 0
    for i, k in enumerate(todo):
        lo, hi = k * chunk_rows, min(n, (k + 1) * chunk_rows)
        t0 = time.perf_counter()
        ids = enc.token_ids(texts.iloc[lo:hi].tolist())
        tokens = int(sum(len(x) for x in ids))
        if forward is None:
            est = tokens * len(todo)   # this process's pass, estimated from its first chunk
            forward = inference_forward(enc, compile_mode, est)
            outcome = compile_outcome(forward)
            print(f"embed: ~{est / 1e6:.1f}M tokens to embed -> "
                  f"{'torch.compile' if outcome['compiled'] else 'eager'} forward (compile {compile_mode})", flush=True)
        vec = embed_token_ids(enc, ids, 128, 8192, precision, forward=forward).cpu().numpy().astype(np.float32)
        norms = np.linalg.norm(vec, axis=1, keepdims=True)
        vec /= np.maximum(norms, 1e-12)
        _atomic_npy(chunks / f"chunk_{k:05d}.npy", vec)
        dt = time.perf_counter() - t0
        run_texts += hi - lo
        run_tokens += tokens
        stats["seconds"] += dt
        stats["tokens"] += tokens
        stats["texts"] += hi - lo
        stats["chunks"][str(k)] = {"texts": hi - lo, "tokens": tokens, "seconds": round(dt, 2)}
        _atomic_json(stats_path, stats)
        el = time.perf_counter() - t_run
        left = n - (len(done) + i + 1) * chunk_rows
        rate = run_texts / el
        print(f"embed: chunk {k + 1}/{n_chunks} ({hi - lo:,} texts, {tokens:,} tokens) in {dt:.0f} s; "
              f"{min(n, (len(done) + i + 1) * chunk_rows):,}/{n:,} done, {rate:,.0f} texts/s, "
              f"{run_tokens / el:,.0f} tokens/s, ETA {_fmt_s(max(left, 0) / rate)}", flush=True)
    if forward is not None:
        outcome = compile_outcome(forward)
    stats["compile"] = outcome if todo else stats.get("compile", outcome)
    _atomic_json(stats_path, stats)

    out = cache / "vectors.npy"
    tmp = cache / f"vectors.tmp{os.getpid()}.npy"
    mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, enc.dim))
    for k in range(n_chunks):
        v = np.load(chunks / f"chunk_{k:05d}.npy")
        lo = k * chunk_rows
        if v.shape != (min(n, lo + chunk_rows) - lo, enc.dim):
            raise SystemExit(f"chunk {k} has shape {v.shape}; delete it and run again")
        mm[lo:lo + len(v)] = v
    mm.flush()
    del mm
    os.replace(tmp, out)
    return {"plan": plan, "stats": stats}


def prepare(cache: Path, data: Path = DATA, max_texts: int | None = MAX_TEXTS, re_extract: bool = False, threads: int = 2,
            chunk_rows: int = CHUNK_ROWS, compile_mode: str = "auto") -> dict:
    cache.mkdir(parents=True, exist_ok=True)
    print(f"cache: {cache}", flush=True)
    t0 = time.perf_counter()
    df, info = texts_table(cache, data, max_texts, re_extract)
    counts = _counts(df)
    _print_counts(counts)
    texts_hash = _file_hash(cache / "texts.parquet")
    res = embed_cache(cache, df, texts_hash, threads, chunk_rows, compile_mode)
    st = res["stats"]
    meta = {"counts": counts, "extract": info, "model": MODEL, "model_path": res["plan"]["model_path"],
            "model_hash": res["plan"]["model_hash"], "pooling": POOLING, "max_length": MAX_LENGTH,
            "precision": res["plan"]["precision"], "dim": res["plan"]["dim"], "dtype": "float32", "unit_rows": True,
            "texts_sha256": texts_hash, "embed_seconds": round(st["seconds"], 1), "tokens_embedded": st["tokens"],
            "tokens_per_s": round(st["tokens"] / max(st["seconds"], 1e-9), 1),
            "texts_per_s": round(st["texts"] / max(st["seconds"], 1e-9), 1),
            "compile": st.get("compile"), "threads": threads, "chunk_rows": chunk_rows,
            "this_call_seconds": round(time.perf_counter() - t0, 1), "vectors": "vectors.npy", "texts": "texts.parquet"}
    _atomic_json(cache / "meta.json", meta)
    print(f"done: {counts['total']:,} vectors ({meta['dim']} dims, float32 unit rows) in {cache / 'vectors.npy'}")
    _print_counts(counts)
    print(f"embedding time {_fmt_s(st['seconds'])} ({st['seconds']:.0f} s over all runs of the cache), "
          f"{st['tokens']:,} tokens, {meta['tokens_per_s']:,.0f} tokens/s, {meta['texts_per_s']:,.0f} texts/s "
          f"(max_length {MAX_LENGTH}, precision {meta['precision']}, compiled {bool((st.get('compile') or {}).get('compiled'))})",
          flush=True)
    return meta


def load_real_vectors(cache: str | os.PathLike = DEFAULT_CACHE, text: bool = True):
    """(vectors, texts) of a prepared cache: vectors an n x dim float32 memory map of unit rows
    (np.load mmap_mode="r"), texts a pandas DataFrame in the same row order with columns row,
    source, paper_id, kind (title/abstract/paragraph/sentence), ord, n_words and (text=True) text."""
    import pandas as pd

    cache = Path(cache)
    path = cache / "vectors.npy"
    if not path.exists() or not (cache / "meta.json").exists():
        raise FileNotFoundError(f"{cache} holds no finished vectors; run: python bench/knn_real.py --prepare-only "
                                f"--cache {cache}")
    vectors = np.load(path, mmap_mode="r")
    cols = list(TEXT_COLUMNS) if text else [c for c in TEXT_COLUMNS if c != "text"]
    texts = pd.read_parquet(cache / "texts.parquet", columns=cols)
    if len(texts) != vectors.shape[0]:
        raise ValueError(f"{cache}: {vectors.shape[0]} vectors but {len(texts)} texts")
    return vectors, texts


# ---------------------------------------------------------------- the comparison (issue 26)

# name -> the knn settings (mapping.knn.KnnConfig fields) of the method, nlist as a multiple of
# sqrt(n) where given; exact search is measured apart
METHODS = {
    "ivf_sq8, old defaults (2√n lists, nprobe 16)": {"index": "ivf_sq8", "nprobe": 16, "nlist_sqrt": 2},
    "ivf_sq8 (8√n lists), tuned": {"index": "ivf_sq8"},
    "auto = hnsw_sq8 on a CPU, tuned": {"index": "auto"},
    "hnsw_flat, tuned": {"index": "hnsw_flat"},
}
TUNED_DEFAULT = "auto = hnsw_sq8 on a CPU, tuned"
OLD_DEFAULT = "ivf_sq8, old defaults (2√n lists, nprobe 16)"


def eval_rows(n: int, queries: int, seed: int) -> np.ndarray:
    """The seeded query rows every method is scored on (not the stage's own samples: other seed)."""
    return np.sort(np.random.default_rng(seed).choice(n, min(queries, n), replace=False))


def exact_lists(X: np.ndarray, rows: np.ndarray, k: int, tile: int = 100_000) -> tuple[np.ndarray, float]:
    """The true k nearest of `rows` (self left out) by FAISS's brute-force kernel over database
    tiles (independent of the stage's own NumPy exact search), and seconds a query."""
    import faiss

    Q = np.ascontiguousarray(X[rows], dtype=np.float32)
    heap = faiss.ResultHeap(len(rows), k + 1, keep_max=True)
    t0 = time.perf_counter()
    for lo in range(0, len(X), tile):
        T = np.ascontiguousarray(X[lo:lo + tile], dtype=np.float32)
        D, I = faiss.knn(Q, T, min(k + 1, len(T)), metric=faiss.METRIC_INNER_PRODUCT)
        I += lo
        if I.shape[1] < k + 1:
            D = np.pad(D, ((0, 0), (0, k + 1 - I.shape[1])), constant_values=-np.inf)
            I = np.pad(I, ((0, 0), (0, k + 1 - I.shape[1])), constant_values=-1)
        heap.add_result(D, I)
    heap.finalize()
    seconds = (time.perf_counter() - t0) / len(rows)
    truth = np.array([[j for j in row if j != r][:k] for r, row in zip(rows, heap.I)])
    return truth, seconds


def recall(truth: np.ndarray, got: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(truth, got)]))


def run_method(cache: Path, name: str, k: int, rows_file: Path, out: Path, peak_file: Path) -> None:
    """Child process: one method's whole graph over the real vectors (mapping.knn.knn_edges), its
    timings, and the lists of the evaluation rows; its peak RSS into peak_file (KiB)."""
    from mapping.knn import KnnConfig, knn_edges

    X, _ = load_real_vectors(cache, text=False)
    rows = np.load(rows_file)
    settings = dict(METHODS[name])
    if "nlist_sqrt" in settings:
        settings["nlist"] = int(settings.pop("nlist_sqrt") * np.sqrt(len(X)))
    t0 = time.perf_counter()
    s, src, dst, _, _ = knn_edges(X, KnnConfig(k=k, exact_below=0, **settings))
    s["total_s"] = round(time.perf_counter() - t0, 3)
    starts = np.searchsorted(src, rows)
    lists = np.stack([dst[a:a + k] for a in starts])
    np.savez(out, lists=lists, summary=json.dumps(s, default=str))
    peak_file.write_text(str(int(vm_hwm(os.getpid()) // 1024)))


def compare(cache: Path, args, verdicts) -> dict:
    """Exact, IVF at the old defaults, IVF tuned and HNSW tuned on the same real vectors, side by side."""
    X, _ = load_real_vectors(cache, text=False)
    n, k = len(X), args.k
    work = cache / "compare"
    work.mkdir(exist_ok=True)
    rows = eval_rows(n, args.queries, args.seed)
    np.save(work / "rows.npy", rows)
    print(f"{n:,} real vectors x {X.shape[1]}; recall@{k} against exact search on {len(rows):,} seeded queries "
          f"(seed {args.seed}); {os.cpu_count()} cores", flush=True)
    truth, exact_s = exact_lists(X, rows, k)
    exact_total = exact_s * n
    print(f"exact search: {exact_s * 1e3:.2f} ms a query on {len(rows):,} queries -> {exact_total:,.0f} s for all "
          f"{n:,} (projected, basis: measured ms a query x n queries; exact cost is linear in the queries)", flush=True)
    figures = {"papers": n, "k": k, "queries": int(len(rows)),
               "exact": {"ms_per_query": exact_s * 1e3, "projected_total_s": exact_total,
                         "projection_basis": "measured ms a query x n queries"}}
    print(f"\n{'method':<46} {'recall@' + str(k):>9} {'build s':>8} {'tune s':>7} {'search s':>9} {'total s':>8} "
          f"{'x exact':>8} {'peak RSS':>9}  setting")
    for name in METHODS:
        out = work / f"method-{len(figures)}.npz"
        c = child([str(Path(__file__).resolve()), "--child", name, "--cache", str(cache), "--k", str(k),
                   "--rows", str(work / "rows.npy"), "--out", str(out)], work / "children.log")
        with np.load(out) as z:
            lists, s = z["lists"], json.loads(str(z["summary"]))
        r = recall(truth, lists)
        speed = exact_total / s["total_s"]
        param = s.get("tuning", {}).get("param")
        setting = f"{param} {s.get(param)}" + (f" of nlist {s['nlist']}" if "nlist" in s else "")
        print(f"{name:<46} {r:>9.4f} {s['build_s']:>8.1f} {s.get('tune_s', 0):>7.1f} {s['search_s']:>9.1f} "
              f"{s['total_s']:>8.1f} {speed:>7.2f}x {c['peak'] / 2**30:>7.2f} GiB  {setting}", flush=True)
        figures[name] = {"recall": r, "speedup_vs_exact": speed, "peak_rss_bytes": c["peak"], "summary": s}
    tuned, old = figures[TUNED_DEFAULT], figures[OLD_DEFAULT]
    param = tuned["summary"]["tuning"]["param"]
    print(f"\nold defaults (2√n lists, nprobe 16): recall@{k} {old['recall']:.4f}; the tuned default "
          f"({tuned['summary']['index']}): {tuned['recall']:.4f} at {param} {tuned['summary'][param]}")
    verdicts.at_least(f"tuned default ({TUNED_DEFAULT}): recall@{k}", tuned["recall"], args.target_recall, "{:.4f}")
    verdicts.at_least(f"tuned default: speed-up over exact search (whole graph)", tuned["speedup_vs_exact"],
                      args.target_speedup, "{:.2f}x")
    return figures


def sweep(cache: Path, args) -> dict:
    """Recall@k against milliseconds a query along each index's tuning schedule, on the evaluation
    queries only (no whole graph): IVF-SQ8 at 2, 4 and 8·sqrt(n) lists and the two HNSW indexes.
    What the defaults (nlist 8·sqrt(n), hnsw_sq8 on a CPU) were chosen from."""
    from mapping.knn import EF_SCHEDULE, NPROBE_SCHEDULE, KnnConfig, make_plan, make_searcher

    X, _ = load_real_vectors(cache, text=False)
    n, k = len(X), args.k
    rows = eval_rows(n, args.queries, args.seed)
    truth, exact_s = exact_lists(X, rows, k)
    Q = np.ascontiguousarray(X[rows], np.float32)
    print(f"{n:,} real vectors; {len(rows):,} seeded queries; exact search {exact_s * 1e3:.2f} ms a query", flush=True)
    curves = {}
    configs = [(f"ivf_sq8, {m}√n lists", KnnConfig(k=k, index="ivf_sq8", nlist=int(m * np.sqrt(n))),
                [v for v in NPROBE_SCHEDULE if 16 <= v <= 256]) for m in (2, 4, 8)]
    configs += [(name, KnnConfig(k=k, index=name), [v for v in EF_SCHEDULE if v <= 256])
                for name in ("hnsw_sq8", "hnsw_flat")]
    for name, cfg, values in configs:
        p = make_plan(cfg, n, X.shape[1])
        t0 = time.perf_counter()
        searcher, _ = make_searcher(X, p, cfg)
        print(f"{name}: build {time.perf_counter() - t0:.1f} s", flush=True)
        points = []
        for v in values:
            searcher.set_param(v)
            t = time.perf_counter()
            _, I = searcher.search(Q, k + 1)
            ms = (time.perf_counter() - t) / len(rows) * 1e3
            got = [[j for j in row if j != r][:k] for r, row in zip(rows, I)]
            r = recall(truth, got)
            points.append({p.param: v, "recall": r, "ms_per_query": ms})
            print(f"  {p.param} {v:>4}: recall@{k} {r:.4f}, {ms:.3f} ms a query ({exact_s * 1e3 / ms:.1f}x exact's)",
                  flush=True)
        curves[name] = points
        del searcher
    return {"papers": n, "queries": int(len(rows)), "exact_ms_per_query": exact_s * 1e3, "curves": curves}

def check_run(run: Path, args, verdicts) -> dict:
    """A finished run's kNN graph: its reported recall@k beside an independent exact search on the
    same vector store (other seeded queries, FAISS's brute-force kernel)."""
    from sciencemap.contracts import EDGES_META_KEY
    from sciencemap.layout import RunLayout
    from sciencemap.storage import read_json_metadata, read_table
    from sciencemap.vectors import open_vectors

    layout = RunLayout(run)
    meta = read_json_metadata(layout.table("edges"), EDGES_META_KEY)
    X = open_vectors(layout).X
    k = meta["k"]
    rows = eval_rows(len(X), args.queries, args.seed)
    t = read_table(layout.table("edges"), columns=["src", "dst", "rank"])
    src, dst, rank = (t.column(c).to_numpy() for c in ("src", "dst", "rank"))
    order = np.lexsort((rank, src))
    src, dst = src[order], dst[order]
    starts, ends = np.searchsorted(src, rows), np.searchsorted(src, rows, side="right")
    got = [dst[a:b] for a, b in zip(starts, ends)]
    truth, _ = exact_lists(X, rows, k)
    independent = recall(truth, got)
    tuning = meta.get("tuning") or {}
    print(f"{run}: {meta['papers']:,} papers, index {meta['index']}, {tuning.get('param')} {meta.get(tuning.get('param'))}"
          f" ({'tuned to ' + str(meta.get('target_recall')) if tuning.get('tuned') else 'as configured'}); "
          f"recall@{k}: the stage's {meta.get('recall_at_k')} on {meta.get('recall_queries')} queries, independent "
          f"exact search {independent:.4f} on {len(rows):,} other queries (seed {args.seed})")
    verdicts.at_least(f"the stage's recall@{k}", meta.get("recall_at_k"), args.target_recall, "{:.4f}")
    verdicts.at_most(f"|the stage's recall - independent exact search's|", abs(meta.get("recall_at_k", 0) - independent),
                     args.agree_within, "{:.4f}")
    return {"stage_recall": meta.get("recall_at_k"), "independent_recall": independent, "meta": meta}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare-only", action="store_true", help="extract and embed the corpus, then stop")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"cache folder (default {DEFAULT_CACHE})")
    ap.add_argument("--data", type=Path, default=DATA, help=f"../shared/data (default {DATA})")
    ap.add_argument("--max-texts", "--limit", type=int, default=MAX_TEXTS,
                    help=f"texts to keep, whole papers in a seeded order (default {MAX_TEXTS:,}; 0 = all; "
                         "a small number makes a small test cache)")
    ap.add_argument("--re-extract", action="store_true", help="extract the texts again even if texts.parquet exists")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--chunk-rows", type=int, default=CHUNK_ROWS, help=f"texts per resumable chunk ({CHUNK_ROWS})")
    ap.add_argument("--compile", default="auto", choices=("auto", "on", "off"),
                    help="torch.compile the forward (auto: when the pass has >= 5M tokens, as the embed job)")
    ap.add_argument("--run", type=Path, help="instead: check a finished run's kNN graph (its recall beside an "
                    "independent exact search on the same vector store)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--queries", type=int, default=2000, help="seeded evaluation queries (exact ground truth)")
    ap.add_argument("--seed", type=int, default=7, help="seed of the evaluation queries (not the stage's samples)")
    ap.add_argument("--target-recall", type=float, default=0.95, help="recall@k of the tuned default, at least")
    ap.add_argument("--target-speedup", type=float, default=4.0,
                    help="the tuned default's whole graph / exact search's, in speed, at least")
    ap.add_argument("--agree-within", type=float, default=0.01,
                    help="--run: |the stage's recall - the independent one|, at most")
    ap.add_argument("--sweep", action="store_true", help="instead: recall@k against ms a query along each index's "
                    "schedule on the evaluation queries (IVF at 2, 4, 8·sqrt(n) lists, HNSW), no whole graphs")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--child", help=argparse.SUPPRESS)          # one method in a process of its own
    ap.add_argument("--rows", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("peak_file", nargs="?", type=Path, help=argparse.SUPPRESS)
    Verdicts.add_arguments(ap)
    a = ap.parse_args(argv)
    cache = a.cache.expanduser().resolve()
    if a.child:
        run_method(cache, a.child, a.k, a.rows, a.out, a.peak_file)
        return 0
    verdicts = Verdicts()
    if a.run:
        figures = check_run(a.run, a, verdicts)
    else:
        if not (cache / "vectors.npy").exists() or a.prepare_only or a.re_extract:
            if not ((cache / "vectors.npy").exists() and (cache / "meta.json").exists() and not a.re_extract):
                prepare(cache, a.data, a.max_texts, a.re_extract, a.threads, a.chunk_rows, a.compile)
            else:
                meta = json.loads((cache / "meta.json").read_text())
                print(f"cache {cache} is ready: {meta['counts']['total']:,} vectors")
                _print_counts(meta["counts"])
                print(f"embedding time {_fmt_s(meta['embed_seconds'])}, {meta['tokens_embedded']:,} tokens, "
                      f"{meta['tokens_per_s']:,.0f} tokens/s")
        if a.prepare_only:
            return 0
        if a.sweep:   # figures only: what the defaults were chosen from
            figures = sweep(cache, a)
            if a.json:
                a.json.write_text(json.dumps(figures, indent=2, default=str))
            return 0
        figures = compare(cache, a, verdicts)
    if a.json:
        a.json.write_text(json.dumps({**figures, "verdicts": verdicts.as_json()}, indent=2, default=str))
    return verdicts.finish(a.no_fail)


if __name__ == "__main__":
    sys.exit(main())
