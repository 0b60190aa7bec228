"""Screenshots of runs' maps, to read them by eye side by side (issue 32).

    .venv/bin/python bench/map_screens.py --run runs/demo --out screens            # after `make demo`
    .venv/bin/python bench/map_screens.py --run runs/demo --run runs/elife --out screens --check   # bench/elife_map.py

For each run, into <out>/<run folder name>/: map_html.png, the run's map.html opened in headless
Chromium (the browser tests' driver, tests/conftest.py) at --width x --height (1400 x 900) once the
page is ready (window.sciencemap.ready: data decoded, labels placed, plot painted), then zoomed in
to the middle quarter (map_html_zoom.png); a copy of each map PNG the render stage wrote (map.png,
map_field.png, map_year.png, map_interdisciplinarity.png); and, where the datamapplot package is
installed, datamapplot_static.png: its static plot of the same paper positions (paper_xy.npy), the
papers of the --labels (25, as labels_on_png) largest topics named by their topic's label, the rest
unlabelled (datamapplot places the labels itself, outside the cloud on leader lines). Without it the
index says so. <out>/index.html shows them side by side. Prints what it wrote and, per HTML view, how
many area and topic labels the page shows, with the browser tests' verdicts: labels clear of each
other, of the legend and of the frame's edge (tests/conftest.py check_map_labels), the area shapes
drawn and shown, console errors; a run placed with jobs/place.py also gets placed_map_html.png and
placed_map_html_zoom.png of placed_maps/map.html, with its placed layer's papers. With --check the
script exits 1 when any view fails.
"""
from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import logging
import shutil
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PNGS = ("map.png", "map_field.png", "map_year.png", "map_interdisciplinarity.png")
LABEL_COUNTS = ("JSON.stringify([Bokeh.documents[0].get_model_by_name('field_labels').data.label.length, "
                "Bokeh.documents[0].get_model_by_name('map_labels').data.label.length])")
# The area shapes (shown or not, the areas drawn) and, on a placed map, the placed papers' layer.
LAYERS = """JSON.stringify({areas_shown: !!(__model('area_shapes') && __model('area_shapes').visible),
  areas_drawn: __model('area_regions') ? new Set(__model('area_regions').data.area).size : 0,
  placed: __model('placed') ? __model('placed').data.x.length : null,
  placed_shown: __model('placed_points') ? __model('placed_points').visible : null})"""


def conftest():
    """tests/conftest.py, loaded by file: the browser tests' headless Chromium (CDP over a pipe)."""
    spec = importlib.util.spec_from_file_location("sciencemap_tests_conftest", REPO / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def html_screens(page: Path, out: Path, width: int, height: int, prefix: str = "map_html",
                 timeout: float = 60) -> list[dict]:
    """<prefix>.png and <prefix>_zoom.png of the page; per view the labels shown and the verdict of
    the browser tests' label check (tests/conftest.py check_map_labels: no two labels intersect, all
    inside the frame, none under the legend), the area layer's areas and, on a placed map, the
    placed layer's papers."""
    t = conftest()
    c = t.Chromium()
    views = []
    try:
        target = c.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sess = c.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for dom in ("Runtime.enable", "Log.enable", "Page.enable"):
            c.send(dom, session=sess)
        c.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                      "mobile": False}, session=sess)
        c.send("Page.navigate", {"url": page.resolve().as_uri()}, session=sess)

        def ev(expr):
            r = c.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True},
                       session=sess)
            return r.get("result", {}).get("value")

        deadline = time.monotonic() + timeout
        while not ev(t.MAP_READY):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{page} did not get ready in {timeout:.0f} s")
            c.pump(0.25)
        ev(t.MAP_HELPERS)
        for name, before in ((f"{prefix}.png", None), (f"{prefix}_zoom.png", t.MAP_ZOOM_IN)):
            if before:
                ev(before)
            c.pump(1.0)                     # the labels are placed once a frame after a range change
            shot = c.send("Page.captureScreenshot", {"format": "png"}, session=sess)
            (out / name).write_bytes(base64.b64decode(shot["data"]))
            areas, topics = json.loads(ev(LABEL_COUNTS))
            try:
                t.check_map_labels(json.loads(ev(t.LABEL_BOXES)), 10**9)
                verdict = "labels clear"
            except AssertionError as e:
                verdict = f"LABELS CLASH: {str(e)[:300]}"
            layers = json.loads(ev(LAYERS))
            views.append({"file": name, "area_labels": areas, "topic_labels": topics, "verdict": verdict, **layers,
                          "errors": t.page_errors(c.events)})
    finally:
        c.close()
    return views


def datamapplot_static(run: Path, out: Path, labels: int) -> str:
    """datamapplot's static plot of the run's paper positions, the `labels` largest topics named, or why not."""
    try:
        import datamapplot
    except ImportError:
        return "datamapplot is not installed (pip install datamapplot==0.7.3): no static plot beside"
    import numpy as np
    import pyarrow.parquet as pq

    from mapping.place import load_map
    from sciencemap.layout import RunLayout

    xy = np.load(run / "paper_xy.npy")
    state = load_map(RunLayout(run), len(xy))
    topics = pq.read_table(run / "topics").to_pandas()
    shown = topics[topics["resolution"] == state.resolution].set_index("cluster")
    # the PNGs' labels: the `labels` largest topics named, the rest "Unlabelled" (datamapplot's none)
    label = shown.sort_values("size", ascending=False, kind="stable")["label"].head(labels)
    topic_label = label.reindex(state.clusters).fillna("Unlabelled").to_numpy(dtype=object)
    ok = np.isfinite(xy[:, 0]) & (state.topic_of_row >= 0)
    names = topic_label[state.topic_of_row[ok]]
    t = time.perf_counter()
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    with warnings.catch_warnings():     # its default font (Roboto) is fetched from Google: offline, a fallback
        warnings.simplefilter("ignore")
        fig, _ = datamapplot.create_plot(xy[ok], names, font_family="DejaVu Sans")
    fig.savefig(out / "datamapplot_static.png", dpi=100)
    return f"datamapplot {datamapplot.__version__}: static plot in {time.perf_counter() - t:.1f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, action="append", required=True, help="a run directory with map.html (repeat)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--check", action="store_true", help="exit 1 if any view fails the browser tests' checks")
    ap.add_argument("--labels", type=int, default=25, help="largest topics named in datamapplot's plot (the PNGs' 25)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows, bad = [], 0
    for run in a.run:
        if not (run / "map.html").is_file():
            print(f"error: {run} has no map.html: run the pipeline (make demo) or the render stage first",
                  file=sys.stderr)
            return 2
        out = a.out / run.resolve().name
        out.mkdir(parents=True, exist_ok=True)
        views = html_screens(run / "map.html", out, a.width, a.height)
        if (run / "placed_maps" / "map.html").is_file():        # after jobs/place.py
            views += html_screens(run / "placed_maps" / "map.html", out, a.width, a.height, prefix="placed_map_html")
        pngs = [p for p in PNGS if (run / p).is_file()]
        for p in pngs:
            shutil.copyfile(run / p, out / p)
        note = datamapplot_static(run, out, a.labels)
        for v in views:
            placed = "" if v["placed"] is None else f"; placed layer: {v['placed']} papers, shown {v['placed_shown']}"
            print(f"{run}: {v['file']}: {v['area_labels']} area and {v['topic_labels']} topic labels, {v['verdict']}; "
                  f"area shapes: {v['areas_drawn']} areas, shown {v['areas_shown']}{placed}; "
                  f"console errors: {len(v['errors'])} {v['errors'][:3]}")
            bad += (not v["verdict"].startswith("labels clear") or v["errors"] != [] or not v["areas_shown"]
                    or v["areas_drawn"] == 0 or v["placed_shown"] is False)
        print(f"{run}: {', '.join(pngs)} copied; {note}")
        rows.append((out.name, views, pngs, note))
    cells = []
    for name, views, pngs, note in rows:
        imgs = "".join(f'<figure><img src="{name}/{f}" width="700"><figcaption>{f}</figcaption></figure>'
                       for f in [v["file"] for v in views] + pngs
                       + (["datamapplot_static.png"] if (a.out / name / "datamapplot_static.png").is_file() else []))
        cells.append(f"<h2>{name}</h2><p>{note}</p><div style='display:flex;flex-wrap:wrap'>{imgs}</div>")
    (a.out / "index.html").write_text("<html><body>" + "".join(cells) + "</body></html>")
    print(f"wrote {a.out / 'index.html'}")
    if bad:
        print(f"{bad} view(s) failed the check: labels clashing, console errors, or a layer missing",
              file=sys.stderr)
    return 1 if bad and a.check else 0


if __name__ == "__main__":
    sys.exit(main())
