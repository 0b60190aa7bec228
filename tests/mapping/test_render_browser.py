"""map.html (mapping.render) in real headless Chromium: no JavaScript errors, labels rendered,
data strings escaped. Skipped where Chromium is not installed (the `browser` fixture)."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
from PIL import Image

from mapping.render import RenderConfig, build_html

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def test_detector_sees_js_errors_and_injection(tmp_path, browser):
    page = tmp_path / "bad.html"
    page.write_text("<html><body><p>hello</p><script>console.error('boom'); undefinedFunction();</script>"
                    "<script>document.body.insertAdjacentHTML('beforeend', '<img src=x onerror=\"window.__pwned=2\">')</script>"
                    "</body></html>")
    r = browser.open_page(page, settle=1.0)
    assert any("undefinedFunction" in e for e in r["errors"]), r["errors"]
    assert any("boom" in e for e in r["errors"]), r["errors"]
    assert r["pwned"] == 2                      # the injection check can fail
    ok = tmp_path / "ok.html"
    ok.write_text("<html><body><p>fine</p></body></html>")
    r = browser.open_page(ok, settle=0.2)
    assert r["errors"] == [] and "fine" in r["text"] and r["pwned"] is None


def test_map_html_no_errors_labels_escaped(tmp_path, browser):
    topics = pd.DataFrame({"cluster": np.arange(4), "size": [40, 30, 20, 10],
                           "label": [EVIL, "protein, folding", "parser, syntax", "galaxy & <b>orbit</b>"],
                           "x": [0.0, 1, 0, 1], "y": [0.0, 0, 1, 1], "main_field": ["Bio", "Bio", "CS", "<i>Astro</i>"],
                           "mean_year": [2001.0, np.nan, 2010, 2015], "interdisciplinarity": [0.0, 1.5, np.nan, 2]})
    examples = [[EVIL, "A title"], ["Protein"], ["Parser"], ["Galaxy"]]
    buf = io.BytesIO()
    Image.new("RGB", (20, 20), "white").save(buf, format="PNG")
    html = build_html(topics, examples, buf.getvalue(), (-0.5, 1.5), (-0.5, 1.5), RenderConfig(title="test map"))
    assert EVIL not in html and "</script><img" not in html  # escaped inside Bokeh's JSON
    page = tmp_path / "map.html"
    page.write_text(html)
    r = browser.open_page(page, wait_js=browser.TABLE_RENDERED, timeout=30)
    assert r["ready"], "BokehJS did not render the topic table"
    assert r["errors"] == [], r["errors"]
    assert r["pwned"] is None, "a data string was executed as HTML"
    bad = [t for t in r["tags"] if t.endswith("[pwned]") or t.startswith("img") or t in ("b", "i")]
    assert not bad, bad
    for label in (EVIL, "protein, folding", "parser, syntax", "galaxy & <b>orbit</b>", "<i>Astro</i>"):
        assert label in r["text"], label        # shown literally, as text


def test_pipeline_map_html_in_browser(tmp_path, browser, make_run):
    from sciencemap.storage import read_table
    from mapping.cluster import ClusterConfig, run_cluster
    from mapping.knn import KnnConfig, run_knn
    from mapping.render import run_render

    layout, _ = make_run(tmp_path / "r", n_clusters=5, per=30, dim=16, noise=0.3, evil_title=EVIL)
    run_knn(KnnConfig(k=8), layout)
    run_cluster(ClusterConfig(resolutions=[0.03], min_cluster_size=3), layout)
    run_render(RenderConfig(layout_method="pca", width=400, height=300, legend_width=120), layout)
    # Switch the colour overlay the way the Select widget does; the CustomJS callback must recolour.
    switch = """(() => { const sel = [...Bokeh.documents[0].all_models].find(m => m.constructor.__name__ === 'Select');
      sel.value = 'c_year'; return sel.value; })()"""
    colours = """(() => { const src = [...Bokeh.documents[0].all_models].find(m => m.data && 'c_year' in m.data);
      return JSON.stringify([src.data.color, src.data.c_year, src.data.c_field]); })()"""
    r = browser.open_page(layout.map_html, wait_js=browser.TABLE_RENDERED, timeout=30,
                               probes={"switch": switch, "colours": colours})
    assert r["ready"] and r["errors"] == [], r["errors"]
    color, c_year, c_field = json.loads(r["probes"]["colours"])
    assert c_year != c_field
    assert color == c_year
    assert r["pwned"] is None
    t = read_table(layout.table("topics")).to_pandas().sort_values("size", ascending=False)
    for label in t["label"].head(5):
        assert label in r["text"]
