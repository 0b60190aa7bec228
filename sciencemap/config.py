"""Stage settings: one dataclass per stage, filled from a TOML section and the command line.

The dataclass is the only place a setting is declared. `add_options` generates its command-line
options from the fields (name, type, default None so TOML and the dataclass default still apply),
with help text, choices and extra spellings from the field's metadata:

    lr: float = setting(2e-5, "peak learning rate")
    pooling: str = setting("mean", "pooling of token vectors", choices=("mean", "cls"))
    resolutions: list[float] = setting(..., "CPM resolutions", parse=comma_floats)

`config_from(cls, toml_section, **overrides)` merges the section with non-None overrides and
rejects unknown keys; `config_from_args` does the same from parsed options.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Callable, TypeVar

from sciencemap.runtime import UserError

T = TypeVar("T")
_NO_DEFAULT = dataclasses.MISSING


def setting(default: Any = _NO_DEFAULT, help: str = "", *, choices: tuple | None = None,
            flags: tuple[str, ...] = (), parse: Callable[[str], Any] | None = None,
            append: bool = False, cli: bool = True, factory: Callable[[], Any] | None = None):
    """A config field with what the command line needs to know about it.

    flags: extra option spellings (e.g. "--layout" beside "--layout-method"); parse: turns the
    option's text into the value (for lists); append: the option may repeat, each value parsed;
    cli=False: TOML only."""
    meta = {"help": help, "choices": choices, "flags": tuple(flags), "parse": parse, "append": append, "cli": cli}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def comma_floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _scalar_type(tp) -> type | None:
    """int / float / str / bool for `X` or `X | None`; None for anything else."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if len(args) == 1 else None
    return tp if tp in (int, float, str, bool) else None


def option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def add_options(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """One option per field of the config dataclass `cls` (default None: 'not given')."""
    hints = typing.get_type_hints(cls)
    group = parser.add_argument_group(f"{cls.__name__} settings (also the TOML section's keys)")
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if f.name in skip or not meta.get("cli", True):
            continue
        names = [option_name(f.name), *meta.get("flags", ())]
        default = f.default if f.default is not _NO_DEFAULT else (
            f.default_factory() if f.default_factory is not _NO_DEFAULT else None)
        help_text = (meta.get("help") or "").replace("%", "%%")
        help_text = f"{help_text} (default: {default!r})" if help_text else f"default: {default!r}"
        kw: dict[str, Any] = {"dest": f.name, "default": None, "help": help_text}
        tp = _scalar_type(hints[f.name])
        if meta.get("parse"):
            kw["type"] = meta["parse"]
            if meta.get("append"):
                kw["action"] = "append"
        elif tp is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif tp is not None:
            kw["type"] = tp
        else:
            continue  # structured values (lists of tables) are TOML-only unless a parser is given
        if meta.get("choices"):
            kw["choices"] = meta["choices"]
        group.add_argument(*names, **kw)


def config_from(cls: type[T], values: dict[str, Any] | None = None, **overrides: Any) -> T:
    """Build a stage config dataclass from a TOML section plus overrides (None = keep)."""
    merged = dict(values or {})
    merged.update({k: v for k, v in overrides.items() if v is not None})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(merged) - names)
    if unknown:
        raise UserError(f"unknown setting(s) {unknown} for {cls.__name__}; known: {sorted(names)}")
    try:
        return cls(**merged)
    except (TypeError, ValueError) as e:
        raise UserError(f"{cls.__name__}: {e}") from None


def config_from_args(cls: type[T], section: dict[str, Any] | None, args: argparse.Namespace) -> T:
    """Config from a TOML section, overridden by the options `add_options` generated for `cls`."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    return config_from(cls, section, **given)


def load_toml(path: str | os.PathLike | None) -> dict[str, Any]:
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file {p} does not exist")
    try:
        with p.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"config file {p} is not valid TOML: {e}") from None
