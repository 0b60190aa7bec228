"""The stage registry: the runner and the job doors know stages only through it.

A stage package declares its stages as `Stage` objects and lists them under the entry-point group
`sciencemap.stages` (setup.cfg), so `sciencemap` imports none of the stage packages by name:

    [options.entry_points]
    sciencemap.stages =
        train = encoders.stages:TRAIN

A stage's `run(cfg, layout, ctx)` does the work and returns a JSON-able summary. Stages that need
a shared, expensive resource (the SparkSession of the two Spark stages) ask the context for it by
name with a factory; the runner closes such resources when the pipeline ends.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable

from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError

ENTRY_POINT_GROUP = "sciencemap.stages"


class StageContext:
    """What a stage gets besides its settings: shared resources, closed once by whoever made the
    context, and the parts of later stages the pipeline started early (`start_early`)."""

    def __init__(self, pipeline: bool = False) -> None:
        # the pipeline's context: a stage runs because it or an earlier one changed (or never
        # finished), so what an earlier attempt with other inputs left is replaced, not refused
        self.pipeline = pipeline
        self._shared: dict[str, Any] = {}
        self._closers: dict[str, Callable[[], None]] = {}   # in the order made
        self._early: dict[str, EarlyPart] = {}

    def start_early(self, name: str, fn: Callable, *args) -> None:
        """Run `fn(*args)` for stage `name` in a process of its own, now; `early_result` collects it."""
        self._early[name] = EarlyPart(fn, args)

    def early_result(self, name: str):
        """What the part started early for stage `name` returned (waiting for it; its error is raised
        here), or None when none was started."""
        part = self._early.pop(name, None)
        return None if part is None else part.result()

    def shared(self, name: str, factory: Callable[[], Any], close: Callable[[Any], None] | None = None):
        """The resource `name`, made by `factory()` the first time it is asked for."""
        if name not in self._shared:
            obj = factory()
            self._shared[name] = obj
            if close is not None:
                self._closers[name] = lambda: close(obj)
        return self._shared[name]

    def held(self) -> list[str]:
        """The shared resources made so far and not released."""
        return list(self._shared)

    def release(self, name: str) -> None:
        """Close the shared resource `name` now (a later ask makes a new one)."""
        self._shared.pop(name, None)
        closer = self._closers.pop(name, None)
        if closer is not None:
            closer()

    def close(self) -> None:
        while self._early:     # started early, never collected: the pipeline stopped before their stage
            self._early.popitem()[1].stop()
        for name in reversed(list(self._closers)):   # the last made first
            self._closers.pop(name)()
        self._shared.clear()

    def __enter__(self) -> "StageContext":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _early_main(conn, fn, args) -> None:
    """The early part's process: its log on stderr, then ("ok", result) or ("error", exception). It
    leads a process group of its own, so `EarlyPart.stop` also stops the processes it started."""
    import os
    import pickle
    import traceback

    from sciencemap.runtime import log_to_stderr

    os.setpgid(0, 0)
    log_to_stderr()
    try:
        out = ("ok", fn(*args))
    except BaseException as e:   # noqa: BLE001 -- handed to the pipeline, which raises it
        traceback.print_exc()
        try:
            pickle.dumps(e)
            out = ("error", e)
        except Exception:
            out = ("error", RuntimeError("".join(traceback.format_exception(e))))
    conn.send(out)
    conn.close()


class EarlyPart:
    """A stage's part running in a spawned process (spawned, not forked: the pipeline's process
    holds the Spark JVM's and torch's threads) and its result, sent back through a pipe."""

    def __init__(self, fn: Callable, args: tuple) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_early_main, args=(child, fn, args), name=f"early-{fn.__name__}")
        self._proc.start()
        child.close()

    def result(self):
        try:
            status, value = self._conn.recv()
        except EOFError:
            self._proc.join()
            raise UserError(f"the process of {self._proc.name} ended with exit code {self._proc.exitcode} and no "
                            "result (a negative code is the signal that killed it: -9 is often the kernel "
                            "out of memory)") from None
        finally:
            self._conn.close()
        self._proc.join()
        if status == "error":
            raise value
        return value

    def stop(self) -> None:
        """Stop the part and every process it started (its process group), then reap it."""
        import os
        import signal

        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self._proc.is_alive():
                break
            try:
                os.killpg(self._proc.pid, sig)
            except (ProcessLookupError, PermissionError):   # not yet its own group: the process alone
                try:
                    os.kill(self._proc.pid, sig)
                except ProcessLookupError:
                    pass
            self._proc.join(10)
        self._proc.join()
        self._conn.close()


@dataclass(frozen=True)
class Stage:
    name: str
    order: int                      # position in the pipeline (smaller runs first)
    config: type                    # the settings dataclass (TOML section [name], generated options)
    run: Callable[[Any, RunLayout, StageContext], dict]
    summary: str = ""               # one line for --help
    # What the job door prints from the summary (default: the whole summary as JSON).
    show: Callable[[dict], str] | None = None
    creates_run: bool = False       # the stage may start a new run directory (ingest, generate)
    in_pipeline: bool = True        # False: a job of its own only (e.g. the synthetic corpus generator)
    ranks: bool = False             # runs as torch processes (torchrun ranks): its job takes --nproc-per-node
    shares: tuple[str, ...] = ()    # the StageContext.shared resources it asks for: the pipeline releases
                                    # one once no later stage asks for it (the Spark JVM before training)
    # A part the pipeline may start early, in a process of its own, while an earlier stage runs:
    # beside(cfg) names that stage (None: not early), early(cfg, layout) is the part (a module-level
    # function, found by name in the new process), and run() gets its result from
    # ctx.early_result(name) (None where it was not started early: then run() does it itself).
    beside: Callable[[Any], str | None] | None = None
    early: Callable[[Any, RunLayout], Any] | None = None


_registered: dict[str, Stage] = {}
_loaded = False


def register(stage: Stage) -> Stage:
    """Add a stage by hand (tests, plug-ins outside an installed distribution)."""
    _registered[stage.name] = stage
    return stage


def _load_entry_points() -> None:
    global _loaded
    if _loaded:
        return
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        stage = ep.load()
        if not isinstance(stage, Stage):
            raise TypeError(f"entry point {ep.name} = {ep.value} is not a sciencemap Stage")
        _registered.setdefault(stage.name, stage)
    _loaded = True


def all_stages() -> list[Stage]:
    """Every registered stage, in pipeline order."""
    _load_entry_points()
    if not _registered:
        raise UserError("no stages are registered: install the project (make install, or pip install .) "
                        "so its entry points are known")
    return sorted(_registered.values(), key=lambda s: (s.order, s.name))


def pipeline_stages() -> list[Stage]:
    return [s for s in all_stages() if s.in_pipeline]


def get_stage(name: str) -> Stage:
    """The stage `name`, loading only its own entry point when it is not registered yet (a job
    door then imports one stage package, not all of them)."""
    if name not in _registered:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
            stage = ep.load()
            if isinstance(stage, Stage):
                _registered.setdefault(stage.name, stage)
    if name in _registered:
        return _registered[name]
    raise UserError(f"unknown stage {name!r}; known: {[s.name for s in all_stages()]}")
