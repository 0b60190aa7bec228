"""Process plumbing (sciencemap.runtime): user errors as one line, a plain process is rank 0 of 1."""
from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

import pytest
import torch

from sciencemap.runtime import Dist, UserError, dist_env, init_dist, log_to_stderr, resolve_device, run_cli

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here: asking for it is no error")


def test_a_user_error_is_one_line_and_exit_code_2(capsys):
    def main(argv):
        raise UserError(f"no such folder {argv[0]}")

    assert run_cli(main, ["/nope"]) == 2
    assert capsys.readouterr().err == "error: no such folder /nope\n"
    assert run_cli(lambda argv: None, []) == 0
    with pytest.raises(ZeroDivisionError):              # a bug stays a traceback
        run_cli(lambda argv: 1 / 0, [])


def test_a_plain_process_is_rank_0_of_1(monkeypatch):
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert dist_env() == (1, 0, 0)
    d = init_dist("cpu")
    assert d == Dist(device="cpu") and d.main and not d.started
    assert d.mean(2.5) == 2.5 and d.gather("x") == ["x"] and d.broadcast({"a": 1}) == {"a": 1}
    d.barrier()
    d.close()
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert dist_env() == (4, 3, 1)


def test_log_lines_go_to_the_stderr_of_the_moment(monkeypatch):
    """A job's log handler follows sys.stderr: one swapped in later gets the lines, and a closed
    earlier one (a finished test's capture) is never written to."""
    logger = logging.getLogger("sciencemap")
    monkeypatch.setattr(logger, "handlers", [])
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    log_to_stderr()
    logger.info("one")
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logger.info("two")
    assert second.getvalue() == "two\n"


@NO_CUDA
def test_one_device_rule_in_one_process(capsys):
    """CUDA asked for where there is none is a UserError (never a quiet CPU run); auto picks and says so."""
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == "cpu"
    assert "device auto: cpu (no CUDA device" in capsys.readouterr().err
    assert resolve_device("auto", local_rank=1, local_world=2) == "cpu"
    assert capsys.readouterr().err == ""                       # only the first rank of a machine says it
    for asked in ("cuda", "cuda:0"):
        with pytest.raises(UserError, match=f"device {asked} asked for, but CUDA is not available"):
            resolve_device(asked)
    with pytest.raises(UserError, match="asked for by 2 ranks on this machine, but CUDA is not available"):
        resolve_device("cuda", local_rank=1, local_world=2)
    with pytest.raises(UserError, match="'gpu' is not valid"):
        resolve_device("gpu")


def _two_ranks(cmd, repo_root, run_dir):
    run_dir.mkdir()
    return subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=300)


@NO_CUDA
@pytest.mark.parametrize("job", ["embed", "train"])
def test_two_ranks_asking_for_cuda_without_it_get_one_sentence(tmp_path, repo_root, job):
    """Two ranks under torch's elastic launcher (the job's --nproc-per-node) each refuse --device
    cuda; the launcher prints the sentence once and exits 2, with no traceback."""
    p = _two_ranks([sys.executable, f"jobs/{job}.py", "--nproc-per-node", "2", "--run", str(tmp_path / "r"),
                    "--device", "cuda"], repo_root, tmp_path / "r")
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 2, p.stderr[-3000:]
    assert errors == ["error: device cuda asked for by 2 ranks on this machine, but CUDA is not available "
                      f"(torch {torch.__version__}, CUDA build None); use --device cpu or auto"]
    assert "Traceback" not in p.stderr and "launching 2 ranks" in p.stderr and p.stdout == ""


@NO_CUDA
def test_plain_torchrun_shows_the_ranks_sentence(tmp_path, repo_root):
    """Under torchrun itself each rank writes its sentence to the error file torchrun gave it:
    torchrun's failure table shows it as the root cause (torchrun's own exit code and table are
    torchrun's; once one rank has failed, torchrun may stop the other before it writes its own
    sentence, so the table holds the sentence once or twice)."""
    p = _two_ranks([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=0",
                    "jobs/embed.py", "--run-dir", str(tmp_path / "r"), "--device", "cuda"], repo_root, tmp_path / "r")
    assert p.returncode != 0
    sentence = "traceback : error: device cuda asked for by 2 ranks on this machine"
    assert "Root Cause" in p.stderr and sentence in p.stderr.split("Root Cause", 1)[1], p.stderr[-2000:]
    assert p.stderr.count(sentence) in (1, 2)


def test_a_rank_writes_its_error_to_the_launchers_file(tmp_path, monkeypatch, capsys):
    err = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(err))
    monkeypatch.setenv("WORLD_SIZE", "2")

    def main(argv):
        raise UserError("bad setting")

    assert run_cli(main, []) == 2
    assert capsys.readouterr().err == "" and json.loads(err.read_text())["message"] == "error: bad setting"


def test_a_rank_stopped_after_writing_its_sentence_still_exits_2(capsys):
    """The agent may stop a rank (SIGTERM: exit code -15) between its writing the UserError sentence
    and its exit 2, because the other rank failed first; the job still exits 2 with the sentence."""
    from types import SimpleNamespace

    from sciencemap.launch import report_failures

    line = "error: device cuda asked for by 2 ranks on this machine"
    failures = {0: SimpleNamespace(message=line, exitcode=-15, timestamp=5),
                1: SimpleNamespace(message=line, exitcode=2, timestamp=5)}
    assert report_failures(failures) == 2
    assert capsys.readouterr().err.splitlines() == [line]
    # stopped before it wrote its sentence: the other rank's sentence is the only line
    stopped = {0: SimpleNamespace(message=line, exitcode=2, timestamp=5),
               1: SimpleNamespace(message="<NONE>", exitcode=-15, timestamp=6)}
    assert report_failures(stopped) == 2
    assert capsys.readouterr().err.splitlines() == [line]
    # a rank that crashed on its own (not a signal the agent sends) is still reported beside it
    stopped[1] = SimpleNamespace(message="<NONE>", exitcode=-11, timestamp=6)
    assert report_failures(stopped) == 2
    assert capsys.readouterr().err.splitlines() == [line, "error: rank 1 exited with code -11 (its output is above)"]
    crashed = {0: SimpleNamespace(message={"message": "Traceback"}, exitcode=-11, timestamp=5)}
    assert report_failures(crashed) == 1
    assert "error: rank 0 exited with code -11" in capsys.readouterr().err
