"""Generator of realistic large corpora for scale tests, writing the ingest contracts directly.

Writes `papers`, `references`, `mentions` and an empty `rejects` (contracts.SCHEMAS) as Parquet
with pyarrow, one file per chunk of citing papers, so memory is bounded by the chunk size (plus a
bitmap and a popularity table over the cited-paper pool), never by the corpus.

Model (every parameter below is measured on the eLife sample unless it says otherwise; measured
with pandas on runs/demo, the 250 eLife research articles of sample/elife, `make demo` output):
- references per citing paper: lognormal, mu 4.054, sigma 0.423 (mean 62.5, median 61, p10 32,
  p90 94 measured);
- mentions per reference: the measured pmf for 1..12 (67.2% once, 18.1% twice, ...), a geometric
  tail beyond; 0.50% of references are never mentioned in the body (reference-list only);
- section of a mention: the first mention of a reference draws from the measured mix
  I 30.09%, R 29.25%, D 23.25%, M 16.04%, O 1.37%; each further mention stays in the first
  mention's class with probability 0.343 (measured share), else draws from the mix again;
- cited papers: a pool of `pool_factor` x N papers (N = citing papers; the first N are the
  full-text corpus, so about 1/pool_factor of references resolve); popularity weights are
  lognormal(0, popularity_sigma) so in-degrees are heavy-tailed with hub papers (not measurable
  on 250 papers: in-degree there is 1 for 86% of cited ids; sigma 1.5 is our assumption);
- authors: every pool paper's first author is its lab's head (lab = id mod n_labs, ~20 papers per
  lab), co-authors come from a large name pool; 15% of references go to a paper of the citing
  paper's own lab, which with chance overlaps gives ~15% self-citation pairs (eLife sample:
  15.0% of pairs have S = 1).
Deterministic under a seed: chunk c uses np.random.default_rng([seed, c]) and the pool's
popularity uses default_rng([seed, -1]); the output does not depend on anything else.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sciencemap.config import setting
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import replace_dir, temporary_sibling, write_json_atomic

from importance.ingest.authors import KEY_COLUMNS, author_keys_arrow, shares_author_arrow

REFS_LOGNORMAL = (4.054, 0.423)
MENTIONS_PMF = [0.6721, 0.1807, 0.0663, 0.0301, 0.0161, 0.0112, 0.0067, 0.0042, 0.0029, 0.0022, 0.0016, 0.0013]
NO_MENTION_SHARE = 0.0050
SECTION_MIX = {"I": 0.3009, "R": 0.2925, "D": 0.2325, "M": 0.1604, "O": 0.0137}
SAME_CLASS_SHARE = 0.343
# title, JATS sec-type and position (eLife order: Introduction, Results, Discussion, Methods).
SECTION_META = {"I": ("Introduction", "intro", 0), "R": ("Results", "results", 1),
                "D": ("Discussion", "discussion", 2), "M": ("Materials and methods", "materials|methods", 3),
                "O": ("Acknowledgements", None, 4)}
CLASS_ORDER = ("I", "R", "D", "M", "O")


@dataclass
class GenerateConfig:
    mentions: int = setting(100_000, "target number of mention rows (the result is within a few %)")
    seed: int = setting(0, "seed of every random draw (same seed and settings: same tables)")
    pool_factor: int = setting(10, "cited-paper pool = pool_factor x citing papers (the first of them are the corpus, "
                                   "so about 1/pool_factor of the references resolve)")
    popularity_sigma: float = setting(1.5, "lognormal sigma of popularity weights (heavy tail)")
    self_citation_share: float = setting(0.15, "share of references drawn from the citing paper's own lab")
    papers_per_lab: int = setting(20, "pool papers per lab (a lab's papers share its head as first author)")
    chunk_papers: int = setting(2000, "citing papers per written file")
    source: str = setting("synthetic", "value of the papers' `source` column")


def _mentions_pmf() -> np.ndarray:
    """Mentions per mentioned reference: measured 1..12, geometric tail to 40 with the measured decay."""
    head = np.array(MENTIONS_PMF)
    ratio = head[-1] / head[-2]
    tail = head[-1] * ratio ** np.arange(1, 29)
    p = np.concatenate([head, tail])
    return p / p.sum()


def expected_mentions_per_paper() -> float:
    mu, s = REFS_LOGNORMAL
    p = _mentions_pmf()
    return math.exp(mu + s * s / 2) * (1 - NO_MENTION_SHARE) * float((np.arange(1, len(p) + 1) * p).sum())


def _hash(a: np.ndarray, b: int | np.ndarray) -> np.ndarray:
    """Cheap deterministic 64-bit mix (splitmix64 finaliser) of two integers."""
    x = (np.asarray(a, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (np.asarray(b, dtype=np.uint64) + np.uint64(0x632BE59BD9B4E019))
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def _ids(prefix: str, ints: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(pa.scalar(prefix), pa.array(ints, pa.int64()).cast(pa.string()), "")


def _letters(ints: np.ndarray, prefix: str = "Fam", width: int = 7) -> pa.Array:
    """Family names made of letters only (author matching strips digits): base-26 of the integer."""
    x = np.asarray(ints, dtype=np.int64).copy()
    buf = np.empty((len(x), width), dtype=np.uint8)
    for k in range(width - 1, -1, -1):
        buf[:, k] = ord("a") + x % 26
        x //= 26
    names = buf.view(f"S{width}").ravel()
    return pc.binary_join_element_wise(pa.scalar(prefix), pa.array(names, pa.binary()).cast(pa.string()), "")


def _authors(ids: np.ndarray, n_labs: int, name_pool: int) -> pa.Array:
    """Author list of each pool paper, a pure function of its id: lab head first, then co-authors."""
    ids = np.asarray(ids, dtype=np.int64)
    n = 2 + (_hash(ids, 1) % np.uint64(9)).astype(np.int64)   # 2..10 authors, mean 6 (eLife: 6.9)
    offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.int32)
    owner = np.repeat(ids, n)
    k = np.arange(offsets[-1]) - np.repeat(offsets[:-1], n)
    lab = owner % n_labs
    co = (_hash(owner, k + 7) % np.uint64(name_pool)).astype(np.int64)
    fam = np.where(k == 0, lab, n_labs + co)
    family = _letters(fam)
    given = pa.array(np.full(len(fam), "A", dtype=object), pa.string())
    orcid = pa.nulls(len(fam), pa.string())
    structs = pa.StructArray.from_arrays([family, given, orcid], fields=list(SCHEMAS["papers"].field("authors").type.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets), structs)


def _with_keys(authors: pa.Array) -> dict:
    return {"authors": authors, **author_keys_arrow(authors)}


class _Writer:
    def __init__(self, root: Path, name: str):
        self.dir = temporary_sibling(root / name)
        self.dir.mkdir(parents=True)
        self.name, self.schema, self.n, self.rows = name, SCHEMAS[name], 0, 0

    def write(self, cols: dict) -> None:
        t = pa.table({f.name: cols.get(f.name, pa.nulls(len(next(iter(cols.values()))), f.type))
                      for f in self.schema}).cast(self.schema)
        pq.write_table(t, self.dir / f"part-{self.n:05d}.parquet", row_group_size=1 << 20)
        self.n += 1
        self.rows += t.num_rows

    def close(self, dest: Path) -> None:
        if self.n == 0:
            pq.write_table(self.schema.empty_table(), self.dir / "part-00000.parquet")
        replace_dir(self.dir, dest)


def run_generate(cfg: GenerateConfig, layout: RunLayout) -> dict:
    """Write papers/references/mentions/rejects for a corpus of about cfg.mentions mentions."""
    if cfg.mentions < 1 or cfg.pool_factor < 1 or cfg.chunk_papers < 1:
        raise UserError("mentions, pool_factor and chunk_papers must be >= 1")
    t0 = time.time()
    # 1.06: about 6% of drawn references are repeats of a hub within one list and are dropped
    N = max(2, math.ceil(cfg.mentions / (expected_mentions_per_paper() / 1.06)))
    U = N * cfg.pool_factor
    n_labs = max(1, U // cfg.papers_per_lab)
    name_pool = 50 * U
    pop_rng = np.random.default_rng([cfg.seed, 2**31])
    cdf = np.cumsum(pop_rng.lognormal(0.0, cfg.popularity_sigma, U))
    cdf /= cdf[-1]
    cited_any = np.zeros(U, dtype=bool)
    pmf = _mentions_pmf()
    mix_p = np.array([SECTION_MIX[c] for c in CLASS_ORDER])
    mix_p /= mix_p.sum()
    titles = pa.array([SECTION_META[c][0] for c in CLASS_ORDER])
    types = pa.array([SECTION_META[c][1] for c in CLASS_ORDER], pa.string())
    classes = pa.array(list(CLASS_ORDER))
    positions = pa.array([SECTION_META[c][2] for c in CLASS_ORDER], pa.int32())
    root = layout.root
    root.mkdir(parents=True, exist_ok=True)
    wp, wr, wm = _Writer(root, "papers"), _Writer(root, "references"), _Writer(root, "mentions")
    n_self = 0
    for c, start in enumerate(range(0, N, cfg.chunk_papers)):
        rng = np.random.default_rng([cfg.seed, c])
        citing = np.arange(start, min(N, start + cfg.chunk_papers), dtype=np.int64)
        nref = np.maximum(1, np.round(rng.lognormal(*REFS_LOGNORMAL, len(citing)))).astype(np.int64)
        r_citing = np.repeat(citing, nref)
        cited = np.searchsorted(cdf, rng.random(len(r_citing)), side="right").clip(0, U - 1)
        own = rng.random(len(r_citing)) < cfg.self_citation_share
        # own-lab paper: same residue mod n_labs as the citing paper, random member of the lab
        lab_size = (U - 1 - r_citing[own] % n_labs) // n_labs + 1
        cited[own] = r_citing[own] % n_labs + n_labs * (rng.random(own.sum()) * lab_size).astype(np.int64)
        ok = cited != r_citing
        r_citing, cited, own = r_citing[ok], cited[ok], own[ok]
        # one reference-list entry per cited paper (a real list does not repeat an entry)
        key = r_citing * U + cited
        _, first = np.unique(key, return_index=True)
        first.sort()
        r_citing, cited = r_citing[first], cited[first]
        n_self += int(own[first].sum())
        cited_any[cited] = True
        rk = np.arange(len(r_citing)) - np.searchsorted(r_citing, r_citing)  # r_citing is sorted
        citing_s, ref_key = _ids("syn:", r_citing), _ids("b", rk)
        cited_s = _ids("syn:", cited)
        year = (2000 + _hash(cited, 3) % np.uint64(17)).astype(np.int32)
        has_doi = (_hash(cited, 5) % np.uint64(100)) < 90
        doi = pc.if_else(pa.array(has_doi), _ids("10.99999/syn.", cited), pa.nulls(len(cited), pa.string()))
        entry = _with_keys(_authors(cited, n_labs, name_pool))
        # citing papers' keys, one row per reference (r_citing is sorted: index into this chunk)
        citing_authors = _with_keys(_authors(citing, n_labs, name_pool))
        at = pa.array(r_citing - start)
        entry_self = shares_author_arrow({k: citing_authors[k].take(at) for k in KEY_COLUMNS}, entry)
        wr.write({"citing_id": citing_s, "ref_key": ref_key, "cited_id": cited_s,
                  "title": _ids("Synthetic paper ", cited), **entry, "entry_shares_author": pa.array(entry_self),
                  "year": pa.array(year), "doi": doi})
        # mentions per reference and their sections
        nm = rng.choice(np.arange(1, len(pmf) + 1), size=len(cited), p=pmf)
        nm[rng.random(len(cited)) < NO_MENTION_SHARE] = 0
        m_ref = np.repeat(np.arange(len(cited)), nm)
        first_cls = rng.choice(len(CLASS_ORDER), size=len(cited), p=mix_p)
        cls = rng.choice(len(CLASS_ORDER), size=len(m_ref), p=mix_p)
        starts = np.concatenate([[0], np.cumsum(nm)[:-1]])
        is_first = np.zeros(len(m_ref), dtype=bool)
        is_first[starts[nm > 0]] = True
        keep = is_first | (rng.random(len(m_ref)) < SAME_CLASS_SHARE)
        cls = np.where(keep, first_cls[m_ref], cls)
        idx = pa.array(m_ref)
        cidx = pa.array(cls)
        wm.write({"citing_id": citing_s.take(idx), "ref_key": ref_key.take(idx), "cited_id": cited_s.take(idx),
                  "section_title": titles.take(cidx), "section_type": types.take(cidx),
                  "section_class": classes.take(cidx), "position": positions.take(cidx)})
        wp.write(_papers(citing, True, n_labs, name_pool, cfg.source, authors=citing_authors))
    # title-only papers: every cited pool paper outside the corpus, in chunks
    ext = np.flatnonzero(cited_any[N:]) + N
    for s in range(0, len(ext), 200_000):
        wp.write(_papers(ext[s:s + 200_000], False, n_labs, name_pool, cfg.source))
    rj = _Writer(root, "rejects")
    n_p, n_r, n_m = wp.rows, wr.rows, wm.rows
    for w in (wp, wr, wm, rj):
        w.close(layout.table(w.name))
    summary = {"config": asdict(cfg), "citing_papers": N, "pool": U, "papers": n_p, "references": n_r,
               "mentions": n_m, "own_lab_references": n_self, "resolved_references_expected": f"~1/{cfg.pool_factor}",
               "seconds": round(time.time() - t0, 2)}
    write_json_atomic(root / "generate_summary.json", summary, indent=1)
    return summary


def _papers(ids: np.ndarray, fulltext: bool, n_labs: int, name_pool: int, source: str,
            authors: dict | None = None) -> dict:
    n = len(ids)
    fields = (_hash(ids, 11) % np.uint64(14)).astype(np.int64)
    return {
        "paper_id": _ids("syn:", ids), "title": _ids("Synthetic paper ", ids),
        "abstract": _ids("Abstract of synthetic paper ", ids) if fulltext else pa.nulls(n, pa.string()),
        **(authors or _with_keys(_authors(ids, n_labs, name_pool))),
        "year": pa.array((2000 + _hash(ids, 3) % np.uint64(17)).astype(np.int32)),
        "venue": pa.nulls(n, pa.string()),
        "fields": pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), _ids("Field ", fields)),
        "source": pa.array(np.full(n, source, dtype=object), pa.string()),
        "has_fulltext": pa.array(np.full(n, fulltext)), "mapped": pa.array(np.ones(n, bool)),
    }
