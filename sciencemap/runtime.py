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
    """Run a job's main(); a UserError becomes one line on stderr and exit code 2, not a traceback."""
    try:
        main(argv)
        return 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
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


def init_dist(device: str = "auto", timeout_s: float | None = None) -> Dist:
    """Join the torchrun process group when WORLD_SIZE > 1 (nccl on CUDA, gloo on CPU).

    `device` is the stage's setting (auto / cpu / cuda); the returned Dist.device is the device
    this rank should use ("cuda:<local rank>" or "cpu"), or `device` unchanged for one process.
    `timeout_s`: how long a collective may wait (None: torch's default, minutes); a stage whose
    ranks finish unevenly and then meet at a barrier needs a long one."""
    world, rank, local = dist_env()
    if world <= 1:
        return Dist(device=device)
    import torch

    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local)
    started = False
    if not torch.distributed.is_initialized():
        from datetime import timedelta

        wait = {"timeout": timedelta(seconds=timeout_s)} if timeout_s else {}
        torch.distributed.init_process_group("nccl" if cuda else "gloo", **wait)
        started = True
    return Dist(rank=rank, world=world, device=f"cuda:{local}" if cuda else "cpu", started=started)
