"""The learned section classifier: a paper's top-level sections -> I / M / R / D / O (METHODS.md §1.1).

Each section is scored by a multinomial logistic regression over binary features:
- its heading: words and word pairs (numbering stripped), the heading's kind (empty / numbered /
  other / keyword), the class the keyword rules give it, its leading section number;
- its text: the words and word pairs of its first OPENING_WORDS words, its first two and four
  words ("in this paper we", "table shows the"), the words of the rest up to BODY_WORDS words, and
  the density of numbers and citation markers in both parts (results are dense in numbers,
  background in citations), and its length;
- its place: relative position among the paper's top-level sections, first / last / second-last,
  the number of sections, each crossed with the heading kind; the classes of the nearest sections
  before and after it whose headings are IMRaD keywords ("between an Introduction and a
  Conclusion").
The paper's sections are then decoded together (Viterbi) with the model's class-to-class
transition scores, so that a paper reads as a plausible sequence (an Introduction first, a
Discussion late); sections whose class is already known (JATS sec-type, a keyword heading) are
fixed points of that sequence.

Pure Python + NumPy at prediction time, so Spark executors classify while they parse: a
section's features are looked up in the vocabulary and the weight rows summed. The weights are
trained by `python -m importance.ingest.section_training` (deterministic) and shipped as
importance/ingest/data/section_model.npz.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from importance.ingest.headings import class_from_heading, heading_kind, normalise_heading

MODEL_FILE = "section_model.npz"
OPENING_WORDS = 150   # the opening: word pairs and position-free cues
BODY_WORDS = 1500     # the words read in all (a long section's tail adds little and costs time)
_TOKEN = re.compile(r"[a-z]+(?:['-][a-z]+)*|\d+(?:[.,]\d+)*%?|%")
_NUMBERING = re.compile(r"^\s*(\d+)(?:\.\d+)*[.)]?(?:\s|$)")
_ROMAN = {"i": 1, "ii": 2, "iii": 3, "iv": 4, "v": 5, "vi": 6, "vii": 7, "viii": 8, "ix": 9, "x": 10}
_ROMAN_NUMBERING = re.compile(r"^\s*([ivx]+)[.)](?:\s|$)", re.I)
# Author-year "(Smith et al., 2001)", "Smith (2001)", numeric "[12]", "[3, 4]".
_CITATION = re.compile(r"\bet al\b|\(\s*[A-Z][^()]{0,60}?\b(?:1[89]|20)\d\d[a-z]?\s*\)|\[\s*\d+(?:\s*[,–-]\s*\d+)*\s*\]")
_DENSITY_EDGES = (0.01, 0.03, 0.06, 0.1)
_CITATION_EDGES = (0.5, 1.5, 3, 6)   # markers per 100 words


def _bucket(value: float, edges: tuple[float, ...]) -> int:
    return sum(value >= e for e in edges)


def section_number(title: str | None) -> int | None:
    """The leading number of a heading: "3 Our approach" -> 3, "2." -> 2, "IV. Results" -> 4."""
    if not title:
        return None
    m = _NUMBERING.match(title)
    if m:
        return int(m.group(1))
    m = _ROMAN_NUMBERING.match(title)
    return _ROMAN.get(m.group(1).lower()) if m else None


def _tokens(text: str) -> list[str]:
    return ["<num>" if t[0].isdigit() else t for t in _TOKEN.findall(text.lower())]


def _densities(prefix: str, raw: str, toks: list[str]) -> list[str]:
    n = max(len(toks), 1)
    return [f"{prefix}numd:{_bucket(toks.count('<num>') / n, _DENSITY_EDGES)}",
            f"{prefix}cited:{_bucket(len(_CITATION.findall(raw)) * 100 / n, _CITATION_EDGES)}"]


def neighbour_classes(titles: Sequence[str | None]) -> list[tuple[str, str]]:
    """For each section, the class the keyword rules give the nearest section before and after it
    with an IMRaD keyword heading ("-" when there is none)."""
    named = [class_from_heading(t) if heading_kind(t) == "keyword" else None for t in titles]
    before, after = [], ["-"] * len(titles)
    last = "-"
    for c in named:
        before.append(last)
        last = c or last
    last = "-"
    for i in range(len(titles) - 1, -1, -1):
        after[i] = last
        last = named[i] or last
    return list(zip(before, after))


def features(title: str | None, text: str | None, position: int | None, n_sections: int | None,
             neighbours: tuple[str, str] | None = None) -> list[str]:
    """The binary features of one top-level section (position 0-based among n_sections;
    neighbours as neighbour_classes gives them)."""
    kind = heading_kind(title)
    words = normalise_heading(title).split()
    out = ["h:" + w for w in words]
    out += ["hb:" + a + "_" + b for a, b in zip(words, words[1:])]
    out += ["hk:" + kind, "hr:" + (class_from_heading(title) or "-") + ":" + kind]
    num = section_number(title)
    if num is not None:
        out.append("num:" + (str(num) if num <= 3 else "4+"))

    words = (text or "").split()
    opening = " ".join(words[:OPENING_WORDS])
    toks = _tokens(opening)
    if toks:
        out += ["w:" + t for t in set(toks)]
        out += ["b:" + a + "_" + b for a, b in set(zip(toks, toks[1:]))]
        out += ["o:" + "_".join(toks[:4]), "o2:" + "_".join(toks[:2])]
        out += _densities("", opening, toks)
        out.append(f"len:{_bucket(len(toks), (20, 60, 120))}")
        if len(words) > OPENING_WORDS:
            rest = " ".join(words[OPENING_WORDS:BODY_WORDS])
            rtoks = _tokens(rest)
            out += ["t:" + t for t in set(rtoks)]
            out += _densities("t", rest, rtoks)
        out.append(f"wlen:{_bucket(len(words), (50, 150, 400, 1000, 2500))}")
    else:
        out.append("notext")

    if position is not None and n_sections:
        n = max(n_sections, position + 1)
        rel = position / (n - 1) if n > 1 else 0.0
        from_end = n - 1 - position
        spots = [f"rel:{_bucket(rel, (0.2, 0.4, 0.6, 0.8))}", f"n:{_bucket(n, (3, 5, 8, 13))}"]
        if position <= 2:
            spots.append(f"pos:{position}")
        if from_end <= 2:
            spots.append(f"end:{from_end}")
        out += spots + ["k" + kind[:2] + "*" + s for s in spots]
    elif position is not None:
        out.append(f"pos:{min(position, 3)}")
    if neighbours is not None:
        out += ["nb:" + neighbours[0], "na:" + neighbours[1], "nba:" + neighbours[0] + neighbours[1]]
    return out


class SectionModel:
    """Vocabulary -> row of weights (a column per class), a bias per class, and transition scores
    (row = previous class, last row = the paper's start; column = next class)."""

    def __init__(self, vocab: list[str], weights: np.ndarray, bias: np.ndarray, classes: Sequence[str],
                 transitions: np.ndarray | None = None, meta: dict | None = None):
        self.index = {f: i for i, f in enumerate(vocab)}
        self.weights = np.asarray(weights, dtype=np.float32)
        self.bias = np.asarray(bias, dtype=np.float32)
        self.classes = tuple(classes)
        k = len(self.classes)
        self.transitions = (np.zeros((k + 1, k), dtype=np.float32) if transitions is None
                            else np.asarray(transitions, dtype=np.float32))
        self.meta = meta or {}

    def scores(self, feats: list[str]) -> np.ndarray:
        rows = [self.index[f] for f in set(feats) if f in self.index]
        return self.bias + (self.weights[rows].sum(axis=0) if rows else 0.0)

    def log_probabilities(self, feats: list[str]) -> np.ndarray:
        s = self.scores(feats).astype(np.float64)
        return s - np.logaddexp.reduce(s)

    def predict(self, title: str | None, text: str | None, position: int | None = None,
                n_sections: int | None = None, neighbours: tuple[str, str] | None = None) -> str:
        """One section on its own (no sequence decoding)."""
        return self.classes[int(np.argmax(self.scores(features(title, text, position, n_sections, neighbours))))]

    def decode(self, log_probs: np.ndarray, fixed: Sequence[str | None]) -> list[str]:
        """The most probable class sequence (Viterbi) given each section's log-probabilities
        (rows) and the classes already known (fixed[i], or None)."""
        k = len(self.classes)
        emit = log_probs.copy()
        for i, c in enumerate(fixed):
            if c is not None:
                emit[i] = np.where(np.arange(k) == self.classes.index(c), 0.0, -1e9)
        score = emit[0] + self.transitions[k]
        back = np.zeros((len(emit), k), dtype=np.int64)
        for i in range(1, len(emit)):
            cand = score[:, None] + self.transitions[:k]
            back[i] = cand.argmax(axis=0)
            score = cand.max(axis=0) + emit[i]
        path = [int(score.argmax())]
        for i in range(len(emit) - 1, 0, -1):
            path.append(int(back[i][path[-1]]))
        return [self.classes[j] for j in reversed(path)]

    def save(self, path: str | Path) -> None:
        """npz: the vocabulary as one newline-joined UTF-8 string (a NumPy string array would pad
        every feature to the longest), weights in float16 (their rounding moves no decision on the
        development set: bench/section_f1.py classifies with the saved file)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        vocab = "\n".join(sorted(self.index, key=self.index.get)).encode()
        np.savez_compressed(tmp, vocab=np.frombuffer(vocab, dtype=np.uint8), weights=self.weights.astype(np.float16),
                            bias=self.bias, classes=np.array(self.classes), transitions=self.transitions,
                            meta=np.frombuffer(json.dumps(self.meta).encode(), dtype=np.uint8))
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> "SectionModel":
        with np.load(path, allow_pickle=False) as z:
            vocab = z["vocab"].tobytes().decode().split("\n")
            return cls(vocab, z["weights"].astype(np.float32), z["bias"], z["classes"].tolist(), z["transitions"],
                       json.loads(z["meta"].tobytes().decode()))


@lru_cache(maxsize=1)
def default_model() -> SectionModel | None:
    """The model shipped with the package, loaded once per process (each Spark Python worker on
    its first paper); None when the file is missing (then rules and position decide)."""
    ref = resources.files("importance.ingest") / "data" / MODEL_FILE
    if not ref.is_file():
        return None
    with resources.as_file(ref) as p:
        return SectionModel.load(p)
