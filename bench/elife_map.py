"""The eLife map: the whole pipeline (jobs/pipeline.py) on the 1,600 eLife research articles of
../shared/data/elife-articles, with the demo's settings (configs/demo.toml) but the eLife input.

    .venv/bin/python bench/elife_map.py --run runs/elife            # then:
    .venv/bin/python bench/map_screens.py --run runs/demo --run runs/elife --out screens --check

Extracts the shared tar to --xml-dir once, links the research articles into <run>/input/ (the
selection of bench/elife_full.py), writes <run>/elife.toml (configs/demo.toml with the input
replaced) and runs the pipeline on it; an interrupted run continues where it stopped (the pipeline
skips finished stages). Prints the stages' wall times and the map's size.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from elife_full import TAR, research_files  # bench/elife_full.py (a script's own folder is on its import path)

REPO = Path(__file__).resolve().parents[1]

INPUTS = re.compile(r"^inputs = \[\n(?:.*\n)*?\]\n", re.M)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/elife"))
    ap.add_argument("--xml-dir", type=Path, default=Path("/tmp/elife_full_xml"))
    ap.add_argument("--tar", type=Path, default=TAR)
    a = ap.parse_args(argv)
    if not a.tar.is_file() and not any(a.xml_dir.glob("*.xml")):
        print(f"error: {a.tar} not found (the shared eLife set, ../shared/data/elife-articles)", file=sys.stderr)
        return 2
    if not any(a.xml_dir.glob("*.xml")):
        a.xml_dir.mkdir(parents=True, exist_ok=True)
        with tarfile.open(a.tar) as t:
            t.extractall(a.xml_dir, filter="data")
    files = research_files(a.xml_dir)
    inp = a.run / "input"
    inp.mkdir(parents=True, exist_ok=True)
    for f in files:
        if not (inp / f.name).exists():
            try:
                os.link(f, inp / f.name)
            except OSError:
                shutil.copy(f, inp / f.name)
    print(f"research articles: {len(files)} (of {len(list(a.xml_dir.glob('*.xml')))} files) in {inp}")
    demo = (REPO / "configs" / "demo.toml").read_text()
    config, n = INPUTS.subn(f'inputs = [\n  {{ path = "{inp.resolve()}", format = "jats", source = "elife" }},\n]\n',
                            demo, count=1)
    if n != 1:
        print("error: configs/demo.toml has no `inputs = [...]` block to replace", file=sys.stderr)
        return 2
    cfg = a.run / "elife.toml"
    cfg.write_text(config)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, str(REPO / "jobs" / "pipeline.py"), "--config", str(cfg), "--run", str(a.run)])
    wall = time.perf_counter() - t
    if p.returncode:
        print(f"error: the pipeline stopped with exit status {p.returncode}", file=sys.stderr)
        return p.returncode
    stages = json.loads((a.run / "stages.json").read_text())
    print("stage seconds:", ", ".join(f"{k} {v['seconds']:.0f}" for k, v in stages.items()))
    import numpy as np
    xy = np.load(a.run / "paper_xy.npy")
    print(f"map: {int(np.isfinite(xy[:, 0]).sum()):,} papers drawn of {len(xy):,} vectors; wall {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
