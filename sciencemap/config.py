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
import difflib
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
            append: bool = False, cli: bool = True, factory: Callable[[], Any] | None = None,
            outputs: bool = True):
    """A config field with what the command line needs to know about it.

    flags: extra option spellings (e.g. "--layout" beside "--layout-method"); parse: turns the
    option's text into the value (for lists); append: the option may repeat, each value parsed;
    cli=False: TOML only; outputs=False: the stage's outputs do not depend on it, so the pipeline's
    record of a finished stage (sciencemap.pipeline.settings_hash) leaves it out and a run made
    before the setting existed is not run again for it."""
    meta = {"help": help, "choices": choices, "flags": tuple(flags), "parse": parse, "append": append, "cli": cli,
            "outputs": outputs}
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


def _describe(tp) -> str:
    """A type hint in words: 'an integer', 'a list of numbers', 'an integer or nothing'."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        parts = [_describe(a) for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(parts) + (" (or left out)" if type(None) in typing.get_args(tp) else "")
    origin = typing.get_origin(tp) or tp
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return "a list" + (f" of {_describe(args[0]).split(' ', 1)[1]}s" if args else "")
    return {int: "an integer", float: "a number", str: "a string", bool: "a boolean (true or false)",
            dict: "a table"}.get(origin, f"a {getattr(origin, '__name__', origin)}")


def _matches(value: Any, tp) -> bool:
    """Whether a TOML (or Python) value fits a config field's type hint."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return any(_matches(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    origin = typing.get_origin(tp) or tp
    if origin is bool:
        return isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is str:
        return isinstance(value, str)
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return isinstance(value, (list, tuple)) and (not args or all(_matches(v, args[0]) for v in value))
    if origin is dict:
        return isinstance(value, dict)
    return True   # a type this checker does not know: the dataclass decides


def _nearest(word: str, words) -> str:
    near = difflib.get_close_matches(word, list(words), n=1, cutoff=0.6)
    return f"did you mean {near[0]!r}? " if near else ""


def check_settings(cls: type, values: dict[str, Any], origin: str = "") -> None:
    """Unknown keys, and values of the wrong type or outside a setting's choices, as one UserError
    sentence that starts with `origin` (the file and [section] the values came from) when given."""
    where = f"{origin}: " if origin else f"{cls.__name__}: "
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise UserError(f"{where}unknown setting(s) {unknown} for {cls.__name__}; "
                        f"{_nearest(unknown[0], fields)}known: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        choices = fields[name].metadata.get("choices")
        if not _matches(value, hints[name]):
            raise UserError(f"{where}{name} = {value!r} is not {_describe(hints[name])}, which {cls.__name__}."
                            f"{name} must be" + (f" (one of {list(choices)})" if choices else ""))
        if choices and value not in choices:
            raise UserError(f"{where}{name} = {value!r} is not allowed; {_nearest(str(value), map(str, choices))}"
                            f"the values are {list(choices)}")


def config_from(cls: type[T], values: dict[str, Any] | None = None, *, origin: str = "", **overrides: Any) -> T:
    """Build a stage config dataclass from a TOML section plus overrides (None = keep), checked by
    `check_settings` first; the dataclass's own checks end in the same kind of sentence."""
    merged = dict(values or {})
    merged.update({k: v for k, v in overrides.items() if v is not None})
    check_settings(cls, merged, origin)
    try:
        return cls(**merged)
    except (TypeError, ValueError) as e:
        raise UserError(f"{origin or cls.__name__}: {e}") from None


def config_from_args(cls: type[T], section: dict[str, Any] | None, args: argparse.Namespace,
                     origin: str = "") -> T:
    """Config from a TOML section, overridden by the options `add_options` generated for `cls`."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    return config_from(cls, section, origin=origin, **given)


def load_toml(path: str | os.PathLike | None, sections=None) -> dict[str, Any]:
    """A TOML settings file; with `sections` (the stage names), a section that is none of them is
    an error, whichever job reads the file."""
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file {p} does not exist")
    try:
        with p.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"config file {p} is not valid TOML: {e}") from None
    if sections is not None:
        known = list(sections)
        bare = sorted(k for k, v in data.items() if not isinstance(v, dict))
        if bare:
            raise UserError(f"config file {p}: {bare[0]} = {data[bare[0]]!r} is outside any [section]; "
                            "settings go under their stage's [section]")
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise UserError(f"config file {p}: unknown section(s) {unknown}; {_nearest(unknown[0], known)}"
                            f"the sections are the stages {known}")
    return data
