"""The command line of every job, generated from the stage registry.

`jobs/<stage>.py`, `python -m jobs.<stage>` and the console script `sciencemap <stage>` all end
here: the options are the stage's config dataclass fields (sciencemap.config.add_options) plus
`--run` and `--config`; the stage's summary is printed (JSON unless the stage says otherwise).

Commands that are not stages (they read a run and write nothing, e.g. `lookup`) are listed under
the entry-point group `sciencemap.commands` as `main(argv, prog) -> exit code` functions, which
end in `command_main`.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

from sciencemap.config import add_options, config_from_args, load_toml
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError, dist_env, log_to_stderr, run_cli
from sciencemap.stages import ENTRY_POINT_GROUP, StageContext, all_stages, get_stage, pipeline_stages
from sciencemap.storage import require_dir

COMMAND_GROUP = "sciencemap.commands"


def unshadow_stage_packages() -> None:
    """Re-run this script with `python -P` when its folder shadows a stage package.

    Python puts a script's own folder first on the import path, so `python jobs/importance.py`
    (and spark-submit, which runs the script the same way) would import jobs/importance.py in
    place of the `importance` package. -P (Python >= 3.11) leaves that folder out; exec keeps the
    process, its environment (spark-submit's gateway variables included) and its arguments."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    if script is None or getattr(main, "__spec__", None) is not None or sys.flags.safe_path:
        return  # not a script (python -m, console script, tests) or already without its folder
    folder = Path(script).resolve().parent
    roots = {ep.module.split(".")[0] for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if any((folder / f"{r}.py").exists() for r in roots):
        os.execv(sys.executable, [sys.executable, "-P", script, *sys.argv[1:]])


def stage_parser(name: str, prog: str | None = None) -> argparse.ArgumentParser:
    stage = get_stage(name)
    ap = argparse.ArgumentParser(prog=prog, description=stage.summary,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    # --run-dir: under torchrun, whose own parser takes --run as an abbreviation of its --run-path.
    ap.add_argument("--run", "--run-dir", dest="run", required=True, help="run directory")
    ap.add_argument("--config", help=f"TOML file; its [{name}] section fills {stage.config.__name__}")
    if stage.ranks:
        ap.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                        help="run as N processes on this machine (one per GPU on CUDA; torch's elastic "
                             "launcher, as torchrun); a rank's error is reported once, with exit code 2")
    add_options(ap, stage.config)
    return ap


def run_stage(name: str, argv: list[str] | None = None, prog: str | None = None) -> dict:
    """Parse a job's options, run the stage, print its summary; returns the summary."""
    stage = get_stage(name)
    args = stage_parser(name, prog).parse_args(argv)
    if stage.ranks and args.nproc_per_node > 1 and dist_env()[0] == 1:
        raise RanksFinished(_launch(name, args.nproc_per_node, sys.argv[1:] if argv is None else argv))
    toml = load_toml(args.config, sections=[s.name for s in all_stages()])
    cfg = config_from_args(stage.config, toml.get(name), args, origin=f"config file {args.config} [{name}]"
                           if name in toml else "")
    run_dir = Path(args.run) if stage.creates_run else require_dir(args.run, "run directory")
    with StageContext() as ctx:
        summary = stage.run(cfg, RunLayout(run_dir), ctx)
    text = stage.show(summary) if stage.show else json.dumps(summary, indent=2, default=str)
    if text:
        print(text)
    return summary


class RanksFinished(Exception):
    """The job ran as several ranks (--nproc-per-node); carries the launcher's exit code."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _launch(name: str, nproc: int, argv: list[str]) -> int:
    """`sciencemap <name> ...` again as `nproc` ranks, without --nproc-per-node."""
    from sciencemap.launch import launch_ranks

    if nproc < 1:
        raise UserError(f"--nproc-per-node {nproc}: give at least 1")
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc-per-node":
            skip = True
        elif not a.startswith("--nproc-per-node="):
            rest.append(a)
    return launch_ranks(nproc, "sciencemap.cli", [name, *rest])


def stage_main(name: str, argv: list[str] | None = None, prog: str | None = None) -> int:
    """Exit code of one job (a UserError is one line on stderr and exit code 2)."""
    unshadow_stage_packages()
    log_to_stderr()
    try:
        return run_cli(lambda a: run_stage(name, a, prog), argv)
    except RanksFinished as done:
        return done.code


def command_main(main, argv: list[str] | None = None) -> int:
    """Exit code of a command that is not a stage: `main(argv)` parses its own options."""
    unshadow_stage_packages()
    log_to_stderr()
    return run_cli(main, argv)


def commands() -> dict[str, object]:
    """The extra commands' entry points by name (group COMMAND_GROUP)."""
    return {ep.name: ep for ep in entry_points(group=COMMAND_GROUP)}


def pipeline_main(argv: list[str] | None = None, prog: str | None = None) -> int:
    from sciencemap.pipeline import PipelineOptions, run_pipeline

    unshadow_stage_packages()
    log_to_stderr()

    def main(a):
        names = [s.name for s in pipeline_stages()]
        ap = argparse.ArgumentParser(prog=prog, description=PIPELINE_SUMMARY)
        ap.add_argument("--run", required=True, help="run directory (created if missing)")
        ap.add_argument("--config", help="TOML file with one [section] per stage")
        ap.add_argument("--from", dest="first", choices=names, help="first stage to run")
        ap.add_argument("--to", dest="last", choices=names, help="last stage to run")
        ap.add_argument("--force", action="store_true", help="re-run stages that already finished")
        o = ap.parse_args(a)
        run_pipeline(PipelineOptions(run=Path(o.run), config=o.config, first=o.first, last=o.last, force=o.force))

    return run_cli(main, argv)


PIPELINE_SUMMARY = "Run the whole pipeline (or a slice of it) into one run directory; finished stages are skipped."


def command_summary(ep) -> str:
    """A command's one line: its module's SUMMARY (importing the module, not running it)."""
    import importlib

    module = importlib.import_module(ep.module)
    return getattr(module, "SUMMARY", None) or (module.__doc__ or "").strip().split("\n")[0]


def usage() -> str:
    """`sciencemap --help`: every command with its one line, stages in pipeline order."""
    stages = all_stages()
    rows = [("The whole run", [("pipeline", PIPELINE_SUMMARY)]),
            ("Its stages, in order (each one job)", [(s.name, s.summary) for s in stages if s.in_pipeline]),
            ("Jobs outside the pipeline", [(s.name, s.summary) for s in stages if not s.in_pipeline]),
            ("Commands that read a run or a table and write no run",
             [(name, command_summary(ep)) for name, ep in sorted(commands().items())])]
    width = max(len(name) for _, group in rows for name, _ in group) + 2
    lines = ["usage: sciencemap <command> [options]", "",
             "Each command has its own --help with every option; the settings of a stage also come from",
             "the [<stage>] section of a TOML file given with --config.", ""]
    for title, group in rows:
        if group:
            lines.append(f"{title}:")
            lines += [textwrap.fill(text, 100, initial_indent=f"  {name:<{width}}", subsequent_indent=" " * (width + 2),
                                  break_on_hyphens=False)
                      for name, text in group]
            lines.append("")
    return "\n".join(lines).rstrip()


def known_commands() -> list[str]:
    return ["pipeline"] + [s.name for s in all_stages()] + sorted(commands())


def main(argv: list[str] | None = None) -> int:
    """`sciencemap <stage|pipeline|command> [options]`: the console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        try:
            text = usage()
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(text, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "pipeline":
        return pipeline_main(rest, prog="sciencemap pipeline")
    extra = commands().get(cmd)
    if extra is not None:
        return extra.load()(rest, prog=f"sciencemap {cmd}")
    if cmd not in {s.name for s in all_stages()}:
        near = difflib.get_close_matches(cmd, known_commands(), n=1, cutoff=0.6)
        hint = f"did you mean '{near[0]}'? " if near else ""
        print(f"error: unknown command '{cmd}'; {hint}`sciencemap --help` lists them all", file=sys.stderr)
        return 2
    return stage_main(cmd, rest, prog=f"sciencemap {cmd}")


if __name__ == "__main__":   # `python -m sciencemap.cli <stage> ...`: how --nproc-per-node starts its ranks
    sys.exit(main())
