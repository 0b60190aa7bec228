"""Facet signals measured on real data (docs/quality.md, "Facets"):

1. the citation-intent classifier's SciCite dev/test figures and the abstract splitter's CSAbstruct
   figures beside its position-only rule (read from the classifiers' own records: `jobs/facets.py
   intent-train` / `splitter-train` evaluate on the test splits when they train);
2. the CL-SciSumm 2018 training citances with a human Discourse Facet: ingested with the project's
   reader (the citing sentence's section class), labelled by the intent classifier, each against the
   human facet (a confusion table each);
3. facet triplet counts per corpus: the importance stage with facet_signal = section (and intent when
   a classifier is given) on an ingested run, counted by the anchor's source.

    .venv/bin/python bench/facet_signals.py --intent M_INTENT [--splitter M_SPLIT] [--run runs/demo] [--json out.json]
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
CLSS_TAR = SHARED / "cl-scisumm" / "training-set-2018-40topics.tar.gz"
CLSS_FOLDER = "data/Training-Set-2019/Task1/From-Training-Set-2018"
HUMAN = ("Method", "Results", "Aim", "Implication", "Hypothesis")


def human_facets(raw: str | None) -> list[str]:
    """'Method_Citation', ' Method citation', "['Aim_Citation','Method_Citation']" -> ['Aim', 'Method']."""
    if not raw:
        return []
    try:
        items = ast.literal_eval(raw) if raw.strip().startswith("[") else [raw]
    except (ValueError, SyntaxError):
        items = [raw]
    out = []
    for x in items:
        k = re.sub(r"[_\s]*citation$", "", str(x).strip(), flags=re.I).strip().lower()
        k = {"result": "results"}.get(k, k)
        out += [h for h in HUMAN if h.lower() == k]
    return out


def confusion(rows, gold_key: str, pred_key: str, labels_pred) -> dict:
    c = Counter((r[gold_key], r[pred_key]) for r in rows)
    return {g: {p: c.get((g, p), 0) for p in labels_pred} for g in HUMAN}


def print_table(title: str, table: dict, labels_pred) -> None:
    print(f"\n{title}")
    print("| human facet | " + " | ".join(labels_pred) + " | n |")
    print("|---|" + "---|" * (len(labels_pred) + 1))
    for g, row in table.items():
        print(f"| {g} | " + " | ".join(str(row[p]) for p in labels_pred) + f" | {sum(row.values())} |")


def clscisumm_rows(tmp: Path, spark) -> tuple[list[dict], dict]:
    """Every human-labelled annotation row with its section class (via the ingest) and text."""
    import pyarrow.parquet as pq

    from importance.ingest.job import IngestConfig, run_ingest
    from importance.ingest.readers.clscisumm import annotation_rows
    from sciencemap.layout import RunLayout

    with tarfile.open(CLSS_TAR) as tf:
        tf.extractall(tmp / "src", filter="data")
    root = tmp / "src" / CLSS_FOLDER
    layout = RunLayout(tmp / "run")
    ing = run_ingest(IngestConfig(inputs=[{"path": str(root), "format": "clscisumm", "source": "clscisumm"}]),
                     layout, spark=spark)
    m = pq.read_table(layout.table("mentions"), columns=["citing_id", "cited_id", "context", "section_class"]).to_pylist()
    section_of = {}
    for r in m:
        section_of.setdefault((r["citing_id"], r["cited_id"], r["context"]), r["section_class"])
    rows, stats = [], Counter()
    for rp in sorted(p for p in root.iterdir() if p.is_dir()):
        for f in sorted((rp / "annotation").glob("*.txt")):
            for a in annotation_rows(f.name, f.read_text(encoding="utf-8", errors="replace")):
                stats["annotation_rows"] += 1
                facets = human_facets(a.get("facet"))
                if not facets:
                    stats["no_human_facet"] += 1
                    continue
                stats["multi_label"] += len(facets) > 1
                key = (f"acl:{a['citing'].lower()}", f"acl:{rp.name.lower()}", a["text"])
                cls = section_of.get(key)
                stats["placed_in_a_section"] += cls is not None and cls != "O"
                rows.append({"human": facets[0], "text": a["text"], "section_class": cls or "O"})
    stats["labelled"] = len(rows)
    return rows, {**stats, "ingest_mentions": ing.get("per_source", {}).get("clscisumm", {}).get("mentions")}


def facet_triplet_counts(run: Path, spark, signals: list[str]) -> dict:
    """The importance stage on a copy of the run's ingested tables, per signal; triplets per facet and source."""
    import pyarrow.parquet as pq

    from importance.job import ImportanceConfig, run_importance
    from sciencemap.layout import RunLayout

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        lay = RunLayout(Path(tmp) / "run")
        lay.root.mkdir()
        for t in ("papers", "references", "mentions", "context_intents"):
            if (run / t).exists():
                (lay.root / t).symlink_to((run / t).resolve())
        src = {r["paper_id"]: r["source"] for r in pq.read_table(lay.table("papers"), columns=["paper_id", "source"]).to_pylist()}
        for signal in signals:
            s = run_importance(ImportanceConfig(facet_signal=signal), lay, spark=spark)
            t = pq.read_table(lay.table("triplets"), columns=["anchor_id", "facet", "negative_kind"]).to_pylist()
            c = Counter((src.get(r["anchor_id"]), r["facet"] or "seed") for r in t)
            out[signal] = {"by_source": {s_: {f: c.get((s_, f), 0) for f in ("seed", "background", "method", "result")}
                                         for s_ in sorted({k[0] for k in c}, key=str)},
                           "facet_pairs": {f: v["pairs"] for f, v in s["facet_triplets"].items()}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--intent", help="a trained intent classifier (jobs/facets.py intent-train --out)")
    ap.add_argument("--splitter", help="a trained abstract splitter (jobs/facets.py splitter-train --out)")
    ap.add_argument("--run", type=Path, help="an ingested run for facet triplet counts (e.g. runs/demo)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    if not CLSS_TAR.is_file():
        sys.exit(f"error: {CLSS_TAR} is missing (../shared/data)")
    from encoders.facets.classifier import classifier_meta, load_classifier
    from importance.ingest.spark import get_spark
    from importance.facets import SECTION_PROXY

    res = {}
    for name, path in (("intent", a.intent), ("splitter", a.splitter)):
        if path:
            meta = classifier_meta(path)
            res[name] = {"dev": meta["training"]["dev"], "test": meta["training"]["test"],
                         "best_epoch": meta["training"]["best_epoch"], "epochs": meta["training"]["epochs"],
                         **({"position_rule": meta["position_rule"]} if "position_rule" in meta else {}),
                         **({"published_scibert_macro_f1": meta["published_scibert_macro_f1"]}
                            if "published_scibert_macro_f1" in meta else {})}
            t = res[name]["test"]
            print(f"{name}: test macro-F1 {t['macro_f1']:.4f}, accuracy {t['accuracy']:.4f} (n = {t['n']}); per class {t['f1']}")
            if "position_rule" in res[name]:
                r = res[name]["position_rule"]["test"]
                print(f"  position-only rule (cuts {r['cut']}): test macro-F1 {r['macro_f1']:.4f}, accuracy {r['accuracy']:.4f}")
            if "published_scibert_macro_f1" in res[name]:
                print(f"  published: SciBERT {res[name]['published_scibert_macro_f1']:.4f} (Beltagy et al. 2019)")
    spark = get_spark()
    tmp = Path(tempfile.mkdtemp(prefix="facet_signals_"))
    try:
        rows, stats = clscisumm_rows(tmp, spark)
        for r in rows:
            r["section_proxy"] = SECTION_PROXY.get(r["section_class"], "none")
        preds = ("background", "method", "result", "none")
        res["clscisumm"] = {"stats": dict(stats), "section_proxy": confusion(rows, "human", "section_proxy", preds)}
        print(f"\nCL-SciSumm 2018 training citances: {dict(stats)}")
        print_table("section-class proxy (I -> background, M -> method, R/D -> result, O -> none)",
                    res["clscisumm"]["section_proxy"], preds)
        if a.intent:
            clf = load_classifier(a.intent, device="cpu")
            for r, lab in zip(rows, clf.predict([r["text"] for r in rows])):
                r["intent"] = lab
            res["clscisumm"]["intent"] = confusion(rows, "human", "intent", preds[:3])
            print_table("intent classifier", res["clscisumm"]["intent"], preds[:3])
        if a.run:
            signals = ["section"] + (["intent"] if (a.run / "context_intents").exists() else [])
            res["facet_triplets"] = facet_triplet_counts(a.run, spark, signals)
            print("\nfacet triplets by the anchor's source:", json.dumps(res["facet_triplets"], indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
