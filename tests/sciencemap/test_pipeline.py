"""The runner (sciencemap.pipeline) on small stages of our own, registered by hand: finished
stages with unchanged settings are skipped, a changed setting re-runs its stage and every later one."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from sciencemap import stages as registry
from sciencemap.cli import pipeline_main
from sciencemap.config import setting
from sciencemap.layout import RunLayout
from sciencemap.pipeline import PipelineOptions, run_pipeline, select
from sciencemap.runtime import UserError
from sciencemap.stages import Stage


@dataclass
class CountConfig:
    n: int = setting(3, "how many lines to write")


@dataclass
class ScaleConfig:
    factor: float = setting(2.0, "multiplier")
    note: str = setting("", "a remark the outputs do not depend on", outputs=False)


@pytest.fixture
def probes(monkeypatch):
    """Two stages after every real one (`count` writes numbers, `scale` reads and multiplies them);
    they leave the registry when the test ends. Returns the list of (stage, setting) calls."""
    calls = []

    def count(cfg, layout: RunLayout, ctx):
        calls.append(("count", cfg.n))
        (layout.root / "numbers.txt").write_text("\n".join(str(i) for i in range(cfg.n)))
        return {"lines": cfg.n}

    def scale(cfg, layout: RunLayout, ctx):
        calls.append(("scale", cfg.factor))
        numbers = [int(x) for x in (layout.root / "numbers.txt").read_text().split()]
        (layout.root / "scaled.json").write_text(json.dumps([x * cfg.factor for x in numbers]))
        return {"sum": sum(numbers) * cfg.factor}

    registry.all_stages()                       # entry points first, so ours are added beside them
    for stage in (Stage("count", 1000, CountConfig, count), Stage("scale", 1001, ScaleConfig, scale)):
        monkeypatch.setitem(registry._registered, stage.name, stage)
    return calls


def _run(run_dir, toml_text=None, tmp=None, **kw):
    config = None
    if toml_text is not None:
        config = tmp / "c.toml"
        config.write_text(toml_text)
    return run_pipeline(PipelineOptions(run=run_dir, config=config, first="count", last="scale", **kw))


def test_skip_rerun_and_invalidate_later_stages(probes, tmp_path):
    run = tmp_path / "run"
    out = _run(run, "[count]\nn = 4\n", tmp_path)
    assert out == {"count": {"lines": 4}, "scale": {"sum": 12.0}}
    assert json.loads((run / "scaled.json").read_text()) == [0.0, 2.0, 4.0, 6.0]
    assert set(json.loads((run / "stages.json").read_text())) == {"count", "scale"}
    assert (run / "config.toml").read_text() == "[count]\nn = 4\n"

    assert _run(run, "[count]\nn = 4\n", tmp_path) == {}           # same settings: both skipped
    assert probes == [("count", 4), ("scale", 2.0)]

    _run(run, "[count]\nn = 4\n[scale]\nfactor = 0.5\n", tmp_path)  # a later setting: only that stage
    assert probes[2:] == [("scale", 0.5)]

    out = _run(run, "[count]\nn = 2\n[scale]\nfactor = 0.5\n", tmp_path)  # an earlier one: it and all after
    assert probes[3:] == [("count", 2), ("scale", 0.5)]
    assert json.loads((run / "scaled.json").read_text()) == [0.0, 0.5]

    _run(run, "[count]\nn = 2\n[scale]\nfactor = 0.5\n", tmp_path, force=True)
    assert probes[5:] == [("count", 2), ("scale", 0.5)]


def test_a_setting_the_outputs_do_not_depend_on_neither_reruns_nor_invalidates(probes, tmp_path):
    import hashlib

    from mapping.knn import KnnConfig
    from sciencemap.pipeline import settings_hash

    run = tmp_path / "run"
    _run(run, "[scale]\nfactor = 3.0\n", tmp_path)
    assert _run(run, '[scale]\nfactor = 3.0\nnote = "another"\n', tmp_path) == {}   # skipped
    assert probes == [("count", 3), ("scale", 3.0)]
    # a stage recorded before the setting existed (its settings without it) still matches
    before = hashlib.sha256(json.dumps({"factor": 3.0}).encode()).hexdigest()[:16]
    assert settings_hash(ScaleConfig(factor=3.0, note="x")) == before != settings_hash(ScaleConfig(factor=2.0))
    assert settings_hash(KnnConfig(keep_index=False)) == settings_hash(KnnConfig()) != settings_hash(KnnConfig(k=5))


def test_a_rerun_stage_forgets_the_later_stages_it_invalidated(probes, tmp_path):
    run = tmp_path / "run"
    _run(run)
    run_pipeline(PipelineOptions(run=run, first="count", last="count", force=True))
    assert set(json.loads((run / "stages.json").read_text())) == {"count"}   # scale must run again
    _run(run)
    assert [c[0] for c in probes] == ["count", "scale", "count", "scale"]


def test_from_to_and_config_errors(probes, tmp_path):
    names = [s.name for s in registry.pipeline_stages()]
    assert [s.name for s in select(registry.pipeline_stages(), "knn", "cluster")] == ["knn", "cluster"]
    with pytest.raises(UserError, match="--from scale comes after --to count"):
        select(registry.pipeline_stages(), "scale", "count")
    with pytest.raises(UserError, match="unknown stage 'nope'"):
        select(registry.pipeline_stages(), "nope", None)
    assert names[-2:] == ["count", "scale"]
    with pytest.raises(UserError, match=r"unknown section\(s\) \['cuont'\]"):
        _run(tmp_path / "r", "[cuont]\nn = 1\n", tmp_path)
    with pytest.raises(UserError, match=r"unknown setting\(s\) \['m'\]"):
        _run(tmp_path / "r", "[count]\nm = 1\n", tmp_path)
    assert probes == []                                    # settings are all checked before any stage runs


def test_the_pipeline_command_line(probes, tmp_path, capsys):
    assert pipeline_main(["--run", str(tmp_path / "r"), "--from", "count", "--to", "scale"]) == 0
    assert "[scale] done" in capsys.readouterr().out
    assert pipeline_main(["--run", str(tmp_path / "r"), "--from", "scale", "--to", "count"]) == 2
    assert "error: --from scale comes after --to count" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pipeline_main(["--run", str(tmp_path / "r"), "--from", "nope"])
