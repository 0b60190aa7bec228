"""Quality experiment (issue 4): base encoder vs H = 0 (SPECTER-style) vs H = 2 (importance-aware).

One command:
    .venv/bin/python bench/quality_experiment.py --out runs/quality [--steps N] [--seeds 0 1 2]

Steps (each cached in --out, so a re-run resumes):
1. Data: the full eLife set (research articles only) and ScisummNet are extracted from
   ../shared/data into <out>/cache (or --elife-dir / --scisumm-dir); --sample uses the repo sample.
2. Ingest once into <out>/shared (training corpus), and the PubMed records into <out>/pubmed.
3. Importance twice on the same tables: <out>/h2 (H=2) and <out>/h0 (H=0), same K and seed; the
   triplets' "val" split (by anchor hash, identical for both) is never trained on.
4. Fine-tune minilm from the same start for every (H, objective, seed) with an equal budget;
   --objectives picks the training objectives (encoders/objectives; default triplet). Triplet
   models keep their directory and result names; another objective's get "-<objective>" (results:
   "-<objective>+..." when several), and the table adds its paired difference to triplet by seed.
   A model trained on cosine (in_batch) is evaluated under cosine: its vectors are L2-normalised
   before (a)-(d), so L2 ranking is cosine ranking.
5. Metrics per model (METHODS.md §6-7, mapping/evaluation/scidocs.py):
   (a) cite: each held-out (val) anchor's cited papers that have text (relevant) + up to 25
       random papers it does not cite (non-relevant; drawn from the papers cited by the anchor's
       source, so positives and negatives have the same kind of text; seeded, same for all
       models), ranked by L2 distance: MAP, nDCG. "cite-ft": the same restricted to in-set
       full-text papers (eLife->eLife, ACL->ACL) with full-text negatives.
   (b) eLife subject classification: first heading subject, classes with >= 10 papers, LinearSVC
       with C in 1e-4..1e2 by 3-fold CV, macro-F1.
   (c) MeSH clustering on the PubMed records (issue 16, mapping.evaluation.curves): each model's exact 20-NN
       cosine graph, beside baselines computed once per run and cached (<out>/baseline_cache.json):
       TF-IDF and BM25 20-NN, a random 20-regular graph (floor), the MeSH criterion's own 20-NN
       (ceiling), and per H=2 model the hybrid "H=2 + BM25" (0.5 / 0.5, mapping.evaluation.relatedness.hybrid).
       Each graph: Leiden CPM on CWTS-normalised weights over its own resolution sweep covering
       --g-range, with --leiden-seeds (mapping.evaluation.curves.sweep); reported as accuracy A at the
       --granularities (A@G) and relative accuracy (seed paper Fig. 6) over all graphs of the table
       together, per Leiden seed. Also a per-graph table (Fig. 6 style) in the .md and the curves
       (Fig. 5 style) in <out>/mesh_curves-<suffix>.png.
   (d) importance-graded (the seed paper's claim, which the cite task cannot see: it counts every
       citation alike): each held-out anchor's cited papers that have text, graded by the pair's
       importance score (pairs table; the same for every H); Spearman's rho between importance
       and closeness, and nDCG with importance as the gain (mapping.evaluation.scidocs.evaluate_graded).
   Mean ± std over seeds per cell; writes results-n<steps>[-lr<lr>][-m<margin>].json/.md (the
   suffix names settings that differ from the recipe), mesh_curves-n<steps>[...].png, and prints the .md.

Facet objectives (--objectives flew unifar; METHODS.md §8): unifar brings unifar_nokl (UniFAR without its
KL term) unless --no-kl-ablation. The run then also needs the facet signal (--facet-signal intent: the
citing sentences labelled by the intent classifier, <out>/shared/context_intents; or section) and the
abstract split (<out>/h<H>/abstract_facets); the classifiers are --intent-classifier /
--splitter-classifier, or trained once into <out>/classifiers. The importance stage writes the facet
triplets beside the seed's (which stay the same); every objective trains the same steps × batch.
   (e) facet-level citation retrieval (METHODS.md §8.7): per facet, the held-out anchors of (d) rank all
       their cited papers (relevant: cited for that facet) + up to 25 uncited ones, by the facet's
       vectors (FLeW: its facet encoder; UniFAR: its facet view) or a model's main vector; MAP, nDCG.
   FLeW's weights are searched on the simplex on half of the cite queries and reported on the other
   half beside equal weights (its rows in (a)-(d) use equal weights, the embed default).

Evaluations (<out>/eval_cache.json) and baselines (<out>/baseline_cache.json) are cached under keys
that hold the settings, a hash of the code that computes them (EVAL_CODE, BASELINE_CODE) and of the
input files (names, sizes and modification times of the tables read and of the model directory),
so a cached figure is always the one this code gives on these inputs. The table's "cached" column
says how many of a row's models (graphs) were read from the cache instead of computed by this run.

A grid shares one --out (data, triplets and the evaluation cache are reused): e.g. --H 0 1 2,
--margin 0.5, --lr 5e-5, --steps 200 each train only their own models.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from encoders.config import TrainConfig
from encoders.model import resolve_model
from encoders.objectives.registry import OBJECTIVES, get_objective
from encoders.objectives.triplet import DEFAULT_MARGIN
from sciencemap.contracts import SPLIT_VAL
from sciencemap.layout import RunLayout
from sciencemap.storage import read_table, write_json_atomic, write_text_atomic
from sciencemap.text import clean_text

REPO = Path(__file__).resolve().parents[1]  # the checkout this script lies in (sample/, ../shared/data)

DATA = REPO.parent / "shared" / "data"
ELIFE_TAR = DATA / "elife-articles" / "elife-articles-6c97171-xml.tar.gz"
SCISUMM_TAR = DATA / "cl-scisumm" / "scisummnet-2019.tar.gz"
SCISUMM_SUB = "data/Training-Set-2019/Task1/From-ScisummNet-2019"
T0 = time.time()
DEFAULT_LR = TrainConfig.lr                 # the seed recipe's
DEFAULT_SCALE = TrainConfig.in_batch_scale

# The code whose change invalidates a cached entry (globs under the checkout): this script (the
# evaluation sets, the metrics' wiring), all of mapping/ (metrics, k-NN graphs, Leiden sweeps, MeSH
# vectors) and sciencemap/ (text cleaning, table reading) and, for an encoder's entry, its
# embedding path (encoders/model.py, encoders/embed/). Whole folders rather than the modules an
# entry imports today: a wider set only costs a re-evaluation, a narrower one could serve a stale
# figure. Training code is not in it: a model is identified by its directory's files instead.
BASELINE_CODE = ("bench/quality_experiment.py", "mapping/*.py", "sciencemap/*.py")
EVAL_CODE = BASELINE_CODE + ("encoders/model.py", "encoders/embed/*.py")


def code_hash(patterns, root: Path = REPO) -> str:
    """SHA-256 (12 hex digits) over the paths and bytes of the files the glob patterns match under root."""
    h = hashlib.sha256()
    for f in sorted({f for pat in patterns for f in root.glob(pat) if f.is_file()}):
        h.update(f"{f.relative_to(root)}\0".encode() + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def files_hash(*paths: Path) -> str:
    """SHA-256 (12 hex digits) over the names, sizes and modification times of every file under the
    paths (tables, a model directory; symbolic links followed): a table or model that a re-run
    rewrote gets a new key. A missing path counts as such."""
    h = hashlib.sha256()
    for p in paths:
        p = Path(p).resolve()
        files = sorted(Path(d) / f for d, _, fs in os.walk(p, followlinks=True) for f in fs) if p.is_dir() \
            else [p] if p.is_file() else []
        h.update(f"{p.name}:{len(files)}\0".encode())
        for f in files:
            st = f.stat()
            h.update(f"{f.relative_to(p)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:12]


def eval_inputs(out: Path) -> list[Path]:
    """The tables the evaluation sets are read from (build_eval_sets, importance_graded_sets)."""
    return [out / "shared" / "papers", out / "shared" / "references", out / "pubmed" / "papers",
            *(out / f"h{h}" / t for h in (2, 0) for t in ("triplets", "pairs")),
            *[p for p in [out / "shared" / "context_intents", out / "shared" / "sections", out / "unarxive" / "sections",
                          out / "unarxive" / "papers"] if p.exists()]]


# Facet objectives (METHODS.md §8): they train on facet triplets ([importance] facet_signal) and abstracts
# split into facets (abstract_facets), and their models hold a "facets" view. A variant is an objective
# trained with other settings under a name of its own: UniFAR without its KL term is the ablation
# the issue asks for, added beside "unifar" unless --no-kl-ablation.
FACET_OBJECTIVES = ("flew", "unifar")
# Full-text objectives (METHODS.md §8.9-8.10): they read the sections table ([ingest] keep_sections). Their
# ablations: CoSAEmb with equal margins, SciJEPa without SIGReg (λ 0).
FULLTEXT_OBJECTIVES = ("cosaemb", "scijepa", "section_cl")
VARIANTS = {"unifar_nokl": ("unifar", {"unifar_kl": False}),
            "cosaemb_equal": ("cosaemb", {"cosaemb_margins": [1.0, 1.0, 1.0]}),
            "scijepa_l0": ("scijepa", {"jepa_lambda": 0.0})}
ABLATIONS = {"unifar": "unifar_nokl", "cosaemb": "cosaemb_equal", "scijepa": "scijepa_l0"}
UNARXIVE_TAR = DATA / "unarxive-sample" / "unarXive_data_sample.tar.gz"


def base_objective(objective: str) -> str:
    return VARIANTS[objective][0] if objective in VARIANTS else objective


def is_facet_objective(objective: str) -> bool:
    return base_objective(objective) in FACET_OBJECTIVES


def is_fulltext_objective(objective: str) -> bool:
    return base_objective(objective) in FULLTEXT_OBJECTIVES


def expand_objectives(objectives, ablations: bool = True) -> list[str]:
    """The objectives as given, each ablation right after its objective: "unifar_nokl" (UniFAR without
    KL), "cosaemb_equal" (equal margins), "scijepa_l0" (no SIGReg)."""
    out = list(dict.fromkeys(objectives))
    for objective, ablation in ABLATIONS.items():
        if ablations and objective in out and ablation not in out:
            out.insert(out.index(objective) + 1, ablation)
    return out


def uses_sections(args) -> bool:
    return any(is_fulltext_objective(o) for o in args.objectives)


def trained_on_cosine(objective: str) -> bool:
    """Evaluate under the objective's own score: cosine-trained models on unit vectors."""
    return "cosine" in get_objective(base_objective(objective)).score_name   # in_batch; unifar: mean facet cosine


def say(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------- data

def prepare_data(args, out: Path) -> tuple[Path, Path]:
    if args.sample:
        return REPO / "sample" / "elife", REPO / "sample" / "scisummnet"
    cache = out / "cache"
    elife = Path(args.elife_dir) if args.elife_dir else cache / "elife_research"
    if not args.elife_dir and not elife.exists():
        raw = cache / "elife"
        if not raw.exists():
            say(f"extracting {ELIFE_TAR.name}")
            raw.mkdir(parents=True)
            with tarfile.open(ELIFE_TAR) as t:
                t.extractall(raw, filter="data")
        tmp = cache / "elife_research.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        n = 0
        for f in sorted(raw.glob("*.xml")):
            with open(f, "rb") as fh:
                head = fh.read(4096)
            if b'article-type="research-article"' in head:
                link = tmp / f.name
                if not link.exists():
                    link.symlink_to(f.resolve())
                n += 1
        tmp.rename(elife)
        say(f"eLife research articles: {n}")
    scisumm = Path(args.scisumm_dir) if args.scisumm_dir else cache / "scisumm_raw" / SCISUMM_SUB
    if not args.scisumm_dir and not scisumm.exists():
        say(f"extracting {SCISUMM_TAR.name}")
        (cache / "scisumm_raw").mkdir(parents=True, exist_ok=True)
        with tarfile.open(SCISUMM_TAR) as t:
            t.extractall(cache / "scisumm_raw", filter="data")
    return elife, scisumm


def _link_tables(src: Path, dest: Path, names) -> RunLayout:
    dest.mkdir(parents=True, exist_ok=True)
    for n in names:
        link = dest / n
        target = (src / n).resolve()
        if link.is_symlink() and link.resolve() != target:   # a link to another table (or to none): replaced
            link.unlink()
        if not link.exists():
            link.symlink_to(target)
    return RunLayout(dest)


def _done(marker: Path) -> bool:
    return marker.exists()


def _mark(marker: Path, obj: dict) -> None:
    write_json_atomic(marker, obj, default=str)


def facet_signal(args) -> str:
    """The importance stage's facet_signal: none unless a facet objective is trained."""
    return args.facet_signal if any(is_facet_objective(o) for o in args.objectives) else "none"


def _importance_signal(marker: Path) -> str | None:
    if not marker.exists():
        return None
    return (json.loads(marker.read_text()).get("summary") or {}).get("config", {}).get("facet_signal", "none")


SCICITE = DATA / "scibert-text-classification" / "sci-cite"
CSABSTRUCT = DATA / "csabstruct"


def check_facet_inputs(args) -> None:
    """A classifier given by path must be there: asked before hours of work rather than after."""
    from sciencemap.runtime import UserError

    for flag, path in (("--intent-classifier", args.intent_classifier), ("--splitter-classifier", args.splitter_classifier)):
        if path and not Path(path).is_dir():
            raise UserError(f"{flag} {path}: no such folder (a classifier from jobs/facets.py intent-train / splitter-train)")


def facet_classifiers(args, out: Path) -> None:
    """The classifiers the facet objectives need and were not given, trained once on the shared sets
    into <out>/classifiers/{intent,splitter} (jobs/facets.py intent-train / splitter-train at their
    defaults, about 25 min each on 2 cores) and reused by later runs."""
    if facet_signal(args) == "none":
        return
    from encoders.facets.intent import train_intent
    from encoders.facets.splitter import train_splitter

    todo = [("splitter_classifier", "splitter", train_splitter, CSABSTRUCT)]
    if args.facet_signal == "intent":
        todo.insert(0, ("intent_classifier", "intent", train_intent, SCICITE))
    for attr, name, train, data in todo:
        if getattr(args, attr):
            continue
        d = out / "classifiers" / name
        marker = out / "classifiers" / f"{name}.done"
        if not marker.exists():
            say(f"train the {name} classifier on {data} (jobs/facets.py {name}-train)")
            t = time.time()
            _mark(marker, train(str(data), str(d), args.model, "cpu"))
            say(f"{name} classifier in {time.time() - t:.0f}s: test {json.loads(marker.read_text()).get('test')}")
        setattr(args, attr, str(d))


def ingest_and_importance(args, out: Path, elife: Path, scisumm: Path) -> dict:
    from importance.ingest.job import IngestConfig, run_ingest
    from importance.job import ImportanceConfig, run_importance

    shared, pubmed = RunLayout(out / "shared"), RunLayout(out / "pubmed")
    signal = facet_signal(args)
    intents_done = shared.root / "intent_label.json"
    # the full-text objectives need the sections table: an ingest without it is redone (the same papers)
    sections = uses_sections(args)
    todo = [not _done(shared.root / "ingest.done") or (sections and not shared.table("sections").exists()),
            not _done(pubmed.root / "ingest.done")]
    # an importance run without the facet triplets a facet objective needs is redone (the seed's triplets
    # come out the same: the facet ones are sampled beside them)
    todo += [not _done(out / f"h{h}" / "importance.done")
             or (signal != "none" and _importance_signal(out / f"h{h}" / "importance.done") != signal) for h in args.H]
    todo += [signal == "intent" and not intents_done.exists()]
    unarxive = RunLayout(out / "unarxive")      # (f)'s third corpus, read for its sections only
    todo += [sections and not _done(unarxive.root / "ingest.done")]
    info = {}
    if not any(todo):
        return info
    from importance.ingest.spark import get_spark

    spark = get_spark()
    try:
        if todo[0]:
            say("ingest eLife + ScisummNet")
            t = time.time()
            s = run_ingest(IngestConfig(inputs=[
                {"path": str(elife), "format": "jats", "source": "elife"},
                {"path": str(scisumm), "format": "scisummnet", "source": "scisummnet"}], keep_sections=sections),
                shared, spark=spark)
            _mark(shared.root / "ingest.done", {"seconds": time.time() - t, "summary": s})
            say(f"ingest done in {time.time() - t:.0f}s")
        if todo[1]:
            t = time.time()
            s = run_ingest(IngestConfig(inputs=[{"path": str(REPO / "sample" / "pubmed"), "format": "pubmed_csv",
                                                 "source": "pubmed"}]), pubmed, spark=spark)
            _mark(pubmed.root / "ingest.done", {"seconds": time.time() - t, "summary": s})
        if todo[-1]:
            src = out / "cache" / "unarxive"
            if not src.exists():
                with tarfile.open(UNARXIVE_TAR) as t:
                    t.extractall(out / "cache" / "unarxive.tmp", filter="data")
                (out / "cache" / "unarxive.tmp").rename(src)
            t = time.time()
            s = run_ingest(IngestConfig(inputs=[{"path": str(src), "format": "unarxive", "source": "unarxive"}],
                                        keep_sections=True), unarxive, spark=spark)
            _mark(unarxive.root / "ingest.done", {"seconds": time.time() - t, "summary": s})
        if signal == "intent" and not intents_done.exists():
            from encoders.facets.intent import label_contexts

            say(f"intent labels of the citing sentences ({args.intent_classifier})")
            _mark(intents_done, label_contexts(shared.root, args.intent_classifier, device="cpu"))
            say(f"intent labels: {json.loads(intents_done.read_text())}")
        tables = ("papers", "references", "mentions") + (("context_intents",) if signal == "intent" else ())
        for h in args.H:
            d = out / f"h{h}"
            if _done(d / "importance.done") and (signal == "none" or _importance_signal(d / "importance.done") == signal):
                continue
            lay = _link_tables(shared.root, d, tables)
            (d / "splitter_label.json").unlink(missing_ok=True)   # the abstracts to split follow the triplets
            t = time.time()
            say(f"importance H={h} (facet_signal {signal})")
            s = run_importance(ImportanceConfig(K=args.K, H=h, margin=args.margin, seed=args.data_seed,
                                                facet_signal=signal), lay, spark=spark)
            _mark(d / "importance.done", {"seconds": time.time() - t, "summary": s})
            say(f"importance H={h} done in {time.time() - t:.0f}s")
    finally:
        spark.stop()
    return info


def split_abstracts(args, out: Path) -> None:
    """The facet objectives' abstract split (`abstract_facets`) of every triplet paper, per H."""
    if facet_signal(args) == "none":
        return
    from encoders.facets.splitter import label_abstracts

    for h in args.H:
        marker = out / f"h{h}" / "splitter_label.json"
        if not marker.exists():
            say(f"abstract facets H={h} ({args.splitter_classifier})")
            _mark(marker, label_abstracts(out / f"h{h}", args.splitter_classifier, device="cpu"))
            say(f"abstract facets H={h}: {json.loads(marker.read_text())}")


def seed_triplets(out: Path, h: int) -> pd.DataFrame:
    """The run's seed triplets (facet null: the facet triplets are the facet objectives' own)."""
    from encoders.training.triplet_table import _read_triplets

    return _read_triplets(RunLayout(out / f"h{h}"))


def triplet_stats(out: Path, hs, facets: bool = False) -> dict:
    from encoders.training.triplet_table import _read_triplets

    res = {}
    for h in hs:
        df = seed_triplets(out, h)
        facet = _read_triplets(RunLayout(out / f"h{h}"), facet="*") if facets else pd.DataFrame()
        res[f"H={h}"] = {"triplets": int(len(df)), "train": int((df.split != SPLIT_VAL).sum()),
                         "val": int((df.split == SPLIT_VAL).sum()),
                         "anchors_train": int(df[df.split != SPLIT_VAL].anchor_id.nunique()),
                         "anchors_val": int(df[df.split == SPLIT_VAL].anchor_id.nunique()),
                         "hard": int((df.negative_kind == "hard").sum()),
                         **({"facet_train": {f: int(n) for f, n in facet[facet.split != SPLIT_VAL].facet.value_counts().items()}}
                            if len(facet) else {})}
    return res


# ---------------------------------------------------------------- training

def variant(args) -> str:
    """Suffix naming the training settings that differ from the recipe defaults (model dirs and
    result files of a grid run side by side in one --out)."""
    parts = [f"lr{args.lr:g}" if args.lr != DEFAULT_LR else "", f"m{args.margin:g}" if args.margin != DEFAULT_MARGIN else ""]
    return "".join(f"-{p}" for p in parts if p)


def objective_suffix(args, objective: str) -> str:
    """'' for the triplet objective (its model dirs and cache keys predate objectives), else
    '-<objective>' plus its settings that differ from the default."""
    if objective == "triplet":
        return ""
    scale = f"-s{args.in_batch_scale:g}" if objective == "in_batch" and args.in_batch_scale != DEFAULT_SCALE else ""
    return f"-{objective}{scale}"


def model_name(h: int, seed: int, objective: str) -> str:
    return f"H={h} seed={seed}" + ("" if objective == "triplet" else f" {objective}")


def model_dir(args, out: Path, h: int, seed: int, objective: str) -> Path:
    return out / "models" / f"h{h}-s{seed}-n{args.steps}{variant(args)}{objective_suffix(args, objective)}"


def results_suffix(args) -> str:
    """Result files of triplet-only runs keep their names; other objective sets are named."""
    return "" if list(args.objectives) == ["triplet"] else "-" + "+".join(args.objectives)


def train_model(args, out: Path, h: int, seed: int, objective: str = "triplet") -> Path:
    from encoders.training.loop import TrainConfig, run_train

    name = model_name(h, seed, objective)
    d = model_dir(args, out, h, seed, objective)
    lay = _link_tables(out / f"h{h}", d, ("papers", "triplets") + (("abstract_facets",) if is_facet_objective(objective) else ()))
    if is_fulltext_objective(objective):    # the sections come with the ingest, not the importance run
        _link_tables(out / "shared", d, ("sections",))
    if not _done(d / "train.done"):
        say(f"train {name} ({args.steps} steps, lr {args.lr:g}, objective {objective}, margin {args.margin:g}, "
            f"in-batch scale {args.in_batch_scale:g})")
        t = time.time()
        cfg = TrainConfig(model=args.model, objective=base_objective(objective), max_steps=args.steps, batch_size=args.batch_size,
                          grad_accum=1, lr=args.lr, margin=args.margin, in_batch_scale=args.in_batch_scale,
                          max_length=args.max_length, seed=seed,
                          val_max=args.val_max, checkpoint_every=0, log_every=10, device="cpu",
                          **(VARIANTS[objective][1] if objective in VARIANTS else {}))
        s = run_train(cfg, lay)
        _mark(d / "train.done", {"seconds": time.time() - t, "summary": s})
        say(f"train {name} done in {time.time() - t:.0f}s")
    return lay.model_dir


# ---------------------------------------------------------------- evaluation sets

def _has_text(title, abstract) -> bool:
    return bool(clean_text(title) or clean_text(abstract))   # None, NaN (pandas 3) and blanks are no text


def build_eval_sets(args, out: Path) -> dict:
    """Cite queries (qrels files in SciDocs format), eLife labels and PubMed papers."""
    from mapping.evaluation.scidocs import write_qrels

    shared, pubmed = RunLayout(out / "shared"), RunLayout(out / "pubmed")
    papers = read_table(shared.table("papers"), columns=["paper_id", "title", "abstract", "fields", "source",
                                                         "has_fulltext"]).to_pandas().drop_duplicates("paper_id")
    papers = papers[[_has_text(t, a) for t, a in zip(papers.title, papers.abstract)]]
    refs = read_table(shared.table("references"), columns=["citing_id", "cited_id"]).to_pandas()
    refs = refs.dropna().drop_duplicates()
    refs = refs[refs.citing_id != refs.cited_id]
    text_ids = set(papers.paper_id)
    refs = refs[refs.cited_id.isin(text_ids)]
    src = dict(zip(papers.paper_id, papers.source))
    fulltext = set(papers.paper_id[papers.has_fulltext])
    # Held-out anchors: val-split anchors of both triplet sets (the split is by anchor hash).
    val = None
    for h in [x for x in (2, 0) if (out / f"h{x}").is_dir()]:
        t = seed_triplets(out, h)
        a = set(t.anchor_id[t.split == SPLIT_VAL])
        train_a = set(t.anchor_id[t.split != SPLIT_VAL])
        assert not (a & train_a), "an anchor is in both splits"
        val = a if val is None else (val & a)
    cited_by = refs.groupby("citing_id")["cited_id"].apply(set).to_dict()
    refs_src = refs.assign(s=refs.citing_id.map(src))
    qrels_sets, eligible = {}, {}
    rng = np.random.default_rng(args.eval_seed)
    for variant in ("cite", "cite-ft"):
        pools = {}
        for s, grp in refs_src.groupby("s"):
            pool = sorted(set(grp.cited_id))
            if variant == "cite-ft":
                pool = [p for p in pool if p in fulltext]
            pools[s] = np.array(pool, dtype=object)
        qrels = {}
        for q in sorted(val):
            rel = cited_by.get(q, set())
            if variant == "cite-ft":
                rel = {p for p in rel if p in fulltext}
            if not rel or q not in text_ids:
                continue
            if len(rel) > args.max_rel:  # SciDocs cite: 5 cited + 25 uncited per query
                rel = set(rng.choice(sorted(rel), args.max_rel, replace=False).tolist())
            pool = pools.get(src.get(q), np.array([], dtype=object))
            cand = pool[~np.isin(pool, list(rel | {q}))]
            neg = rng.choice(cand, size=min(args.n_neg, len(cand)), replace=False) if len(cand) else []
            qrels[q] = {**{p: 1 for p in sorted(rel)}, **{p: 0 for p in neg}}
        keys = sorted(qrels)
        eligible[variant] = len(keys)
        if len(keys) > args.max_queries:
            keys = sorted(rng.choice(keys, args.max_queries, replace=False).tolist())
        qrels = {k: qrels[k] for k in keys}
        write_qrels(out / f"qrels-{variant}.txt", qrels)
        qrels_sets[variant] = qrels
        if variant == "cite":
            cite_pools = pools
    graded, graded_eligible = importance_graded_sets(args, out, val, text_ids)
    facet_sets, facet_eligible = {}, {}
    if facet_signal(args) != "none":
        facet_sets, facet_eligible = facet_qrels(args, out, set(graded), text_ids, src, cite_pools)
        for f, q in facet_sets.items():
            write_qrels(out / f"qrels-facet-{f}.txt", q)
    el = papers[(papers.source == "elife") & papers.has_fulltext].copy()
    el["label"] = el.fields.map(lambda f: f[0] if f is not None and len(f) else None)
    el = el.dropna(subset=["label"])
    counts = el.label.value_counts()
    el = el[el.label.isin(counts[counts >= 10].index)]
    pm = read_table(pubmed.table("papers"), columns=["paper_id", "title", "abstract", "mesh"]).to_pandas()
    pm = pm.drop_duplicates("paper_id")
    pm = pm[pm.mesh.map(lambda m: m is not None and len(m) > 0)
            & np.array([_has_text(t, a) for t, a in zip(pm.title, pm.abstract)], bool)].reset_index(drop=True)
    need = set(el.paper_id)
    vt = seed_triplets(out, 2 if (out / "h2").is_dir() else 0)      # the validation triplets' accuracy
    vt = vt[(vt.split == SPLIT_VAL) & vt.anchor_id.isin(text_ids) & vt.positive_id.isin(text_ids)
            & vt.negative_id.isin(text_ids)].reset_index(drop=True)
    need.update(vt.anchor_id, vt.positive_id, vt.negative_id)
    for qrels in [*qrels_sets.values(), graded, *facet_sets.values()]:
        for q, c in qrels.items():
            need.add(q)
            need.update(c)
    texts = papers[papers.paper_id.isin(need)][["paper_id", "title", "abstract"]]
    texts = pd.concat([texts, pm[["paper_id", "title", "abstract"]]]).drop_duplicates("paper_id")
    return {"qrels": qrels_sets, "elife": el[["paper_id", "label"]].reset_index(drop=True), "pubmed": pm,
            "val_triplets": vt, "chunks": paragraph_chunks(args, out, val, src) if uses_sections(args) else None,
            "texts": texts.reset_index(drop=True), "val_anchors": len(val),
            "eligible": {**eligible, "graded": graded_eligible, **{f"facet-{f}": n for f, n in facet_eligible.items()}},
            "graded": graded, "facets": facet_sets}


def facet_counts_of(args, out: Path, anchors: set) -> pd.DataFrame:
    """citing_id, cited_id and the number of citing sentences per facet, for the anchors' pairs, by
    the run's facet signal (importance.facets, here in pandas for a few hundred anchors): section
    classes as the proxy (I -> background, M -> method, R/D -> result) or the intent labels."""
    import pyarrow.dataset as pads

    from importance.facets import SECTION_CLASSES
    from sciencemap.contracts import FACETS

    lay = RunLayout(out / ("h2" if (out / "h2").is_dir() else f"h{args.H[0]}"))
    anchors = sorted(anchors)
    if args.facet_signal == "section":
        p = pads.dataset(str(lay.table("pairs"))).to_table(
            columns=["citing_id", "cited_id", "f_I", "f_M", "f_R", "f_D"], filter=pads.field("citing_id").isin(anchors)).to_pandas()
        return pd.DataFrame({"citing_id": p.citing_id, "cited_id": p.cited_id,
                             **{f: sum(p[f"f_{c}"] for c in SECTION_CLASSES[f]) for f in FACETS}})
    m = pads.dataset(str(lay.table("mentions"))).to_table(
        columns=["citing_id", "cited_id", "context"], filter=pads.field("citing_id").isin(anchors)).to_pandas()
    lab = pads.dataset(str(lay.table("context_intents"))).to_table(
        columns=["citing_id", "context", "intent"], filter=pads.field("citing_id").isin(anchors)).to_pandas()
    m = m.dropna(subset=["cited_id"]).merge(lab.drop_duplicates(["citing_id", "context"]),
                                            on=["citing_id", "context"], how="left")
    m["intent"] = m.intent.fillna("none")   # a pair cited in unlabelled sentences only stays, for no facet
    c = pd.crosstab([m.citing_id, m.cited_id], m.intent).reindex(columns=list(FACETS), fill_value=0)
    return c.reset_index()


def facet_qrels(args, out: Path, anchors: set, text_ids: set, src: dict, pools: dict) -> tuple[dict, dict]:
    """Facet-level citation retrieval (METHODS.md §8.7): the importance-graded task's held-out anchors
    (all their cited papers with text are embedded already), per facet f those with a cited paper
    cited for f (≥1 citing sentence of facet f); each ranks all its cited papers that have text
    (relevant: cited for f; the others are cited for other facets only, or in sentences of no facet)
    plus --n-neg random uncited papers from the cite task's pool of its source, drawn once per
    anchor for the three facets. {facet: qrels}, {facet: its queries}."""
    from sciencemap.contracts import FACETS

    counts = facet_counts_of(args, out, anchors)
    counts = counts[counts.cited_id.isin(text_ids) & counts.citing_id.isin(text_ids)
                    & (counts.citing_id != counts.cited_id)]
    rng = np.random.default_rng(args.eval_seed + 2)   # a stream of its own: the other sets stay as they were
    sets = {f: {} for f in FACETS}
    for q, g in sorted(counts.groupby("citing_id"), key=lambda x: x[0]):
        cited = set(g.cited_id)
        pool = pools.get(src.get(q), np.array([], dtype=object))
        cand = pool[~np.isin(pool, list(cited | {q}))]
        neg = rng.choice(cand, size=min(args.n_neg, len(cand)), replace=False) if len(cand) else []
        for f in FACETS:
            rel = set(g.cited_id[g[f] > 0])
            if rel:
                sets[f][q] = {**{p: int(p in rel) for p in sorted(cited)}, **{p: 0 for p in neg}}
    eligible = {f: len(q) for f, q in sets.items()}
    return sets, eligible


PARA_ANCHORS = 100      # (f): held-out anchors with sections, at most
PARA_CHUNKS = 20        # (f): chunks a paper, at most (a seeded sample, in order)


def paragraph_chunks(args, out: Path, val: set, source_of: dict) -> pd.DataFrame:
    """(f)'s chunks: at most PARA_ANCHORS held-out anchors of the training corpus (eLife, ScisummNet) that
    have sections, and every unArXive sample paper; each paper's sections chunked as CoSAEmb reads them
    (encoders.embed.chunks.paper_chunks: the base tokenizer with the section tags, max_length), at most
    PARA_CHUNKS a paper. `text` keeps the tags (for CoSAEmb models), `plain` drops them (other models, BM25)."""
    import re

    from transformers import AutoTokenizer

    from encoders.embed.chunks import paper_chunks
    from encoders.fulltext.chunks import SPECIAL_TOKENS, add_special_tokens
    from encoders.fulltext.sections_table import paper_sections, section_paper_ids

    tok = AutoTokenizer.from_pretrained(resolve_model(args.model), local_files_only=True)
    add_special_tokens(tok)
    tags = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS) + r"\s*")
    rng = np.random.default_rng(args.eval_seed)
    rows = []
    for run, pick in (("shared", True), ("unarxive", False)):
        lay = RunLayout(out / run)
        have = section_paper_ids(lay.table("sections"))
        ids = sorted(have & val) if pick else sorted(have)
        if pick and len(ids) > PARA_ANCHORS:
            ids = sorted(rng.choice(ids, PARA_ANCHORS, replace=False).tolist())
        titles = dict(read_table(lay.table("papers"), columns=["paper_id", "title"]).to_pandas()
                      .drop_duplicates("paper_id").itertuples(index=False, name=None))
        for pid, secs in paper_sections(lay.table("sections"), set(ids)):
            chunks = list(paper_chunks(titles.get(pid), secs, tok, args.max_length))
            if len(chunks) > PARA_CHUNKS:
                chunks = [chunks[i] for i in sorted(rng.choice(len(chunks), PARA_CHUNKS, replace=False))]
            src = source_of.get(pid, "unarxive") if pick else "unarxive"
            rows += [(pid, src, pos, cls, k, text, tags.sub("", text).strip()) for pos, cls, k, text in chunks]
    return pd.DataFrame(rows, columns=["paper_id", "source", "position", "section_class", "chunk", "text", "plain"])


def importance_graded_sets(args, out: Path, val: set, text_ids: set) -> tuple[dict, int]:
    """{anchor: {cited: importance}} for held-out anchors with >= args.min_graded cited papers that
    have text and not all of one importance; a seeded sample of at most args.max_queries."""
    h = 2 if (out / "h2").is_dir() else 0   # pairs do not depend on H; only triplets do
    pairs = read_table(RunLayout(out / f"h{h}").table("pairs"),
                       columns=["citing_id", "cited_id", "importance"]).to_pandas()
    pairs = pairs[pairs.citing_id.isin(val) & pairs.cited_id.isin(text_ids)
                  & pairs.citing_id.isin(text_ids) & (pairs.citing_id != pairs.cited_id)]
    graded = {q: dict(zip(g.cited_id, g.importance.astype(float))) for q, g in pairs.groupby("citing_id")
              if len(g) >= args.min_graded and g.importance.nunique() > 1}
    keys = sorted(graded)
    if len(keys) > args.max_queries:
        rng = np.random.default_rng(args.eval_seed + 1)   # its own stream: the cite sets stay as they were
        keys = sorted(rng.choice(keys, args.max_queries, replace=False).tolist())
    return {k: graded[k] for k in keys}, len(graded)


# ---------------------------------------------------------------- metrics

MESH_K = 20             # k of every k-NN graph in (c)
HYBRID_W = 0.5          # the encoder's share in the "H=2 + BM25" hybrid (BM25: the rest)
BASELINES = {"tfidf": "TF-IDF 20-NN (baseline)", "bm25": "BM25 20-NN (baseline)",
             "random": "random 20-regular (floor)", "mesh": "MeSH 20-NN (ceiling)"}


def mesh_criterion(mv):
    from mapping.evaluation.curves import Criterion

    return Criterion("mesh", mv.V, mv.rows)


def graph_curve(args, graph, crit) -> dict:
    """The graph's accuracy–granularity curve on the PubMed records (mapping.evaluation.curves.sweep: its own
    resolution sweep covering --g-range, --curve-points resolutions × --leiden-seeds)."""
    from mapping.evaluation.curves import sweep

    c = sweep(graph, crit, tuple(args.g_range), points=args.curve_points, seeds=tuple(args.leiden_seeds))
    c["edges"] = graph.m
    return c


def pubmed_texts(pm: pd.DataFrame) -> list[str]:
    return [f"{clean_text(t)} {clean_text(a)}".strip() for t, a in zip(pm.title, pm.abstract)]


def bm25_pubmed(pm: pd.DataFrame):
    from mapping.evaluation.text_graphs import bm25_graph

    return bm25_graph(pubmed_texts(pm), k=MESH_K, name="bm25")


def baseline_curves(args, out: Path, pm: pd.DataFrame, mv, crit) -> tuple[dict, bool]:
    """TF-IDF, BM25, random 20-regular and MeSH (criterion) 20-NN curves on the PubMed records,
    computed once and cached in <out>/baseline_cache.json (keyed by the records, the sweep, the
    code (BASELINE_CODE) and the PubMed table's files); (curves, whether they came from the cache)."""
    from mapping.evaluation import text_graphs as tg

    cache = out / "baseline_cache.json"
    key = hashlib.sha256(json.dumps(["baselines-v1", sorted(pm.paper_id.tolist()), MESH_K, args.g_range,
                                     args.curve_points, args.leiden_seeds]).encode()).hexdigest()[:12] \
        + f"|code:{code_hash(BASELINE_CODE)}|data:{files_hash(out / 'pubmed' / 'papers')}"
    cached = json.loads(cache.read_text()) if cache.exists() else {}
    if key in cached:
        return cached[key], True
    texts, n = pubmed_texts(pm), len(pm)
    builders = {"tfidf": lambda: tg.tfidf_graph(texts, k=MESH_K, name="tfidf"),
                "bm25": lambda: bm25_pubmed(pm),
                "random": lambda: tg.random_regular_graph(n, k=MESH_K, seed=0, name="random"),
                "mesh": lambda: tg.criterion_graph(mv.V, mv.rows, n, k=MESH_K, name="mesh")}
    res = {}
    for name, build in builders.items():
        t = time.time()
        c = graph_curve(args, build(), crit)
        res[name] = c
        say(f"baseline {name}: {c['edges']} edges, curve in {time.time() - t:.0f}s")
    cached = json.loads(cache.read_text()) if cache.exists() else {}
    cached[key] = res
    _mark(cache, cached)
    return res, False


class EvalEncoder:
    """A model as the embed stage runs it: its objective's input text, main vector (SciJEPa: of `branch`) and
    views (ViewsForward), or the plain pooled forward for a model without an own main vector or views."""

    def __init__(self, args, spec, branch: str = "online"):
        from encoders.config import EmbedConfig
        from encoders.embed.views import main_dim, objective_views, own_main_vector
        from encoders.model import load_encoder

        self.enc = load_encoder(str(spec), None, args.max_length, "cpu")
        self.objective, self.specs = objective_views(self.enc)
        if self.objective is not None:
            self.objective.embed_settings = EmbedConfig(branch=branch)
            self.objective.check_embed(self.objective.embed_settings)
        self.own = bool(self.specs) or own_main_vector(self.objective)
        self.dim = main_dim(self.enc, self.objective)

    def paper_texts(self, titles, abstracts) -> list[str]:
        if self.objective is None:
            return self.enc.texts(titles, abstracts)
        return [self.objective.input_text(t, a, self.enc.sep) for t, a in zip(titles, abstracts)]

    def embed(self, docs: list[str]) -> tuple[np.ndarray, dict]:
        """Main vectors of the texts and each view's (n x K x dim)."""
        from encoders.embed import embed_texts
        from encoders.embed.views import ViewsForward, split, width

        if not self.own:
            return embed_texts(self.enc, docs, batch_size=64, precision="float32"), {}
        rows = embed_texts(self.enc, docs, batch_size=64, precision="float32",
                           forward=ViewsForward(self.enc, self.objective, self.specs), width=width(self.dim, self.specs))
        return split(rows, self.dim, self.specs)


def embed_eval_texts(args, spec, texts: pd.DataFrame, branch: str = "online") -> tuple[np.ndarray, np.ndarray | None, EvalEncoder]:
    """The model's main vectors of the texts and, for a model with a "facets" view (flew, unifar), its
    facet vectors (n x 3 x dim), from one forward in the embed stage's own way (FLeW's main vector at its
    default, equal weights; SciJEPa's of `branch`); and the EvalEncoder, for more texts."""
    model = EvalEncoder(args, spec, branch)
    main, views = model.embed(model.paper_texts(texts.title, texts.abstract))
    return main, views.get("facets"), model


def facet_retrieval(sets: dict, idx: dict, emb: dict, facets: np.ndarray | None) -> dict:
    """(e) facet-level citation retrieval: each facet's queries ranked by that facet's vectors where the
    model has them (FLeW's facet encoders, UniFAR's facet views), else by its main vector; the means
    over the facets as facet_map / facet_ndcg."""
    from mapping.evaluation.scidocs import evaluate_ranking
    from sciencemap.contracts import FACETS

    res = {}
    for f, qrels in sets.items():
        e = emb if facets is None else {p: facets[i, FACETS.index(f)] for p, i in idx.items()}
        r = evaluate_ranking(qrels, e)
        res[f"facet_{f}_map"], res[f"facet_{f}_ndcg"], res[f"facet_{f}_queries"] = r["map"], r["ndcg"], r["queries"]
    if sets:
        res["facet_map"] = float(np.mean([res[f"facet_{f}_map"] for f in sets]))
        res["facet_ndcg"] = float(np.mean([res[f"facet_{f}_ndcg"] for f in sets]))
    return res


def anchor_half(q: str) -> int:
    """0 or 1 by a hash of the anchor id: the halves FLeW's weights are picked on (0) and reported on (1)."""
    return hashlib.sha256(q.encode()).digest()[0] & 1


def flew_weight_search(qrels: dict, idx: dict, facets: np.ndarray, step: float = 0.1) -> dict:
    """FLeW's weights on the simplex (encoders.facets.weights.search, Σ_f w_f cos_f), picked by cite MAP on
    half of the held-out cite queries and reported on the other half beside equal weights."""
    from encoders.facets.weights import mean_ap, search

    V = facets / np.maximum(np.linalg.norm(facets, axis=2, keepdims=True), 1e-12)

    def task(half: int):
        qs = [q for q in sorted(qrels) if anchor_half(q) == half and q in idx]
        cands = sorted({c for q in qs for c in qrels[q] if c in idx})
        col = {c: j for j, c in enumerate(cands)}
        cos = np.einsum("afd,cfd->acf", V[[idx[q] for q in qs]], V[[idx[c] for c in cands]])
        relevant, mask = np.zeros(cos.shape[:2], bool), np.zeros(cos.shape[:2], bool)
        for i, q in enumerate(qs):
            for c, r in qrels[q].items():
                if c in col and c != q:
                    mask[i, col[c]], relevant[i, col[c]] = True, r > 0
        return cos, relevant, mask, len(qs)

    pick, report_on = task(0), task(1)
    best = search(*pick[:3], step=step)[0]
    equal = [1 / V.shape[1]] * V.shape[1]
    return {"weights": best["weights"], "pick_map": best["map"], "pick_queries": pick[3],
            "report_queries": report_on[3], "report_map": mean_ap(*report_on[:3], best["weights"]),
            "report_map_equal": mean_ap(*report_on[:3], equal)}


def evaluate_model(args, spec, ev: dict, crit, cosine: bool = False, hybrid_with=None,
                   objective: str | None = None, branch: str = "online") -> dict:
    """Metrics (a)-(d) of one encoder; (c) is its 20-NN graph's curve ("mesh_sweep") and, when
    `hybrid_with` (the PubMed BM25 graph) is given, the hybrid's ("mesh_hybrid_sweep"); the validation
    triplets' accuracy, the geometry, and with the full-text objectives (f) paragraph retrieval."""
    import torch

    from mapping.evaluation.scidocs import evaluate_graded, evaluate_ranking, svm_macro_f1

    torch.set_num_threads(args.threads)
    texts = ev["texts"]
    t = time.time()
    X, facets, model = embed_eval_texts(args, spec, texts, branch)
    emb_s = time.time() - t
    if cosine:  # the model's own score: L2 on unit vectors ranks as cosine
        X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
        if facets is not None:
            facets = facets / np.maximum(np.linalg.norm(facets, axis=2, keepdims=True), 1e-12)
    idx = {p: i for i, p in enumerate(texts.paper_id)}
    emb = {p: X[i] for p, i in idx.items()}
    res = {"embed_s": round(emb_s, 1), "texts": len(texts)}
    for variant, qrels in ev["qrels"].items():
        r = evaluate_ranking(qrels, emb)
        res[f"{variant}_map"], res[f"{variant}_ndcg"], res[f"{variant}_queries"] = r["map"], r["ndcg"], r["queries"]
    res.update(facet_retrieval(ev.get("facets") or {}, idx, emb, facets))
    if facets is not None and base_objective(objective or "") == "flew":
        res["flew_weights"] = flew_weight_search(ev["qrels"]["cite"], idx, facets)
    g = evaluate_graded(ev["graded"], emb)
    res["imp_rho"], res["imp_ndcg"], res["imp_queries"] = g["rho"], g["ndcg"], g["queries"]
    el = ev["elife"]
    c = svm_macro_f1(X[[idx[p] for p in el.paper_id]], el.label.tolist(), seed=0)
    res["cls_f1"], res["cls_C"] = c["macro_f1"], c["C"]
    pm = ev["pubmed"]
    from mapping.evaluation.relatedness import hybrid
    from mapping.evaluation.text_graphs import vector_graph

    t = time.time()
    g = vector_graph(X[[idx[p] for p in pm.paper_id]], k=MESH_K, name="encoder")
    res["mesh_sweep"] = graph_curve(args, g, crit)
    if hybrid_with is not None:
        hg = hybrid("encoder + BM25", [(g, HYBRID_W), (hybrid_with, 1.0 - HYBRID_W)])
        res["mesh_hybrid_sweep"] = graph_curve(args, hg, crit)
    res["mesh_s"] = round(time.time() - t, 1)
    res.update(triplet_accuracy(ev["val_triplets"], idx, X))
    res.update(geometry_of(X, idx, ev["qrels"]["cite"]))
    if ev.get("chunks") is not None:
        ch = ev["chunks"]
        tagged = base_objective(objective or "") == "cosaemb"      # read with its tags; the others plain text
        V, _ = model.embed(list(ch.text if tagged else ch.plain))
        res.update(paragraph_figures(ch, V))
    return res


SCIJEPA_BRANCHES = ("online", "predictor", "target")
PARA_BM25 = "bm25 paragraphs"


def branch_name(name: str, branch: str) -> str:
    return f"{name} [{branch}]"


def paragraph_bm25(ch: pd.DataFrame) -> dict:
    """(f) by BM25 over the chunks' words (tags dropped): the text baseline."""
    from mapping.evaluation.paragraphs import bm25_topk

    src, dst, _ = bm25_topk(list(ch.plain), 3)
    return paragraph_row(src, dst, ch)


def fulltext_stats(args, out: Path, ch: pd.DataFrame) -> dict:
    """Per source: papers with sections, sections by class, SciJEPa's tasks by rule, CoSAEmb's chunks (from the
    first seed's item store, when trained) and (f)'s papers and chunks."""
    from encoders.fulltext.pairs import RULES, section_pairs
    from encoders.fulltext.sections_table import paper_sections, strip_positions

    stats: dict = {}
    for run in ("shared", "unarxive"):
        lay = RunLayout(out / run)
        papers = read_table(lay.table("papers"), columns=["paper_id", "title", "abstract", "source"]).to_pandas() \
            .drop_duplicates("paper_id").set_index("paper_id")
        for pid, secs in paper_sections(lay.table("sections")):
            src = papers.source.get(pid, run)
            d = stats.setdefault(src, {"papers": 0, "sections": {}, "tasks": {r: {} for r in RULES}})
            d["papers"] += 1
            for _, cls, _, _ in secs:
                d["sections"][cls or ""] = d["sections"].get(cls or "", 0) + 1
            title, abstract = (x if isinstance(x, str) else None for x in (papers.title.get(pid), papers.abstract.get(pid)))
            for r in RULES:
                for task, *_ in section_pairs(title, abstract, strip_positions(secs), r):
                    d["tasks"][r][task] = d["tasks"][r].get(task, 0) + 1
    store = next(iter(sorted((out / "models").glob("h2-s*-cosaemb/train_tokens/cosaemb_tokens-*"))), None) \
        if (out / "models").is_dir() else None
    if store is not None:
        from encoders.training.item_store import open_store

        items = [i for i in open_store(store).items.column("item_id").to_pylist() if i.startswith("c:")]
        source = read_table(out / "shared" / "papers", columns=["paper_id", "source"]).to_pandas() \
            .drop_duplicates("paper_id").set_index("paper_id").source
        for pid in (i[2:].rsplit(":", 2)[0] for i in items):
            d = stats.setdefault(source.get(pid, "?"), {})
            d["chunks"] = d.get("chunks", 0) + 1
    for src, grp in ch.groupby("source"):
        stats.setdefault(src, {})["paragraph_set"] = {"papers": int(grp.paper_id.nunique()), "chunks": int(len(grp))}
    return stats


def training_stats(args, out: Path) -> dict:
    """Per objective: the trained models' train seconds, rows read (triplets / pairs) and distinct texts
    and tokens read, from their train.done records (mean over seeds)."""
    res = {}
    for o in args.objectives:
        recs = [json.loads((model_dir(args, out, h, s, o) / "train.done").read_text()) for h in args.H for s in args.seeds
                if (model_dir(args, out, h, s, o) / "train.done").exists()]
        if recs:
            tr = [r["summary"].get("training", {}) for r in recs]
            res[o] = {"models": len(recs), "train_seconds": float(np.mean([r["summary"]["train_seconds"] for r in recs])),
                      **{k: float(np.mean([t.get(k, np.nan) for t in tr])) for k in
                         ("triplets_seen", "papers_seen", "tokens_seen")}}
    return res


def triplet_accuracy(trip: pd.DataFrame, idx: dict, X: np.ndarray) -> dict:
    """The held-out seed triplets (val split): the share whose positive is nearer the anchor than the negative
    (L2 on the vectors as the model is scored: unit for cosine models), overall and by negative kind."""
    if trip is None or not len(trip):
        return {}
    a, p, n = (X[[idx[i] for i in trip[c]]] for c in ("anchor_id", "positive_id", "negative_id"))
    ok = np.linalg.norm(a - p, axis=1) < np.linalg.norm(a - n, axis=1)
    kinds = trip["negative_kind"].to_numpy()
    return {"val_acc": float(ok.mean()), "val_triplets": int(len(trip)),
            **{f"val_acc_{k}": float(ok[kinds == k].mean()) for k in sorted(set(kinds))}}


def geometry_of(X: np.ndarray, idx: dict, qrels: dict) -> dict:
    """METHODS.md §7.2 on the evaluation texts' main vectors; alignment over the cite task's (anchor, cited) pairs."""
    from sciencemap.geometry import geometry

    pairs = [(idx[q], idx[c]) for q, cands in qrels.items() for c, r in cands.items() if r > 0 and q in idx and c in idx]
    a, b = (np.asarray([x[i] for x in pairs], np.int64) for i in (0, 1))
    g = geometry(X, X[a], X[b])
    return {"geo_alignment": g.get("alignment"), "geo_uniformity": g["uniformity"],
            "geo_spectrum": g["spectrum_deviation"], "geo_rank": g["spectrum_effective_rank"], "geo_pairs": len(pairs)}


def paragraph_figures(ch: pd.DataFrame, V: np.ndarray) -> dict:
    """(f) recall@1 / @3 of a same-paper chunk and of an other-section one, all chunks and unArXive's alone."""
    from mapping.evaluation.paragraphs import dense_topk

    src, dst, _ = dense_topk(V, 3)
    return paragraph_row(src, dst, ch)


def paragraph_row(src, dst, ch: pd.DataFrame) -> dict:
    from mapping.evaluation.paragraphs import paragraph_recall

    out = {}
    for name, mask in (("", None), ("_unarxive", (ch.source == "unarxive").to_numpy())):
        r = paragraph_recall(src, dst, ch.paper_id, ch.position, queries=mask)
        out.update({f"para{name}_r1": r["recall@1_same_paper"], f"para{name}_r3": r["recall@3_same_paper"],
                    f"para{name}_o1": r["recall@1_other_section"], f"para{name}_o3": r["recall@3_other_section"],
                    f"para{name}_queries": r["queries_same_paper"]})
    return out


def mesh_vectors(pm: pd.DataFrame):
    from mapping.evaluation.mesh_accuracy import CHECK_TAG_UIS, CHECK_TAGS, publication_vectors

    return publication_vectors([list(m) for m in pm.mesh], drop_names=CHECK_TAGS, drop_uis=CHECK_TAG_UIS)


# ---------------------------------------------------------------- report

BASE_METRICS = [("cite_map", "cite MAP"), ("cite_ndcg", "cite nDCG"), ("cite-ft_map", "cite-ft MAP"),
                ("cite-ft_ndcg", "cite-ft nDCG"), ("cls_f1", "eLife subj. macro-F1"),
                ("imp_rho", "importance ρ"), ("imp_ndcg", "importance nDCG")]
FACET_METRICS = [("facet_map", "facet MAP"), ("facet_ndcg", "facet nDCG")]


FULLTEXT_METRICS = [("val_acc", "val triplet acc."), ("para_r1", "(f) R@1 paper"), ("para_r3", "(f) R@3 paper"),
                    ("para_o1", "(f) R@1 other section"), ("para_o3", "(f) R@3 other section"),
                    ("geo_alignment", "alignment"), ("geo_uniformity", "uniformity"), ("geo_spectrum", "spectrum dev.")]


def metrics(args) -> list[tuple[str, str]]:
    return BASE_METRICS + (FACET_METRICS if facet_signal(args) != "none" else []) \
        + [(f"mesh_A{g:g}", f"MeSH A@G={g:g}") for g in args.granularities] + [("mesh_rel_acc", "MeSH rel. acc.")] \
        + (FULLTEXT_METRICS if uses_sections(args) else [])


def hybrid_name(name: str) -> str:
    return f"{name} + BM25"


def mesh_graphs(per_model: dict, baselines: dict) -> dict[str, dict]:
    """Every graph of (c) by name: the models', their hybrids' ("<model> + BM25") and the baselines'."""
    curves = {n: m["mesh_sweep"] for n, m in per_model.items() if "mesh_sweep" in m}
    curves.update({hybrid_name(n): m["mesh_hybrid_sweep"] for n, m in per_model.items() if "mesh_hybrid_sweep" in m})
    curves.update(baselines)
    return curves


def mesh_scores(args, curves: dict[str, dict]) -> dict[str, dict]:
    """{graph: {mesh_A<G>: mean over Leiden seeds, ..._std, mesh_rel_acc (+ _std)}}; the relative
    accuracy is over all graphs together, seed by seed (mapping.evaluation.curves.relative_accuracies)."""
    from mapping.evaluation.curves import accuracy_at, relative_accuracies

    try:
        rel = relative_accuracies(curves)
    except ValueError:
        rel = {}
    out = {}
    for name, c in curves.items():
        d = {}
        for g, v in accuracy_at(c, list(args.granularities)).items():
            d[f"mesh_A{g:g}"], d[f"mesh_A{g:g}_std"] = v["mean"], v["std"]
        r = rel.get(name, {})
        d["mesh_rel_acc"], d["mesh_rel_acc_std"] = r.get("mean"), r.get("std")
        d["g_range"] = r.get("g_range")
        out[name] = d
    return out


def plot_curves(args, path: Path, curves: dict[str, dict], groups: dict[str, list[str]]) -> None:
    """Seed paper Fig. 5: A against G (log x), one line per row of the table (the mean over its
    graphs' training seeds × Leiden seeds), a band from the lowest to the highest of those curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mapping.evaluation.curves import accuracy_at

    fig, ax = plt.subplots(figsize=(8, 5.5))
    lo, hi = args.g_range
    grid = np.exp(np.linspace(np.log(lo * 0.8), np.log(hi * 1.25), 60))
    cmap = plt.get_cmap("tab20")
    for i, (label, names) in enumerate(groups.items()):
        colour = cmap((2 * i) % 20 + (i // 10) % 2)   # ten dark hues, then their light ones
        style = "--" if label.endswith(("(baseline)", "(floor)", "(ceiling)")) else "-." if "hybrid" in label else "-"
        per = [[accuracy_at({"points": curves[n]["points"], "seeds": [s]}, grid.tolist())[float(g)]["mean"]
                for g in grid] for n in names if n in curves for s in curves[n]["seeds"]]
        if not per:
            continue
        A = np.array(per, float)
        ok = np.isfinite(A).any(axis=0)
        with np.errstate(all="ignore"):
            mean, amin, amax = np.nanmean(A[:, ok], 0), np.nanmin(A[:, ok], 0), np.nanmax(A[:, ok], 0)
        ax.plot(grid[ok], mean, label=label, lw=1.6, color=colour, ls=style)
        ax.fill_between(grid[ok], amin, amax, color=colour, alpha=0.2, lw=0)
    from mapping.evaluation.compare import save_curve_plot
    save_curve_plot(fig, ax, path, list(args.granularities), "MeSH accuracy A",
                    f"MeSH accuracy–granularity, PubMed records (Leiden seeds {list(args.leiden_seeds)})",
                    legend_size=7, dpi=130, grid=True)


def _cell(vals: list[float]) -> str:
    vals = [v for v in vals if v is not None and np.isfinite(v)]
    if not vals:
        return "—"
    if len(vals) == 1:
        return f"{vals[0]:.4f}"
    return f"{np.mean(vals):.4f} ± {np.std(vals, ddof=1):.4f}"


def objectives_note(args) -> str:
    notes = {"triplet": f"triplet (margin {args.margin}, raw L2)",
             "in_batch": f"in_batch (in-batch negatives, cosine × {args.in_batch_scale:g}, "
                         f"{2 * args.batch_size} candidates per anchor)",
             "flew": f"flew (three facet encoders, triplet margin {args.margin}, raw L2, on the facet triplets and "
                     "facet text; the same steps × batch as the others, spread over the three encoders, so each "
                     "sees about a third of the triplets while the model holds three times the parameters and "
                     "optimizer state: a threefold budget in memory, not in steps)",
             "unifar": "unifar (facet anchors + attention over sentences, facet InfoNCE τ 0.08 + KL λ 0.3→0.5, "
                       "cosine, on the facet triplets)",
             "unifar_nokl": "unifar_nokl (the same without the KL term)",
             "cosaemb": "cosaemb (section chunks, local / global / inter-document rows, squared L2, margins 1/2/3, "
                        "main vector = the abstract view)",
             "cosaemb_equal": "cosaemb_equal (the same with margins 1/1/1)",
             "scijepa": "scijepa (title+abstract → method, method → conclusion by section class; EMA target "
                        "0.996→0.999, predictor, 1 − cos + 0.0025·SIGReg; encoder lr 5e-6, predictor 1e-4; online branch "
                        "unless named)",
             "scijepa_l0": "scijepa_l0 (the same without SIGReg)",
             "section_cl": "section_cl (InfoNCE, scale 20, on scijepa's pairs, encoder lr 5e-6)"}
    return ", ".join(notes.get(o, o) for o in args.objectives)


def report(args, out: Path, per_model: dict, data: dict, baselines: dict, plot: Path | None = None,
           cached: set[str] = frozenset()) -> str:
    """The results as Markdown; `cached` names the models and graphs whose figures were read from
    the caches (a hybrid "<model> + BM25" with its model), counted in the tables' "cached" column."""
    METRICS = metrics(args)
    curves = mesh_graphs(per_model, baselines)
    scores = mesh_scores(args, curves)
    entries = {n: {**m, **scores.get(n, {})} for n, m in per_model.items()}
    entries.update({n: scores[n] for n in curves if n not in entries})
    groups = {"base (minilm, untuned)": ["base"]}
    for h in sorted(args.H):
        for obj in args.objectives:
            label = f"H={h} (SPECTER-style)" if h == 0 else f"H={h} (importance-aware)"
            if obj != "triplet":
                label = label.replace(")", f", {obj})")
            groups[label] = [model_name(h, s, obj) for s in args.seeds]
    for obj in args.objectives:
        if 2 in args.H:
            groups["H=2 + BM25 (hybrid 0.5/0.5" + ("" if obj == "triplet" else f", {obj}") + ")"] = \
                [hybrid_name(model_name(2, s, obj)) for s in args.seeds]
    if "scijepa" in args.objectives:
        for h in sorted(args.H):
            for b in SCIJEPA_BRANCHES[1:]:
                groups[f"H={h} (scijepa, {b} branch, seed {args.seeds[0]})"] = [branch_name(model_name(h, args.seeds[0], "scijepa"), b)]
    groups.update({label: [n] for n, label in BASELINES.items()})
    if data.get("paragraph_bm25"):
        entries[PARA_BM25] = data["paragraph_bm25"]
        groups["BM25 over the chunks ((f) baseline)"] = [PARA_BM25]
    groups = {g: names for g, names in groups.items() if any(n in entries for n in names)}
    rows = {g: {k: [entries[n].get(k) for n in names if n in entries] for k, _ in METRICS}
            for g, names in groups.items()}
    if plot is not None and curves:
        plot_curves(args, plot, curves, groups)
    def from_cache(names) -> int:
        return sum(n in cached or any(n == hybrid_name(m) for m in cached) for n in names)

    lines = [f"# Quality experiment: base vs {' vs '.join(f'H={h}' for h in sorted(args.H))} "
             f"({'repo sample' if args.sample else 'full eLife research + ScisummNet'})",
             "", "| model | models | cached | " + " | ".join(lbl for _, lbl in METRICS) + " |",
             "|---|---|---|" + "---|" * len(METRICS)]
    for g, vals in rows.items():
        done = [n for n in groups[g] if n in entries]
        lines.append(f"| {g} | {len(done)} | {from_cache(done)} | " + " | ".join(_cell(vals[k]) for k, _ in METRICS)
                     + " |")
    contrasts = []  # (row label, [(model, model it is paired with)] by seed)
    for obj in args.objectives:
        tag = "" if obj == "triplet" else f" ({obj})"
        contrasts += [(f"H={h} − H=0{tag}", [(model_name(h, s, obj), model_name(0, s, obj)) for s in args.seeds])
                      for h in sorted(args.H) if h > 0 and 0 in args.H]
    if "triplet" in args.objectives:
        contrasts += [(f"H={h}: {obj} − triplet", [(model_name(h, s, obj), model_name(h, s, "triplet"))
                                                   for s in args.seeds])
                      for h in sorted(args.H) for obj in args.objectives if obj != "triplet"]
    for obj, abl, what in (("cosaemb", "cosaemb_equal", "graded − equal margins"), ("scijepa", "scijepa_l0", "SIGReg λ 0.0025 − 0")):
        if {obj, abl} <= set(args.objectives):
            contrasts += [(f"H={h}: {obj} − {abl} ({what})", [(model_name(h, s, obj), model_name(h, s, abl))
                                                               for s in args.seeds]) for h in sorted(args.H)]
    if {"unifar", "unifar_nokl"} <= set(args.objectives):
        contrasts += [(f"H={h}: unifar − unifar_nokl (the KL term)", [(model_name(h, s, "unifar"),
                                                                      model_name(h, s, "unifar_nokl")) for s in args.seeds])
                      for h in sorted(args.H)]
    for label, pairs in contrasts:
        pairs = [(x, y) for x, y in pairs if x in entries and y in entries]
        if not pairs:
            continue
        a, b = [entries[x] for x, _ in pairs], [entries[y] for _, y in pairs]
        diffs = {k: [m.get(k) - n.get(k) for m, n in zip(a, b) if m.get(k) is not None and n.get(k) is not None
                     and np.isfinite(m.get(k)) and np.isfinite(n.get(k))]
                 for k, _ in METRICS}
        lines.append(f"| {label} (paired by seed) | {len(pairs)} | {from_cache({n for p in pairs for n in p})} | "
                     + " | ".join(_cell(diffs[k]).replace("0.", "+0.", 1) if diffs[k] and np.mean(diffs[k]) >= 0
                                  else _cell(diffs[k]) for k, _ in METRICS) + " |")
    q = {v: next(iter(per_model.values())).get(f"{v}_queries") for v in ("cite", "cite-ft")}
    ts = data.get("triplets", {})
    lines += ["",
              f"Budget per tuned model: {args.steps} optimizer steps × batch {args.batch_size} × grad_accum 1 "
              f"(= {args.steps * args.batch_size} triplets), lr {args.lr}, objectives {objectives_note(args)}, "
              f"max_length {args.max_length}, mean pooling, start {args.model}; train seeds {args.seeds}; "
              f"triplets K={args.K}, seed {args.data_seed}.",
              "Triplets: " + "; ".join(f"{k}: {v['train']} train / {v['val']} val, anchors {v['anchors_train']} train / "
                                        f"{v['anchors_val']} val, {v['hard']} hard"
                                        + (", facet triplets (train) " + ", ".join(f"{f} {n}" for f, n in sorted(v["facet_train"].items()))
                                           if v.get("facet_train") else "") for k, v in ts.items()) + ".",
              f"(a) cite: {q['cite']} held-out anchors (val split, never trained on; a seeded sample of at most "
              f"{args.max_queries} of the {data.get('cite_eligible', {}).get('cite')} with ≥1 cited paper that has text); "
              f"candidates = ≤{args.max_rel} cited (relevant) + ≤{args.n_neg} random uncited papers cited elsewhere in the same source; "
              f"L2 ranking (cosine for {', '.join(o for o in OBJECTIVES if trained_on_cosine(o))} models). cite-ft: {q['cite-ft']} anchors, in-set full-text papers only.",
              f"(b) eLife research articles, first heading subject, classes ≥10 papers: n={data.get('cls_n')}, "
              f"{data.get('cls_classes')} classes; LinearSVC, C∈1e-4..1e2, 3-fold CV.",
              f"(c) {data.get('mesh_n')} PubMed records with MeSH; every graph a 20-NN graph on them (encoders: "
              "exact cosine; TF-IDF: cosine; BM25: Okapi k1 1.2, b 0.75; MeSH: cosine of the criterion's own "
              "vectors = the ceiling; random: a 20-regular graph = the floor; H=2 + BM25: the sum of the two graphs' "
              f"CWTS-normalised weights, {HYBRID_W:g} each, one hybrid per H=2 seed), Leiden CPM (no small-cluster merging) "
              f"on CWTS-normalised weights, each graph its own {args.curve_points}-resolution sweep covering "
              f"G∈{list(args.g_range)}, Leiden seeds {list(args.leiden_seeds)} (mapping.evaluation.curves.sweep). "
              f"'A@G=g' = accuracy interpolated at granularity g (linear in log G), mean over Leiden seeds; "
              f"'rel. acc.' = relative accuracy (seed paper Fig. 6) over all {len(curves)} graphs of this table "
              f"together, per Leiden seed over their common G range {_grange(scores)}, averaged (1 = the average graph).",
              f"(d) importance-graded: {next(iter(per_model.values())).get('imp_queries')} held-out anchors "
              f"(a seeded sample of at most {args.max_queries} of the {data.get('cite_eligible', {}).get('graded')} "
              f"with ≥{args.min_graded} cited papers that have text and unequal importance); all their cited papers "
              "graded by importance; Spearman ρ(importance, −L2 distance) and nDCG with importance as gain.",
              "Cells: mean ± sample std over train seeds (base and the baselines: one graph each; their Leiden-seed "
              "spread is in the per-graph table below).",
              "'cached': how many of the row's models (a paired row: of the models in its pairs) had their figures "
              "read from <out>/eval_cache.json or baseline_cache.json instead of computed by this run; a cached "
              "entry's key holds a hash of the code (quality_experiment.py, mapping/, sciencemap/, and the "
              "embedding path for encoders) and of the input tables' and model's files, so it is what this code "
              "gives on these inputs.",
              f"Command: `{data.get('command')}`; wall time {data.get('wall_s', 0):.0f} s; "
              f"load average at start {data.get('load_start')}, at end {data.get('load_end')}."]
    if uses_sections(args):
        lines += fulltext_report(args, data)
    if facet_signal(args) != "none":
        lines += facet_report(args, data, groups, entries)
    if curves:
        lines += ["", f"### (c) per graph (seed paper Fig. 6 style; ± = sample std over Leiden seeds {list(args.leiden_seeds)})", "",
                  "| graph | MeSH rel. acc. | " + " | ".join(f"A@G={g:g}" for g in args.granularities)
                  + " | edges | sweep s | cached |",
                  "|---|---|" + "---|" * len(args.granularities) + "---|---|---|"]
        pm = lambda d, k: "—" if d.get(k) is None or not np.isfinite(d[k]) else (
            f"{d[k]:.4f}" + ("" if d.get(k + "_std") is None or not np.isfinite(d[k + "_std"]) else f" ± {d[k + '_std']:.4f}"))
        order = sorted(curves, key=lambda n: -(scores[n]["mesh_rel_acc"] if scores[n]["mesh_rel_acc"] is not None
                                                and np.isfinite(scores[n]["mesh_rel_acc"]) else -np.inf))
        for n in order:
            d = scores[n]
            lines.append(f"| {BASELINES.get(n, n)} | {pm(d, 'mesh_rel_acc')} | "
                         + " | ".join(pm(d, f"mesh_A{g:g}") for g in args.granularities)
                         + f" | {curves[n].get('edges', '—')} | {curves[n].get('seconds', 0):.0f} | "
                         + f"{'yes' if from_cache([n]) else 'no'} |")
        if plot is not None:
            lines += ["", f"Curves (Fig. 5 style): `{plot.name}`."]
    return "\n".join(lines) + "\n"


def fulltext_report(args, data: dict) -> list[str]:
    """The full-text objectives' inputs per source, (f)'s set, the extra columns, and what each objective read."""
    from encoders.fulltext.pairs import RULES, TASKS

    ft, tr = data.get("fulltext") or {}, data.get("training") or {}
    lines = ["", "### Full-text inputs and what the models read", "",
             "Sections (`[ingest] keep_sections`), CoSAEmb's chunks (max_length "
             f"{args.max_length}, from the first seed's item store) and SciJEPa's tasks by rule (class: the method is "
             "the M sections, the conclusion D else R; position: the paper's heading-then-position rule), per source:", "",
             "| source | papers with sections | sections I / M / R / D / O | chunks | "
             + " | ".join(f"{r}: {t}" for r in RULES for t in TASKS) + " | (f) papers / chunks |",
             "|---|---|---|---|" + "---|" * (len(RULES) * len(TASKS)) + "---|"]
    for src, d in sorted(ft.items()):
        sec = d.get("sections", {})
        para = d.get("paragraph_set", {})
        lines.append(f"| {src} | {d.get('papers', '—')} | " + " / ".join(str(sec.get(c, 0)) for c in "IMRDO")
                     + f" | {d.get('chunks', '—')} | " + " | ".join(str(d.get("tasks", {}).get(r, {}).get(t, 0))
                                                                for r in RULES for t in TASKS)
                     + f" | {para.get('papers', 0)} / {para.get('chunks', 0)} |")
    lines += ["", "(f) full-text paragraph retrieval: the chunks of at most "
              f"{PARA_ANCHORS} held-out anchors with sections (eLife, ScisummNet; never trained on) and of the unArXive "
              f"sample's papers, at most {PARA_CHUNKS} a paper (seeded); each chunk queries all the others by cosine "
              "(BM25: over the words); 'R@k paper' = a chunk of the same paper among the k nearest, 'R@k other "
              "section' = one of the same paper from another section (queries whose paper has one). CoSAEmb models "
              "read the chunks with their section tags, the others without. 'val triplet acc.' = the held-out seed "
              "triplets whose positive is nearer the anchor than the negative (the model's own distance). Geometry "
              "(METHODS.md §7.2) of the main vectors of every evaluation text; alignment over the cite task's "
              "(anchor, cited) pairs.", ""]
    if data.get("paragraph_bm25"):
        b = data["paragraph_bm25"]
        lines += [f"unArXive's queries alone, BM25: R@1 paper {b.get('para_unarxive_r1')}, R@1 other section "
                  f"{b.get('para_unarxive_o1')} ({b.get('para_unarxive_queries')} queries); per model in the .json "
                  "(para_unarxive_*).", ""]
    if tr:
        lines += ["What each objective's models read (mean over its models): train seconds, rows (triplets or pairs, "
                  "with repeats), distinct texts, tokens (a pair's target once).", "",
                  "| objective | models | train s | rows | texts | tokens |", "|---|---|---|---|---|---|"]
        for o, d in tr.items():
            lines.append(f"| {o} | {d['models']} | {d['train_seconds']:.0f} | {d['triplets_seen']:.0f} | "
                         f"{d['papers_seen']:.0f} | {d['tokens_seen']:.0f} |")
    return lines


def facet_report(args, data: dict, groups: dict, entries: dict) -> list[str]:
    """(e) per facet, and FLeW's weights picked on one half of the cite queries, reported on the other."""
    from sciencemap.contracts import FACETS

    el = data.get("cite_eligible", {})
    lines = ["", f"### (e) facet-level citation retrieval (facet signal: {args.facet_signal})", "",
             "Per facet f: the anchors of (d) (held-out) with ≥1 cited paper (with text) cited in a sentence of facet f "
             f"({args.facet_signal}: " + ("the intent classifier's label" if args.facet_signal == "intent" else
                                          "section class I → background, M → method, R/D → result") +
             f"); candidates: all the anchor's cited papers with text (relevant: cited for f) + ≤{args.n_neg} "
             "random uncited papers of its source (the same for its three facets); ranked by the model's facet-f "
             "vector (FLeW: the facet-f encoder; UniFAR: facet view f) or, for a model without facets, its main "
             "vector. Queries per facet: " + ", ".join(f"{f} {el.get(f'facet-{f}')}" for f in FACETS) + ".",
             "", "| model | " + " | ".join(f"{f} MAP | {f} nDCG" for f in FACETS) + " |",
             "|---|" + "---|---|" * len(FACETS)]
    for g, names in groups.items():
        got = [entries[n] for n in names if n in entries and "facet_map" in entries[n]]
        if got:
            lines.append(f"| {g} | " + " | ".join(_cell([e.get(f"facet_{f}_{m}") for e in got])
                                                  for f in FACETS for m in ("map", "ndcg")) + " |")
    flew = [(s, entries[n]["flew_weights"]) for h in sorted(args.H) for s in args.seeds
            for n in [model_name(h, s, "flew")] if n in entries and "flew_weights" in entries[n]]
    if flew:
        lines += ["", "FLeW's weights (background, method, result) searched on the simplex (step 0.1, ranking by "
                  "Σ w_f cos_f) by cite MAP on half of the held-out cite queries (by anchor hash), reported on "
                  "the other half beside equal weights:", "",
                  "| seed | weights | MAP, picking half | MAP, other half | MAP, other half, equal weights | queries |",
                  "|---|---|---|---|---|---|"]
        for s, w in flew:
            lines.append(f"| {s} | {', '.join(f'{x:g}' for x in w['weights'])} | {w['pick_map']:.4f} | "
                         f"{w['report_map']:.4f} | {w['report_map_equal']:.4f} | {w['pick_queries']} / {w['report_queries']} |")
        d = [w["report_map"] - w["report_map_equal"] for _, w in flew]
        lines.append(f"| picked − equal | | | {_cell(d)} | | |")
    return lines


def _grange(scores: dict) -> str:
    r = next((d["g_range"] for d in scores.values() if d.get("g_range")), None)
    return f"[{r[0]:.1f}, {r[1]:.1f}]" if r else "(none)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/quality")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--H", type=int, nargs="+", default=[0, 2])
    ap.add_argument("--elife-dir")
    ap.add_argument("--scisumm-dir")
    ap.add_argument("--sample", action="store_true", help="use the repo sample instead of the full sets")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=DEFAULT_LR)
    ap.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    ap.add_argument("--objectives", nargs="+", default=["triplet"], choices=[*OBJECTIVES, *VARIANTS],
                    help="training objectives, each trained for every (H, seed)")
    ap.add_argument("--no-ablations", "--no-kl-ablation", dest="ablations", action="store_false",
                    help="do not also train the ablations: unifar_nokl (UniFAR without its KL term), cosaemb_equal "
                    "(CoSAEmb with equal margins), scijepa_l0 (SciJEPa without SIGReg)")
    ap.add_argument("--facet-signal", default="intent", choices=["intent", "section"],
                    help="facet objectives: the facet triplets' and facet task's signal (importance facet_signal)")
    ap.add_argument("--intent-classifier", help="facet signal intent: a classifier from jobs/facets.py intent-train "
                    "(default: trained once into <out>/classifiers/intent)")
    ap.add_argument("--splitter-classifier", help="facet objectives: a classifier from jobs/facets.py splitter-train "
                    "(default: trained once into <out>/classifiers/splitter)")
    ap.add_argument("--in-batch-scale", type=float, default=DEFAULT_SCALE)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--val-max", type=int, default=32)
    ap.add_argument("--K", type=int, default=5)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--eval-seed", type=int, default=0)
    ap.add_argument("--n-neg", type=int, default=25)
    ap.add_argument("--max-queries", type=int, default=200)
    ap.add_argument("--max-rel", type=int, default=5, help="cited papers kept per cite query (SciDocs: 5)")
    ap.add_argument("--min-graded", type=int, default=3, help="cited papers with text per importance-graded query")
    ap.add_argument("--g-range", type=float, nargs=2, default=[10.0, 200.0],
                    help="(c): the granularities each graph's resolution sweep covers")
    ap.add_argument("--curve-points", type=int, default=16, help="(c): resolutions per graph's sweep")
    ap.add_argument("--leiden-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--granularities", type=float, nargs="+", default=[20.0, 50.0, 100.0],
                    help="(c): the G at which the table reports accuracy")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--train-only", action="store_true",
                    help="prepare the data and train every model, evaluate nothing (a later run evaluates them)")
    ap.add_argument("--report-only", action="store_true",
                    help="train and evaluate nothing new: rebuild the results file from the finished models")
    args = ap.parse_args()
    args.objectives = expand_objectives(args.objectives, args.ablations)
    check_facet_inputs(args)
    os.chdir(REPO)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = {"command": " ".join([".venv/bin/python", "bench/quality_experiment.py"] + sys.argv[1:]),
            "load_start": [round(x, 2) for x in os.getloadavg()]}
    elife, scisumm = prepare_data(args, out)
    facet_classifiers(args, out)
    ingest_and_importance(args, out, elife, scisumm)
    split_abstracts(args, out)
    data["triplets"] = triplet_stats(out, args.H, facet_signal(args) != "none")
    say(f"triplets: {data['triplets']}")
    if args.train_only:
        for s in args.seeds:
            for h in args.H:
                for o in args.objectives:
                    train_model(args, out, h, s, o)
        return
    ev = build_eval_sets(args, out)
    data.update(cls_n=len(ev["elife"]), cls_classes=int(ev["elife"].label.nunique()), mesh_n=len(ev["pubmed"]),
                val_anchors=ev["val_anchors"], eval_texts=len(ev["texts"]), cite_eligible=ev["eligible"])
    mv = mesh_vectors(ev["pubmed"])
    crit = mesh_criterion(mv)
    data["mesh_n"] = int(len(mv.rows))
    say(f"eval: {len(ev['texts'])} texts, cite queries {[len(q) for q in ev['qrels'].values()]}, "
        f"importance-graded queries {len(ev['graded'])}, "
        f"eLife labelled {len(ev['elife'])}, PubMed {len(mv.rows)}")
    per_model = {}
    stem = f"results-n{args.steps}{variant(args)}{results_suffix(args)}"
    res_json, res_md = out / f"{stem}.json", out / f"{stem}.md"
    prev = json.loads(res_json.read_text()).get("data", {}) if res_json.exists() else {}
    cache = out / "eval_cache.json"
    # (c) as curves (issue 16): a key of its own, so entries of the old γ-grid evaluation are never mixed in.
    ekey = hashlib.sha256(json.dumps([args.max_queries, args.max_rel, args.n_neg, args.eval_seed, args.max_length,
                                      "graded", args.min_graded, "curves-v1", MESH_K, HYBRID_W, args.g_range,
                                      args.curve_points, args.leiden_seeds]
                                     + ([f"facets-v1:{facet_signal(args)}"] if facet_signal(args) != "none" else [])
                                     ).encode()).hexdigest()[:12]
    ekey += f"|code:{code_hash(EVAL_CODE)}|data:{files_hash(*eval_inputs(out))}"
    t = time.time()
    baselines, baselines_cached = baseline_curves(args, out, ev["pubmed"], mv, crit)
    from_cache = set(baselines) if baselines_cached else set()
    data["baselines_s"] = round(time.time() - t, 1)
    bm25 = None   # the PubMed BM25 graph, built when an H=2 model needs its hybrid
    plot = out / f"mesh_curves-{stem[len('results-'):]}.png"
    md = ""
    # Seeds in the outer loop, so an interrupted run still has matched H=0 / H=2 pairs to report.
    todo = [("base", None, None, None)] + [(model_name(h, s, o), h, s, o) for s in args.seeds for h in args.H
                                           for o in args.objectives]
    # SciJEPa's other branches (predictor, EMA target) on the first seed
    todo += [(branch_name(model_name(h, args.seeds[0], "scijepa"), b), h, args.seeds[0], "scijepa")
             for h in args.H for b in SCIJEPA_BRANCHES[1:] if "scijepa" in args.objectives]
    if ev["chunks"] is not None:
        data["fulltext"] = fulltext_stats(args, out, ev["chunks"])
        t = time.time()
        data["paragraph_bm25"] = paragraph_bm25(ev["chunks"])
        say(f"(f) BM25 over {len(ev['chunks'])} chunks in {time.time() - t:.0f}s: {data['paragraph_bm25']}")
    for name, h, seed, objective in todo:
        branch = name.rsplit("[", 1)[1].rstrip("]") if name.endswith("]") else "online"
        if args.report_only and h is not None and not (model_dir(args, out, h, seed, objective) / "train.done").exists():
            continue
        spec = args.model if h is None else train_model(args, out, h, seed, objective)
        key = f"{name}|{spec}|{ekey}|model:{files_hash(resolve_model(spec))}"   # a retrained model: a new key
        cached = json.loads(cache.read_text()) if cache.exists() else {}
        if key in cached:
            per_model[name] = cached[key]
            from_cache.add(name)
        elif args.report_only:
            continue
        else:
            t = time.time()
            if h == 2 and bm25 is None:
                bm25 = bm25_pubmed(ev["pubmed"])
            per_model[name] = evaluate_model(args, spec, ev, crit, cosine=objective is not None and trained_on_cosine(objective),
                                             hybrid_with=bm25 if h == 2 else None, objective=objective, branch=branch)
            cached = json.loads(cache.read_text()) if cache.exists() else {}  # re-read: merge, never clobber
            cached[key] = per_model[name]
            _mark(cache, cached)
            m = per_model[name]
            say(f"eval {name}: cite MAP {m['cite_map']:.4f} nDCG {m['cite_ndcg']:.4f}, cite-ft MAP "
                f"{m['cite-ft_map']:.4f}, importance rho {m['imp_rho']:.4f}, F1 {m['cls_f1']:.4f}, mesh curve(s) {m['mesh_s']:.0f}s ({time.time() - t:.0f}s)")
        # Results after every model: a run cut short still leaves a (partial) table.
        data["wall_s"] = time.time() - T0
        data["load_end"] = [round(x, 2) for x in os.getloadavg()]
        if args.report_only and prev:  # keep the measuring run's command, wall time and load
            data.update({k: prev[k] for k in ("command", "wall_s", "load_start", "load_end") if k in prev})
        data["models_done"] = list(per_model)
        data["training"] = training_stats(args, out)
        data["from_cache"] = sorted(from_cache)
        md = report(args, out, per_model, data, baselines, plot, from_cache)
        _mark(res_json, {"args": vars(args), "data": data, "models": per_model, "baselines": baselines})
        write_text_atomic(res_md, md)
    if ev["chunks"] is not None and per_model:   # CoSAEmb's chunks per source, from a store trained in this run
        data["fulltext"] = fulltext_stats(args, out, ev["chunks"])
        md = report(args, out, per_model, data, baselines, plot, from_cache)
        _mark(res_json, {"args": vars(args), "data": data, "models": per_model, "baselines": baselines})
        write_text_atomic(res_md, md)
    print(md or "nothing evaluated yet")

if __name__ == "__main__":
    main()
