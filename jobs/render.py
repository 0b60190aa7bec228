"""Lay out the map (UMAP of topic vectors) and render it: writes `topics`, map.png and map.html.

    python jobs/render.py --run runs/demo [--config demo.toml] [--map-resolution 0.01] [--layout umap|pca]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importance.contracts import RunLayout  # noqa: E402
from importance.runtime import config_from, load_toml, require_dir, run_cli  # noqa: E402
from mapping.render import RenderConfig, run_render  # noqa: E402


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="run directory")
    ap.add_argument("--config", help="TOML file; its [render] section fills RenderConfig")
    ap.add_argument("--map-resolution", type=float, help="one of the clustered resolutions")
    ap.add_argument("--layout", dest="layout_method", choices=["umap", "pca"])
    ap.add_argument("--width", type=int)
    ap.add_argument("--height", type=int)
    a = ap.parse_args(argv)
    cfg = config_from(RenderConfig, load_toml(a.config).get("render"), map_resolution=a.map_resolution,
                      layout_method=a.layout_method, width=a.width, height=a.height)
    print(json.dumps(run_render(cfg, RunLayout(require_dir(a.run, "run directory"))), indent=2))


if __name__ == "__main__":
    sys.exit(run_cli(main))
