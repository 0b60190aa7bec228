"""Process plumbing (sciencemap.runtime): user errors as one line, a plain process is rank 0 of 1."""
from __future__ import annotations

import io
import logging
import sys

import pytest

from sciencemap.runtime import Dist, UserError, dist_env, init_dist, log_to_stderr, run_cli


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
