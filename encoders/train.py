"""Fine-tune an encoder on importance-aware triplets (METHODS.md §4).

Reads `triplets` (split=train / val) joined to `papers` text, trains with the triplet margin loss
(AdamW, linear warm-up then decay), logs JSON lines to the run's train_log, measures validation
loss and triplet accuracy before and after, and saves a Hugging Face model directory (safetensors)
that transformers and sentence-transformers both load.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import torch

from importance.contracts import SPLIT_TRAIN, SPLIT_VAL, RunLayout
from importance.runtime import UserError, replace_dir
from encoders.losses import TripletLoss, triplet_distances
from encoders.model import DEFAULT_MODEL, SCIENCEMAP_JSON, Encoder, load_encoder, paper_text

TRIPLET_COLS = ["anchor_id", "positive_id", "negative_id", "negative_kind", "split"]


@dataclass
class TrainConfig:
    model: str = DEFAULT_MODEL      # "minilm" or a local Hugging Face directory (e.g. SciBERT)
    pooling: str = "mean"           # mean over non-padding tokens (seed paper) or cls
    margin: float = 1.0
    normalize: bool = False         # L2-normalise before the loss (off: see METHODS.md §4)
    lr: float = 2e-5
    weight_decay: float = 0.01
    batch_size: int = 8             # triplets per micro-batch
    grad_accum: int = 1             # micro-batches per optimizer step (seed recipe: 4)
    max_steps: int = 20             # optimizer steps; 0 = run `epochs` full passes
    epochs: int = 1
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0      # 0 = no clipping
    max_length: int = 128
    seed: int = 0
    log_every: int = 5
    val_max: int = 128              # validation triplets used (a seeded sample), for speed
    eval_batch_size: int = 32
    device: str = "auto"


def _check(cfg: TrainConfig) -> None:
    for name in ("batch_size", "grad_accum", "epochs", "log_every", "val_max", "eval_batch_size"):
        if getattr(cfg, name) < 1:
            raise UserError(f"train setting {name}={getattr(cfg, name)} must be at least 1")
    if cfg.max_steps < 0:
        raise UserError(f"train setting max_steps={cfg.max_steps} must be >= 0 (0 = full epochs)")
    if not 0 <= cfg.warmup_ratio < 1:
        raise UserError(f"train setting warmup_ratio={cfg.warmup_ratio} must be in [0, 1)")
    if cfg.lr <= 0:
        raise UserError(f"train setting lr={cfg.lr} must be positive")


def _dataset(path: Path, what: str) -> ds.Dataset:
    if not path.exists():
        raise UserError(f"table {path} does not exist; run the importance stage first ({what})")
    return ds.dataset(str(path), format="parquet")


def load_texts(papers_dir: Path, ids: set[str], sep: str) -> dict[str, str]:
    """Text of the papers in `ids`, scanning `papers` batch by batch (never the whole corpus at once)."""
    wanted = pa.array(sorted(ids), pa.string())
    out: dict[str, str] = {}
    for batch in _dataset(papers_dir, "papers").to_batches(columns=["paper_id", "title", "abstract"]):
        tbl = pa.Table.from_batches([batch])
        tbl = tbl.filter(pc.is_in(tbl["paper_id"], value_set=wanted))
        for pid, title, abstract in zip(*(tbl[c].to_pylist() for c in ("paper_id", "title", "abstract"))):
            text = paper_text(title, abstract, sep)
            if text and pid not in out:  # first row wins on duplicate ids
                out[pid] = text
    return out


def load_triplets(layout: RunLayout, sep: str, val_max: int, seed: int) -> tuple[dict, dict, dict]:
    """Train and val triplets as dicts of lists (a, p, n, kind), plus counts of what was dropped."""
    tbl = _dataset(layout.table("triplets"), "triplets").to_table(columns=TRIPLET_COLS)
    df = tbl.to_pandas()
    # Spark's row order is not stable between runs: sort, then shuffle with our own seed.
    df = df.sort_values(["split", "anchor_id", "positive_id", "negative_id"], kind="stable")
    ids = set(df["anchor_id"]) | set(df["positive_id"]) | set(df["negative_id"])
    texts = load_texts(layout.table("papers"), ids, sep)
    has_text = df[["anchor_id", "positive_id", "negative_id"]].isin(texts.keys()).all(axis=1)
    counts = {"triplets_total": int(len(df)), "dropped_no_text": int((~has_text).sum())}
    df = df[has_text]
    splits = {}
    for split in (SPLIT_TRAIN, SPLIT_VAL):
        part = df[df["split"] == split]
        if split == "val" and len(part) > val_max:
            pick = np.sort(np.random.default_rng(seed).permutation(len(part))[:val_max])
            part = part.iloc[pick]
        splits[split] = {
            "a": [texts[i] for i in part["anchor_id"]],
            "p": [texts[i] for i in part["positive_id"]],
            "n": [texts[i] for i in part["negative_id"]],
            "kind": part["negative_kind"].fillna("").tolist(),
        }
        counts[f"{split}_triplets"] = int(len(part))
    return splits["train"], splits["val"], counts


def triplet_vectors(enc: Encoder, a: list[str], p: list[str], n: list[str]):
    """One forward pass over anchors, positives and negatives together (one padded batch)."""
    vec = enc.embed_texts(a + p + n)
    k = len(a)
    return vec[:k], vec[k:2 * k], vec[2 * k:]


@torch.inference_mode()
def evaluate(enc: Encoder, data: dict, loss_fn: TripletLoss, batch_size: int = 32) -> dict:
    """Validation loss and triplet accuracy (d(a,p) < d(a,n)), overall and per negative kind."""
    n = len(data["a"])
    if n == 0:
        return {"n": 0, "loss": None, "accuracy": None}
    was_training = enc.model.training
    enc.model.eval()
    loss_sum, correct = 0.0, np.zeros(n, bool)
    try:
        for i in range(0, n, batch_size):
            sl = slice(i, i + batch_size)
            va, vp, vn = triplet_vectors(enc, data["a"][sl], data["p"][sl], data["n"][sl])
            loss_sum += float(loss_fn(va, vp, vn)) * len(va)
            dp, dn = triplet_distances(va, vp, vn, loss_fn.normalize)
            correct[sl] = (dp < dn).cpu().numpy()
    finally:
        enc.model.train(was_training)
    out = {"n": n, "loss": loss_sum / n, "accuracy": float(correct.mean())}
    kinds = np.asarray(data["kind"])
    for kind in sorted(set(data["kind"]) - {""}):
        out[f"accuracy_{kind}"] = float(correct[kinds == kind].mean())
    return out


def _batches(n: int, batch_size: int, seed: int):
    """Endless stream of index batches: a fresh seeded permutation per epoch."""
    epoch = 0
    while True:
        perm = np.random.default_rng([seed, epoch]).permutation(n)
        for i in range(0, n, batch_size):
            yield epoch, perm[i:i + batch_size]
        epoch += 1


def save_model(enc: Encoder, dest: Path, meta: dict) -> Path:
    """Write a Hugging Face model directory (safetensors + tokenizer) atomically, plus the
    sentence-transformers files (modules.json, pooling config) so that it loads there too."""
    dest = Path(dest)
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    enc.model.save_pretrained(tmp)
    enc.tokenizer.save_pretrained(tmp)
    (tmp / SCIENCEMAP_JSON).write_text(json.dumps(meta, indent=2, default=str))
    # No Normalize module: the vectors were trained raw (METHODS.md §4).
    (tmp / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ], indent=2))
    (tmp / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": enc.max_length, "do_lower_case": False}, indent=2))
    (tmp / "1_Pooling").mkdir()
    (tmp / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": enc.dim,
        "pooling_mode_cls_token": enc.pooling == "cls",
        "pooling_mode_mean_tokens": enc.pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }, indent=2))
    replace_dir(tmp, dest)
    return dest


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_train(cfg: TrainConfig, layout: RunLayout, encoder: Encoder | None = None) -> dict:
    """Train on the run's triplets and save the model to layout.model_dir. Returns a summary."""
    from transformers import get_linear_schedule_with_warmup

    _check(cfg)
    t_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    enc = encoder or load_encoder(cfg.model, cfg.pooling, cfg.max_length, cfg.device)
    train, val, counts = load_triplets(layout, enc.sep, cfg.val_max, cfg.seed)
    n_train = len(train["a"])
    if n_train == 0:
        raise UserError(f"no usable train triplets in {layout.table('triplets')} "
                        f"({counts['triplets_total']} rows, {counts['dropped_no_text']} without paper text); "
                        "run the importance stage on a corpus with resolved references")
    per_step = cfg.batch_size * cfg.grad_accum
    total = cfg.max_steps or cfg.epochs * math.ceil(n_train / per_step)
    _log(f"train: {n_train} train / {len(val['a'])} val triplets, {total} steps of {per_step} "
         f"on {enc.device} ({enc.path.name}, pooling={enc.pooling}, max_length={enc.max_length})")

    loss_fn = TripletLoss(cfg.margin, cfg.normalize)
    val_before = evaluate(enc, val, loss_fn, cfg.eval_batch_size)
    _log(f"train: validation before: {json.dumps(val_before)}")

    model = enc.model
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = get_linear_schedule_with_warmup(opt, int(cfg.warmup_ratio * total), total)
    stream = _batches(n_train, cfg.batch_size, cfg.seed)
    layout.root.mkdir(parents=True, exist_ok=True)
    log_f = layout.train_log.open("w")
    t0 = time.perf_counter()
    window, window_t, losses, epoch = [], t0, [], 0
    try:
        for step in range(1, total + 1):
            opt.zero_grad(set_to_none=True)
            step_loss = 0.0
            for _ in range(cfg.grad_accum):
                epoch, idx = next(stream)
                va, vp, vn = triplet_vectors(enc, [train["a"][i] for i in idx],
                                             [train["p"][i] for i in idx], [train["n"][i] for i in idx])
                loss = loss_fn(va, vp, vn) / cfg.grad_accum
                loss.backward()
                step_loss += float(loss.detach())
            if cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            lr = sched.get_last_lr()[0]
            opt.step()
            sched.step()
            window.append(step_loss)
            losses.append(step_loss)
            if step % cfg.log_every == 0 or step == total:
                now = time.perf_counter()
                rec = {"step": step, "epoch": epoch, "loss": float(np.mean(window)), "lr": lr,
                       "seconds": round(now - t0, 3),
                       "seconds_per_step": round((now - window_t) / len(window), 4)}
                log_f.write(json.dumps(rec) + "\n")
                log_f.flush()
                eta = (now - t0) / step * (total - step)
                _log(f"train: step {step}/{total} loss {rec['loss']:.4f} lr {lr:.2e} "
                     f"{rec['seconds_per_step']:.2f} s/step ETA {eta:.0f}s")
                window, window_t = [], now
    finally:
        log_f.close()
    train_seconds = time.perf_counter() - t0

    val_after = evaluate(enc, val, loss_fn, cfg.eval_batch_size)
    _log(f"train: validation after: {json.dumps(val_after)}")
    meta = {"pooling": enc.pooling, "base_model": str(enc.path), "steps": total,
            "max_length": enc.max_length, "config": dataclasses.asdict(cfg),
            "val_before": val_before, "val_after": val_after, **counts}
    model.eval()
    save_model(enc, layout.model_dir, meta)
    return {"model_dir": str(layout.model_dir), "steps": total, "train_triplets": n_train,
            **counts, "final_loss": losses[-1] if losses else None,
            "train_seconds": round(train_seconds, 2),
            "seconds_per_step": round(train_seconds / max(total, 1), 4),
            "val_before": val_before, "val_after": val_after,
            "seconds": round(time.perf_counter() - t_start, 2)}
