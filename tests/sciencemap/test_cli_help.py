"""`sciencemap --help` lists every registered command with its one line; an unknown command
names the nearest one."""
from importlib.metadata import entry_points

from sciencemap.cli import COMMAND_GROUP, main
from sciencemap.stages import ENTRY_POINT_GROUP, all_stages


def _listed(text: str) -> dict[str, str]:
    """name -> the first line of its summary, from the help's two-column rows."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            name, _, first = line.strip().partition(" ")
            rows[name] = first.strip()
    return rows


def test_help_lists_every_registered_command_with_its_summary(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    listed = _listed(out)
    registered = ({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
                  | {ep.name for ep in entry_points(group=COMMAND_GROUP)} | {"pipeline"})
    assert set(listed) == registered
    assert {"place", "generate", "lookup", "classify-sections", "benchmark"} <= set(listed)
    for name, first in listed.items():
        assert len(first) > 10, name   # a summary, not a bare name
    stages = [s.name for s in all_stages() if s.in_pipeline]
    order = [name for name in listed if name in stages]
    assert order == stages             # in pipeline order
    assert out.index("knn ") < out.index("place ") < out.index("lookup ")


def test_no_command_prints_the_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "lookup" in capsys.readouterr().err


def test_an_unknown_command_suggests_the_nearest(capsys):
    assert main(["knnn", "--run", "x"]) == 2
    assert capsys.readouterr().err.strip() == ("error: unknown command 'knnn'; did you mean 'knn'? "
                                               "`sciencemap --help` lists them all")
    assert main(["zzzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err


def test_every_job_door_answers_help_in_all_three_forms(repo_root):
    """`python jobs/X.py --help`, `python -m jobs.X --help` and `sciencemap X --help` exit 0 with a
    usage line for every job: a door whose folder shadows a stage package (jobs/importance.py
    beside `import importance`) fails the first form otherwise."""
    import os
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    console = Path(sys.executable).parent / "sciencemap"
    doors = sorted(p.stem for p in (repo_root / "jobs").glob("*.py") if p.stem != "__init__")
    assert {"classify_sections", "lookup", "benchmark", "knn", "place"} <= set(doors)
    forms = [form for door in doors
             for form in ([sys.executable, f"jobs/{door}.py"], [sys.executable, "-m", f"jobs.{door}"],
                          [str(console), door.replace("_", "-")])]

    def ask(form):
        return subprocess.run([*form, "--help"], cwd=repo_root, capture_output=True, text=True, timeout=120)

    # 45 interpreters, most of their time imports: as many at once as there are cores
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        answers = list(pool.map(ask, forms))
    failed = {" ".join(form[1:] if form[0] == sys.executable else form): (p.returncode, p.stderr.strip().splitlines()[-1:])
              for form, p in zip(forms, answers) if p.returncode != 0 or "usage:" not in p.stdout}
    assert len(answers) == 3 * len(doors) and not failed, failed
