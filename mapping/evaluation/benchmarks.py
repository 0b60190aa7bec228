"""Readers for the official release files of the representation benchmarks the seed papers report
(SciDocs, CSFCube, RELISH, SciRepEval), and one function per benchmark that turns a directory laid
out as the release plus an embeddings map {paper_id: vector} into that benchmark's own table
(METHODS.md §7.1). The metrics themselves are `mapping/evaluation/scidocs.py`'s; values are fractions in
[0, 1] (the papers print 100x). Every reader raises UserError naming the file (and line) on
malformed input; what cannot be scored (an id without an embedding) is counted as "missing".

Formats, as read from each project's own loader / evaluation code and sample files:
- SciDocs (allenai/scidocs, `data/`): `<task>/{val,test}.qrel` for cite, cocite, coview, coread
  (`qid 0 pid rel` lines; `.qrels` is accepted too); `mag/` and `mesh/` `{train,val,test}.csv`
  with a header and two columns (paper id, class label); `recomm/{train,val,test}.csv` with a header
  and rows `query_id,clicked_id,"id1,id2,..."` (the candidates in display order, the clicked one
  among them) and `recomm/propensity_scores.json` `{"scores": [per display position]}`; metadata
  `paper_metadata_{mag_mesh,view_cite_read,recomm}.json` = {pid: {"paper_id", "title", "abstract",
  ...}} (abstract or title may be null).
- CSFCube (iesl/CSFCube): `abstracts-csfcube-preds.jsonl` (paper_id, title, abstract as a list of
  sentences, pred_labels, metadata), `queries-release.csv` (pid, facet, year, title, paper type),
  `test-pid2anns-csfcube-<facet>.json` {query pid: {"cands": [...], "relevance_adju": [0-3 ...],
  other per-annotator lists}}, `evaluation_splits.json` {facet or "all": {"fold1_dev", "fold2_dev",
  "fold1_test", "fold2_test": ["<pid>_<facet>", ...]}}.
- RELISH (RELISH-DB v1): a JSON list of {"uid", "pmid", "response": {"relevant": [...], "partial":
  [...], "irrelevant": [...]}} (`RELISH_v1.json`; Aspire's copy is `RELISH_v1_ann.json`); texts as
  `PubMed-<pmid>.txt` (title line, then abstract lines) as Aspire's preprocessing reads them.
- SciRepEval (allenai/scirepeval): labelled examples as rows {"query_id", "cand_id", "score"}
  (`<config>/test_qrel.jsonl` locally, or the Hugging Face `allenai/scirepeval_test` parquet files);
  metadata rows either flat {"doc_id", "title", "abstract", ...} or {"query": {...} or a search
  string, "doc_id", "candidates": [{"doc_id", ...}, ...]} (JSONL or parquet).

Not confirmed, and so stated here: SciDocs' recomm score comes from a trained recommender with
extra features (SPECTER's Table 1); here the candidates are ranked by embedding closeness alone,
so recomm numbers are not comparable with the published ones. SciDocs trains `lightning`'s
LinearSVC; sklearn's stands in. CSFCube's `rank_metrics.py` could not be read; its DCG is taken
from the copy in Aspire (same author): ranks 1 and 2 undiscounted. The header names of the SciDocs
CSVs, the exact S3 layout of SciRepEval's test data, RELISH's official metric (SciRepEval reports
nDCG, Aspire MAP and nDCG%20) and how RELISH repeats a query annotated twice were not confirmed:
the first annotation of a repeated query is kept and the repeats counted.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from mapping.evaluation.scidocs import (click_metrics, evaluate_ranking, pool_metrics, rank_queries, read_qrels,
                                        svm_test_f1)
from sciencemap.runtime import UserError

SCIDOCS_RANKING = ("cite", "cocite", "coview", "coread")
SCIDOCS_CLASSIFICATION = ("mag", "mesh")
CSFCUBE_FACETS = ("background", "method", "result")
RELISH_GRADES = {"relevant": 2, "partial": 1, "irrelevant": 0}
# SciRepEval's proximity and ad-hoc search tasks (test config -> the metrics its task list reports);
# paper-reviewer matching is left out: it ranks reviewers through their papers, not candidates.
SCIREPEVAL_TASKS = {"feeds_1": ("map",), "feeds_m": ("map",), "feeds_title": ("map",),
                    "trec_covid": ("ndcg",), "search": ("ndcg",), "same_author": ("map",),
                    "high_influence_cite": ("map",), "relish": ("ndcg",),
                    "scidocs_cite": ("map", "ndcg"), "scidocs_cocite": ("map", "ndcg"),
                    "scidocs_view": ("map", "ndcg"), "scidocs_read": ("map", "ndcg")}


# ---------------------------------------------------------------- shared file helpers

def _load_json(path: Path) -> Any:
    if not path.is_file():
        raise UserError(f"{path} not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{path} line {e.lineno}: not valid JSON ({e.msg})") from None


def _json_objects(path: Path, shape: str, need: tuple[str, ...], what: str) -> Iterator[tuple[str, dict]]:
    """(key, entry) of a JSON file holding one object of objects; the file must have `shape` and
    every entry the keys `need` (the error names the `what` entry lacking them)."""
    data = _load_json(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected {shape}")
    for key, rec in data.items():
        if not isinstance(rec, dict) or any(k not in rec for k in need):
            raise UserError(f"{path}: {what} {key} lacks {' or '.join(need)}")
        yield str(key), rec


def _jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    if not path.is_file():
        raise UserError(f"{path} not found")
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path} line {n}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise UserError(f"{path} line {n}: expected a JSON object")
            yield n, rec


def _rows(path: Path) -> Iterator[tuple[int, dict]]:
    """Records of a JSONL file, or of a parquet file (numbered by row, from 1)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise UserError(f"{path}: not a readable parquet file ({e})") from None
        yield from enumerate(rows, 1)
    else:
        yield from _jsonl(path)


def _need(rec: Mapping, keys: tuple[str, ...], path: Path, n: int | str) -> None:
    lacking = [k for k in keys if k not in rec]
    if lacking:
        raise UserError(f"{path} line {n}: lacks {', '.join(lacking)}")


def _paper(pid: str, title, abstract) -> dict:
    return {"paper_id": pid, "title": title or "", "abstract": abstract or ""}


# ---------------------------------------------------------------- SciDocs

def read_scidocs_metadata(path: str | Path) -> dict[str, dict]:
    """`paper_metadata_*.json` -> {pid: {paper_id, title, abstract}} (null text becomes "")."""
    path = Path(path)
    out = {}
    for pid, rec in _json_objects(path, "an object {paper_id: {title, abstract, ...}}", ("title",), "entry"):
        out[pid] = _paper(pid, rec.get("title"), rec.get("abstract"))
    return out


def _csv_rows(path: str | Path, fields: int, shape: str) -> Iterator[tuple[int, Path, list[str]]]:
    """(line number, path, row) of a CSV after its header, blank rows skipped; a row of another
    width is an error that names the expected `shape`."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} not found")
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    for n, row in enumerate(rows[1:], 2):
        if not row:
            continue
        if len(row) != fields:
            raise UserError(f"{path} line {n} has {len(row)} fields; rows are {shape}")
        yield n, path, row


def read_scidocs_labels(path: str | Path) -> list[tuple[str, str]]:
    """A MAG / MeSH CSV (header, then `paper_id,class_label` rows) -> [(pid, label)]."""
    return [(row[0], row[1]) for _, _, row in _csv_rows(path, 2, "'paper_id,class_label'")]


def read_scidocs_clicks(path: str | Path) -> list[tuple[str, str, list[str]]]:
    """A recomm CSV (header, then `query_id,clicked_id,"shown ids"`) -> [(query, clicked, shown)]."""
    out = []
    for n, path, row in _csv_rows(path, 3, "'query_id,clicked_id,\"shown ids, comma-separated\"'"):
        shown = [s.strip() for s in row[2].split(",") if s.strip()]
        if row[1] not in shown:
            raise UserError(f"{path} line {n}: the clicked paper {row[1]} is not among the shown ones")
        out.append((row[0], row[1], shown))
    return out


def read_propensity(path: str | Path) -> list[float]:
    """`propensity_scores.json` {"scores": [click propensity per display position]}."""
    path = Path(path)
    data = _load_json(path)
    scores = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(scores, list) or not scores or not all(isinstance(s, (int, float)) and s > 0 for s in scores):
        raise UserError(f"{path}: expected {{\"scores\": [positive numbers]}}")
    return [float(s) for s in scores]


def _qrel_file(root: Path, task: str, split: str) -> Path | None:
    for name in (f"{split}.qrel", f"{split}.qrels"):
        if (root / task / name).is_file():
            return root / task / name
    return None


def _classify(root: Path, task: str, split: str, emb: Mapping[str, np.ndarray]) -> dict:
    """SciDocs gives a paper without an embedding a zero vector (it is not dropped); counted."""
    train, test = read_scidocs_labels(root / task / "train.csv"), read_scidocs_labels(root / task / f"{split}.csv")
    dim = len(next(iter(emb.values())))
    zero = np.zeros(dim, np.float32)
    X = lambda rows: np.stack([np.asarray(emb.get(p, zero), np.float32) for p, _ in rows])  # noqa: E731
    res = svm_test_f1(X(train), [y for _, y in train], X(test), [y for _, y in test])
    res["missing"] = sum(p not in emb for p, _ in train + test)
    return {"f1": res.pop("macro_f1"), **res}


def scidocs_table(root: str | Path, emb: Mapping[str, np.ndarray], split: str = "test") -> dict:
    """SciDocs' table from its data directory: MAP and nDCG per ranking task (trec_eval-style, as
    SciDocs scores them with pytrec_eval), macro-F1 for MAG and MeSH (SVM trained on train.csv,
    scored on `split`), and adjusted nDCG / P@1 for recomm. Tasks whose files are absent are left
    out and listed under "absent"."""
    root = Path(root)
    if not emb:
        raise UserError("no embeddings given")
    table: dict[str, Any] = {"absent": []}
    for task in SCIDOCS_RANKING:
        f = _qrel_file(root, task, split)
        if f is None:
            table["absent"].append(task)
            continue
        table[task] = evaluate_ranking(read_qrels(f), emb, trec=True)
    for task in SCIDOCS_CLASSIFICATION:
        if not (root / task / "train.csv").is_file():
            table["absent"].append(task)
            continue
        table[task] = _classify(root, task, split, emb)
    if (root / "recomm" / f"{split}.csv").is_file():
        table["recomm"] = click_metrics(read_scidocs_clicks(root / "recomm" / f"{split}.csv"), emb,
                                        read_propensity(root / "recomm" / "propensity_scores.json"))
    else:
        table["absent"].append("recomm")
    if len(table) == 1:
        raise UserError(f"{root} holds none of SciDocs' task folders ({', '.join(table['absent'])})")
    return table


# ---------------------------------------------------------------- CSFCube

def read_csfcube_abstracts(path: str | Path) -> dict[str, dict]:
    """`abstracts-csfcube-preds.jsonl` -> {pid: {paper_id, title, abstract (sentences joined)}}."""
    path = Path(path)
    out = {}
    for n, rec in _jsonl(path):
        _need(rec, ("paper_id", "title", "abstract"), path, n)
        sents = rec["abstract"]
        if not isinstance(sents, list):
            raise UserError(f"{path} line {n}: abstract must be a list of sentences")
        out[str(rec["paper_id"])] = _paper(str(rec["paper_id"]), rec["title"], " ".join(map(str, sents)))
    return out


def read_csfcube_queries(path: str | Path) -> list[dict]:
    """`queries-release.csv` -> its rows (pid, facet, year, title, paper type)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} not found")
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        lacking = {"pid", "facet", "title"} - set(reader.fieldnames or ())
        if lacking:
            raise UserError(f"{path} line 1: header lacks {', '.join(sorted(lacking))}")
        rows = list(reader)
    for n, row in enumerate(rows, 2):
        if row["facet"] not in CSFCUBE_FACETS:
            raise UserError(f"{path} line {n}: facet {row['facet']!r} is not one of {', '.join(CSFCUBE_FACETS)}")
    return rows


def read_csfcube_anns(path: str | Path) -> dict[str, dict[str, int]]:
    """`test-pid2anns-csfcube-<facet>.json` -> {query pid: {candidate pid: adjudicated grade 0-3}}."""
    path = Path(path)
    out = {}
    for qpid, ann in _json_objects(path, '{query pid: {"cands": [...], "relevance_adju": [...]}}',
                                   ("cands", "relevance_adju"), "query"):
        cands, rels = ann["cands"], ann["relevance_adju"]
        if len(cands) != len(rels):
            raise UserError(f"{path}: query {qpid} has {len(cands)} cands but {len(rels)} relevance_adju")
        if len(set(cands)) != len(cands):
            raise UserError(f"{path}: query {qpid} lists a candidate twice")
        out[qpid] = {str(c): int(r) for c, r in zip(cands, rels)}
    return out


def read_csfcube_splits(path: str | Path) -> dict[str, dict[str, list[str]]]:
    """`evaluation_splits.json` -> {facet or "all": {fold name: ["<pid>_<facet>", ...]}}."""
    path = Path(path)
    data = _load_json(path)
    ok = isinstance(data, dict) and all(isinstance(v, dict) and all(isinstance(x, list) for x in v.values())
                                        for v in data.values())
    if not ok:
        raise UserError(f"{path}: expected {{facet: {{fold name: [\"<pid>_<facet>\", ...]}}}}")
    return data


def csfcube_table(root: str | Path, emb: Mapping[str, np.ndarray], split: str = "test",
                  facet_emb: Mapping[str, Mapping[str, np.ndarray]] | None = None) -> dict:
    """CSFCube's table: per facet and "all", the mean over queries of `pool_metrics` (each query's
    whole pool ranked by L2 distance; relevant = grade >= 2), averaged as CSFCube does: test = the
    mean of the two test folds' means, dev = fold 1's dev queries only. facet_emb: a facet view's
    vectors ({facet: {paper_id: vector}}, FLeW's or UniFAR's facets, METHODS.md §8): a facet found
    there is ranked by its own vectors, the others by `emb`."""
    root = Path(root)
    if split not in ("dev", "test"):
        raise UserError(f"CSFCube split must be dev or test, not {split!r}")
    splits = read_csfcube_splits(root / "evaluation_splits.json")
    per_query, missing = {}, 0
    for facet in CSFCUBE_FACETS:
        anns = read_csfcube_anns(root / f"test-pid2anns-csfcube-{facet}.json")
        ranked, lacking = rank_queries(anns, (facet_emb or {}).get(facet, emb))
        missing += lacking
        for qpid, order in ranked.items():
            per_query[f"{qpid}_{facet}"] = pool_metrics([anns[qpid][p] for p in order], threshold=2)
    folds = ["fold1_dev"] if split == "dev" else ["fold1_test", "fold2_test"]
    table: dict[str, Any] = {}
    for facet in (*CSFCUBE_FACETS, "all"):
        if facet not in splits or any(f not in splits[facet] for f in folds):
            raise UserError(f"{root / 'evaluation_splits.json'} lacks {facet} {' / '.join(folds)}")
        fold_means = []
        for fold in folds:
            scored = [per_query[q] for q in splits[facet][fold] if q in per_query]
            if scored:
                fold_means.append({m: float(np.mean([s[m] for s in scored])) for m in scored[0]})
        table[facet] = ({m: float(np.mean([f[m] for f in fold_means])) for m in fold_means[0]}
                        if fold_means else {})
    table["queries"], table["missing"] = len(per_query), missing
    table["facet_vectors"] = sorted(f for f in CSFCUBE_FACETS if f in (facet_emb or {}))
    return table


# ---------------------------------------------------------------- RELISH

def read_relish_annotations(path: str | Path) -> tuple[dict[str, dict[str, int]], int]:
    """RELISH JSON -> ({query pmid: {candidate pmid: 2 relevant / 1 partial / 0 irrelevant}},
    repeats): a query annotated again, or a candidate listed again, keeps its first grade; each
    repeat is counted."""
    path = Path(path)
    data = _load_json(path)
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a list of {{\"pmid\", \"response\": {{relevant, partial, irrelevant}}}}")
    out: dict[str, dict[str, int]] = {}
    repeats = 0
    for i, ann in enumerate(data):
        if not isinstance(ann, dict) or "pmid" not in ann or not isinstance(ann.get("response"), dict):
            raise UserError(f"{path}: entry {i} lacks pmid or response")
        qid = str(ann["pmid"])
        if qid in out:
            repeats += 1
            continue
        grades: dict[str, int] = {}
        for kind, grade in RELISH_GRADES.items():
            cands = ann["response"].get(kind, [])
            if not isinstance(cands, list):
                raise UserError(f"{path}: entry {i} (pmid {qid}): response.{kind} is not a list")
            for c in map(str, cands):
                repeats += c in grades
                grades.setdefault(c, grade)
        out[qid] = grades
    return out, repeats


def read_relish_texts(folder: str | Path) -> dict[str, dict]:
    """`PubMed-<pmid>.txt` files (title on the first line, the abstract after) -> {pmid: paper}."""
    folder = Path(folder)
    files = sorted(folder.glob("PubMed-*.txt"))
    if not files:
        raise UserError(f"{folder} holds no PubMed-<pmid>.txt files")
    out = {}
    for f in files:
        lines = f.read_text(encoding="utf-8").splitlines()
        if not lines or not lines[0].strip():
            raise UserError(f"{f} line 1: no title")
        pmid = f.stem[len("PubMed-"):]
        out[pmid] = _paper(pmid, lines[0].strip(), " ".join(s.strip() for s in lines[1:] if s.strip()))
    return out


def relish_table(path: str | Path, emb: Mapping[str, np.ndarray]) -> dict:
    """RELISH: MAP (partial counts as relevant, as trec_eval's relevance level 1 does) and nDCG
    (gains 2 / 1 / 0) over each query's judged candidates ranked by L2 distance. `path`: the
    annotation JSON or the folder holding RELISH_v1.json / RELISH_v1_ann.json."""
    path = Path(path)
    if path.is_dir():
        found = [path / n for n in ("RELISH_v1.json", "RELISH_v1_ann.json") if (path / n).is_file()]
        if not found:
            raise UserError(f"{path} holds neither RELISH_v1.json nor RELISH_v1_ann.json")
        path = found[0]
    qrels, repeats = read_relish_annotations(path)
    return {**evaluate_ranking(qrels, emb, trec=True), "repeats": repeats}


# ---------------------------------------------------------------- SciRepEval

def read_scirepeval_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """SciRepEval labelled rows {query_id, cand_id, score} (JSONL or parquet) -> {qid: {cid: score}}."""
    path = Path(path)
    out: dict[str, dict[str, int]] = {}
    for n, rec in _rows(path):
        _need(rec, ("query_id", "cand_id", "score"), path, n)
        try:
            score = int(rec["score"])
        except (TypeError, ValueError):
            raise UserError(f"{path} line {n}: score {rec['score']!r} is not a number") from None
        out.setdefault(str(rec["query_id"]), {})[str(rec["cand_id"])] = score
    if not out:
        raise UserError(f"{path} holds no query-candidate rows")
    return out


def read_scirepeval_metadata(path: str | Path) -> dict[str, dict]:
    """SciRepEval metadata rows (JSONL or parquet) -> {doc_id: {paper_id, title, abstract}}: flat
    paper rows, or query rows with their candidates (a search query's text becomes its title)."""
    path = Path(path)
    out = {}

    def add(rec, n):
        _need(rec, ("doc_id",), path, n)
        out[str(rec["doc_id"])] = _paper(str(rec["doc_id"]), rec.get("title"), rec.get("abstract"))

    for n, rec in _rows(path):
        if "candidates" not in rec:
            add(rec, n)
            continue
        q = rec.get("query")
        if isinstance(q, dict):
            add(q, n)
        elif isinstance(q, str):
            add({"doc_id": rec.get("doc_id"), "title": q} if "doc_id" in rec else {}, n)
        else:
            raise UserError(f"{path} line {n}: query is neither a paper nor a search string")
        if not isinstance(rec["candidates"], list):
            raise UserError(f"{path} line {n}: candidates is not a list")
        for c in rec["candidates"]:
            add(c if isinstance(c, dict) else {}, n)
    return out


def _scirepeval_test_file(folder: Path) -> Path | None:
    if (folder / "test_qrel.jsonl").is_file():
        return folder / "test_qrel.jsonl"
    parquet = sorted(folder.glob("*.parquet"))
    if len(parquet) > 1:
        raise UserError(f"{folder} holds {len(parquet)} parquet files; expected one test file")
    return parquet[0] if parquet else None


def scirepeval_table(root: str | Path, emb: Mapping[str, np.ndarray], tasks: tuple[str, ...] | None = None) -> dict:
    """SciRepEval's proximity and search tasks found under `root/<test config>/` (test_qrel.jsonl or
    one parquet file): each task's own metrics, trec_eval-style (as SciRepEval's pytrec_eval run
    omits candidates without an embedding, they stay judged-but-unretrieved)."""
    root = Path(root)
    unknown = set(tasks or ()) - set(SCIREPEVAL_TASKS)
    if unknown:
        raise UserError(f"unknown SciRepEval task(s) {', '.join(sorted(unknown))}; known: {', '.join(SCIREPEVAL_TASKS)}")
    table: dict[str, Any] = {}
    for task in tasks or SCIREPEVAL_TASKS:
        f = _scirepeval_test_file(root / task)
        if f is None:
            continue
        res = evaluate_ranking(read_scirepeval_qrels(f), emb, trec=True)
        table[task] = {m: res[m] for m in SCIREPEVAL_TASKS[task]} | {"queries": res["queries"],
                                                                    "missing": res["missing"]}
    if not table:
        raise UserError(f"{root} holds no SciRepEval task folder ({', '.join(tasks or SCIREPEVAL_TASKS)})")
    return table


# ---------------------------------------------------------------- command

SUITES = {"scidocs": scidocs_table, "csfcube": csfcube_table, "relish": relish_table, "scirepeval": scirepeval_table}


def load_embeddings(path: str | Path) -> dict[str, np.ndarray]:
    """{paper_id: vector} from SciDocs embeddings JSONL, Parquet of (paper_id, vector) rows, or a
    run directory's vector store."""
    from mapping.evaluation.scidocs import read_embeddings_jsonl
    from sciencemap.storage import dataset
    from sciencemap.vectors import open_vectors

    p = Path(path)
    if p.is_file() and p.suffix in (".jsonl", ".json"):
        return read_embeddings_jsonl(p)
    if p.is_dir() and ((p / "vectors").exists() or (p / "embeddings").exists()):
        v = open_vectors(p)
        return dict(zip(v.ids().tolist(), np.asarray(v.X, np.float32)))
    if p.suffix == ".parquet" or p.is_dir():
        t = dataset(p).to_table(columns=["paper_id", "vector"])
        return {pid: np.asarray(vec, np.float32) for pid, vec in zip(t.column("paper_id").to_pylist(),
                                                                      t.column("vector").to_pylist())}
    raise UserError(f"{p}: give embeddings JSONL, Parquet of paper_id + vector, or a run directory")


def load_facet_view(run: str | Path, view: str) -> dict[str, dict[str, np.ndarray]]:
    """{key: {paper_id: vector}} of a run's named view (sciencemap.embeddings.load_view)."""
    from sciencemap.embeddings import load_view

    ids, keys, X = load_view(Path(run), view)
    out: dict[str, dict[str, np.ndarray]] = {}
    for pid, key, vec in zip(ids.tolist(), keys.tolist(), X):
        out.setdefault(key, {})[pid] = vec
    return out


def _flat(table: Mapping, prefix: str = "") -> list[tuple[str, Any]]:
    rows = []
    for k, v in table.items():
        if isinstance(v, Mapping):
            rows += _flat(v, f"{prefix}{k} ")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            rows.append((f"{prefix}{k}".strip(), v))
    return rows


def run_benchmark(argv: list[str] | None, prog: str | None = None) -> dict:
    import argparse

    ap = argparse.ArgumentParser(prog=prog, description=SUMMARY + " (METHODS.md §7.1).")
    ap.add_argument("--suite", required=True, choices=sorted(SUITES))
    ap.add_argument("--data", required=True, help="the release folder (RELISH: its annotation JSON file)")
    ap.add_argument("--vectors", required=True, help="embeddings JSONL, Parquet of paper_id + vector, or a run directory")
    ap.add_argument("--split", default="test", help="scidocs / csfcube: test or val/dev")
    ap.add_argument("--view", default="", help="csfcube: a run's view whose keys are facets (e.g. 'facets' of a "
                    "flew or unifar model): each facet's queries ranked by that facet's vectors")
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    a = ap.parse_args(argv)
    emb = load_embeddings(a.vectors)
    fn = SUITES[a.suite]
    if a.view and a.suite != "csfcube":
        raise UserError("--view is read by the csfcube suite only (facet queries)")
    extra = {"facet_emb": load_facet_view(a.vectors, a.view)} if a.view else {}
    table = fn(a.data, emb) if a.suite in ("relish", "scirepeval") else fn(a.data, emb, split=a.split, **extra)
    if a.json:
        print(json.dumps(table, indent=2, default=str))
    else:
        print(f"{a.suite} ({len(emb):,} vectors)")
        for k, v in _flat(table):
            print(f"  {k:<40} {v:.4f}" if isinstance(v, float) else f"  {k:<40} {v}")
    return table


# `sciencemap --help` shows it beside the command's name
SUMMARY = ("A benchmark's own table (SciDocs, CSFCube, RELISH, SciRepEval) from its official release files "
           "and your vectors.")

def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """`sciencemap benchmark`: exit code (a UserError is one line, exit code 2)."""
    from sciencemap.cli import command_main

    return command_main(lambda a: run_benchmark(a, prog), argv)
