"""Citation intent (METHODS.md §8.1): background / method / result for each citing sentence, learned
from SciCite (Cohan et al. 2019; the SciBERT copy: JSON lines {"text", "label"} in train/dev/test.txt).

    python jobs/facets.py intent-train --data DIR/sci-cite --out MODEL_DIR [--model minilm|PATH]
    python jobs/facets.py intent-label --run runs/x [--classifier MODEL_DIR]

`intent-train` fine-tunes the encoder with a linear head (encoders.facets.classifier) and prints dev and test
macro-F1. It is trained by this command rather than shipped: a fine-tuned encoder is the size of the
encoder (90 MB for MiniLM, 440 MB for SciBERT), and users fine-tune the encoder they map with.
`intent-label` labels every distinct citing sentence of a run's `mentions` and writes `context_intents`
(citing_id, context, intent, p_background, p_method, p_result), which the importance stage reads under
`[importance] facet_signal = "intent"`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from sciencemap.runtime import UserError

INTENTS = ("background", "method", "result")
SPLITS = ("train", "dev", "test")
# SciBERT (Beltagy et al. 2019, Table 1): SciCite macro-F1 of fine-tuned SciBERT (scivocab, uncased).
PUBLISHED_SCIBERT_MACRO_F1 = 0.8549


def read_scicite(folder: str | Path, split: str) -> list[tuple[str, str]]:
    """(text, label) rows of one split; a row without text or with another label is an error."""
    path = Path(folder) / f"{split}.txt"
    if not path.is_file():
        raise UserError(f"no SciCite split {path} (expected train.txt, dev.txt, test.txt in {folder})")
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{n}: not a JSON line ({e})") from None
            text, label = " ".join(str(row.get("text") or "").split()), row.get("label")
            if not text or label not in INTENTS:
                raise UserError(f"{path}:{n}: needs a text and a label in {INTENTS} (got label {label!r})")
            out.append((text, label))
    return out


def train_intent(data: str | Path, out: str | Path, model: str = "minilm", device: str = "auto", **settings) -> dict:
    from encoders.facets.classifier import ClassifierSettings, evaluate, save_classifier, train_classifier

    s = ClassifierSettings(**settings)
    train, dev, test = (read_scicite(data, sp) for sp in SPLITS)
    t0 = time.time()
    clf, rec = train_classifier(model, INTENTS, train, dev, s, device=device)
    rec.test = evaluate(clf, test)
    save_classifier(clf, Path(out), rec, extra={"task": "citation_intent", "data": str(data),
                                                "published_scibert_macro_f1": PUBLISHED_SCIBERT_MACRO_F1})
    return {"out": str(out), "seconds": round(time.time() - t0, 1), "best_epoch": rec.best_epoch,
            "dev_macro_f1": rec.dev["macro_f1"], "test": rec.test,
            "published_scibert_macro_f1": PUBLISHED_SCIBERT_MACRO_F1}


def label_contexts(run: str | Path, classifier: str | Path | None = None, device: str = "auto",
                   batch_size: int = 128) -> dict:
    """Label the run's citing sentences, LABEL_BATCH_ROWS mentions at a time (each (citing_id, context)
    once within a batch; the importance stage drops repeats across batches); writes `context_intents`."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from encoders.facets.classifier import LABEL_BATCH_ROWS, open_labeller, write_labelled
    from sciencemap.contracts import SCHEMAS
    from sciencemap.layout import RunLayout

    layout = RunLayout(Path(run))
    mentions = layout.table("mentions")
    if not mentions.exists():
        raise UserError(f"{mentions} is missing: run the ingest stage first")
    d = ds.dataset(str(mentions))
    if "context" not in d.schema.names:
        raise UserError(f"{mentions} has no context column: ingest it again with this version")
    t0 = time.time()
    path, clf = open_labeller(layout, classifier, "intent", INTENTS, "citation intent", device)
    counts = dict.fromkeys(INTENTS, 0)

    def labelled():
        for b in d.to_batches(columns=["citing_id", "context"], filter=pc.field("context").is_valid(),
                              batch_size=LABEL_BATCH_ROWS):
            tab = pa.Table.from_batches([b]).group_by(["citing_id", "context"]).aggregate([])
            if not tab.num_rows:
                continue
            proba = clf.predict_proba(tab["context"].to_pylist(), batch_size)
            intent = [INTENTS[i] for i in proba.argmax(1)]
            for label in intent:
                counts[label] += 1
            yield pa.table({"citing_id": tab["citing_id"], "context": tab["context"], "intent": intent,
                            **{f"p_{name}": proba[:, j] for j, name in enumerate(INTENTS)}})

    n = write_labelled(layout.table("context_intents"), SCHEMAS["context_intents"], labelled())
    return {"contexts": n, "by_intent": counts, "classifier": str(path), "seconds": round(time.time() - t0, 1)}
