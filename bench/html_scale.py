"""The interactive HTML map at scale: map.html for N generated topics, its size and load time.

    .venv/bin/python bench/html_scale.py                       # 100,000 topics, and the old page at 100,000
    .venv/bin/python bench/html_scale.py --n 20000 --old-n 0   # a quick look, without the old page

1. Generates N topics (default 100,000; seeded) shaped like a 33M-paper map's: sizes log-normal
   (median ~180 papers, at least 5), positions in a few hundred UMAP-like clumps, main fields
   (250 MeSH descriptor names, Zipf-like frequencies, mostly one per clump), mean years around a
   clump year (a few missing), DIV in [0, 1] (some 0, a few missing), three example titles per
   topic and a label of three words from them. The titles are real ones, recombined so that none
   repeats: article titles of the eLife JATS files (articles and their references,
   ../shared/data/elife-articles) and the PubMed sample's titles; each generated title is the
   start of one real title joined to the end of another at word boundaries. The background image is
   datashaded from 20 generated papers per topic (mapping.map_png.shade_categories, the stage's size).
2. Builds map.html with mapping.html_map.build_html (what the render stage calls) and prints its
   size in MB (10^6 bytes) and what it is made of: the JavaScript and CSS of BokehJS, the Bokeh
   document (widgets, mappers, empty sources), the background PNG and the topics' data blob
   (with its numbers and strings before and after gzip).
3. Opens it in headless Chromium, the way the browser tests do (tests/conftest.py: open_page) and
   prints the load time: from navigation to the moment the page set window.sciencemap.ready (data
   decoded, sources filled and two animation frames after, so the plot has been painted with the
   data), with its parts, and every console error. Then once more with WebGL taken away (what a
   browser without WebGL gets: BokehJS draws on the canvas). Headless Chromium without a GPU runs
   WebGL in software (SwiftShader; the renderer is printed), where drawing 100k markers costs more
   than on the canvas; with a GPU it is the other way round.
   Then the time of one repaint of the plot (what each frame of panning or zooming costs) and of a
   search.
4. The same for the page of the old build_html (mapping/render.py at --old-ref, before this
   module: every topic as Bokeh JSON with three colour columns, canvas), at --old-n topics (default
   N; 0 skips it): size, the time until BokehJS reported the document idle (every view drawn once;
   polled every 0.25 s) and one repaint.

A verdict line per check (met, MISSED, or not checked with the reason): the new page at most
--max-mb (15) MB; for each of the two loads, the page got ready, decoded all N topics and logged no
console error (not checked where headless Chromium is not installed). Exits 1 when any is missed or
not checked (--no-fail: 0).
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from verdicts import Verdicts  # bench/verdicts.py; a script's own folder is on its import path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"   # the shared data sets beside the checkout
ELIFE = DATA / "elife-articles" / "elife-articles-6c97171-xml.tar.gz"
PUBMED = DATA / "pubmed-multilabel-mesh-sample"
# mapping/render.py as it was before mapping/html_map.py (its build_html is the reference).
OLD_REF = "dd596bf"
CHECK_TAGS = {"Humans", "Male", "Female", "Animals", "Adult", "Middle Aged", "Aged", "Adolescent", "Child",
              "Aged, 80 and over", "Young Adult", "Child, Preschool", "Infant", "Infant, Newborn", "Pregnancy"}
STOP = {"the", "and", "for", "with", "from", "into", "its", "are", "was", "were", "that", "this", "via", "during",
        "between", "using", "use", "new", "study", "analysis", "role", "effect", "effects", "after", "not", "but",
        "their", "than", "two", "can", "all", "has", "have", "which", "who", "how", "does", "novel", "within"}


# ---------------------------------------------------------------- real titles and field names

def real_titles() -> list[str]:
    """Distinct article titles of the eLife XML (articles and references) and the PubMed sample."""
    from lxml import etree

    out = set()
    with tarfile.open(ELIFE) as tf:
        for m in tf:
            if not m.isfile():
                continue
            data = tf.extractfile(m).read()
            for _, el in etree.iterparse(io.BytesIO(data), tag="article-title", resolve_entities=False,
                                         no_network=True, load_dtd=False, huge_tree=True):
                s = " ".join("".join(el.itertext()).split()).rstrip(".")
                if len(s) >= 15:
                    out.add(s)
                el.clear(keep_tail=True)
    for f in sorted(PUBMED.glob("*.csv")):
        out.update(" ".join(str(s).split()).rstrip(".") for s in pd.read_csv(f)["Title"].dropna())
    return sorted(out)


def field_names(k: int = 250) -> list[str]:
    """The k most frequent MeSH major descriptors of the PubMed sample (check tags left out)."""
    from collections import Counter

    c = Counter()
    for f in sorted(PUBMED.glob("*.csv")):
        for x in pd.read_csv(f)["meshMajor"].dropna():
            c.update(d for d in ast.literal_eval(x) if d not in CHECK_TAGS)
    return [d for d, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def recombined_titles(titles: list[str], m: int, rng: np.random.Generator) -> list[str]:
    """m distinct titles, each the first part of one real title and the last part of another."""
    words = [t.split() for t in titles]
    words = [w for w in words if len(w) >= 4]
    out, seen = [], set()
    while len(out) < m:
        a, b = rng.integers(0, len(words), (2, m - len(out)))
        for i, j in zip(a.tolist(), b.tolist()):
            wa, wb = words[i], words[j]
            s = " ".join(wa[:max(2, int(len(wa) * rng.uniform(0.3, 0.7)))]
                         + wb[max(2, int(len(wb) * rng.uniform(0.3, 0.7))):])
            if s not in seen:
                seen.add(s)
                out.append(s)
    return out


# ---------------------------------------------------------------- generated topics

def generate_topics(n: int, seed: int = 0, n_examples: int = 3) -> tuple[pd.DataFrame, list[list[str]]]:
    rng = np.random.default_rng(seed)
    titles = recombined_titles(real_titles(), n * n_examples, rng)
    examples = [titles[i * n_examples:(i + 1) * n_examples] for i in range(n)]
    fields = np.array(field_names(), dtype=object)

    n_clumps = max(1, min(400, n // 50))
    centre = rng.uniform(0, 20, (n_clumps, 2))
    spread = rng.uniform(0.2, 1.2, n_clumps)
    clump = rng.integers(0, n_clumps, n)
    xy = centre[clump] + spread[clump, None] * rng.standard_normal((n, 2))
    zipf = 1.0 / np.arange(1, len(fields) + 1) ** 0.9
    clump_field = rng.choice(len(fields), n_clumps, p=zipf / zipf.sum())
    other = rng.choice(len(fields), n, p=zipf / zipf.sum())
    field = np.where(rng.random(n) < 0.7, clump_field[clump], other)
    year = rng.normal(2008, 5, n_clumps)[clump] + rng.normal(0, 3, n)
    year[rng.random(n) < 0.005] = np.nan
    div = rng.beta(0.8, 5, n)
    div[rng.random(n) < 0.05] = 0.0
    div[rng.random(n) < 0.02] = np.nan
    size = np.maximum(5, np.rint(rng.lognormal(5.2, 1.0, n))).astype(np.int64)

    labels = []
    for ex in examples:
        ws = []
        for t in ex:
            for w in re.findall(r"[a-z]{3,}", t.lower()):
                if w not in STOP and w not in ws:
                    ws.append(w)
        pick = sorted(rng.choice(len(ws), min(3, len(ws)), replace=False).tolist()) if ws else []
        labels.append(", ".join(ws[i] for i in pick))
    order = np.argsort(-size, kind="stable")          # cluster ids: 0 = largest, as the stage numbers them
    t = pd.DataFrame({"cluster": np.arange(n, dtype=np.int32), "size": size[order].astype(np.int32),
                      "label": [labels[i] for i in order],
                      "x": xy[order, 0].astype(np.float32), "y": xy[order, 1].astype(np.float32),
                      "main_field": fields[field[order]], "mean_year": year[order].astype(np.float32),
                      "interdisciplinarity": div[order].astype(np.float32)})
    return t, [examples[i] for i in order]


def background(topics: pd.DataFrame, cfg, per_topic: int = 20, seed: int = 0):
    """(PNG bytes, x_range, y_range): generated papers around the topics, shaded the way the stage
    shades map.png's papers (mapping.map_png.shade_categories, on white)."""
    from PIL import Image

    from mapping.map_png import Frame, bounds, shade_categories
    from mapping.render import CITED_ONLY, category_colors

    rng = np.random.default_rng(seed + 1)
    n = len(topics)
    t = np.repeat(np.arange(n), per_topic)
    r = 0.03 * np.sqrt(topics["size"].to_numpy(float) / np.median(topics["size"]))[t]
    ang = rng.uniform(0, 2 * np.pi, len(t))
    rad = r * np.sqrt(rng.random(len(t)))
    x = (topics["x"].to_numpy(float)[t] + rad * np.cos(ang)).astype(np.float32)
    y = (topics["y"].to_numpy(float)[t] + rad * np.sin(ang)).astype(np.float32)
    names = ["elife", "pubmed", "s2orc", CITED_ONLY]
    codes = rng.choice(4, len(t), p=[0.1, 0.3, 0.2, 0.4]).astype(np.int32)
    xr, yr = bounds(x, y)
    img = shade_categories(x, y, codes, names, category_colors(names), Frame(cfg.width, cfg.height, cfg.legend_width,
                                                                             xr, yr), under=CITED_ONLY)
    bg = Image.new("RGB", img.size, "white")
    bg.paste(img, (0, 0), img)
    buf = io.BytesIO()
    bg.save(buf, format="PNG")
    return buf.getvalue(), xr, yr


# ---------------------------------------------------------------- measuring a page

def composition(html: str) -> dict[str, int]:
    """Bytes of the page by part."""
    from mapping.html_map import DATA_ELEMENT_ID

    parts = {"bokehjs_js_css": 0, "bokeh_document": 0, "background_png": 0, "topics_blob": 0}
    for m in re.finditer(r"<(script|style)([^>]*)>(.*?)</\1>", html, re.S):
        attrs, body = m.group(2), m.group(3)
        if f'id="{DATA_ELEMENT_ID}"' in attrs:
            parts["topics_blob"] += len(body)
        elif "application/json" in attrs:
            png = sum(len(u) for u in re.findall(r"data:image/png;base64,[A-Za-z0-9+/=]*", body))
            parts["background_png"] += png
            parts["bokeh_document"] += len(body) - png
        elif len(body) > 20_000:
            parts["bokehjs_js_css"] += len(body)
    parts["other"] = len(html.encode()) - sum(parts.values())
    return parts


# The BokehJS view of the topic points (a probe defines it first).
POINTS_VIEW = """window.__points = (() => { const m = Bokeh.documents[0].get_model_by_name('topic_points');
  const stack = [...Bokeh.index.roots];
  while (stack.length) { const v = stack.pop(); if (v.model === m) return v; stack.push(...v.children()); }
  return null; })(); true"""
# Seconds of one synchronous repaint of the plot, everything invalidated (a frame while panning
# or zooming), median of 3; for any Bokeh page with one plot.
REPAINT = """(() => { const st = [...Bokeh.index.roots]; let pv = null;
  while (st.length && pv === null) {
    const v = st.pop(); if (v.frame && v.canvas_view) pv = v; else st.push(...v.children()); }
  const t = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now(); pv.invalidate_painters(); pv.paint(); t.push(performance.now() - t0); }
  return t.sort((a, b) => a - b)[1] / 1e3; })()"""


# Run before the page's scripts: no WebGL context for anyone (as in a browser without WebGL).
NO_WEBGL = """const get = HTMLCanvasElement.prototype.getContext;
HTMLCanvasElement.prototype.getContext = function (type, ...args) {
  return /webgl/i.test(type) ? null : get.call(this, type, ...args); };"""
GL_RENDERER = """(() => { const gl = document.createElement('canvas').getContext('webgl');
  if (!gl) return 'none'; const e = gl.getExtension('WEBGL_debug_renderer_info');
  return e ? gl.getParameter(e.UNMASKED_RENDERER_WEBGL) : 'unknown'; })()"""


def measure_new_page(page: Path, timeout: float, init_js: str | None = None) -> tuple[dict, dict]:
    """Open a page of build_html; (open_page's result, the page's timings in ms)."""
    probes = {"s": "JSON.stringify(window.sciencemap ? {n: sciencemap.n, error: sciencemap.error,"
                   " start: sciencemap.t_start, inflated: sciencemap.t_inflated, decoded: sciencemap.t_decoded,"
                   " filled: sciencemap.t_filled, ready: sciencemap.t_ready} : null)",
              "view": POINTS_VIEW, "webgl": "__points.has_webgl", "gl": GL_RENDERER, "repaint": REPAINT,
              "search": "(() => { const t = performance.now(); const k = sciencemap.search('cell'); "
                        "const t2 = performance.now(); sciencemap.search('cell'); "
                        "return JSON.stringify([k, t2 - t, performance.now() - t2]); })()"}
    r = load_in_browser(page, "window.sciencemap && (window.sciencemap.ready || window.sciencemap.error)", probes,
                        timeout, init_js)
    return r, json.loads(r["probes"]["s"] or "null") or {}


def browser_tests_conftest():
    """tests/conftest.py, loaded by file (no import-path edit): the browser tests' headless Chromium."""
    spec = importlib.util.spec_from_file_location("sciencemap_tests_conftest", REPO / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    return conftest


def missing_chromium() -> str | None:
    """Why headless Chromium cannot open the pages here, or None when it can."""
    chromium = browser_tests_conftest().CHROMIUM
    if Path(chromium).exists():
        return None
    return f"headless Chromium not installed ({chromium}); apt-get install chromium"


def load_in_browser(path: Path, wait_js: str, probes: dict[str, str], timeout: float,
                    init_js: str | None = None) -> dict:
    if why := missing_chromium():
        raise SystemExit(why)
    return browser_tests_conftest().open_page(path, wait_js=wait_js, timeout=timeout, settle=0.5, probes=probes,
                                              init_js=init_js)


def old_build_html(ref: str):
    """build_html of mapping/render.py at git `ref`, imported from a temporary copy."""
    src = subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:mapping/render.py"], check=True,
                         capture_output=True, text=True).stdout
    f = Path(tempfile.mkdtemp(prefix="old-render-")) / "old_render.py"
    f.write_text(src)
    spec = importlib.util.spec_from_file_location("old_render", f)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod                   # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod.build_html


def mb(b: int) -> str:
    return f"{b / 1e6:.2f} MB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="topics (default 100,000)")
    ap.add_argument("--old-n", type=int, default=None, help="topics for the old page (default --n; 0 = skip)")
    ap.add_argument("--old-ref", default=OLD_REF, help="git revision of the old mapping/render.py")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--title-chars", type=int, default=None, help="cut example titles to this length "
                    "(default: mapping.html_map.TITLE_CHARS)")
    ap.add_argument("--table-rows", type=int, default=None, help="rows of the topic table (0 = all topics)")
    ap.add_argument("--canvas", action="store_true", help="draw the topic points on a canvas instead of WebGL")
    ap.add_argument("--max-mb", "--target-mb", dest="max_mb", type=float, default=15.0,
                    help="fail above this page size (10^6 bytes)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for a page to load")
    ap.add_argument("--out", type=Path, default=None, help="keep the pages in this folder (default: a temporary one)")
    Verdicts.add_arguments(ap)
    args = ap.parse_args(argv)
    from mapping.html_map import build_html, pack_topics
    from mapping.render import RenderConfig

    out = args.out or Path(tempfile.mkdtemp(prefix="html-scale-"))
    out.mkdir(parents=True, exist_ok=True)
    cfg = RenderConfig(title=f"Map of science ({args.n:,} generated topics)")
    t0 = time.perf_counter()
    topics, examples = generate_topics(args.n, args.seed)
    png, xr, yr = background(topics, cfg, seed=args.seed)
    print(f"generated {args.n:,} topics (titles: {np.mean([len(t) for e in examples for t in e]):.0f} characters "
          f"on average), background {mb(len(png))}, in {time.perf_counter() - t0:.0f} s", flush=True)

    t0 = time.perf_counter()
    html = build_html(topics, examples, png, xr, yr, cfg, title_chars=args.title_chars, table_rows=args.table_rows,
                      webgl=not args.canvas)
    build_s = time.perf_counter() - t0
    page = out / "map_new.html"
    page.write_text(html, encoding="utf-8")
    size = page.stat().st_size
    _, info = pack_topics(topics, examples, measure=True,
                          **({} if args.title_chars is None else {"title_chars": args.title_chars}))
    print(f"\nnew page (mapping.html_map.build_html, {'canvas' if args.canvas else 'WebGL'}, {args.n:,} topics): "
          f"{mb(size)}, built in {build_s:.1f} s")
    for k, v in composition(html).items():
        print(f"  {k:16s} {mb(v):>10s}  ({v / size:5.1%})")
    print(f"  topics blob before base64: numbers {mb(info['numeric_bytes'])} -> gzip {mb(info['numeric_gzip_bytes'])}; "
          f"strings {mb(info['text_bytes'])} -> word-coded {mb(info['text_coded_bytes'])} ({info['vocab']:,} tokens "
          f"in the vocabulary) -> gzip {mb(info['text_gzip_bytes'])} (gzip of the characters: "
          f"{mb(info['text_plain_gzip_bytes'])}); whole blob gzip {mb(info['gzip_bytes'])}; "
          f"{info['gzip_bytes'] * 4 / 3 / args.n:.0f} bytes per topic in the page; {info['fields']} main fields")

    verdicts = Verdicts()
    verdicts.at_most("new page size, MB (10^6 bytes)", size / 1e6, args.max_mb, "{:.3g}")
    no_browser = missing_chromium()
    for how, init_js in (("", None), (" with WebGL taken away (BokehJS's canvas fallback)", NO_WEBGL)):
        checks = (f"the page{how} got ready within {args.timeout:.0f} s",
                  f"the page{how} decoded all {args.n:,} topics", f"the page{how} logged no console error")
        if no_browser:
            for name in checks:
                verdicts.not_checked(name, no_browser)
            continue
        r, s_ = measure_new_page(page, args.timeout, init_js)
        print(f"  in headless Chromium{how}:")
        ready = bool(r["ready"] and s_.get("ready"))
        verdicts.check(checks[0], ready, "" if ready else f"error: {s_.get('error')}")
        if ready:
            sec = lambda a, b: f"{(s_[b] - s_[a]) / 1e3:.2f} s"  # noqa: E731
            print(f"    loaded in {s_['ready'] / 1e3:.2f} s from navigation to the map drawn with the data (BokehJS "
                  f"and document up at {s_['start'] / 1e3:.2f} s; base64 + gunzip {sec('start', 'inflated')}; "
                  f"decode {sec('inflated', 'decoded')}; sources filled {sec('decoded', 'filled')}; "
                  f"painted {sec('filled', 'ready')}); {s_['n']:,} topics")
            print(f"    topic points drawn with WebGL: {r['probes']['webgl']} (WebGL renderer: {r['probes']['gl']})")
            print(f"    one repaint of the plot (a pan/zoom frame): {r['probes']['repaint']:.2f} s")
            k, first, again = json.loads(r["probes"]["search"])
            print(f"    search 'cell': {k:,} topics match; {first / 1e3:.2f} s the first time (lower-cases the "
                  f"strings), {again / 1e3:.2f} s after")
            verdicts.check(checks[1], s_["n"] == args.n, f"decoded {s_['n']:,}")
        else:
            verdicts.not_checked(checks[1], "the page did not get ready")
        print(f"    console errors: {len(r['errors'])}" + "".join(f"\n      {e[:300]}" for e in r["errors"]))
        verdicts.check(checks[2], not r["errors"], "; ".join(e[:200] for e in r["errors"]))

    old_n = args.n if args.old_n is None else args.old_n
    if old_n > 0 and no_browser:
        print(f"\nold page: not built ({no_browser})")
    elif old_n > 0:
        old = old_build_html(args.old_ref)
        ot, oe = (topics, examples) if old_n == args.n else generate_topics(old_n, args.seed)
        if old_n != args.n:
            png, xr, yr = background(ot, cfg, seed=args.seed)
        t0 = time.perf_counter()
        ohtml = old(ot, [list(e) for e in oe], png, xr, yr, cfg)
        obuild = time.perf_counter() - t0
        opage = out / "map_old.html"
        opage.write_text(ohtml, encoding="utf-8")
        osize = opage.stat().st_size
        print(f"\nold page (mapping/render.py build_html at {args.old_ref}, canvas, {old_n:,} topics): {mb(osize)}, "
              f"built in {obuild:.1f} s")
        for k, v in composition(ohtml).items():
            if k != "topics_blob":
                print(f"  {k:16s} {mb(v):>10s}  ({v / osize:5.1%})")
        wait = ("(() => { if (window.__t_done) return true; const d = window.Bokeh && Bokeh.documents[0]; "
                "if (d && d.is_idle) { window.__t_done = performance.now(); return true; } return false; })()")
        ro = load_in_browser(opage, wait, {"t": "window.__t_done || null", "repaint": REPAINT}, args.timeout)
        if ro["ready"] and ro["probes"]["t"]:
            print(f"  loaded in headless Chromium: {ro['probes']['t'] / 1e3:.2f} s from navigation to the document "
                  f"idle (plot and table drawn; polled every 0.25 s)")
            if ro["probes"]["repaint"] is not None:
                print(f"  one repaint of the plot (a pan/zoom frame): {ro['probes']['repaint']:.2f} s")
        else:
            print(f"  did not load within {args.timeout:.0f} s")
        print(f"  console errors: {len(ro['errors'])}" + "".join(f"\n    {e[:300]}" for e in ro["errors"]))
    print(f"\npages in {out}")
    return verdicts.finish(args.no_fail)


if __name__ == "__main__":
    sys.exit(main())
