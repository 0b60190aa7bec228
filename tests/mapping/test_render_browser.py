"""map.html (mapping.html_map, written by the render stage) in real headless Chromium: no JavaScript
errors, the topics decoded from the blob, hover, overlays, search, WebGL with a canvas fallback,
data strings shown as text. Skipped where Chromium is not installed (the `browser` fixture)."""
from __future__ import annotations

import io
import json
import re

import numpy as np
import pandas as pd
from PIL import Image

from mapping.html_map import build_html, payload_of, unpack_topics
from mapping.render import RenderConfig

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
SEARCH_RESULT = "JSON.stringify([__model('topics').selected.indices, __model('search_info').text])"
NO_WEBGL = """const get = HTMLCanvasElement.prototype.getContext;
HTMLCanvasElement.prototype.getContext = function (type, ...args) { return /webgl/i.test(type) ? null : get.call(this, type, ...args); };"""


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (20, 20), "white").save(buf, format="PNG")
    return buf.getvalue()


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
    examples = [["A title", EVIL], ["Protein"], ["Parser"], ["Galaxy"]]
    html = build_html(topics, examples, _png(), (-0.5, 1.5), (-0.5, 1.5), RenderConfig(title="test map <b>x</b>"))
    assert EVIL not in html and "</script><img" not in html and "<b>x</b>" not in html
    page = tmp_path / "map.html"
    page.write_text(html)
    # hover over the <script> topic (row 0: the largest): its example title is shown in the tooltip
    r = browser.open_page(page, wait_js=f"({browser.MAP_READY}) && {browser.TABLE_RENDERED}", timeout=30,
                          probes={"helpers": browser.MAP_HELPERS, "hover": "__hover(0)"})
    assert r["ready"], "the map did not load or BokehJS did not render the topic table"
    assert r["errors"] == [], r["errors"]
    assert r["probes"]["hover"] == EVIL
    assert r["pwned"] is None, "a data string was executed as HTML"
    bad = [t for t in r["tags"] if t.endswith("[pwned]") or t.startswith("img") or t in ("b", "i")]
    assert not bad, bad
    for label in (EVIL, "protein, folding", "parser, syntax", "galaxy & <b>orbit</b>", "<i>Astro</i>", "test map <b>x</b>"):
        assert label in r["text"], label        # shown literally, as text
    text = r["text"]
    assert "A title" in text and text.count(EVIL) >= 3   # table cell, tooltip label, tooltip example
    assert re.search(r"mean year:\s*2001\.0", text)


def test_generated_map_decodes_hovers_switches_and_searches(tmp_path, browser, generated_topics):
    n = 2000
    want = {}

    def matches(df, query):
        hay = (df["label"] + "\n" + df["ex0"] + "\n" + df["ex1"] + "\n" + df["ex2"]).str.lower()
        return [i for i, h in enumerate(hay) if all(t in h for t in query.lower().split())]

    topics, examples = generated_topics(n)
    fields = pd.DataFrame({"label": ["Life <sciences>", "Physics"], "x": [-5.0, 5.0], "y": [0.0, 3.0],
                           "size": [1500, 500]})
    html = build_html(topics, examples, _png(), (-20, 20), (-20, 20), RenderConfig(labels_on_map=25), fields)
    df, head = unpack_topics(payload_of(html))
    page = tmp_path / "map.html"
    page.write_text(html)
    title_word = df["ex1"][1234].split()[2].lower()        # a word of a title
    terms = df["label"][77].split(", ")                    # terms of a label; both must match (AND)
    want["title"], want["label"] = matches(df, title_word), matches(df, " ".join(terms[:2]))
    assert 1234 in want["title"] and 77 in want["label"]
    probes = {
        "data": """(() => { const d = __model('topics').data; const pick = i => ({label: d.label[i], ex0: d.ex0[i],
            ex2: d.ex2[i], size: d.size[i], field: d.main_field[i], year: d.year_s[i], div: d.interdisciplinarity_s[i], x: d.x[i]});
            return JSON.stringify({n: sciencemap.n, cols: Object.keys(d).sort(), len: d.label.length,
              rows: [0, 1, 999, 1999].map(pick), labels: __model('map_labels').data.label.length,
              fields: __model('field_labels').data.label,
              webgl: __view('topic_points').has_webgl,
              gl_available: !!document.createElement('canvas').getContext('webgl')}); })()""",
        "tooltip": "JSON.stringify(__model('hover').tooltips)",
        "c_field": "JSON.stringify(__colours())",
        "to_year": "__model('overlay').value = 'year'",
        "c_year": "JSON.stringify([__colours(), __model('year_bar').visible, __model('field_legend').visible, "
                  "__model('year_bar').title, __model('year_mapper').nan_color])",
        "to_div": "__model('overlay').value = 'interdisciplinarity'",
        "c_div": "JSON.stringify([__colours(), __model('interdisciplinarity_bar').visible, __model('year_bar').visible, "
                 "__model('interdisciplinarity_bar').title])",
        # (a CustomJS callback runs after the probe that triggers it: setting and reading are two probes)
        "set_title": f"__model('search').value = {json.dumps(title_word.upper())}",
        "search_title": SEARCH_RESULT,
        "set_label": f"__model('search').value = {json.dumps(' '.join(terms[:2]))}",
        "search_label": SEARCH_RESULT,
        "set_none": "__model('search').value = 'zzzqqq'",
        "search_none": SEARCH_RESULT,
        "hover": "__hover(999)",
    }
    r = browser.open_page(page, wait_js=browser.MAP_READY, timeout=60, probes={"helpers": browser.MAP_HELPERS, **probes})
    assert r["ready"] and r["errors"] == [], r["errors"]
    p = r["probes"]
    d = json.loads(p["data"])
    assert d["n"] == n == d["len"] and d["labels"] == 25
    assert d["fields"] == ["Life <sciences>", "Physics"]
    assert {"label", "size", "main_field", "year_s", "interdisciplinarity_s", "ex0", "ex1", "ex2", "x", "y"} <= set(d["cols"])
    for i, row in zip([0, 1, 999, 1999], d["rows"]):      # the browser decoded what Python packed
        assert row["label"] == df["label"][i] and row["ex0"] == df["ex0"][i] and row["ex2"] == df["ex2"][i]
        assert row["size"] == df["size"][i] and row["field"] == df["main_field"][i]
        assert row["year"] == ("–" if np.isnan(df["year"][i]) else f"{df['year'][i]:.1f}")
        assert abs(row["x"] - df["x"][i]) < 1e-9
    assert d["rows"][0]["size"] == topics["size"].max()     # largest first
    tips = dict(json.loads(p["tooltip"]))
    assert set(tips) >= {"topic", "papers", "main field", "mean year", "interdisciplinarity (DIV)", "example"}
    # hover over topic 999 shows its fields in the tooltip
    assert p["hover"] == df["label"][999]
    for s in (df["label"][999], df["ex0"][999], df["ex2"][999], df["main_field"][999]):
        assert s in r["text"], s
    # the overlay switch recolours the points from the values (the year mapper's NaN colour where missing)
    c_field = json.loads(p["c_field"])
    c_year, year_bar_on, legend_on, year_title, nan_color = json.loads(p["c_year"])
    c_div, div_bar_on, year_bar_still, div_title = json.loads(p["c_div"])
    assert len(c_field) == len(c_year) == len(c_div) == n
    assert c_field != c_year != c_div
    assert len(set(c_year)) > 100 and len(set(c_field)) <= 16  # a continuous scale vs. 15 fields + grey
    nan_rgba = int(nan_color[1:], 16) * 256 + 255
    missing = np.flatnonzero(np.isnan(df["year"].to_numpy()))
    assert len(missing) and all(c_year[i] == nan_rgba for i in missing)
    assert year_bar_on and not legend_on and year_title == "mean year"
    assert div_bar_on and not year_bar_still and div_title == "interdisciplinarity (DIV)"
    # search: by a title word (case-insensitive) and by a label term (+ a word start), with the count shown
    sel, text = json.loads(p["search_title"])
    assert sel == want["title"] and text == f"{len(want['title']):,} of {n:,} topics match"
    sel, text = json.loads(p["search_label"])
    assert sel == want["label"] and text.startswith(f"{len(want['label']):,} of")
    assert json.loads(p["search_none"]) == [[], f"0 of {n:,} topics match"]
    if d["gl_available"]:
        assert d["webgl"] is True, "WebGL is available but the topic points are not drawn with it"


def test_map_without_webgl_falls_back_to_canvas(tmp_path, browser, generated_topics):
    topics, examples = generated_topics(300)
    html = build_html(topics, examples, _png(), (-20, 20), (-20, 20), RenderConfig())
    page = tmp_path / "map.html"
    page.write_text(html)
    r = browser.open_page(page, wait_js=browser.MAP_READY, timeout=60, init_js=NO_WEBGL, probes={
        "helpers": browser.MAP_HELPERS, "state": "JSON.stringify([sciencemap.n, __view('topic_points').has_webgl, "
                                     "!!document.createElement('canvas').getContext('webgl')])",
        "switch": "(__model('overlay').value = 'year', __colours().length)"})
    assert r["ready"] and r["errors"] == [], r["errors"]
    assert json.loads(r["probes"]["state"]) == [300, False, False]
    assert r["probes"]["switch"] == 300


def test_pipeline_map_html_in_browser(tmp_path, browser, make_run):
    from sciencemap.storage import read_table
    from mapping.cluster import ClusterConfig, run_cluster
    from mapping.knn import KnnConfig, run_knn
    from mapping.render import run_render

    layout, _ = make_run(tmp_path / "r", n_clusters=5, per=30, dim=16, noise=0.3, evil_title=EVIL)
    run_knn(KnnConfig(k=8), layout)
    run_cluster(ClusterConfig(resolutions=[0.03], min_cluster_size=3), layout)
    run_render(RenderConfig(layout_method="pca", width=400, height=300, legend_width=120), layout)
    r = browser.open_page(layout.map_html, wait_js=f"({browser.MAP_READY}) && {browser.TABLE_RENDERED}", timeout=30,
                          probes={"helpers": browser.MAP_HELPERS, "before": "JSON.stringify(__colours())",
                                  "switch": "__model('overlay').value = 'year'",
                                  "after": "JSON.stringify(__colours())", "n": "sciencemap.n",
                                  "regions": "JSON.stringify(__model('area_regions').data.area)",
                                  "labels": browser.LABEL_BOXES})
    assert r["ready"] and r["errors"] == [], r["errors"]
    # the research areas as a layer of shapes, one or more a named area, and every label clear of the others
    areas = read_table(layout.table("areas")).to_pandas()
    assert len(areas) > 1 and set(json.loads(r["probes"]["regions"])) == set(areas["label"])
    browser.check_labels(json.loads(r["probes"]["labels"]), RenderConfig().labels_on_map)
    assert json.loads(r["probes"]["before"]) != json.loads(r["probes"]["after"])
    assert r["pwned"] is None
    t = read_table(layout.table("topics")).to_pandas()
    assert r["probes"]["n"] == len(t)                     # one resolution clustered: all topics are on the map
    for label in t.sort_values("size", ascending=False)["label"].head(5):
        assert label in r["text"]


def test_placed_papers_layer_shows_hovers_and_switches_off(tmp_path, browser):
    """place's map.html: the placed papers as a layer with their own hover (titles as text), the
    checkbox hides and shows it, no errors."""
    topics = pd.DataFrame({"cluster": np.arange(3), "size": [40, 30, 20], "label": ["a, b", "c, d", "e, f"],
                           "x": [0.0, 1, 0], "y": [0.0, 0, 1], "main_field": ["Bio", "Bio", "CS"],
                           "mean_year": [2001.0, 2005, 2010], "interdisciplinarity": [0.1, 0.2, 0.3]})
    placed = pd.DataFrame({"x": [0.1, 0.9], "y": [0.1, 0.1], "paper_id": ["doi:10.1/new1", "doi:10.1/new2"],
                           "title": [EVIL, "a new paper"], "topic": ["a, b", "c, d"]})
    html = build_html(topics, [["x"], ["y"], ["z"]], _png(), (-0.5, 1.5), (-0.5, 1.5), RenderConfig(), placed=placed)
    assert EVIL not in html
    page = tmp_path / "placed.html"
    page.write_text(html)
    state = ("JSON.stringify([__model('placed_points').visible, __model('placed_toggle').labels, "
             "__model('placed').data.title])")
    r = browser.open_page(page, wait_js=f"({browser.MAP_READY}) && {browser.TABLE_RENDERED}", timeout=30, probes={
        "helpers": browser.MAP_HELPERS, "on": state,      # (BokehJS runs a CustomJS callback asynchronously: set, then read)
        "switch_off": "(__model('placed_toggle').active = [], true)", "off": state,
        "switch_on": "(__model('placed_toggle').active = [0], true)", "back": state})
    assert r["ready"] and r["errors"] == [], r["errors"]
    on, off, back = (json.loads(r["probes"][k]) for k in ("on", "off", "back"))
    assert on == [True, ["placed papers (2)"], [EVIL, "a new paper"]]
    assert off[0] is False and back[0] is True
    assert r["pwned"] is None and "placed papers (2)" in r["text"]


def test_labels_never_overlap_and_zooming_makes_room(tmp_path, browser, generated_topics):
    """A crowded map (3,000 topics, 12 areas with long names, room for far fewer labels than asked)
    at 1400 x 900: every label drawn is clear of the others, of the legend and of the frame's edge,
    before and after zooming in; zooming shows topic labels that had no room before."""
    topics, examples = generated_topics(3000, seed=3)
    rng = np.random.default_rng(1)
    fields = pd.DataFrame({"label": [f"Area {i}: cell biology, neuroscience and more" for i in range(12)],
                           "x": rng.normal(0, 4, 12), "y": rng.normal(0, 4, 12), "size": rng.integers(50, 900, 12)})
    cfg = RenderConfig(labels_on_map=200)
    page = tmp_path / "map.html"
    page.write_text(build_html(topics, examples, _png(), (-20, 20), (-20, 20), cfg, fields))
    zoom = "(() => { const m = __view('topic_points').parent.model; m.x_range.setv({start: -4, end: 4}); " \
           "m.y_range.setv({start: -4, end: 4}); return true; })()"
    r = browser.open_page(page, wait_js=browser.MAP_READY, timeout=60, viewport=(1400, 900),
                          probes={"helpers": browser.MAP_HELPERS, "before": browser.LABEL_BOXES, "zoom": zoom, "after": browser.LABEL_BOXES})
    assert r["ready"] and r["errors"] == [], r["errors"]
    areas0, topics0 = browser.check_labels(json.loads(r["probes"]["before"]), cfg.labels_on_map)
    areas1, topics1 = browser.check_labels(json.loads(r["probes"]["after"]), cfg.labels_on_map)
    assert len(topics0) < cfg.labels_on_map     # crowded: far from every asked-for label had room
    assert areas0 and areas0 <= set(fields["label"])
    assert topics1 - topics0, "zooming in showed no topic label that was hidden before"
