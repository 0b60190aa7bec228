"""Process plumbing every stage shares: user-facing errors, logging, device and distributed set-up.

Nothing here imports torch or pyspark at module level: `import sciencemap` must stay cheap for the
mapping stages (tests/sciencemap/test_imports.py checks it). The torch-using helpers import it
inside the function.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass


class UserError(Exception):
    """An error the user can fix (bad path, missing Java, wrong schema): printed as one sentence."""


def run_cli(main, argv=None) -> int:
    """Run a job's main(); a UserError becomes one line on stderr and exit code 2, not a traceback.

    A rank started by torch's elastic launcher (torchrun, or `--nproc-per-node`) writes the line to
    the error file the launcher named (TORCHELASTIC_ERROR_FILE) instead: the launcher reports it,
    once for all ranks (sciencemap.launch)."""
    try:
        main(argv)
        return 0
    except UserError as e:
        line = f"error: {e}"
        error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
        if error_file and dist_env()[0] > 1:
            import json
            import time

            with open(error_file, "w") as f:
                json.dump({"message": line, "timestamp": int(time.time())}, f)
        else:
            print(line, file=sys.stderr)
        return 2


PACKAGE_LOGGERS = ("sciencemap", "importance", "encoders", "mapping")


def log_to_stderr() -> None:
    """A job's own log lines (progress with rate, ETA and memory; stage summaries) on stderr.
    Only the project's loggers: the root logger stays quiet, so py4j and numba do not flood it."""
    import logging

    class StderrHandler(logging.StreamHandler):
        """Writes to sys.stderr as it is at each record, not as it was when the handler was made
        (a caller that swaps stderr, as pytest's capture does, may have closed that one)."""

        @property
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, _):
            pass

    for name in PACKAGE_LOGGERS:
        logger = logging.getLogger(name)
        if not logger.handlers:
            handler = StderrHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)


def say(msg: str, rank: int = 0, world: int = 1) -> None:
    """A progress line on stderr (stdout is for the job's JSON summary); rank-tagged under torchrun."""
    prefix = f"[rank {rank}/{world}] " if world > 1 else ""
    print(prefix + msg, file=sys.stderr, flush=True)


def rss_mb() -> float:
    """Peak resident memory of this process in MB: VmHWM from /proc (ru_maxrss of a child process
    starts at its parent's RSS at fork, so it overstates a stage launched from a big parent);
    ru_maxrss (KiB on Linux) where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- processes (torchrun / DDP)

def dist_env() -> tuple[int, int, int]:
    """(world size, rank, local rank) as torchrun sets them; (1, 0, 0) for a plain process."""
    return (int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0")),
            int(os.environ.get("LOCAL_RANK", "0")))


@dataclass
class Dist:
    """This process's place among torchrun's processes, and the few collectives the stages use."""

    rank: int = 0
    world: int = 1
    device: str = "auto"
    started: bool = False  # we initialised the process group (and destroy it in close())

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            import torch

            torch.distributed.barrier()

    def mean(self, x):
        """The ranks' mean of a float, or of a tensor (which stays on its device: CUDA under nccl,
        CPU under gloo, and is not waited for)."""
        if self.world == 1:
            return x
        import torch

        if isinstance(x, torch.Tensor):
            t = x.clone()
            torch.distributed.all_reduce(t)
            return t / self.world
        t = torch.tensor([x], dtype=torch.float64, device=_collective_device())
        torch.distributed.all_reduce(t)
        return float(t.item()) / self.world

    def gather(self, obj):
        if self.world == 1:
            return [obj]
        import torch

        out = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def broadcast(self, obj):
        if self.world == 1:
            return obj
        import torch

        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        if self.started:
            import torch

            torch.distributed.destroy_process_group()
            self.started = False


def _collective_device():
    import torch

    dist = torch.distributed
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def resolve_device(device: str = "auto", local_rank: int = 0, local_world: int = 1) -> str:
    """The one rule for a stage's `device` setting, in one process or in many: "cpu", "cuda" or
    "cuda:<i>" (i = local_rank when several ranks share the machine).

    Asking for CUDA where there is none is a UserError (never a quiet CPU run), and so is a GPU
    index beyond the devices seen, or more ranks on this machine than GPUs (NCCL cannot put two
    ranks on one GPU). "auto" takes CUDA when torch sees enough GPUs for the ranks, else the CPU,
    and logs which and why (rank 0 only)."""
    import torch

    # the same sentence on every rank: the launcher reports it once
    where = f" by {local_world} ranks on this machine" if local_world > 1 else ""
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "auto":
        use_cuda = have >= local_world > 0 and have > 0
        if local_rank == 0:
            why = (f"{have} CUDA device(s) seen" if have else
                   f"no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda})")
            if have and not use_cuda:
                why += f", fewer than the {local_world} ranks on this machine"
            say(f"device auto: {'cuda' if use_cuda else 'cpu'} ({why})")
        if not use_cuda:
            return "cpu"
        return f"cuda:{local_rank}" if local_world > 1 else "cuda"
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise UserError(f"device {device!r} is not valid ({e}); use auto, cpu or cuda") from None
    if dev.type == "cpu":
        return "cpu"
    if dev.type != "cuda":
        raise UserError(f"device {device!r} is not supported; use auto, cpu or cuda")
    if not have:
        raise UserError(f"device {device} asked for{where}, but CUDA is not available (torch "
                        f"{torch.__version__}, CUDA build {torch.version.cuda}); use --device cpu or auto")
    index = dev.index if dev.index is not None else (local_rank if local_world > 1 else None)
    if local_world > have:
        raise UserError(f"device {device} asked for by {local_world} ranks on this machine, but only {have} "
                        f"CUDA device(s) are visible; start at most {have} ranks per machine")
    if index is not None and index >= have:
        raise UserError(f"device cuda:{index} asked for, but only {have} CUDA device(s) are visible")
    return "cuda" if index is None else f"cuda:{index}"


def init_dist(device: str = "auto", timeout_s: float | None = None) -> Dist:
    """Join the torchrun process group when WORLD_SIZE > 1 (nccl on CUDA, gloo on CPU).

    `device` is the stage's setting (auto / cpu / cuda), resolved by resolve_device on every path;
    the returned Dist.device is the device this process uses ("cuda:<local rank>" or "cpu" under
    torchrun, "cuda" or "cpu" for one process).
    `timeout_s`: how long a collective may wait (None: torch's default, minutes); a stage whose
    ranks finish unevenly and then meet at a barrier needs a long one."""
    world, rank, local = dist_env()
    if world <= 1:
        return Dist(device=resolve_device(device))
    import torch

    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    dev = resolve_device(device, local, local_world)
    cuda = dev.startswith("cuda")
    if cuda:
        torch.cuda.set_device(torch.device(dev))
    started = False
    if not torch.distributed.is_initialized():
        from datetime import timedelta

        wait = {"timeout": timedelta(seconds=timeout_s)} if timeout_s else {}
        torch.distributed.init_process_group("nccl" if cuda else "gloo", **wait)
        started = True
    return Dist(rank=rank, world=world, device=dev, started=started)
