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
    """What a stage gets besides its settings: shared resources, closed once by whoever made the context."""

    def __init__(self) -> None:
        self._shared: dict[str, Any] = {}
        self._closers: list[Callable[[], None]] = []

    def shared(self, name: str, factory: Callable[[], Any], close: Callable[[Any], None] | None = None):
        """The resource `name`, made by `factory()` the first time it is asked for."""
        if name not in self._shared:
            obj = factory()
            self._shared[name] = obj
            if close is not None:
                self._closers.append(lambda: close(obj))
        return self._shared[name]

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()
        self._shared.clear()

    def __enter__(self) -> "StageContext":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
