"""Training objectives as plug-ins (METHODS.md §4). Each module defines one `Objective`
(encoders.objectives.base): its settings, its batches, its loss, its validation and its model-card
entry. The training loop (encoders.train) knows objectives only through this registry.

The registry names each objective's module and imports it on first use: the names are needed by
encoders.config (the `--objective` choices), which must stay importable without torch.
"""
from __future__ import annotations

import importlib

from sciencemap.runtime import UserError

from encoders.objectives.base import Objective

# name -> module defining OBJECTIVE (an Objective subclass). The first one is the default.
_MODULES = {
    "triplet": "encoders.objectives.triplet",
    "in_batch": "encoders.objectives.in_batch",
}
OBJECTIVES: tuple[str, ...] = tuple(_MODULES)
DEFAULT_OBJECTIVE = OBJECTIVES[0]


def get_objective(name: str) -> type[Objective]:
    """The Objective class registered as `name`; an unknown name is a UserError listing the known ones."""
    if name not in _MODULES:
        raise UserError(f"training objective {name!r} is unknown; use one of {', '.join(OBJECTIVES)}")
    cls = importlib.import_module(_MODULES[name]).OBJECTIVE
    assert cls.name == name, (cls.name, name)
    return cls


__all__ = ["DEFAULT_OBJECTIVE", "OBJECTIVES", "Objective", "get_objective"]
