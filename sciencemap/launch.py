"""Several processes of one job on this machine (`--nproc-per-node N`), through torch's elastic
launcher, the machinery behind torchrun.

Why not only torchrun: when a rank fails, torchrun exits 1 and prints its own traceback and a
failure table, so a setting the user can fix (`--device cuda` on a machine without CUDA) reads like
a crash. Here every rank's UserError is written to the error file the launcher gives it
(TORCHELASTIC_ERROR_FILE; sciencemap.runtime.run_cli does that), and the launcher prints each
distinct sentence once and exits with the rank's own code (2). Plain torchrun still works: it shows
the same sentences in its failure table.
"""
from __future__ import annotations

import logging
import signal
import sys
import uuid

from sciencemap.runtime import say


def launch_ranks(nproc: int, module: str, argv: list[str]) -> int:
    """Run `python -m module *argv` as `nproc` ranks on this machine (WORLD_SIZE, RANK, LOCAL_RANK,
    MASTER_ADDR/PORT set as torchrun sets them); returns the exit code for the whole job."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    # The agent logs each failure (and its rendezvous) on its own; the failures are reported below.
    quiet = logging.getLogger("torch.distributed.elastic")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"sciencemap-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0, monitor_interval=0.1)
    say(f"launching {nproc} ranks: python -m {module} {' '.join(argv)}")
    try:
        elastic_launch(config, sys.executable)("-m", module, *argv)
        return 0
    except ChildFailedError as e:
        return report_failures(e.failures)
    finally:
        quiet.setLevel(level)


def report_failures(failures: dict) -> int:
    """One line per distinct failure (the rank's UserError sentence where it wrote one); exit code 2
    when a rank wrote one, else the code of the first rank that failed."""
    def sentence(f) -> str | None:
        return f.message if isinstance(f.message, str) and f.message.startswith("error: ") else None

    user_error = any(sentence(f) is not None for f in failures.values())
    # once one rank has failed, the agent stops the others (SIGTERM, then SIGKILL); a rank stopped
    # before it wrote its own sentence is not a failure of its own when another rank wrote one
    stopped_by_agent = {-signal.SIGTERM, -signal.SIGKILL}
    seen: list[str] = []
    for rank, f in sorted(failures.items(), key=lambda kv: (kv[1].timestamp, kv[0])):
        msg = sentence(f)
        if msg is None and user_error and f.exitcode in stopped_by_agent:
            continue
        line = msg or f"error: rank {rank} exited with code {f.exitcode} (its output is above)"
        if line not in seen:
            seen.append(line)
    for line in seen:
        print(line, file=sys.stderr, flush=True)
    if user_error:
        # a rank's UserError exits 2; a rank may write its sentence and be stopped by the agent (the
        # other rank failed first) before it exits, so its own exit code is then the signal's
        return 2
    first = min(failures.items(), key=lambda kv: (kv[1].timestamp, kv[0]))[1]
    return first.exitcode if first.exitcode > 0 else 1
