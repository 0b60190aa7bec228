"""Verdicts of a bench script's targets and checks, so that a figure cannot pass by accident.

Each target or check gets one line: `met`, `MISSED` or `not checked (<reason>)`. A script that
cannot check a target (no GPU, no data, a run too small for the check) says so with the reason
instead of leaving the line out, and the exit code is non-zero when any target is missed or not
checked; `--no-fail` (for exploratory runs) prints the same lines and exits 0.

    from verdicts import Verdicts   # bench/verdicts.py: a script's own folder is on its import path

    ap.add_argument("--target-speed", type=float, default=5.0, help="...")
    Verdicts.add_arguments(ap)                                  # --no-fail
    v = Verdicts()
    v.at_least("speed vs exact search", speed, args.target_speed, "{:.1f}x")
    v.at_most("peak RSS / raw vectors", ratio, 1.5, "{:.2f}x")
    v.check("resumed edges identical to the uninterrupted run's", same)
    v.not_checked("kill/resume", "fewer than 3 query blocks")
    out["verdicts"] = v.as_json()                               # beside the figures, when written
    sys.exit(v.finish(args.no_fail))

The block printed by finish:

    verdicts:
      speed vs exact search: 0.8x (target >= 5.0x): MISSED
      kill/resume: not checked (fewer than 3 query blocks)
    1 MISSED, 1 not checked: exit 1
"""
from __future__ import annotations

import argparse
import math
import numbers
from dataclasses import asdict, dataclass

MET, MISSED, NOT_CHECKED = "met", "MISSED", "not checked"


@dataclass
class Verdict:
    name: str
    measured: str | None      # the figure as printed (None for a check, or when not measured)
    target: str | None        # as printed: ">= 5.0x", "<= 1.2"; None for a check that holds or not
    status: str               # MET, MISSED or NOT_CHECKED
    reason: str = ""          # why not checked, or what a check found

    def line(self) -> str:
        """`name: figure (target >= t): met`, `name: MISSED (what was found)`, `name: not checked (why)`."""
        head = self.name + (f": {self.measured}" if self.measured is not None else "") \
            + (f" (target {self.target})" if self.target else "")
        return f"{head}: {self.status}" + (f" ({self.reason})" if self.reason else "")


def _finite(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)   # NumPy scalars too


class Verdicts:
    def __init__(self) -> None:
        self.items: list[Verdict] = []

    @staticmethod
    def add_arguments(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--no-fail", action="store_true",
                        help="exploratory run: print the verdicts but exit 0 when a target is missed or not checked")

    def _threshold(self, name: str, value, target: float, fmt: str, op: str, ok: bool, reason: str) -> Verdict:
        want = f"{op} {fmt.format(target)}"
        if not _finite(value):   # nothing to compare: the target was not checked, never "met"
            v = Verdict(name, None, want, NOT_CHECKED, reason or "no figure was measured")
        else:
            v = Verdict(name, fmt.format(value), want, MET if ok else MISSED)
        self.items.append(v)
        return v

    def at_least(self, name: str, value, target: float, fmt: str = "{:.4g}", reason: str = "") -> Verdict:
        """A figure that must reach `target`; a missing or NaN figure is not checked, `reason` saying why."""
        return self._threshold(name, value, target, fmt, ">=", _finite(value) and value >= target, reason)

    def at_most(self, name: str, value, target: float, fmt: str = "{:.4g}", reason: str = "") -> Verdict:
        """A figure that must stay at or below `target`."""
        return self._threshold(name, value, target, fmt, "<=", _finite(value) and value <= target, reason)

    def check(self, name: str, ok: bool, detail: str = "") -> Verdict:
        """A check that holds or not (an equality, a page that loads); `detail` says what was found."""
        v = Verdict(name, None, None, MET if ok else MISSED, detail)
        self.items.append(v)
        return v

    def not_checked(self, name: str, reason: str, target: str | None = None) -> Verdict:
        v = Verdict(name, None, target, NOT_CHECKED, reason)
        self.items.append(v)
        return v

    def as_json(self) -> list[dict]:
        return [asdict(v) for v in self.items]

    def exit_code(self, no_fail: bool = False) -> int:
        """1 when any target is missed or not checked, or none was reached at all; 0 with no_fail."""
        bad = not self.items or any(v.status != MET for v in self.items)
        return 1 if bad and not no_fail else 0

    def finish(self, no_fail: bool = False) -> int:
        """Print the block of verdict lines and a summary; return the exit code (0 when every
        target is met, or with --no-fail)."""
        print("\nverdicts:")
        for v in self.items:
            print(f"  {v.line()}")
        missed = sum(v.status == MISSED for v in self.items)
        unchecked = sum(v.status == NOT_CHECKED for v in self.items)
        code = self.exit_code(no_fail)
        if not self.items:   # a run that reached no verdict has shown nothing
            print(f"no target was checked: exit {code}")
        elif not missed and not unchecked:
            print(f"all {len(self.items)} met: exit 0")
        else:
            print(f"{missed} MISSED, {unchecked} not checked: exit {code}" + (" (--no-fail)" if no_fail else ""))
        print(end="", flush=True)
        return code
