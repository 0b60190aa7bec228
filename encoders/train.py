"""Fine-tune an encoder on importance-aware triplets (METHODS.md §4).

Reads `triplets` (split=train / val) joined to `papers` text and trains with the triplet margin loss
on L2 distance. Defaults are the seed recipe: AdamW lr 2e-5, batch 8 x accumulation 4, 2 epochs,
10% linear warm-up then linear decay, max_length 256. On CUDA: bf16 autocast and SDPA attention
(chosen at run time by encoders.model). Several processes: `torchrun --nproc_per_node=N --
jobs/train.py --run ...` (DistributedDataParallel; nccl on CUDA, gloo on CPU); each rank takes a
disjoint slice of every epoch's seeded permutation; rank 0 alone writes log, checkpoints, model.

Checkpoints (every `checkpoint_every` optimizer steps, `<run>/checkpoints/step-NNNNNNNN`, written
to a temporary directory then renamed) hold model, optimizer, scheduler, every rank's RNG states
and the step, which fixes the data position (the order is a pure function of seed, epoch and
rank). A re-run with the same settings, data and number of processes resumes from the newest one
and reaches the same final weights as an uninterrupted run (bit-identical on CPU); checkpoints
written otherwise are discarded, and all are removed once the model is saved. Validation (loss,
triplet accuracy overall / hard / easy, and retrieval of each anchor's positive among all
validation candidates: MRR, recall@1/5) runs before training, at the end of every epoch and at
the end, into the JSON-lines log; the loss curve goes to `<run>/train_curve.png`.

Why an own loop rather than sentence-transformers' trainer: that trainer is the Hugging Face
Trainer, which needs `accelerate` (not installed here) and resumes at its own granularity; the
product-specific parts (raw-vector L2 triplet loss, hard/easy and retrieval metrics, exact resume
with a deterministic per-rank data order) would each need overriding. The loop is ~150 lines of
plain torch; the loss, scheduler and model I/O come from torch / transformers.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import torch

from encoders.config import TrainConfig
from sciencemap.contracts import SPLIT_TRAIN, SPLIT_VAL, TRIPLETS_META_KEY

from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import read_json_metadata, replace_dir
from encoders.losses import TripletLoss, triplet_distances
from encoders.model import SCIENCEMAP_JSON, Encoder, load_encoder, paper_text

TRIPLET_COLS = ["anchor_id", "positive_id", "negative_id", "negative_kind", "split"]
CHECKPOINTS = "checkpoints"
CURVE_PNG = "train_curve.png"
# Settings that change the training trajectory: a checkpoint is only resumed when they match.
TRAJECTORY_FIELDS = ("model", "pooling", "margin", "normalize", "lr", "weight_decay", "batch_size",
                     "grad_accum", "max_steps", "epochs", "warmup_ratio", "max_grad_norm",
                     "max_length", "seed")


def _check(cfg: TrainConfig) -> None:
    for name in ("batch_size", "grad_accum", "epochs", "log_every", "val_max", "eval_batch_size",
                 "keep_checkpoints"):
        if getattr(cfg, name) < 1:
            raise UserError(f"train setting {name}={getattr(cfg, name)} must be at least 1")
    for name in ("max_steps", "eval_every", "checkpoint_every"):
        if getattr(cfg, name) < 0:
            raise UserError(f"train setting {name}={getattr(cfg, name)} must be >= 0 (0 = off / full epochs)")
    if not 0 <= cfg.warmup_ratio < 1:
        raise UserError(f"train setting warmup_ratio={cfg.warmup_ratio} must be in [0, 1)")
    if cfg.lr <= 0:
        raise UserError(f"train setting lr={cfg.lr} must be positive")
    if cfg.margin is not None and cfg.margin < 0:
        raise UserError(f"train setting margin={cfg.margin} must be >= 0")


# ---------------------------------------------------------------- processes (torchrun / DDP)

@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    device: str = "auto"
    started: bool = False  # we initialised the process group (and destroy it at the end)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def mean(self, x: float) -> float:
        if self.world == 1:
            return x
        t = torch.tensor([x], dtype=torch.float64, device=_collective_device())
        torch.distributed.all_reduce(t)
        return float(t.item()) / self.world

    def gather(self, obj):
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def broadcast(self, obj):
        if self.world == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]


def _collective_device() -> torch.device:
    dist = torch.distributed
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init_dist(device: str) -> Dist:
    """Join the torchrun process group when WORLD_SIZE > 1 (nccl on CUDA, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(device=device)
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local)
    started = False
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
        started = True
    return Dist(rank=rank, world=world, device=f"cuda:{local}" if cuda else "cpu", started=started)


def shard_order(n: int, seed: int, epoch: int, rank: int = 0, world: int = 1) -> np.ndarray:
    """This rank's triplet order in `epoch`: a seeded permutation, padded cyclically to a multiple
    of `world` (as torch's DistributedSampler does) and dealt out round-robin."""
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    per_rank = math.ceil(n / world)
    return np.resize(perm, per_rank * world)[rank::world]


# ---------------------------------------------------------------- data

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
    """Train and val triplets as dicts of lists: ids (ai, pi, ni), texts (a, p, n) and kind;
    plus counts of what was dropped."""
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
        if split == SPLIT_VAL and len(part) > val_max:
            pick = np.sort(np.random.default_rng(seed).permutation(len(part))[:val_max])
            part = part.iloc[pick]
        d = {"ai": part["anchor_id"].tolist(), "pi": part["positive_id"].tolist(),
             "ni": part["negative_id"].tolist(), "kind": part["negative_kind"].fillna("").tolist()}
        d.update(a=[texts[i] for i in d["ai"]], p=[texts[i] for i in d["pi"]], n=[texts[i] for i in d["ni"]])
        splits[split] = d
        counts[f"{split}_triplets"] = int(len(part))
    return splits[SPLIT_TRAIN], splits[SPLIT_VAL], counts


def _data_digest(data: dict) -> str:
    h = hashlib.sha256()
    for row in zip(data["ai"], data["pi"], data["ni"]):
        h.update("\t".join(row).encode() + b"\n")
    return h.hexdigest()[:16]


def triplet_vectors(enc: Encoder, a: list[str], p: list[str], n: list[str]):
    """One forward pass over anchors, positives and negatives together (one padded batch)."""
    vec = enc.embed_texts(a + p + n)
    k = len(a)
    return vec[:k], vec[k:2 * k], vec[2 * k:]


# ---------------------------------------------------------------- validation

def retrieval_metrics(vectors: torch.Tensor, index: dict[str, int], data: dict, normalize: bool) -> dict:
    """Rank each validation (anchor, positive) pair's positive among all validation candidates
    (every positive and negative paper) by L2 distance; the anchor itself and the anchor's other
    positives are left out of its list (filtered ranking). MRR and recall@1 / @5."""
    v = torch.nn.functional.normalize(vectors, dim=-1) if normalize else vectors
    cand_ids = sorted(set(data["pi"]) | set(data["ni"]))
    if not cand_ids:
        return {}
    cand = torch.tensor([index[i] for i in cand_ids])
    col = {pid: j for j, pid in enumerate(cand_ids)}
    positives: dict[str, set[str]] = {}
    for a, p in zip(data["ai"], data["pi"]):
        positives.setdefault(a, set()).add(p)
    pairs = sorted({(a, p) for a, p in zip(data["ai"], data["pi"])})
    anchors = sorted(positives)
    dist = torch.cdist(v[[index[a] for a in anchors]], v[cand])  # anchors x candidates
    row = {a: i for i, a in enumerate(anchors)}
    ranks = []
    for a, p in pairs:
        d = dist[row[a]].clone()
        skip = [col[x] for x in positives[a] - {p}] + ([col[a]] if a in col else [])
        d[skip] = float("inf")
        ranks.append(1 + int((d < d[col[p]]).sum()))
    r = np.asarray(ranks, float)
    return {"pairs": len(pairs), "candidates": len(cand_ids), "mrr": float((1 / r).mean()),
            "recall@1": float((r <= 1).mean()), "recall@5": float((r <= 5).mean())}


@torch.inference_mode()
def evaluate(enc: Encoder, data: dict, loss_fn: TripletLoss, batch_size: int = 32) -> dict:
    """Validation loss, triplet accuracy (d(a,p) < d(a,n)) overall and per negative kind, and the
    retrieval metrics. Each distinct paper is embedded once."""
    n = len(data["a"])
    if n == 0:
        return {"n": 0, "loss": None, "accuracy": None}
    texts: dict[str, str] = {}
    for ids, txt in ((data["ai"], data["a"]), (data["pi"], data["p"]), (data["ni"], data["n"])):
        texts.update(zip(ids, txt))
    order = list(texts)
    index = {pid: i for i, pid in enumerate(order)}
    vec = torch.from_numpy(enc.encode([texts[i] for i in order], batch_size))
    va, vp, vn = (vec[[index[i] for i in data[k]]] for k in ("ai", "pi", "ni"))
    dp, dn = triplet_distances(va, vp, vn, loss_fn.normalize)
    correct = (dp < dn).numpy()
    out = {"n": n, "loss": float(loss_fn(va, vp, vn)), "accuracy": float(correct.mean())}
    kinds = np.asarray(data["kind"])
    for kind in sorted(set(data["kind"]) - {""}):
        out[f"accuracy_{kind}"] = float(correct[kinds == kind].mean())
    out.update(retrieval_metrics(vec, index, data, loss_fn.normalize))
    return out


# ---------------------------------------------------------------- checkpoints

def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def _checkpoint_dirs(root: Path) -> list[tuple[int, Path]]:
    out = []
    for p in (root / CHECKPOINTS).glob("step-*"):
        if (p / "state.pt").is_file() and (p / "meta.json").is_file() and p.name[5:].isdigit():
            out.append((int(p.name[5:]), p))
    return sorted(out)


def find_checkpoint(root: Path, fingerprint: str) -> Path | None:
    """Newest complete checkpoint written with the same settings, data and world size."""
    for _, path in reversed(_checkpoint_dirs(root)):
        try:
            if json.loads((path / "meta.json").read_text()).get("fingerprint") == fingerprint:
                return path
        except (OSError, json.JSONDecodeError):
            continue
    return None


def save_checkpoint(root: Path, step: int, state: dict, meta: dict, keep: int) -> Path:
    """Write checkpoints/step-N atomically (temporary directory, then rename); keep the newest `keep`."""
    base = root / CHECKPOINTS
    base.mkdir(parents=True, exist_ok=True)
    dest = base / f"step-{step:08d}"
    tmp = base / f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    torch.save(state, tmp / "state.pt")
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
    replace_dir(tmp, dest)
    for _, old in _checkpoint_dirs(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return dest


# ---------------------------------------------------------------- outputs

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


def read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
    return out


def plot_curve(log: list[dict], dest: Path) -> Path:
    """Training loss per logged step and validation loss / accuracy / MRR per evaluation (PNG)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state

    tr = [r for r in log if r.get("kind") == "train"]
    va = [r for r in log if r.get("kind") == "val" and r.get("val_loss") is not None]
    fig = Figure(figsize=(8, 4.5), dpi=100)
    ax = fig.subplots()
    if tr:
        ax.plot([r["step"] for r in tr], [r["loss"] for r in tr], label="train loss", color="tab:blue")
    if va:
        ax.plot([r["step"] for r in va], [r["val_loss"] for r in va], "o-", label="validation loss",
                color="tab:orange")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("triplet loss")
    ax2 = ax.twinx()
    for key, style in (("val_accuracy", "s--"), ("val_mrr", "^:")):
        pts = [(r["step"], r[key]) for r in va if r.get(key) is not None]
        if pts:
            ax2.plot(*zip(*pts), style, label=key.replace("val_", "validation "), color="tab:green"
                     if key == "val_accuracy" else "tab:red")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("accuracy / MRR")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper right", fontsize=8)
    ax.set_title("Triplet fine-tuning")
    fig.tight_layout()
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    fig.savefig(tmp, format="png")
    os.replace(tmp, dest)
    return dest


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """No weight decay on biases and LayerNorm weights (the usual BERT fine-tuning groups)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


# ---------------------------------------------------------------- the job

def run_train(cfg: TrainConfig, layout: RunLayout, encoder: Encoder | None = None,
              after_step: Callable[[int], None] | None = None) -> dict:
    """Train on the run's triplets and save the model to layout.model_dir. Returns a summary.

    Under torchrun every process calls this; rank 0 writes. `after_step(step)` is a test hook
    called after each optimizer step (and its checkpoint)."""
    from transformers import get_linear_schedule_with_warmup

    _check(cfg)
    t_start = time.perf_counter()
    if cfg.margin is None:
        found = read_json_metadata(layout.table("triplets"), TRIPLETS_META_KEY).get("margin")
        cfg = dataclasses.replace(cfg, margin=float(found) if found is not None else 1.0)
    dist = init_dist(cfg.device)
    try:
        torch.manual_seed(cfg.seed + dist.rank)
        enc = encoder or load_encoder(cfg.model, cfg.pooling, cfg.max_length, dist.device)
        if enc.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        train, val, counts = load_triplets(layout, enc.sep, cfg.val_max, cfg.seed)
        n_train = len(train["a"])
        if n_train == 0:
            raise UserError(f"no usable train triplets in {layout.table('triplets')} "
                            f"({counts['triplets_total']} rows, {counts['dropped_no_text']} without paper text); "
                            "run the importance stage on a corpus with resolved references")
        return _train(cfg, layout, enc, dist, train, val, counts, after_step, t_start,
                      get_linear_schedule_with_warmup)
    finally:
        if dist.started:
            torch.distributed.destroy_process_group()


def _train(cfg, layout, enc, dist, train, val, counts, after_step, t_start, make_schedule) -> dict:
    n_train = len(train["a"])
    per_rank = math.ceil(n_train / dist.world)
    micro_per_epoch = math.ceil(per_rank / cfg.batch_size)
    steps_per_epoch = math.ceil(micro_per_epoch / cfg.grad_accum)
    total = cfg.max_steps or cfg.epochs * steps_per_epoch
    fingerprint = hashlib.sha256(json.dumps(
        [{k: getattr(cfg, k) for k in TRAJECTORY_FIELDS}, str(enc.path), enc.max_length,
         dist.world, _data_digest(train)], default=str).encode()).hexdigest()[:16]
    if dist.main:
        _say(f"train: {n_train} train / {len(val['a'])} val triplets, {total} steps "
             f"({steps_per_epoch}/epoch) of {cfg.batch_size}x{cfg.grad_accum}x{dist.world} on {enc.device} "
             f"({enc.path.name}, pooling={enc.pooling}, max_length={enc.max_length}, margin={cfg.margin})")

    model = enc.model
    # The pooler head is not part of the loss: frozen so DDP sees no parameters without gradients.
    pooler = getattr(model, "pooler", None)
    if isinstance(pooler, torch.nn.Module):
        pooler.requires_grad_(False)
    loss_fn = TripletLoss(cfg.margin, cfg.normalize)
    opt = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr)
    sched = make_schedule(opt, int(cfg.warmup_ratio * total), total)

    # Resume: rank 0 picks the checkpoint, every rank loads it.
    ckpt = find_checkpoint(layout.root, fingerprint) if cfg.resume and dist.main else None
    if dist.main and not cfg.resume and (layout.root / CHECKPOINTS).exists():
        shutil.rmtree(layout.root / CHECKPOINTS)
    if dist.main and cfg.resume and ckpt is None and _checkpoint_dirs(layout.root):
        _say("train: ignoring checkpoints written with other settings or data; starting afresh")
        shutil.rmtree(layout.root / CHECKPOINTS)
    ckpt = dist.broadcast(str(ckpt) if ckpt else None)
    start, seconds_before, log = 0, 0.0, []
    if ckpt:
        # CPU first: RNG states must stay CPU tensors; load_state_dict copies weights to the device.
        state = torch.load(Path(ckpt) / "state.pt", map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        _set_rng_state(state["rng"][dist.rank])
        start, seconds_before = int(state["step"]), float(state["seconds"])
        del state
        log = [r for r in read_log(layout.train_log) if r.get("step", 0) <= start]
        if dist.main:
            _say(f"train: resumed from {ckpt} (step {start}/{total})")

    train_enc = enc
    ddp = None
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, device_ids=[enc.device.index] if enc.device.type == "cuda" else None)
        train_enc = dataclasses.replace(enc, model=ddp)

    log_f = None
    if dist.main:
        layout.root.mkdir(parents=True, exist_ok=True)
        tmp = layout.train_log.with_name(f".{layout.train_log.name}.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in log))
        os.replace(tmp, layout.train_log)  # a resumed log keeps only what the checkpoint covers
        log_f = layout.train_log.open("a")

    def write(rec: dict) -> None:
        log.append(rec)
        if log_f:
            log_f.write(json.dumps(rec) + "\n")
            log_f.flush()

    def validate(step: int) -> dict | None:
        res = None
        if dist.main:
            res = evaluate(enc, val, loss_fn, cfg.eval_batch_size)
            write({"kind": "val", "step": step, "epoch": round(step / steps_per_epoch, 4),
                   **{f"val_{k}": v for k, v in res.items()}})
            _say(f"train: validation at step {step}: {json.dumps(res)}")
        dist.barrier()
        return res

    orders: dict[int, np.ndarray] = {}
    t0 = time.perf_counter()
    window, window_t, losses = [], t0, []
    try:
        if start == 0:
            validate(0)
        model.train()
        for step in range(start, total):
            epoch, j = divmod(step, steps_per_epoch)
            if epoch not in orders:
                orders = {epoch: shard_order(n_train, cfg.seed, epoch, dist.rank, dist.world)}
            order = orders[epoch]
            micro = range(j * cfg.grad_accum, min((j + 1) * cfg.grad_accum, micro_per_epoch))
            opt.zero_grad(set_to_none=True)
            step_loss = 0.0
            for k, m in enumerate(micro):
                idx = order[m * cfg.batch_size:(m + 1) * cfg.batch_size]
                # Gradients are all-reduced once per optimizer step, on the last micro-batch.
                sync = ddp.no_sync() if ddp is not None and k < len(micro) - 1 else contextlib.nullcontext()
                with sync:
                    va, vp, vn = triplet_vectors(train_enc, [train["a"][i] for i in idx],
                                                 [train["p"][i] for i in idx], [train["n"][i] for i in idx])
                    loss = loss_fn(va, vp, vn) / len(micro)
                    loss.backward()
                step_loss += float(loss.detach())
            if cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            lr = sched.get_last_lr()[0]
            opt.step()
            sched.step()
            done = step + 1
            step_loss = dist.mean(step_loss)
            window.append(step_loss)
            losses.append(step_loss)
            if done % cfg.log_every == 0 or done == total:
                now = time.perf_counter()
                rec = {"kind": "train", "step": done, "epoch": round(done / steps_per_epoch, 4),
                       "loss": float(np.mean(window)), "lr": lr,
                       "seconds": round(seconds_before + now - t0, 3),
                       "seconds_per_step": round((now - window_t) / len(window), 4)}
                write(rec)
                if dist.main:
                    eta = (now - t0) / (done - start) * (total - done)
                    _say(f"train: step {done}/{total} loss {rec['loss']:.4f} lr {lr:.2e} "
                         f"{rec['seconds_per_step']:.2f} s/step ETA {eta:.0f}s")
                window, window_t = [], now
            if done % steps_per_epoch == 0 or done == total or (cfg.eval_every and done % cfg.eval_every == 0):
                validate(done)
                model.train()
            if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < total:
                rngs = dist.gather(_rng_state())
                if dist.main:
                    state = {"step": done, "model": model.state_dict(), "optimizer": opt.state_dict(),
                             "scheduler": sched.state_dict(), "rng": rngs,
                             "seconds": seconds_before + time.perf_counter() - t0}
                    path = save_checkpoint(layout.root, done, state, {
                        "fingerprint": fingerprint, "step": done, "total": total,
                        "epoch": done // steps_per_epoch, "next_micro_batch": (done % steps_per_epoch) * cfg.grad_accum,
                        "world_size": dist.world, "config": dataclasses.asdict(cfg)}, cfg.keep_checkpoints)
                    _say(f"train: checkpoint {path}")
                dist.barrier()
            if after_step is not None:
                after_step(done)
    finally:
        if log_f:
            log_f.close()
    train_seconds = time.perf_counter() - t0
    model.eval()

    vals = [r for r in log if r.get("kind") == "val"]
    strip = lambda r: {k[4:]: v for k, v in r.items() if k.startswith("val_")}  # noqa: E731
    val_before = strip(vals[0]) if vals and vals[0]["step"] == 0 else None
    val_after = strip(vals[-1]) if vals and vals[-1]["step"] == total else None
    if dist.main:
        meta = {"pooling": enc.pooling, "base_model": str(enc.path), "steps": total,
                "max_length": enc.max_length, "world_size": dist.world, "config": dataclasses.asdict(cfg),
                "val_before": val_before, "val_after": val_after, **counts}
        save_model(enc, layout.model_dir, meta)
        plot_curve(log, layout.root / CURVE_PNG)
        if not cfg.keep_final_checkpoint and (layout.root / CHECKPOINTS).exists():
            shutil.rmtree(layout.root / CHECKPOINTS)
    dist.barrier()
    train_losses = [r["loss"] for r in log if r.get("kind") == "train"]
    return {"model_dir": str(layout.model_dir), "steps": total, "steps_per_epoch": steps_per_epoch,
            "resumed_from_step": start, "world_size": dist.world, "train_triplets": n_train,
            "margin": cfg.margin, **counts,
            "final_loss": losses[-1] if losses else (train_losses[-1] if train_losses else None),
            "train_seconds": round(train_seconds, 2),
            "seconds_per_step": round(train_seconds / max(total - start, 1), 4),
            "val_before": val_before, "val_after": val_after,
            "curve_png": str(layout.root / CURVE_PNG),
            "seconds": round(time.perf_counter() - t_start, 2)}
