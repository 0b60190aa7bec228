"""Execute notebooks/explore_run.ipynb on a finished run and keep it there with its outputs:
<run>/explore_run.ipynb and an HTML export <run>/explore_run.html (images inline: opens offline).

    .venv/bin/python notebooks/execute.py --run runs/demo      # make demo runs this last

The notebook runs in a real kernel (nbclient, ipykernel) with SCIENCEMAP_RUN and SCIENCEMAP_REPO
set, from the notebooks folder, as a user's Jupyter would run it; a failing cell stops it with that
cell's error and nothing is written.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOTEBOOK = HERE / "explore_run.ipynb"


def execute(run: Path, timeout: int = 1200) -> tuple[Path, Path]:
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    from sciencemap.storage import write_bytes_atomic, write_text_atomic

    run = run.resolve()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = {"SCIENCEMAP_RUN": str(run), "SCIENCEMAP_REPO": str(HERE.parent)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)            # the kernel inherits this process's environment
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(HERE)}}).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out_nb, out_html = run / NOTEBOOK.name, run / (NOTEBOOK.stem + ".html")
    write_text_atomic(out_nb, nbformat.writes(nb))
    html, _ = HTMLExporter(embed_images=True).from_notebook_node(nb)
    write_bytes_atomic(out_html, html.encode("utf-8"))
    return out_nb, out_html


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, type=Path, help="a finished run (after evaluate)")
    a = ap.parse_args(argv)
    if not (a.run / "report.md").is_file():
        print(f"error: {a.run} is not a finished run (no report.md); run the pipeline first", file=sys.stderr)
        return 2
    for path in execute(a.run):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
