"""Finished runs' maps in headless Chromium at 1400 x 900: the runs named in SCIENCEMAP_MAP_RUNS
(folders joined by ":"), e.g. the demo's and the eLife map (bench/elife_map.py, minutes to build,
so not in the default suite, where the end-to-end test checks its own run's map the same way):

    SCIENCEMAP_MAP_RUNS=runs/demo:runs/elife .venv/bin/python -m pytest -q tests/test_maps_in_browser.py

Each map.html, and placed_maps/map.html where jobs/place.py has run: ready with no console error;
every visible label clear of the others, of the legend and of the frame's edge, before and after
zooming in; the research-area layer drawn and shown with every area of the run's areas table; on a
placed map, the placed layer shown with every placed paper of the run's placed table.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

RUNS = [Path(p) for p in os.environ.get("SCIENCEMAP_MAP_RUNS", "").split(":") if p]
pytestmark = pytest.mark.skipif(not RUNS, reason="SCIENCEMAP_MAP_RUNS names no finished run")

LAYERS = ("JSON.stringify({visible: __model('area_shapes').visible, areas: __model('area_regions').data.area, "
          "placed: __model('placed') ? __model('placed').data.x.length : null, "
          "placed_visible: __model('placed_points') ? __model('placed_points').visible : null})")



def _pages():
    for run in RUNS:
        yield pytest.param(run, run / "map.html", id=f"{run.name}/map.html")
        if (run / "placed_maps" / "map.html").is_file():
            yield pytest.param(run, run / "placed_maps" / "map.html", id=f"{run.name}/placed_maps/map.html")


@pytest.mark.parametrize("run,page", list(_pages()))
def test_the_map_reads_in_chromium(browser, run, page):
    from mapping.render import RenderConfig

    assert page.is_file(), f"{page} not found: build the run first (make demo, bench/elife_map.py)"
    r = browser.open_page(page, wait_js=browser.MAP_READY, timeout=90, viewport=(1400, 900),
                          probes={"helpers": browser.MAP_HELPERS, "before": browser.LABEL_BOXES, "layers": LAYERS,
                                  "zoom": browser.MAP_ZOOM_IN, "after": browser.LABEL_BOXES})
    assert r["ready"] and r["errors"] == [], r["errors"]
    top = RenderConfig().labels_on_map
    areas_shown, topics_shown = browser.check_labels(json.loads(r["probes"]["before"]), top)
    browser.check_labels(json.loads(r["probes"]["after"]), top)
    areas = set(pq.read_table(run / "areas", columns=["label"]).column("label").to_pylist())
    assert areas_shown and areas_shown <= areas and len(topics_shown) > 0
    layers = json.loads(r["probes"]["layers"])
    assert layers["visible"] and set(layers["areas"]) == areas
    if page.parent.name == "placed_maps":
        placed = pq.read_table(run / "placed", columns=["reason"]).column("reason").null_count
        assert layers["placed_visible"] and layers["placed"] == placed
    else:
        assert layers["placed"] is None
