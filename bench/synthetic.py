"""A generated corpus with the structure a map of science has, for the scale benchmarks.

`write_corpus(run_dir, n, dim)` writes a run directory the mapping stages read:
- `embeddings/part-NNNNN.parquet`: n unit-ish vectors (float32) from a two-level Gaussian mixture
  (super-topics → topics → papers), so kNN lists, clusters and a layout mean something;
- `papers/`: one row per paper with a title of topic words, a year around its topic's mean year,
  one or two fields (its topic's field, sometimes a second one), and, for a share of papers,
  MeSH-like descriptors (with tree numbers and a major flag) drawn mostly from its topic's set;
  `has_fulltext` true for a seeded `fulltext_share` of them (the flag only: no body text).

`write_references(run_dir, topic_of)` adds `references/`: citation links with the heavy tails of
real ones (lognormal reference-list lengths, preferential choice of the cited papers, a share of
cited papers outside the corpus, a few unresolved), for the papers `write_corpus` made
(`corpus_topics` gives their topics).
Everything is seeded and written in chunks, so 2M papers take a few hundred MB of memory.
"""
from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sciencemap.contracts import SCHEMAS, embeddings_schema
from sciencemap.embeddings import shard_name

LETTERS = np.array(list(string.ascii_lowercase))


def words(k: int, prefix: str, rng: np.random.Generator) -> np.ndarray:
    """k distinct letter-only pseudo-words (CountVectorizer's token pattern takes no digits)."""
    out = set()
    while len(out) < k:
        out.add(prefix + "".join(rng.choice(LETTERS, 5)))
    return np.array(sorted(out), dtype=object)


class Corpus:
    """The mixture's parameters: topic centres, fields, years, words and descriptors per topic."""

    def __init__(self, dim: int, n_topics: int, n_super: int, n_fields: int, seed: int):
        rng = np.random.default_rng(seed)
        self.dim, self.n_topics = dim, n_topics
        sup = rng.standard_normal((n_super, dim)).astype(np.float32)
        self.topic_super = rng.integers(0, n_super, n_topics)
        self.centres = sup[self.topic_super] + 0.6 * rng.standard_normal((n_topics, dim)).astype(np.float32)
        self.fields = np.array([f"Field {a}" for a in words(n_fields, "", rng)], dtype=object)
        self.topic_field = (self.topic_super * n_fields // n_super + rng.integers(0, 2, n_topics)) % n_fields
        self.topic_year = rng.normal(2005, 8, n_topics)
        self.vocab = words(n_topics * 4 + 2000, "", rng)
        self.topic_words = rng.integers(0, len(self.vocab), (n_topics, 8))
        n_desc, n_parents = 6000, 300
        self.desc_ui = np.array([f"D{d:06d}" for d in range(n_desc)], dtype=object)
        self.desc_name = np.array([f"Term {w}" for w in words(n_desc, "", rng)], dtype=object)
        parent = rng.integers(0, n_parents, n_desc)
        self.desc_tree = np.array([f"X{d:03d}" if d < n_parents else f"X{parent[d]:03d}.{d:05d}"
                                   for d in range(n_desc)], dtype=object)
        self.topic_desc = rng.integers(0, n_desc, (n_topics, 10))


def _vectors(c: Corpus, topic: np.ndarray, rng: np.random.Generator, noise: float) -> np.ndarray:
    X = c.centres[topic] + noise * rng.standard_normal((len(topic), c.dim)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _papers(c: Corpus, ids: np.ndarray, topic: np.ndarray, rng: np.random.Generator, mesh_share: float,
            fulltext_share: float = 1.0) -> pa.Table:
    n = len(ids)
    tw = c.topic_words[topic]
    pick = tw[np.arange(n)[:, None], rng.integers(0, tw.shape[1], (n, 4))]
    common = rng.integers(0, len(c.vocab), (n, 2))
    title_words = c.vocab[np.concatenate([pick, common], axis=1)]
    titles = [" ".join(w) for w in title_words]
    year = np.clip(np.round(rng.normal(c.topic_year[topic], 4)), 1950, 2026).astype(np.int32)
    second = rng.random(n) < 0.2
    f1 = c.topic_field[topic]
    f2 = rng.integers(0, len(c.fields), n)
    n_f = 1 + second
    fvals = np.empty(n_f.sum(), dtype=object)
    offs = np.concatenate([[0], np.cumsum(n_f)])
    fvals[offs[:-1]] = c.fields[f1]
    fvals[offs[:-1][second] + 1] = c.fields[f2[second]]
    fields = pa.ListArray.from_arrays(pa.array(offs, pa.int32()), pa.array(fvals, pa.string()))
    # MeSH: a share of papers, 3-6 descriptors, 80% from the topic's set, the first one major.
    has = rng.random(n) < mesh_share
    n_m = np.where(has, rng.integers(3, 7, n), 0)
    moffs = np.concatenate([[0], np.cumsum(n_m)])
    owner = np.repeat(np.arange(n), n_m)
    own_set = c.topic_desc[topic[owner], rng.integers(0, c.topic_desc.shape[1], len(owner))]
    d = np.where(rng.random(len(owner)) < 0.8, own_set, rng.integers(0, len(c.desc_ui), len(owner)))
    major = np.zeros(len(owner), bool)
    major[moffs[:-1][has]] = True
    trees = pa.ListArray.from_arrays(pa.array(np.arange(len(d) + 1), pa.int32()), pa.array(c.desc_tree[d], pa.string()))
    mesh_struct = pa.StructArray.from_arrays(
        [pa.array(c.desc_ui[d], pa.string()), pa.array(c.desc_name[d], pa.string()), pa.array(major), trees],
        fields=list(SCHEMAS["papers"].field("mesh").type.value_type))
    mesh = pa.ListArray.from_arrays(pa.array(moffs, pa.int32()), mesh_struct)
    null_str = pa.nulls(n, pa.string())
    cols = {
        "paper_id": pa.array(ids, pa.string()), "title": pa.array(titles, pa.string()), "abstract": null_str,
        "authors": pa.nulls(n, SCHEMAS["papers"].field("authors").type),
        "author_keys": pa.nulls(n, SCHEMAS["papers"].field("author_keys").type),
        "orcid_author_keys": pa.nulls(n, SCHEMAS["papers"].field("orcid_author_keys").type),
        "year": pa.array(year), "venue": null_str, "fields": fields,
        "keywords": pa.nulls(n, SCHEMAS["papers"].field("keywords").type), "mesh": mesh,
        "source": pa.array(np.where(has, "pubmed", "generated"), pa.string()),
        "has_fulltext": pa.array(np.ones(n, bool) if fulltext_share >= 1 else rng.random(n) < fulltext_share),
        "source_file": pa.array(np.full(n, "generated"), pa.string()), "mapped": pa.array(np.ones(n, bool)),
    }
    return pa.table(cols, schema=SCHEMAS["papers"])


def write_corpus(run: Path, n: int, dim: int = 384, n_topics: int = 0, shard: int = 100_000, seed: int = 0,
                 noise: float = 0.9, mesh_share: float = 0.3, with_papers: bool = True, draw_seed: int | None = None,
                 id_prefix: str = "gen", fulltext_share: float = 1.0) -> dict:
    """Write embeddings shards (+ the papers table) for n generated papers into run/. Returns the
    mixture's sizes. Paper ids are `<id_prefix>:<row>`; rows are written in a seeded shuffled topic
    order. `draw_seed` draws other papers from the same mixture (default seed + 1: the corpus
    itself); row i's topic is default_rng(draw_seed).integers(0, n_topics, n)[i] (`corpus_topics`).
    `fulltext_share` < 1 marks only that seeded share of the papers as full text."""
    run = Path(run)
    n_topics = n_topics or default_topics(n)
    c = Corpus(dim, n_topics, max(4, n_topics // 20), 40, seed)
    rng = np.random.default_rng(seed + 1 if draw_seed is None else draw_seed)
    topic_of = rng.integers(0, n_topics, n)
    (run / "embeddings").mkdir(parents=True, exist_ok=True)
    if with_papers:  # an empty papers folder would be a table without a schema
        (run / "papers").mkdir(parents=True, exist_ok=True)
    for k, lo in enumerate(range(0, n, shard)):
        hi = min(n, lo + shard)
        ids = np.array([f"{id_prefix}:{i}" for i in range(lo, hi)], dtype=object)
        X = _vectors(c, topic_of[lo:hi], rng, noise)
        t = pa.table({"paper_id": pa.array(ids, pa.string()),
                      "vector": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1), pa.float32()), dim)},
                     schema=embeddings_schema(dim))
        pq.write_table(t, run / "embeddings" / shard_name(k))
        if with_papers:
            pq.write_table(_papers(c, ids, topic_of[lo:hi], rng, mesh_share, fulltext_share),
                           run / "papers" / f"part-{k:05d}.parquet")
    return {"papers": n, "dim": dim, "topics": n_topics, "fields": len(c.fields)}


def default_topics(n: int) -> int:
    return max(20, n // 400)


def corpus_topics(n: int, n_topics: int = 0, seed: int = 0, draw_seed: int | None = None) -> np.ndarray:
    """The topic of each of write_corpus's rows (same arguments, same draw)."""
    rng = np.random.default_rng(seed + 1 if draw_seed is None else draw_seed)
    return rng.integers(0, n_topics or default_topics(n), n)


class CitationModel:
    """Who cites whom in the generated corpora: `draw(rng, citing)` gives, for each citing row, a
    cited index and whether it lies outside the corpus (then an index into an outside pool of n
    papers). A share `outside_share` is outside; the rest are corpus papers of the citing paper's
    topic with probability `same_topic` (so citations and topics agree, as in real literature),
    else of any topic. Within the pool drawn from, a paper is cited with probability proportional
    to its popularity, Pareto(`popularity_alpha`) + 1: preferential attachment's heavy tail."""

    def __init__(self, topic_of: np.ndarray, rng: np.random.Generator, popularity_alpha: float = 1.5,
                 same_topic: float = 0.7, outside_share: float = 0.3):
        self.topic_of, self.same_topic, self.outside_share = topic_of, same_topic, outside_share
        n = self.n = len(topic_of)
        n_topics = int(topic_of.max()) + 1 if n else 0
        popularity = rng.pareto(popularity_alpha, n) + 1.0
        outside_pop = rng.pareto(popularity_alpha, n) + 1.0
        # preferential choice within a topic: one cumulative popularity over the rows sorted by topic
        self.by_topic = np.argsort(topic_of, kind="stable")
        self.cum = np.cumsum(popularity[self.by_topic])
        self.topic_end = self.cum[np.searchsorted(topic_of[self.by_topic], np.arange(n_topics), side="right") - 1]
        self.topic_start = np.r_[0.0, self.topic_end[:-1]]
        self.outside_cum = np.cumsum(outside_pop)

    def draw(self, rng: np.random.Generator, citing: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m, n = len(citing), self.n
        outside = rng.random(m) < self.outside_share
        local = rng.random(m) < self.same_topic
        u = rng.random(m)
        inside = np.flatnonzero(~outside)
        t = self.topic_of[citing[inside]]
        target = np.where(local[inside], self.topic_start[t] + u[inside] * (self.topic_end[t] - self.topic_start[t]),
                          u[inside] * self.cum[-1])
        cited = np.empty(m, np.int64)
        cited[inside] = self.by_topic[np.minimum(np.searchsorted(self.cum, target, side="right"), n - 1)]
        out_rows = np.flatnonzero(outside)
        cited[out_rows] = np.minimum(np.searchsorted(self.outside_cum, u[out_rows] * self.outside_cum[-1],
                                                     side="right"), n - 1)
        return cited, outside


def write_references(run: Path, topic_of: np.ndarray, mean_refs: float = 30.0, refs_sigma: float = 0.7,
                     popularity_alpha: float = 1.5, same_topic: float = 0.7, outside_share: float = 0.3,
                     unresolved_share: float = 0.03, shard: int = 100_000, seed: int = 0,
                     id_prefix: str = "gen", outside_prefix: str = "ext") -> dict:
    """Write run/references/ (the references table's schema; citing_id, cited_id filled) for the
    papers 0..n-1 of write_corpus (ids `<id_prefix>:<row>`, `topic_of` = corpus_topics(n)).

    - Reference-list lengths: lognormal with mean `mean_refs` and log-sd `refs_sigma` (rounded; a
      long tail of review-sized lists, some papers with none).
    - Cited papers: CitationModel (outside ones are `<outside_prefix>:<j>`); most papers are cited
      a few times, a few thousands of times. A paper may cite itself or the same paper twice
      (rare; the readers drop and count both).
    - A share `unresolved_share` of the cited ids is null (references not matched to a paper).
    Returns the counts: references (rows), those to corpus papers (resolved or not), the most
    cited corpus paper's resolved citations."""
    run = Path(run)
    topic_of = np.asarray(topic_of)
    n = len(topic_of)
    rng = np.random.default_rng([seed, 7])
    model = CitationModel(topic_of, rng, popularity_alpha, same_topic, outside_share)
    mu = np.log(mean_refs) - refs_sigma ** 2 / 2              # lognormal mean = exp(mu + sigma² / 2)
    out = run / "references"
    out.mkdir(parents=True, exist_ok=True)
    schema = SCHEMAS["references"]
    cited_count = np.zeros(n, np.int64)
    total = inside_total = 0
    for k, lo in enumerate(range(0, n, shard)):
        hi = min(n, lo + shard)
        lengths = np.round(rng.lognormal(mu, refs_sigma, hi - lo)).astype(np.int64)
        citing = np.repeat(np.arange(lo, hi), lengths)
        m = len(citing)
        cited, outside = model.draw(rng, citing)
        inside = np.flatnonzero(~outside)
        unresolved = rng.random(m) < unresolved_share
        cited_count += np.bincount(cited[inside[~unresolved[inside]]], minlength=n)
        citing_ids = pa.array(np.char.add(f"{id_prefix}:", citing.astype(str)).astype(object), pa.string())
        cited_ids = np.where(outside, np.char.add(f"{outside_prefix}:", cited.astype(str)),
                             np.char.add(f"{id_prefix}:", cited.astype(str))).astype(object)
        cited_ids[unresolved] = None
        cols = {f.name: pa.nulls(m, f.type) for f in schema}
        cols["citing_id"], cols["cited_id"] = citing_ids, pa.array(cited_ids, pa.string())
        pq.write_table(pa.table(cols, schema=schema), out / f"part-{k:05d}.parquet")
        total += m
        inside_total += len(inside)
    return {"references": int(total), "corpus_internal": int(inside_total), "most_cited": int(cited_count.max(initial=0))}


# --- Input files with references (issue 27): what the ingest stage reads -----------------------
SYN_DOI = "10.5555/syn."                 # paper i of the pool is doi:10.5555/syn.<i>
SECTIONS = ("Introduction", "Methods", "Results", "Discussion")
REFS_PER_PAPER = (3.4, 0.55)             # lognormal: mean ~35, the 1-1.5 billion links of a 33M map


def pool_topics(pool: int, n_topics: int, seed: int) -> np.ndarray:
    """The topic of every pool paper (corpus papers 0..n-1, then the outside ones, which are cited
    regardless of topic): what the generated vectors of write_input_vectors follow."""
    return np.random.default_rng([seed, 7]).integers(0, n_topics, pool)


def write_input_corpus(root: Path, n: int, fulltext_share: float = 0.1, paragraphs: int = 5,
                       per_file: int = 20_000, seed: int = 0) -> dict:
    """n generated papers as S2ORC JSON Lines under root/train (full text: body paragraphs in four
    sections with a cite span per mention) and root/map (title, abstract, fields and the
    bibliography only), a seeded `fulltext_share` of them with full text. Reference lists are
    lognormal (REFS_PER_PAPER) and the cited papers drawn by CitationModel: corpus papers, or
    papers n..2n-1 outside the corpus (cited-only). Every entry carries the cited paper's DOI,
    title, authors and year, so resolution is by DOI. Titles and abstracts are words of the
    paper's topic (pool_topics)."""
    import json

    root = Path(root)
    n_topics = default_topics(n)
    c = Corpus(8, n_topics, max(4, n_topics // 20), 40, seed)
    topic = pool_topics(2 * n, n_topics, seed)
    rng = np.random.default_rng([seed, 8])
    model = CitationModel(topic[:n], rng)
    year = np.clip(np.round(c.topic_year[topic] + rng.normal(0, 4, 2 * n)), 1950, 2026).astype(int)
    fulltext = rng.random(n) < fulltext_share
    names = words(5000, "", np.random.default_rng([seed, 9]))

    def title(i):
        return " ".join(c.vocab[c.topic_words[topic[i], [(i * 7 + j) % 8 for j in range(4)]]]).capitalize()

    def authors(i):
        return [{"first": "A", "middle": [], "last": str(names[(i * 31 + j * 977) % len(names)]).capitalize()}
                for j in range(3)]

    def words_of(r, t, k):
        w = c.topic_words[t]
        return " ".join(c.vocab[np.where(r.random(k) < 0.6, w[r.integers(0, 8, k)], r.integers(0, len(c.vocab), k))])

    def reference_lists(r, citing):
        counts = np.maximum(1, np.round(r.lognormal(*REFS_PER_PAPER, len(citing)))).astype(np.int64)
        owner = np.repeat(citing, counts)
        cited, outside = model.draw(r, owner)
        cited = np.where(outside, n + cited, cited)
        return [np.unique(x[x != i]) for x, i in zip(np.split(cited, np.cumsum(counts)[:-1]), citing)]

    for role in ("train", "map"):
        (root / role).mkdir(parents=True, exist_ok=True)
    files = {"train": None, "map": None}
    counts = {"train": 0, "map": 0, "references": 0, "mentions": 0}
    for lo in range(0, n, per_file):
        r = np.random.default_rng([seed, 10, lo])
        citing = np.arange(lo, min(n, lo + per_file))
        refs = reference_lists(r, citing)
        out = {role: open(root / role / f"part-{lo // per_file:05d}.jsonl", "w") for role in files}
        for i, cited in zip(citing, refs):
            role = "train" if fulltext[i] else "map"
            doc = {"paper_id": f"syn{i}",
                   "metadata": {"title": title(i), "authors": authors(i), "year": int(year[i]),
                                "doi": f"{SYN_DOI}{i}", "venue": f"Journal {int(topic[i]) % 50}"},
                   "abstract": words_of(r, topic[i], 150),
                   "mag_field_of_study": [str(c.fields[c.topic_field[topic[i]]])],
                   "bib_entries": {f"b{j}": {"title": title(x), "authors": authors(x)[:1], "year": int(year[x]),
                                             "other_ids": {"DOI": [f"{SYN_DOI}{x}"]}} for j, x in enumerate(cited)}}
            if role == "train":
                body = []
                where = r.integers(0, len(SECTIONS) * paragraphs, len(cited))   # each reference mentioned once
                extra = r.integers(0, len(cited), len(cited) // 2)               # and half of them again
                spans = np.concatenate([np.arange(len(cited)), extra])
                places = np.concatenate([where, r.integers(0, len(SECTIONS) * paragraphs, len(extra))])
                for k in range(len(SECTIONS) * paragraphs):
                    sec = k // paragraphs
                    body.append({"section": SECTIONS[sec], "sec_number": str(sec + 1),
                                 "text": words_of(r, topic[i], 100),
                                 "cite_spans": [{"start": 0, "end": 3, "text": "[1]", "ref_id": f"b{j}"}
                                                for j in spans[places == k]]})
                doc["body_text"] = body
                counts["mentions"] += len(spans)
            out[role].write(json.dumps(doc) + "\n")
            counts[role] += 1
            counts["references"] += len(cited)
        for f in out.values():
            f.close()
    return {"papers": n, "topics": n_topics, **counts}


def write_input_vectors(run: Path, n: int, seed: int = 0, dim: int = 384, noise: float = 0.9,
                        shard: int = 100_000) -> dict:
    """Embeddings shards for every paper in run/papers (corpus and cited-only), as the embed stage
    would write them, from the mixture of the paper's topic (pool_topics; ids doi:10.5555/syn.<i>):
    the GPU stages stand aside on a CPU-only scale run and the mapping stages get vectors with
    topic structure. n and seed: write_input_corpus's. A paper whose id is not a generated DOI gets
    a random topic."""
    from sciencemap.storage import read_table

    run = Path(run)
    ids = read_table(run / "papers", columns=["paper_id"]).column("paper_id").to_numpy(zero_copy_only=False)
    prefix = "doi:" + SYN_DOI
    index = np.array([int(x[len(prefix):]) if x.startswith(prefix) else -1 for x in ids], dtype=np.int64)
    n_topics = default_topics(n)
    topic_of = pool_topics(2 * n, n_topics, seed)
    rng = np.random.default_rng([seed, 11])
    topic = np.where(index >= 0, topic_of[np.maximum(index, 0)], rng.integers(0, n_topics, len(index)))
    c = Corpus(dim, n_topics, max(4, n_topics // 20), 40, seed)
    out = run / "embeddings"
    out.mkdir(parents=True, exist_ok=True)
    for k, lo in enumerate(range(0, len(ids), shard)):
        hi = min(len(ids), lo + shard)
        X = _vectors(c, topic[lo:hi], rng, noise)
        t = pa.table({"paper_id": pa.array(ids[lo:hi], pa.string()),
                      "vector": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1), pa.float32()), dim)},
                     schema=embeddings_schema(dim))
        pq.write_table(t, out / shard_name(k))
    return {"papers": len(ids), "dim": dim, "topics": n_topics}

if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(description="write a generated corpus (embeddings + papers) into a run directory")
    ap.add_argument("run", type=Path)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--dim", type=int, default=384)
    a = ap.parse_args()
    print(json.dumps(write_corpus(a.run, a.n, a.dim)))
