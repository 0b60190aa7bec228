"""Fine-tune an encoder on importance-aware triplets (METHODS.md §4) with a pluggable objective.

The loop here is the same for every objective (encoders.objectives): it reads the objective's input
(`triplets` split=train / val joined to `papers` text, tokenized once by rank 0 into memory-mapped
Arrow files: encoders.training.triplet_table), takes each rank's micro-batches from a DataLoader
(encoders.training.feed), asks the objective for each micro-batch's loss, and owns the optimizer,
schedule, processes, checkpoints (encoders.training.checkpoints) and export (encoders.training.export). Step losses
stay on the device until a log line (one synchronisation per `log_every` steps). The default
objective is the triplet margin loss on L2 distance. Defaults are the seed recipe: AdamW lr 2e-5,
batch 8 x accumulation 4, 2 epochs, 10% linear warm-up then linear decay, max_length 256; a budget
(max_tokens, max_hours: encoders.training.budget) fixes fewer steps before the first, on a seeded
sample of the triplets when that is less than one pass. On CUDA:
bf16 autocast, SDPA attention (chosen at run time by encoders.model) and fused AdamW; opt-in
torch.compile, gradient checkpointing and length buckets. Several processes: `torchrun
--nproc_per_node=N -- jobs/train.py --run-dir ...` (DistributedDataParallel; nccl on CUDA, gloo on
CPU); each rank takes a disjoint slice of every epoch's seeded permutation; rank 0 alone writes
log, checkpoints, model.

Checkpoints every `checkpoint_every` optimizer steps. A re-run with the same settings (objective
included), data and number of processes resumes from the newest one and reaches the same final
weights as an uninterrupted run (bit-identical on CPU); checkpoints written otherwise are discarded,
and all are removed once the model is saved. Validation (the objective's: its loss, triplet
accuracy overall / hard / easy under its score, and retrieval of each anchor's positive among all
validation candidates: MRR, recall@1/5) runs before training, at the end of every epoch and at the
end, into the JSON-lines log; the loss curve goes to `<run>/train_curve.png`.

Why an own loop rather than sentence-transformers' trainer: that trainer is the Hugging Face
Trainer, which needs `accelerate` (not installed here) and resumes at its own granularity; the
product-specific parts (raw-vector L2 triplet loss, hard/easy and retrieval metrics, exact resume
with a deterministic per-rank data order) would each need overriding. The loop is ~150 lines of
plain torch; the losses, scheduler and model I/O come from torch / transformers.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from sciencemap.layout import RunLayout
from sciencemap.runtime import Dist, UserError, init_dist, say
from sciencemap.storage import sweep_temporaries, write_text_atomic

from encoders.training.checkpoints import (checkpoint_dirs, find_checkpoint, load_checkpoint, remove_checkpoints,
                                           rng_state, save_checkpoint, set_rng_state)
from encoders.config import TrainConfig
from encoders.training.export import plot_curve, save_model
from encoders.model import Encoder, load_encoder
from encoders.objectives.base import Objective
from encoders.objectives.registry import get_objective
from encoders.training.triplet_table import TripletTokens
from encoders.training.budget import (PROBE_STEPS, WALL_CLOCK_SLACK, budget_steps, check_budget, has_budget,
                                      plan_budget, seen)
from encoders.training.feed import RankSampler, micro_batches

# Settings that change the training trajectory whatever the objective: a checkpoint is only
# resumed when they, the objective's own settings (Objective.fields), the data and the world size match.
TRAJECTORY_FIELDS = ("model", "pooling", "objective", "lr", "weight_decay", "batch_size", "grad_accum",
                     "max_steps", "epochs", "max_tokens", "max_hours", "warmup_ratio", "max_grad_norm", "max_length",
                     "seed", "bucket_tokens")


def _check(cfg: TrainConfig) -> None:
    for name in ("batch_size", "grad_accum", "epochs", "log_every", "val_max", "eval_batch_size",
                 "keep_checkpoints"):
        if getattr(cfg, name) < 1:
            raise UserError(f"train setting {name}={getattr(cfg, name)} must be at least 1")
    for name in ("max_steps", "eval_every", "checkpoint_every", "bucket_tokens"):
        if getattr(cfg, name) < 0:
            raise UserError(f"train setting {name}={getattr(cfg, name)} must be >= 0 (0 = off / full epochs)")
    if not 0 <= cfg.warmup_ratio < 1:
        raise UserError(f"train setting warmup_ratio={cfg.warmup_ratio} must be in [0, 1)")
    if cfg.lr <= 0:
        raise UserError(f"train setting lr={cfg.lr} must be positive")
    check_budget(cfg)


def fingerprint(cfg: TrainConfig, objective: Objective, enc: Encoder, world: int, data_digest: str,
                steps: int) -> str:
    """Identifies a training trajectory: settings (the objective's included), base model, data
    (the train triplets and their order), processes, planned steps (a budget's depend on a measurement)."""
    return hashlib.sha256(json.dumps(
        [{k: getattr(cfg, k) for k in TRAJECTORY_FIELDS}, objective.settings(), str(enc.path), enc.max_length,
         world, data_digest, steps], default=str).encode()).hexdigest()[:16]


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


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """No weight decay on biases and LayerNorm weights (the usual BERT fine-tuning groups)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _optimizer(cfg: TrainConfig, model: torch.nn.Module, device: torch.device, parts=(),
               encoder_lr: float | None = None) -> torch.optim.AdamW:
    """AdamW over the encoder (at `encoder_lr`, None = cfg.lr: an objective's own, Objective.encoder_lr),
    then the objective's trainable `parts` (encoders.objectives.base.Part) in groups of their own, at
    their own learning rate and weight decay."""
    groups = [{**g, "lr": encoder_lr or cfg.lr} for g in param_groups(model, cfg.weight_decay)]
    for part in parts:
        if part.trainable:
            for g in param_groups(part.module, cfg.weight_decay if part.weight_decay is None else part.weight_decay):
                if g["params"]:
                    groups.append({**g, "lr": part.lr or cfg.lr})
    # Fused AdamW on CUDA (one kernel for all parameters); on a CPU the loop's own (today's numbers).
    return torch.optim.AdamW(groups, lr=cfg.lr, **({"fused": True} if device.type == "cuda" else {}))


def _prepare_model(cfg: TrainConfig, model: torch.nn.Module) -> None:
    # The pooler head is not part of the loss: frozen so DDP sees no parameters without gradients.
    pooler = getattr(model, "pooler", None)
    if isinstance(pooler, torch.nn.Module):
        pooler.requires_grad_(False)
    if cfg.gradient_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):   # transformers >= 5.x's name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(cfg: TrainConfig, objective: Objective, enc: Encoder, dist: Dist, probe: TripletTokens) -> float:
    """Seconds per optimizer step on `probe` (the slowest rank's): PROBE_STEPS real steps after one
    untimed, every rank at once but without DDP's all-reduce or torch.compile (the hard stop covers
    a slower run). The steps are thrown away (weights, RNG restored), not kept as the first training steps: their
    learning rate would need the step count they serve to plan."""
    model = enc.model
    parts = list(objective.parts.values())   # timed with their optimizer step too (FLeW: two more encoders)
    modules = [model] + [p.module for p in parts]
    start_weights = [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in modules]
    start_rng = rng_state()
    opt = _optimizer(cfg, model, enc.device, parts)
    sampler = RankSampler(len(probe.train["a"]), cfg.seed, dist.rank, dist.world)
    pad_id = enc.tokenizer.pad_token_id or 0
    collate = objective.collate(probe, pad_id, cfg.bucket_tokens)

    def feed():   # as many passes over the probe as the timed steps need
        for epoch in range(PROBE_STEPS + 1):
            yield from micro_batches(probe, sampler, epoch, cfg.batch_size, 0, pad_id, 0,
                                     pin=False, bucket_tokens=cfg.bucket_tokens, collate=collate)

    batches = feed()
    was_training = model.training
    model.train()
    for step in range(PROBE_STEPS + 1):
        if step == 1:
            _sync(enc.device)
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for _ in range(cfg.grad_accum):
            with _memory_hint(cfg, enc.device):
                (objective.batch_loss(enc, next(batches)) / cfg.grad_accum).backward()
        if cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
    _sync(enc.device)
    seconds = (time.perf_counter() - t0) / PROBE_STEPS
    del opt
    for m, w in zip(modules, start_weights):
        m.zero_grad(set_to_none=True)
        m.load_state_dict(w)
    model.train(was_training)
    set_rng_state(start_rng)
    return max(dist.gather(seconds))


def _token_data(objective: Objective, layout: RunLayout, enc: Encoder, dist: Dist, sample_triplets: int):
    """What the objective trains on (by default the run's triplets, or a budget's sample of them),
    tokenized once (rank 0 builds or reuses its item store), memory-mapped on every rank."""
    answer = None
    if dist.main:
        t0 = time.perf_counter()
        try:
            folder, built = objective.prepare_data(layout, enc, sample_triplets)
            answer = {"folder": str(folder)}
            say(f"train: {'tokenized' if built else 'reusing'} triplets in {folder} "
                f"({time.perf_counter() - t0:.1f}s)")
        except UserError as e:
            answer = {"error": str(e)}
    answer = dist.broadcast(answer)
    if "error" in answer:
        raise UserError(answer["error"])
    return objective.open_data(Path(answer["folder"]))


def loader_workers(cfg: TrainConfig, device: torch.device) -> int:
    return cfg.loader_workers if cfg.loader_workers >= 0 else (4 if device.type == "cuda" else 0)


@contextlib.contextmanager
def _memory_hint(cfg: TrainConfig, device: torch.device):
    """Out of memory in a micro-batch's forward or backward is a UserError naming the batch and the
    settings that shrink it; other errors pass unchanged."""
    try:
        yield
    except torch.OutOfMemoryError as e:
        raise UserError(f"out of {'GPU' if device.type == 'cuda' else 'CPU'} memory training a micro-batch of "
                        f"{cfg.batch_size} triplets (max_length {cfg.max_length}) on {device}; lower the train "
                        "setting batch_size (raise grad_accum to keep the effective batch) or set "
                        "gradient_checkpointing (--batch-size, --grad-accum, --gradient-checkpointing)") from e


# ---------------------------------------------------------------- the job

def run_train(cfg: TrainConfig, layout: RunLayout, encoder: Encoder | None = None,
              after_step: Callable[[int], None] | None = None) -> dict:
    """Train on the run's triplets with cfg.objective and save the model to layout.model_dir.
    Returns a summary.

    Under torchrun every process calls this; rank 0 writes. `after_step(step)` is a test hook
    called after each optimizer step (and its checkpoint)."""
    from transformers import get_linear_schedule_with_warmup

    _check(cfg)
    objective_cls = get_objective(cfg.objective)
    objective_cls.check(cfg)
    t_start = time.perf_counter()
    cfg = objective_cls.resolve(cfg, layout)
    objective = objective_cls(cfg)
    dist = init_dist(cfg.device)
    try:
        torch.manual_seed(cfg.seed + dist.rank)
        enc = encoder or load_encoder(cfg.model, cfg.pooling, cfg.max_length, dist.device)
        if enc.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        _prepare_model(cfg, enc.model)
        objective.set_up(enc)
        plan = None
        if has_budget(cfg):
            # what the plan depends on: the trajectory, and what sets the speed of a step
            speed = {k: getattr(cfg, k) for k in (*TRAJECTORY_FIELDS, "compile", "gradient_checkpointing")}
            plan = plan_budget(cfg, layout, enc, dist, {**speed, "device": str(enc.device)},
                               lambda probe: time_steps(cfg, objective, enc, dist, probe), objective)
        data = _token_data(objective, layout, enc, dist, plan["sample_triplets"] if plan else 0)
        n_train = len(data.train["a"])
        if n_train == 0:
            counts = data.counts
            raise UserError(f"no usable train triplets in {layout.table('triplets')} "
                            f"({counts['triplets_total']} rows, {counts['dropped_no_text']} without paper text); "
                            "run the importance stage on a corpus with resolved references")
        run = _Run(cfg, objective, layout, enc, dist, data, plan, t_start)
        run.set_up(get_linear_schedule_with_warmup)
        return run.run(after_step)
    finally:
        dist.close()


def _plan_steps(cfg: TrainConfig, plan: dict | None, data: TripletTokens, world: int,
                steps_per_epoch: int) -> dict:
    """The planned steps and what set them: the epochs / max_steps plan (over the whole table, also
    when the data is a budget's sample), or a budget that allows fewer."""
    sampled = plan is not None and plan["sample_triplets"]
    by = {"max_steps" if cfg.max_steps else "epochs":
          plan["steps_by_epochs"] if sampled else cfg.max_steps or cfg.epochs * steps_per_epoch}
    if plan:
        by.update(budget_steps(cfg, plan, data, world, steps_per_epoch))
    reason = min(by, key=by.get)   # the first of equals: the epochs plan when a budget allows as much
    out = {"planned_steps": by[reason], "planned_by": reason, "steps_by": by}
    if plan:
        out.update({k: plan[k] for k in ("train_triplets_available", "sample_triplets", "probe_triplets",
                                         "probe_tokens_per_paper", "seconds_per_step") if k in plan},
                   tokens_per_step=round(plan["triplets_per_step"] * 3 * data.mean_paper_tokens(), 1))
    return out


class _Run:
    """One training run of the loop, in the order it happens: `set_up` (optimizer over the encoder
    and the objective's trainable parts, schedule, resume from a checkpoint, processes), then per
    optimizer step `step`, `validate` and `checkpoint`, and `finish` (model card and export)."""

    def __init__(self, cfg: TrainConfig, objective: Objective, layout: RunLayout, enc: Encoder, dist: Dist,
                 data: TripletTokens, plan: dict | None, t_start: float):
        self.cfg, self.objective, self.layout, self.enc, self.dist, self.data = cfg, objective, layout, enc, dist, data
        self.t_start = t_start
        self.n_train, self.counts = len(data.train["a"]), data.counts
        per_rank = math.ceil(self.n_train / dist.world)
        self.micro_per_epoch = math.ceil(per_rank / cfg.batch_size)
        self.steps_per_epoch = math.ceil(self.micro_per_epoch / cfg.grad_accum)
        self.steps_plan = _plan_steps(cfg, plan, data, dist.world, self.steps_per_epoch)
        self.total = self.steps_plan["planned_steps"]
        # the hard stop behind a max_hours plan: the loop's seconds (over resumes) well past the budget
        self.stop_after = cfg.max_hours * 3600 * WALL_CLOCK_SLACK if cfg.max_hours else math.inf
        self.trajectory = fingerprint(cfg, objective, enc, dist.world, data.digest, self.total)
        self.log: list[dict] = []
        self.log_f = None
        self.start, self.seconds_before = 0, 0.0
        self.ddp: list = []

    # -- set-up
    def trained_parameters(self) -> list[torch.nn.Parameter]:
        """What the optimizer steps and the clipping bounds: the encoder's, then the parts'."""
        return [*self.enc.model.parameters(),
                *(q for part in self.objective.parts.values() if part.trainable for q in part.module.parameters())]

    def set_up(self, make_schedule) -> None:
        cfg, dist, enc = self.cfg, self.dist, self.enc
        if dist.main:
            say(f"train: {self.n_train} train / {len(self.data.val['a'])} val triplets, {self.total} steps "
                f"({self.steps_per_epoch}/epoch; set by {self.steps_plan['planned_by']}) of {cfg.batch_size}x"
                f"{cfg.grad_accum}x{dist.world} on {enc.device} ({enc.path.name}, pooling={enc.pooling}, "
                f"max_length={enc.max_length}, objective={self.objective.name} "
                f"{json.dumps(self.objective.settings())})")
        self.opt = _optimizer(cfg, enc.model, enc.device, self.objective.parts.values(), self.objective.encoder_lr())
        self.sched = make_schedule(self.opt, int(cfg.warmup_ratio * self.total), self.total)
        self._resume()
        self.train_enc = enc
        if dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [enc.device.index] if enc.device.type == "cuda" else None
            wrapped = DistributedDataParallel(enc.model, device_ids=ids)
            self.ddp = [wrapped]
            self.train_enc = dataclasses.replace(enc, model=wrapped)
            for name, part in self.objective.parts.items():
                if part.trainable:
                    self.objective._running[name] = DistributedDataParallel(part.module, device_ids=ids)
                    self.ddp.append(self.objective._running[name])
        if cfg.compile:   # opt-in: the compiled model trains; `model` (the same parameters) is saved
            self.train_enc = dataclasses.replace(self.train_enc, model=torch.compile(self.train_enc.model, dynamic=True))
        if dist.main:
            self.layout.root.mkdir(parents=True, exist_ok=True)
            # A resumed log keeps only what the checkpoint covers.
            write_text_atomic(self.layout.train_log, "".join(json.dumps(r) + "\n" for r in self.log))
            self.log_f = self.layout.train_log.open("a")
        self.val = self.data.split_rows("val") if dist.main else None
        self.sampler = RankSampler(self.n_train, cfg.seed, dist.rank, dist.world)
        self.workers = loader_workers(cfg, enc.device)
        self.pad_id = enc.tokenizer.pad_token_id or 0

    def _resume(self) -> None:
        """Rank 0 picks the newest checkpoint of this trajectory, every rank loads it."""
        cfg, dist, ckpt_dir = self.cfg, self.dist, self.layout.checkpoints_dir
        if dist.main and ckpt_dir.is_dir():
            sweep_temporaries(ckpt_dir)  # what a killed checkpoint write left
        ckpt = find_checkpoint(ckpt_dir, self.trajectory) if cfg.resume and dist.main else None
        if dist.main and not cfg.resume:
            remove_checkpoints(ckpt_dir)
        if dist.main and cfg.resume and ckpt is None and checkpoint_dirs(ckpt_dir):
            say("train: ignoring checkpoints written with other settings or data; starting afresh")
            remove_checkpoints(ckpt_dir)
        ckpt = dist.broadcast(str(ckpt) if ckpt else None)
        if not ckpt:
            return
        state = load_checkpoint(Path(ckpt))
        self.enc.model.load_state_dict(state["model"])
        for name, part in self.objective.parts.items():
            part.module.load_state_dict(state["parts"][name])
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"][dist.rank])
        self.start, self.seconds_before = int(state["step"]), float(state["seconds"])
        del state
        self.log = [r for r in read_log(self.layout.train_log) if r.get("step", 0) <= self.start]
        if dist.main:
            say(f"train: resumed from {ckpt} (step {self.start}/{self.total})")

    # -- the loop's parts
    def write(self, rec: dict) -> None:
        self.log.append(rec)
        if self.log_f:
            self.log_f.write(json.dumps(rec) + "\n")
            self.log_f.flush()

    def validate(self, step: int) -> dict | None:
        res = None
        if self.dist.main:
            res = self.objective.validate(self.enc, self.val, self.cfg.eval_batch_size)
            self.write({"kind": "val", "step": step, "epoch": round(step / self.steps_per_epoch, 4),
                        **{f"val_{k}": v for k, v in res.items()}})
            say(f"train: validation at step {step}: {json.dumps(res)}")
        self.dist.barrier()
        return res

    def feed(self, epoch: int, first_micro: int):
        """An epoch's micro-batches from `first_micro` on (the resumed position)."""
        return micro_batches(self.data, self.sampler, epoch, self.cfg.batch_size, first_micro, self.pad_id,
                             self.workers, pin=self.enc.device.type == "cuda", bucket_tokens=self.cfg.bucket_tokens,
                             collate=self.objective.collate(self.data, self.pad_id, self.cfg.bucket_tokens))

    def _no_sync(self, last: bool):
        """Gradients are all-reduced once per optimizer step, on the last micro-batch."""
        stack = contextlib.ExitStack()
        if not last:
            for d in self.ddp:
                stack.enter_context(d.no_sync())
        return stack

    def step(self, step: int, feed, n_micro: int) -> tuple[torch.Tensor, float]:
        """One optimizer step over `n_micro` micro-batches of `feed`: the summed loss (on the
        device, float64) and the learning rate it ran at."""
        cfg, enc = self.cfg, self.enc
        self.opt.zero_grad(set_to_none=True)
        step_loss = torch.zeros((), dtype=torch.float64, device=enc.device)
        self.objective.step_now = step   # what an objective draws per step (SIGReg's slices) follows it, also on resume
        for k in range(n_micro):
            batch = next(feed)
            with self._no_sync(k == n_micro - 1), _memory_hint(cfg, enc.device):
                loss = self.objective.batch_loss(self.train_enc, batch) / n_micro
                loss.backward()
            step_loss += loss.detach().double()
        if cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.trained_parameters(), cfg.max_grad_norm)
        lr = self.sched.get_last_lr()[0]
        self.opt.step()
        self.sched.step()
        self.objective.after_step(enc, step + 1, self.total)
        return step_loss, lr

    def checkpoint(self, done: int) -> None:
        rngs = self.dist.gather(rng_state())
        if self.dist.main:
            state = {"step": done, "model": self.enc.model.state_dict(), "optimizer": self.opt.state_dict(),
                     "scheduler": self.sched.state_dict(), "rng": rngs,
                     "seconds": self.seconds_before + time.perf_counter() - self.t0}
            if self.objective.parts:
                state["parts"] = {name: part.module.state_dict() for name, part in self.objective.parts.items()}
            cfg, spe = self.cfg, self.steps_per_epoch
            path = save_checkpoint(self.layout.checkpoints_dir, done, state, {
                "fingerprint": self.trajectory, "step": done, "total": self.total,
                "epoch": done // spe, "next_micro_batch": (done % spe) * cfg.grad_accum,
                "world_size": self.dist.world, "config": dataclasses.asdict(cfg)}, cfg.keep_checkpoints)
            say(f"train: checkpoint {path}")
        self.dist.barrier()

    # -- the loop
    def run(self, after_step) -> dict:
        cfg, dist, total, spe = self.cfg, self.dist, self.total, self.steps_per_epoch
        model = self.enc.model
        self.t0 = t0 = time.perf_counter()
        # Step losses stay on the device (float64) until a log line: no synchronisation per step.
        window, window_t, self.last_loss = [], t0, None
        done, budget_stopped, feed, feed_epoch = self.start, False, None, None
        try:
            if self.start == 0:
                self.write({"kind": "plan", "step": 0, **self.steps_plan})
                self.validate(0)
            model.train()
            for step in range(self.start, total):
                epoch, j = divmod(step, spe)
                if feed_epoch != epoch:
                    feed, feed_epoch = self.feed(epoch, j * cfg.grad_accum), epoch
                n_micro = min((j + 1) * cfg.grad_accum, self.micro_per_epoch) - j * cfg.grad_accum
                step_loss, lr = self.step(step, feed, n_micro)
                done = step + 1
                window.append(step_loss)
                if self.stop_after < math.inf and done < total and done % cfg.log_every == 0:
                    # looked at on log lines (no sync per step); rank 0's clock decides for all ranks
                    budget_stopped = dist.broadcast(self.seconds_before + time.perf_counter() - t0 > self.stop_after)
                last = done == total or budget_stopped
                if done % cfg.log_every == 0 or last:
                    now = time.perf_counter()
                    step_losses = dist.mean(torch.stack(window)).tolist()   # the one sync of the window
                    self.last_loss = step_losses[-1]
                    rec = {"kind": "train", "step": done, "epoch": round(done / spe, 4),
                           "loss": float(np.mean(step_losses)), "lr": lr,
                           "seconds": round(self.seconds_before + now - t0, 3),
                           "seconds_per_step": round((now - window_t) / len(window), 4)}
                    self.write(rec)
                    if dist.main:
                        eta = (now - t0) / (done - self.start) * (total - done)
                        say(f"train: step {done}/{total} loss {rec['loss']:.4f} lr {lr:.2e} "
                            f"{rec['seconds_per_step']:.2f} s/step ETA {eta:.0f}s")
                    window, window_t = [], now
                if done % spe == 0 or last or (cfg.eval_every and done % cfg.eval_every == 0):
                    self.validate(done)
                    model.train()
                if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and not last:
                    self.checkpoint(done)
                if after_step is not None:
                    after_step(done)
                if budget_stopped:
                    say(f"train: max_hours={cfg.max_hours} reached: stopped at step {done} of {total} planned")
                    break
            self.training = {**self.steps_plan, "steps_done": done, "budget_stopped": budget_stopped,
                             "train_triplets": self.n_train, **seen(self.data, cfg, dist.world, done, spe)}
            self.write({"kind": "end", "step": done, **self.training})
        finally:
            if self.log_f:
                self.log_f.close()
        self.done, self.train_seconds = done, time.perf_counter() - t0
        model.eval()
        return self.finish()

    def finish(self) -> dict:
        """Model card, exported model (with the objective's parts), training curve; the summary."""
        cfg, dist, enc, objective, done, log = self.cfg, self.dist, self.enc, self.objective, self.done, self.log
        vals = [r for r in log if r.get("kind") == "val"]
        strip = lambda r: {k[4:]: v for k, v in r.items() if k.startswith("val_")}  # noqa: E731
        val_before = strip(vals[0]) if vals and vals[0]["step"] == 0 else None
        val_after = strip(vals[-1]) if vals and vals[-1]["step"] == done else None
        if dist.main:
            card = {"pooling": enc.pooling, "base_model": str(enc.path), "objective": objective.card(), "steps": done,
                    "max_length": enc.max_length, "world_size": dist.world, "config": dataclasses.asdict(cfg),
                    "val_before": val_before, "val_after": val_after, "training": self.training, **self.counts}
            save_model(enc, self.layout.model_dir, card,
                       {name: part.module for name, part in objective.parts.items()})
            plot_curve(log, self.layout.train_curve_png, objective.name)
            if not cfg.keep_final_checkpoint:
                remove_checkpoints(self.layout.checkpoints_dir)
        dist.barrier()
        train_losses = [r["loss"] for r in log if r.get("kind") == "train"]
        return {"model_dir": str(self.layout.model_dir), "steps": done, "steps_per_epoch": self.steps_per_epoch,
                "resumed_from_step": self.start, "world_size": dist.world, "train_triplets": self.n_train,
                "device": str(enc.device), "fused_adamw": bool(self.opt.defaults.get("fused")),
                "objective": objective.name, "objective_settings": objective.settings(),
                "margin": cfg.margin, **self.counts,
                "final_loss": self.last_loss if self.last_loss is not None else (train_losses[-1] if train_losses else None),
                "train_seconds": round(self.train_seconds, 2),
                "seconds_per_step": round(self.train_seconds / max(done - self.start, 1), 4), "training": self.training,
                "val_before": val_before, "val_after": val_after,
                "curve_png": str(self.layout.train_curve_png),
                "seconds": round(time.perf_counter() - self.t_start, 2)}
