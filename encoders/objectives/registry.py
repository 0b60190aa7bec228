"""The registry of training objectives: name -> the module that defines it, imported on first use.
The names are needed by encoders.config (the `--objective` choices), which must stay importable
without torch.
"""
from __future__ import annotations

import importlib

from sciencemap.runtime import UserError

# name -> module defining OBJECTIVE (an Objective subclass). The first one is the default.
_MODULES = {
    "triplet": "encoders.objectives.triplet",
    "in_batch": "encoders.objectives.in_batch",
    "ema_head": "encoders.objectives.ema_head",
    "flew": "encoders.objectives.flew",
    "unifar": "encoders.objectives.unifar",
    "cosaemb": "encoders.objectives.cosaemb",
    "scijepa": "encoders.objectives.scijepa",
    "section_cl": "encoders.objectives.section_cl",
}
OBJECTIVES: tuple[str, ...] = tuple(_MODULES)
DEFAULT_OBJECTIVE = OBJECTIVES[0]


def get_objective(name: str):
    """The Objective class registered as `name`; an unknown name is a UserError listing the known ones."""
    if name not in _MODULES:
        raise UserError(f"training objective {name!r} is unknown; use one of {', '.join(OBJECTIVES)}")
    cls = importlib.import_module(_MODULES[name]).OBJECTIVE
    assert cls.name == name, (cls.name, name)
    return cls

