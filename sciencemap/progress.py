"""Progress lines for long steps: done / total, rate, ETA and the process's memory.

At 33M papers a mapping step runs for minutes to hours; a user needs to see that it moves, how
fast, when it ends and whether memory grows. Lines go to the logger at most every `every_s`
seconds, plus one at the end.
"""
from __future__ import annotations

import logging
import time

from sciencemap.runtime import rss_mb

log = logging.getLogger("sciencemap.progress")


def current_rss_mb() -> float:
    """Resident memory now (MB), from /proc; the peak where /proc is missing."""
    try:
        with open("/proc/self/statm") as f:
            import os

            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return rss_mb()


def _duration(s: float) -> str:
    if s != s or s == float("inf"):
        return "?"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _rate(r: float) -> str:
    return f"{r:,.0f}" if r >= 10 else f"{r:.2g}"


class Progress:
    """`with Progress("knn search", total, "queries") as p: ... p.advance(n)`."""

    def __init__(self, name: str, total: int, unit: str = "items", every_s: float = 10.0, done: int = 0,
                 logger: logging.Logger | None = None):
        self.name, self.total, self.unit, self.every_s = name, int(total), unit, every_s
        self.start_done = self.done = int(done)
        self.log = logger or log
        self.t0 = self.last = time.perf_counter()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.report(final=True)

    @property
    def rate(self) -> float:
        dt = time.perf_counter() - self.t0
        return (self.done - self.start_done) / dt if dt > 0 else 0.0

    def advance(self, n: int) -> None:
        self.done += int(n)
        if time.perf_counter() - self.last >= self.every_s:
            self.report()

    def report(self, final: bool = False) -> str:
        self.last = time.perf_counter()
        rate = self.rate
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        line = (f"{self.name}: {self.done:,}/{self.total:,} {self.unit} ({pct:.1f}%), {rate:,.0f} {self.unit}/s, "
                + (f"took {_duration(self.last - self.t0)}" if final else f"ETA {_duration(eta)}")
                + f", RSS {current_rss_mb():,.0f} MB (peak {rss_mb():,.0f} MB)")
        self.log.info(line)
        return line
