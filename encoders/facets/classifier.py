"""A sentence classifier: the project's encoder, fine-tuned with a linear head over its pooled vector
(METHODS.md §8.1). Used for citation intent (SciCite: background / method / result) and for the
abstract facet splitter (CSAbstruct); both are a list of (text, label) to learn and a list of texts to
label, so one trainer serves both.

Training is deterministic for a seed on one device: AdamW (2e-5 on the encoder, 1e-3 on the head),
linear warm-up over the first 10% of the steps then linear decay, class-balanced cross-entropy
(SciCite is 59% background), and the epoch with the best dev macro-F1 is kept. A saved classifier is a
folder: the fine-tuned encoder (save_pretrained + tokenizer), `head.safetensors`, `classifier.json`
(labels, pooling, max_length, training record and dev/test figures).
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from sciencemap.runtime import UserError
from sciencemap.storage import atomic_dir

CLASSIFIER_FILE = "classifier.json"
HEAD_FILE = "head.safetensors"


@dataclass
class ClassifierSettings:
    epochs: int = 3
    batch_size: int = 32
    lr: float = 2e-5            # encoder
    head_lr: float = 1e-3       # the freshly initialised head
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_length: int = 96        # SciCite contexts average ~45 word pieces; CSAbstruct sentences fewer
    dropout: float = 0.1
    seed: int = 0
    balanced: bool = True       # class weights n / (k * n_c) in the loss
    max_train: int = 0          # 0 = every training example; else a seeded sample (tests, quick runs)


def macro_f1(gold: Sequence[int], pred: Sequence[int], k: int) -> tuple[float, list[float], np.ndarray]:
    """Macro-F1, per-class F1 and the k x k confusion matrix (rows gold, columns predicted)."""
    cm = np.zeros((k, k), np.int64)
    np.add.at(cm, (np.asarray(gold, np.int64), np.asarray(pred, np.int64)), 1)
    f1 = []
    for c in range(k):
        tp, fp, fn = cm[c, c], cm[:, c].sum() - cm[c, c], cm[c, :].sum() - cm[c, c]
        f1.append(float(2 * tp / (2 * tp + fp + fn)) if tp + fp + fn else 0.0)
    return float(np.mean(f1)), f1, cm


class SentenceClassifier(torch.nn.Module):
    """encoder -> pooled vector -> dropout -> linear -> logits over `labels`."""

    def __init__(self, encoder, labels: Sequence[str], dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder                       # encoders.model.Encoder (not a Module itself)
        self.transformer = encoder.model             # registered, so .parameters() covers it
        self.labels = list(labels)
        self.dropout = torch.nn.Dropout(dropout)
        self.head = torch.nn.Linear(encoder.dim, len(self.labels))

    def forward(self, batch: dict) -> torch.Tensor:
        return self.head(self.dropout(self.encoder.forward(batch)))

    @torch.inference_mode()
    def predict_proba(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Class probabilities (n x k), texts in order; length-sorted batches (less padding)."""
        was = self.training
        self.eval()
        ids = self.encoder.token_ids(list(texts))
        order = np.argsort([len(x) for x in ids], kind="stable")
        out = np.zeros((len(ids), len(self.labels)), np.float32)
        try:
            for i in range(0, len(order), batch_size):
                rows = order[i:i + batch_size]
                logits = self.forward(self.encoder.pad([ids[r] for r in rows]))
                out[rows] = torch.softmax(logits.float(), -1).cpu().numpy()
        finally:
            self.train(was)
        return out

    def predict(self, texts: Sequence[str], batch_size: int = 64) -> list[str]:
        if not texts:
            return []
        return [self.labels[i] for i in self.predict_proba(texts, batch_size).argmax(1)]


@dataclass
class TrainRecord:
    settings: dict
    n_train: int
    class_counts: dict
    epochs: list = field(default_factory=list)   # per epoch: loss, dev macro-F1, seconds
    best_epoch: int = 0
    dev: dict = field(default_factory=dict)
    test: dict = field(default_factory=dict)


def _scores(model: SentenceClassifier, texts, labels, batch_size=64) -> dict:
    k = len(model.labels)
    gold = [model.labels.index(y) for y in labels]
    pred = [model.labels.index(y) for y in model.predict(texts, batch_size)]
    m, per, cm = macro_f1(gold, pred, k)
    return {"n": len(texts), "macro_f1": round(m, 4), "accuracy": round(float(np.mean(np.equal(gold, pred))), 4),
            "f1": {lab: round(f, 4) for lab, f in zip(model.labels, per)}, "confusion": cm.tolist()}


def train_classifier(model_spec: str, labels: Sequence[str], train: Sequence[tuple[str, str]],
                     dev: Sequence[tuple[str, str]], s: ClassifierSettings, device: str = "auto",
                     log=print) -> tuple[SentenceClassifier, TrainRecord]:
    """Fine-tune encoder + head on (text, label) pairs; keeps the epoch with the best dev macro-F1."""
    from encoders.model import load_encoder
    from encoders.training.loop import param_groups

    unknown = sorted({y for _, y in list(train) + list(dev)} - set(labels))
    if unknown:
        raise UserError(f"labels {unknown} are not among the classifier's labels {list(labels)}")
    if not train:
        raise UserError("no training examples")
    rng = random.Random(s.seed)
    train = list(train)
    if s.max_train and len(train) > s.max_train:
        train = rng.sample(train, s.max_train)
    torch.manual_seed(s.seed)
    enc = load_encoder(model_spec, max_length=s.max_length, device=device)
    model = SentenceClassifier(enc, labels, s.dropout).to(enc.device)
    y = np.array([model.labels.index(lab) for _, lab in train])
    counts = np.bincount(y, minlength=len(labels))
    weights = (len(y) / (len(labels) * np.maximum(counts, 1))) if s.balanced else np.ones(len(labels))
    loss_fn = torch.nn.CrossEntropyLoss(weight=torch.tensor(weights, dtype=torch.float32, device=enc.device))
    ids = enc.token_ids([t for t, _ in train])
    # the training loop's groups (no decay on biases and norms) for the encoder; the head apart, undecayed
    groups = [{**g, "lr": s.lr} for g in param_groups(model.transformer, s.weight_decay)]
    opt = torch.optim.AdamW(groups + [{"params": list(model.head.parameters()), "lr": s.head_lr, "weight_decay": 0.0}])
    steps_per_epoch = math.ceil(len(train) / s.batch_size)
    total = steps_per_epoch * s.epochs
    warm = max(1, int(s.warmup_ratio * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: (t + 1) / warm if t < warm else max(0.0, (total - t) / max(1, total - warm)))
    rec = TrainRecord(settings=asdict(s), n_train=len(train),
                      class_counts={lab: int(c) for lab, c in zip(labels, counts)})
    best, best_state = -1.0, None
    for epoch in range(s.epochs):
        t0, order, losses = time.time(), list(range(len(train))), []
        rng.shuffle(order)
        model.train()
        for i in range(0, len(order), s.batch_size):
            rows = order[i:i + s.batch_size]
            batch = enc.pad([ids[r] for r in rows])
            loss = loss_fn(model(batch).float(), torch.as_tensor(y[rows], device=enc.device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
        d = _scores(model, [t for t, _ in dev], [lab for _, lab in dev]) if dev else {"macro_f1": 0.0}
        rec.epochs.append({"epoch": epoch + 1, "loss": round(float(np.mean(losses)), 4),
                           "dev_macro_f1": d["macro_f1"], "seconds": round(time.time() - t0, 1)})
        log(f"classifier epoch {epoch + 1}/{s.epochs}: loss {np.mean(losses):.4f}, dev macro-F1 {d['macro_f1']:.4f} "
            f"({time.time() - t0:.0f} s)")
        if d["macro_f1"] > best:
            best, rec.best_epoch, rec.dev = d["macro_f1"], epoch + 1, d
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    model.eval()
    return model, rec


def evaluate(model: SentenceClassifier, examples: Sequence[tuple[str, str]]) -> dict:
    return _scores(model, [t for t, _ in examples], [lab for _, lab in examples])


def save_classifier(model: SentenceClassifier, dest: Path, record: TrainRecord, extra: dict | None = None) -> Path:
    """Written whole or not at all (a folder renamed into place)."""
    from safetensors.torch import save_file

    with atomic_dir(Path(dest)) as tmp:
        model.transformer.save_pretrained(tmp)
        model.encoder.tokenizer.save_pretrained(tmp)
        save_file({k: v.contiguous() for k, v in model.head.state_dict().items()}, str(tmp / HEAD_FILE))
        meta = {"labels": model.labels, "pooling": model.encoder.pooling, "max_length": model.encoder.max_length,
                "base_model": str(model.encoder.path), "training": asdict(record), **(extra or {})}
        (tmp / CLASSIFIER_FILE).write_text(json.dumps(meta, indent=1))
    return Path(dest)


def load_classifier(path: str | Path, device: str = "auto") -> SentenceClassifier:
    from safetensors.torch import load_file

    from encoders.model import load_encoder

    path = Path(path)
    meta_file = path / CLASSIFIER_FILE
    if not meta_file.is_file():
        raise UserError(f"{path} is not a saved sentence classifier (no {CLASSIFIER_FILE})")
    meta = json.loads(meta_file.read_text())
    enc = load_encoder(path, pooling=meta["pooling"], max_length=meta["max_length"], device=device)
    model = SentenceClassifier(enc, meta["labels"]).to(enc.device)
    model.head.load_state_dict(load_file(str(path / HEAD_FILE), device=str(enc.device)))
    model.eval()
    return model


# Rows a label command reads, labels and writes at a time (one Parquet part each): memory stays flat
# however large the run.
LABEL_BATCH_ROWS = 65_536


def open_labeller(layout, classifier: str | Path | None, default: str, labels, what: str, device: str = "auto"):
    """(path, classifier) for a label command: the given folder, else <run>/models/<default>; one clear
    error when it classifies something else."""
    path = Path(classifier) if classifier else layout.root / "models" / default
    clf = load_classifier(path, device=device)
    if list(clf.labels) != list(labels):
        raise UserError(f"{path} classifies {clf.labels}, not {what} {list(labels)}")
    return path, clf


def write_labelled(dest: Path, schema, tables) -> int:
    """A labelled table from an iterable of pyarrow tables, one part file each; the folder replaces
    `dest` once every part is written. Returns the rows written."""
    import pyarrow.parquet as pq

    n = 0
    with atomic_dir(Path(dest)) as tmp:
        for i, t in enumerate(tables):
            pq.write_table(t.cast(schema), tmp / f"part-{i:05d}.parquet")
            n += t.num_rows
        if n == 0:
            pq.write_table(schema.empty_table(), tmp / "part-00000.parquet")
    return n


def classifier_meta(path: str | Path) -> dict:
    return json.loads((Path(path) / CLASSIFIER_FILE).read_text())
