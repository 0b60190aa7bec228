"""Settings declared once (sciencemap.config): options generated from the dataclass fields, TOML
merged with the command line, unknown keys refused; every registered stage's parser builds."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from sciencemap.cli import stage_parser
from sciencemap.config import add_options, comma_floats, config_from, config_from_args, load_toml, setting
from sciencemap.runtime import UserError
from sciencemap.stages import all_stages


def _words(text: str) -> list[str]:
    return text.split("+")


@dataclass
class Example:
    steps: int = setting(10, "optimizer steps")
    lr: float = setting(2e-5, "peak learning rate (100% of the schedule)")
    name: str = setting("minilm", "model")
    pooling: str = setting("mean", "pooling", choices=("mean", "cls"))
    normalize: bool = setting(True, "unit vectors")
    layout_method: str = setting("umap", "layout", flags=("--layout",))
    resolutions: list[float] = setting(factory=lambda: [0.01, 0.1], help="CPM resolutions", parse=comma_floats)
    inputs: list[list[str]] = setting(factory=list, help="input folders", parse=_words, append=True)
    toml_only: int = setting(3, "not on the command line", cli=False)
    margin: float | None = setting(None, "None: the data's own")


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    add_options(ap, Example)
    return ap.parse_args(argv)


def test_defaults_come_from_the_dataclass_not_the_parser():
    args = _parse([])
    assert all(getattr(args, f) is None for f in ("steps", "lr", "name", "normalize", "resolutions", "inputs"))
    assert not hasattr(args, "toml_only")
    assert config_from_args(Example, None, args) == Example()


def test_types_bool_pairs_choices_and_extra_flags():
    args = _parse(["--steps", "7", "--lr", "0.5", "--name", "x", "--pooling", "cls", "--no-normalize",
                   "--layout", "pca", "--margin", "0.25"])
    cfg = config_from_args(Example, None, args)
    assert (cfg.steps, cfg.lr, cfg.name, cfg.pooling, cfg.normalize, cfg.layout_method, cfg.margin) == \
        (7, 0.5, "x", "cls", False, "pca", 0.25)
    assert type(cfg.steps) is int and type(cfg.lr) is float
    assert _parse(["--normalize"]).normalize is True
    assert _parse(["--layout-method", "pca"]).layout_method == "pca"
    for bad in (["--pooling", "max"], ["--steps", "1.5"], ["--lr", "fast"]):
        with pytest.raises(SystemExit):
            _parse(bad)


def test_parse_and_append():
    args = _parse(["--resolutions", "0.5, 1,2e-3", "--inputs", "a+b", "--inputs", "c"])
    cfg = config_from_args(Example, None, args)
    assert cfg.resolutions == [0.5, 1.0, 0.002]
    assert cfg.inputs == [["a", "b"], ["c"]]
    with pytest.raises(SystemExit):
        _parse(["--resolutions", "0.1,x"])


def test_command_line_overrides_toml_which_overrides_the_default(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("[example]\nsteps = 99\nlr = 0.1\ntoml_only = 5\n")
    section = load_toml(toml)["example"]
    cfg = config_from_args(Example, section, _parse(["--steps", "4"]))
    assert (cfg.steps, cfg.lr, cfg.toml_only, cfg.name) == (4, 0.1, 5, "minilm")


def test_unknown_keys_and_bad_files_are_user_errors(tmp_path):
    with pytest.raises(UserError, match=r"unknown setting\(s\) \['stpes'\] for Example"):
        config_from(Example, {"stpes": 3})
    with pytest.raises(UserError, match="does not exist"):
        load_toml(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[x\n")
    with pytest.raises(UserError, match="not valid TOML"):
        load_toml(bad)
    assert load_toml(None) == {}


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions for s in a.option_strings]


@pytest.mark.parametrize("stage", [s.name for s in all_stages()])
def test_every_stage_parser_builds_without_a_repeated_option(stage):
    """argparse raises on a conflicting option string; building must not, and each spelling is one option."""
    parser = stage_parser(stage)
    strings = _option_strings(parser)
    assert len(strings) == len(set(strings)), sorted(s for s in strings if strings.count(s) > 1)
    assert "--run" in strings and "--config" in strings
    cfg_type = next(s.config for s in all_stages() if s.name == stage)
    # the generated defaults are "not given", so a bare command line gives the dataclass defaults
    args = parser.parse_args(["--run", "/tmp/x"])
    assert config_from_args(cfg_type, None, args) == cfg_type()


def test_jobs_are_short_doors(repo_root):
    jobs = sorted((repo_root / "jobs").glob("*.py"))
    assert len(jobs) >= 10
    long = {j.name: n for j in jobs if (n := len(j.read_text().splitlines())) > 30}
    assert not long, long
