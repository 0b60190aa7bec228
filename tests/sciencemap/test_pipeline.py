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


EARLY_PARTS = '''
import json, os, signal, time
from sciencemap.runtime import UserError

def meet(cfg, layout):
    """Tells the stage beside it that it runs, and waits (at most a minute) to hear it runs too."""
    (layout.root / "early_pid").write_text(str(os.getpid()))
    for _ in range(600):
        if (layout.root / "beside_running").exists():
            return {"pid": os.getpid(), "factor": cfg.factor}
        time.sleep(0.1)
    raise AssertionError("the stage beside never ran while this part did")

def fail(cfg, layout):
    raise UserError("no MeSH descriptors here")

def die(cfg, layout):
    os.kill(os.getpid(), signal.SIGKILL)

def hang(cfg, layout):
    child = os.fork()          # a process of its own, as a pool of workers would be
    if child == 0:
        time.sleep(600)
        os._exit(0)
    (layout.root / "early_child_pid").write_text(str(child))
    (layout.root / "early_pid").write_text(str(os.getpid()))
    time.sleep(600)
'''


@pytest.fixture
def early_probes(monkeypatch, tmp_path):
    """`count` and then `scale`, whose early part (one of EARLY_PARTS, in a module the spawned process
    imports by name) starts beside `count`. Returns a function that registers them with that part."""
    import importlib
    import os
    import time

    (tmp_path / "early_parts.py").write_text(EARLY_PARTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    parts = importlib.import_module("early_parts")

    def register(part: str, count_fails: bool = False, wait: bool = True):
        def count(cfg, layout: RunLayout, ctx):
            (layout.root / "beside_running").write_text("")
            for _ in range(600 if wait else 0):       # the early part is a process of its own, running now
                if (layout.root / "early_pid").exists():
                    break
                time.sleep(0.1)
            if count_fails:
                raise UserError("count failed")
            return {"pid": os.getpid(), "pipeline": ctx.pipeline}

        def scale(cfg, layout: RunLayout, ctx):
            early = ctx.early_result("scale")
            return {"early": early, "pid": os.getpid()}

        registry.all_stages()
        monkeypatch.setitem(registry._registered, "count", Stage("count", 1000, CountConfig, count))
        monkeypatch.setitem(registry._registered, "scale", Stage(
            "scale", 1001, ScaleConfig, scale, beside=lambda cfg: "count" if cfg.factor > 0 else None,
            early=getattr(parts, part)))

    return register


def test_an_early_part_runs_in_its_own_process_beside_the_earlier_stage(early_probes, tmp_path, capsys):
    early_probes("meet")
    out = _run(tmp_path / "run", "[scale]\nfactor = 1.5\n", tmp_path)
    pid = out["count"]["pid"]
    assert out["scale"]["pid"] == pid and out["scale"]["early"]["pid"] != pid    # its result, from its process
    assert out["scale"]["early"]["factor"] == 1.5                                   # with the stage's settings
    assert out["count"]["pipeline"] is True      # the pipeline's context (a job's own says False)
    assert "[scale] starting beside count" in capsys.readouterr().out
    # the earlier stage already done (only a setting of the later one changed): nothing starts early,
    # run() gets None (and does its part itself)
    (tmp_path / "run" / "early_pid").unlink()
    early_probes("meet", wait=False)
    out = _run(tmp_path / "run", "[scale]\nfactor = 2.5\n", tmp_path)
    assert out["scale"]["early"] is None and not (tmp_path / "run" / "early_pid").exists()
    # not beside (its setting says no): the same
    out = _run(tmp_path / "run2", "[scale]\nfactor = -1.0\n", tmp_path)
    assert set(out) == {"count", "scale"} and out["scale"]["early"] is None
    assert not (tmp_path / "run2" / "early_pid").exists()


def test_an_early_part_that_fails_or_is_killed_fails_its_stage_with_the_reason(early_probes, tmp_path):
    early_probes("fail", wait=False)
    with pytest.raises(UserError, match="no MeSH descriptors here"):
        _run(tmp_path / "run", "[scale]\nfactor = 1.0\n", tmp_path)
    state = json.loads((tmp_path / "run" / "stages.json").read_text())
    assert set(state) == {"count"}                         # count finished; scale runs again next time

    early_probes("die", wait=False)
    with pytest.raises(UserError, match=r"ended with exit code -9 and no result"):
        _run(tmp_path / "run2", "[scale]\nfactor = 1.0\n", tmp_path)


def test_an_early_part_is_stopped_when_the_stage_beside_it_fails(early_probes, tmp_path):
    import os
    import time

    early_probes("hang", count_fails=True)
    with pytest.raises(UserError, match="count failed"):
        _run(tmp_path / "run", "[scale]\nfactor = 1.0\n", tmp_path)
    pid = int((tmp_path / "run" / "early_pid").read_text())
    with pytest.raises(ProcessLookupError):               # terminated and reaped when the pipeline stopped
        os.kill(pid, 0)
    child = int((tmp_path / "run" / "early_child_pid").read_text())
    for _ in range(50):       # the process it started stopped too (gone, or a zombie for init to reap)
        try:
            state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("gone", "Z"):
            break
        time.sleep(0.1)
    assert state in ("gone", "Z")


def test_a_shared_resource_is_released_after_the_last_stage_that_shares_it(monkeypatch, tmp_path):
    """As the Spark JVM is stopped after importance, before training and the mapping stages."""
    events = []

    def make():
        events.append("made")
        return object()

    def user(name):
        def run(cfg, layout, ctx):
            res = ctx.shared("res", make, close=lambda r: events.append("closed"))
            events.append(f"{name} ran")
            return {"res": id(res)}
        return run

    def other(cfg, layout, ctx):
        events.append("c ran")
        return {"held": ctx.held()}

    registry.all_stages()
    for stage in (Stage("a", 1000, CountConfig, user("a"), shares=("res",)),
                  Stage("b", 1001, CountConfig, user("b"), shares=("res",)),
                  Stage("c", 1002, CountConfig, other)):
        monkeypatch.setitem(registry._registered, stage.name, stage)
    out = run_pipeline(PipelineOptions(run=tmp_path / "run", first="a", last="c"))
    assert out["a"]["res"] == out["b"]["res"] and out["c"]["held"] == []   # one resource, gone before c
    assert events == ["made", "a ran", "b ran", "closed", "c ran"]
    events.clear()
    run_pipeline(PipelineOptions(run=tmp_path / "run2", first="a", last="a"))   # the last chosen stage
    assert events == ["made", "a ran", "closed"]


def test_stop_spark_ends_the_jvm_and_a_new_session_starts_another(repo_root):
    import subprocess
    import sys

    script = """
import os
from pyspark import SparkContext
from importance.ingest.spark import get_spark, stop_spark
s = get_spark(app="stop-test", master="local[1]", shuffle_partitions=2)
assert s.range(10).count() == 10
proc = SparkContext._gateway.proc
stop_spark(s)
assert proc.poll() is not None, "the JVM still runs"
s = get_spark(app="stop-test-2", master="local[1]", shuffle_partitions=2)
assert s.range(5).count() == 5 and SparkContext._gateway.proc.pid != proc.pid
stop_spark(s)
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", script], cwd=repo_root, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-3000:]
