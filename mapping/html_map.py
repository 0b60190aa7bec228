"""The interactive HTML map (map.html): topic points drawn with WebGL over the papers' datashaded
image, held at ~100k topics.

What the page holds:
- BokehJS, INLINE (the file opens without network), and a small Bokeh document: the figure, the
  background image (a PNG data: URI), empty data sources, colour mappers, legend, colour bars,
  widgets and the JavaScript that fills the sources;
- the topics as one binary blob, gzip-compressed and base64-encoded in a non-executed
  `<script type="application/octet-stream">` element (layout: `pack_topics`). Topics are sorted by
  size (largest first), so the labelled topics and the table's first rows are the blob's first rows.
  Numbers are quantized to 16 bits over their range (x, y and each value overlay of
  mapping.overlays, under the overlay's name; 65535 = missing), sizes are uint32, the category
  overlay (the main field) a uint16 code into one list of names (most frequent first); the
  strings (label and example titles, shortened to `title_chars`) are lines, one column after
  another, coded as word tokens (a vocabulary and varint ids: a third smaller than gzip on the
  characters). Colours are not shipped: the browser maps values through Bokeh colour mappers.
- On DocumentReady the page decodes the blob (atob, DecompressionStream), fills the sources and
  sets `window.sciencemap.ready` (with timings) once the plot has been drawn with the data; the
  benchmark (bench/html_scale.py) and the browser tests wait for it.
- Labels are placed by the page, not by Python: after every pan and zoom the areas' and the
  topics' labels are laid out again without overlap inside the plot frame (`placer`; METHODS.md).
- The research areas' outlines (from the PNGs' shapes), when given, as a layer under the points.

Strings from the data reach the page only as data: in the JSON of the Bokeh document (escaped by
Bokeh), in the blob (decoded to JavaScript strings), and from there into hover fields, table
cells, canvas labels and a render_as_text Div, which insert them as text, never as HTML.
"""
from __future__ import annotations

import base64
import gzip
import json
import math
import re
import struct

import numpy as np
import pandas as pd

from mapping.overlays import OVERLAYS

# Example titles longer than this are cut at a word boundary and end in "…" (bytes in the blob
# grow with it: ~0.5 MB per 10 characters at 100k topics × 3 titles, coded and compressed).
TITLE_CHARS = 80
# Colours of the most frequent main fields (Tableau 10, then more); the rest are grey.
FIELD_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
                 "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]
OTHER_COLOR = "#7f7f7f"
# Label fonts by level, not by size: areas bold and larger, topics small (Bokeh's default family).
AREA_FONT, TOPIC_FONT, LABEL_FAMILY = "12pt", "9pt", "Helvetica, Arial, sans-serif"
LABEL_GAP = 2   # px of free space each side of a label's text
DATA_ELEMENT_ID = "sciencemap-data"
MISSING_Q = 65535                   # quantized value of NaN
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")   # "\n" separates the blob's strings


def clean_text(s) -> str:
    """A display string: missing -> "", control characters (and line separators) -> one space."""
    if s is None or (isinstance(s, float) and math.isnan(s)) or s is pd.NA:
        return ""
    return _CONTROL.sub(" ", str(s)).strip()


def shorten(s: str, n: int) -> str:
    """s cut to at most n characters, at a word boundary when one is in the last 40%, ending in "…"."""
    if n <= 0 or len(s) <= n:
        return s
    cut = s[:n - 1]
    sp = cut.rfind(" ")
    if sp >= 0.6 * (n - 1):
        cut = cut[:sp]
    return cut.rstrip(" ,;:.-") + "…"


def quantize(v: np.ndarray) -> tuple[np.ndarray, float, float]:
    """uint16 codes q with v ≈ lo + q · step over the finite range (step = range / 65534, so the
    error is below range / 131068); NaN -> MISSING_Q."""
    v = np.asarray(v, np.float64)
    ok = np.isfinite(v)
    q = np.full(len(v), MISSING_Q, np.uint16)
    if not ok.any():
        return q, 0.0, 1.0
    lo, hi = float(v[ok].min()), float(v[ok].max())
    step = (hi - lo) / (MISSING_Q - 1) or 1.0
    q[ok] = np.rint((v[ok] - lo) / step).astype(np.uint16)
    return q, lo, step


def _value_overlays() -> list:
    return [ov for ov in OVERLAYS if ov.kind == "value"]


def _category_overlay():
    """The overlay the page draws with a legend (the first category overlay: the main field)."""
    cats = [ov for ov in OVERLAYS if ov.kind == "category"]
    if len(cats) != 1:
        raise ValueError(f"the HTML map shows one category overlay; mapping.overlays declares {len(cats)}")
    return cats[0]


def _palette(name: str) -> list[str]:
    """Bokeh's 256-colour palette of that name where it has one (the page's colours as before),
    else the matplotlib colour map's (the PNGs')."""
    from bokeh.palettes import all_palettes

    from mapping.map_png import palette_of

    return all_palettes.get(name.capitalize(), {}).get(256) or palette_of(name)


def _field_codes(main_field: pd.Series) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(uint16 code per topic, names by descending topic count, topics per name)."""
    names = main_field.map(clean_text).replace("", "(no field)")
    counts = names.value_counts(sort=False)
    order = sorted(counts.index, key=lambda f: (-counts[f], f))
    if len(order) > MISSING_Q:
        raise ValueError(f"{len(order)} distinct main fields; the HTML map codes at most {MISSING_Q}")
    code = {f: i for i, f in enumerate(order)}
    return names.map(code).to_numpy(np.uint16), order, counts[order].to_numpy(np.int64)


_TOKEN = re.compile(r"\w+ ?|\W")      # a word with its following space, or one other character


def encode_text(text: str) -> tuple[list[str], np.ndarray]:
    """Lossless word coding of `text`: (vocabulary, most frequent first; LEB128 varint token ids as
    uint8). gzip then sees short ids of a few hundred thousand distinct tokens instead of
    characters within its 32 KB window: a third smaller than gzip on the characters."""
    tokens = _TOKEN.findall(text)
    codes, uniques = pd.factorize(np.asarray(tokens, dtype=object))
    rank = np.argsort(-np.bincount(codes, minlength=len(uniques)), kind="stable")   # ties: first seen first
    new_id = np.empty(len(uniques), np.int64)
    new_id[rank] = np.arange(len(uniques))
    return [uniques[i] for i in rank], varint_encode(new_id[codes])


def varint_encode(ids: np.ndarray) -> np.ndarray:
    ids = np.asarray(ids, np.int64)
    nbytes = np.ones(len(ids), np.int64)
    for k in (1, 2, 3, 4):
        nbytes += ids >= (1 << (7 * k))
    start = np.cumsum(nbytes) - nbytes
    out = np.empty(int(nbytes.sum()), np.uint8)
    for k in range(int(nbytes.max(initial=0))):
        m = nbytes > k
        out[start[m] + k] = ((ids[m] >> (7 * k)) & 127) | np.where(nbytes[m] > k + 1, 128, 0)
    return out


def varint_decode(b: np.ndarray) -> np.ndarray:
    b = np.asarray(b, np.uint8)
    ends = np.flatnonzero(b < 128)
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    out = np.zeros(len(ends), np.int64)
    for k in range(int((ends - starts).max(initial=-1)) + 1):
        m = starts + k <= ends
        out[m] |= (b[starts[m] + k].astype(np.int64) & 127) << (7 * k)
    return out


def pack_topics(topics: pd.DataFrame, examples: list[list[str]], title_chars: int = TITLE_CHARS,
                n_examples: int | None = None, measure: bool = False) -> tuple[bytes, dict]:
    """The topics (sorted by size, largest first) as the page's blob and figures about it.

    Blob = gzip of: uint32 header length, the UTF-8 JSON header, zero padding to 4 bytes, then the
    body: binary columns (4-byte aligned, offsets relative to the body), the token vocabulary
    (UTF-8, NUL-separated) and the token ids of the strings (encode_text), whose text is the label
    column, then each example column, as "\n"-separated lines. Returns (gzip bytes, info); with
    `measure`, info also gives the compressed size of the parts on their own and of the strings
    gzipped as characters (more compression runs)."""
    if len(examples) != len(topics):
        raise ValueError(f"{len(examples)} example lists for {len(topics)} topics")
    t = topics.reset_index(drop=True)
    n = len(t)
    order = np.argsort(-t["size"].to_numpy(np.int64), kind="stable")
    t = t.iloc[order].reset_index(drop=True)
    k = max([len(e) for e in examples], default=0) if n_examples is None else n_examples
    ex = [[shorten(clean_text(e[j]), title_chars) if j < len(e) else "" for j in range(k)]
          for e in (examples[i] for i in order)]
    fcode, fnames, fcounts = _field_codes(t[_category_overlay().column])

    numeric = {}
    for col, src in (("x", "x"), ("y", "y"), *((ov.name, ov.column) for ov in _value_overlays())):
        q, lo, step = quantize(t[src].to_numpy(np.float64))
        numeric[col] = (q, {"type": "u16q", "lo": lo, "step": step})
    numeric["size"] = (t["size"].to_numpy(np.uint32), {"type": "u32"})
    numeric["fcode"] = (fcode, {"type": "u16"})
    text_cols = ["label"] + [f"ex{j}" for j in range(k)]
    text = "\n".join([clean_text(s) for s in t["label"]] + [row[j] for j in range(k) for row in ex])
    vocab, ids = encode_text(text)

    columns, parts, off = [], [], 0
    for name, (arr, spec) in numeric.items():
        columns.append({"name": name, "offset": off, **spec})
        b = arr.tobytes()
        parts.append(b + b"\0" * (-len(b) % 4))
        off += len(parts[-1])
    vb = "\0".join(vocab).encode("utf-8")
    header = {"n": n, "fields": fnames, "field_counts": fcounts.tolist(), "columns": columns,
              "text_columns": text_cols, "vocab": {"offset": off, "length": len(vb), "count": len(vocab)},
              "tokens": {"offset": off + len(vb), "length": len(ids), "text_bytes": len(text.encode("utf-8"))}}
    hb = json.dumps(header).encode("utf-8")
    raw = struct.pack("<I", len(hb)) + hb + b"\0" * (-(4 + len(hb)) % 4) + b"".join(parts) + vb + ids.tobytes()
    gz = gzip.compress(raw, compresslevel=9, mtime=0)
    info = {"topics": n, "examples": k, "header": header, "raw_bytes": len(raw), "gzip_bytes": len(gz),
            "vocab": len(vocab), "token_bytes": len(ids), "fields": len(fnames)}
    if measure:
        numbers, text_b = b"".join(parts), text.encode("utf-8")
        info |= {"numeric_bytes": len(numbers), "numeric_gzip_bytes": len(gzip.compress(numbers, 9, mtime=0)),
                 "text_bytes": len(text_b), "text_coded_bytes": len(vb) + len(ids),
                 "text_gzip_bytes": len(gzip.compress(vb + ids.tobytes(), 9, mtime=0)),
                 "text_plain_gzip_bytes": len(gzip.compress(text_b, 9, mtime=0))}
    return gz, info


def unpack_topics(gz: bytes) -> tuple[pd.DataFrame, dict]:
    """The inverse of pack_topics (what the page's JavaScript does), for tests and tools:
    (one row per topic in blob order, with decoded numbers and strings; the header)."""
    raw = gzip.decompress(gz)
    (hl,) = struct.unpack_from("<I", raw, 0)
    head = json.loads(raw[4:4 + hl])
    base = 4 + hl + (-(4 + hl)) % 4
    n, out = head["n"], {}
    for c in head["columns"]:
        if c["type"] == "u16q":
            q = np.frombuffer(raw, np.uint16, n, base + c["offset"])
            out[c["name"]] = np.where(q == MISSING_Q, np.nan, c["lo"] + q * c["step"])
        else:
            out[c["name"]] = np.frombuffer(raw, np.uint32 if c["type"] == "u32" else np.uint16, n, base + c["offset"])
    v, tk = head["vocab"], head["tokens"]
    vocab = raw[base + v["offset"]:base + v["offset"] + v["length"]].decode("utf-8").split("\0")
    ids = varint_decode(np.frombuffer(raw, np.uint8, tk["length"], base + tk["offset"]))
    lines = "".join(vocab[i] for i in ids).split("\n")
    for j, name in enumerate(head["text_columns"]):
        out[name] = lines[j * n:(j + 1) * n] if n else []
    df = pd.DataFrame(out)
    df[_category_overlay().column] = [head["fields"][c] for c in df["fcode"]] if n else []
    return df, head


def payload_of(html: str) -> bytes:
    """The gzip blob inside a page written by build_html."""
    m = re.search(rf'<script type="application/octet-stream" id="{DATA_ELEMENT_ID}">([A-Za-z0-9+/=\s]*)</script>', html)
    if m is None:
        raise ValueError("no sciencemap data element in this HTML")
    return base64.b64decode("".join(m.group(1).split()))


# JavaScript run on DocumentReady: decode the blob, fill the sources, define the search.
_LOAD_JS = r"""
const S = window.sciencemap = window.sciencemap || {};
S.ready = false;
S.t_start = performance.now();
// Labels that never overlap (the PNGs' rule, mapping.map_png.place_labels): areas first, largest
// first, then topics largest first; each at the first of five spots (on its point, above, below,
// right, left) whose box lies inside the plot frame and overlaps no box placed before; at most
// n_labels topic labels at once. Placed again after every pan and zoom (once a frame), so a label
// hidden for want of room appears when zooming makes room. Boxes are in frame pixels, `gap` px
// wider on each side than the text.
const placer = (d) => {
  const ctx = document.createElement("canvas").getContext("2d");
  const levels = [[areas, area_font, area_px, area_src, Infinity], [d, topic_font, topic_px, labels, n_labels]];
  let pending = false;
  const place = () => {
    pending = false;
    const W = plot.inner_width, H = plot.inner_height, xr = plot.x_range, yr = plot.y_range;
    if (!(W > 0 && H > 0)) { request(); return; }        // not laid out yet
    const kx = W / (xr.end - xr.start), ky = H / (yr.end - yr.start);
    const boxes = [];
    const free = (b) => b[0] >= 0 && b[1] >= 0 && b[2] <= W && b[3] <= H &&
      boxes.every(o => b[0] >= o[2] || o[0] >= b[2] || b[1] >= o[3] || o[1] >= b[3]);
    for (const [cand, font, font_px, source, limit] of levels) {
      ctx.font = font;
      const h = font_px * 1.2 + 2 * gap;
      const out = {x: [], y: [], label: []};
      for (let i = 0; i < cand.label.length && out.label.length < limit; i++) {
        const t = cand.label[i], sx = (cand.x[i] - xr.start) * kx, sy = (yr.end - cand.y[i]) * ky;
        if (!t || !(sx >= 0 && sx <= W && sy >= 0 && sy <= H)) continue;   // no text, or off the view
        const w = ctx.measureText(t).width + 2 * gap;
        for (const [dx, dy] of [[0, 0], [0, -h], [0, h], [0.6 * w, 0], [-0.6 * w, 0]]) {
          const b = [sx + dx - w / 2, sy + dy - h / 2, sx + dx + w / 2, sy + dy + h / 2];
          if (!free(b)) continue;
          boxes.push(b);
          out.x.push(xr.start + (sx + dx) / kx); out.y.push(yr.end - (sy + dy) / ky); out.label.push(t);
          break;
        }
      }
      source.data = out;
    }
  };
  const request = () => { if (!pending) { pending = true; requestAnimationFrame(place); } };
  for (const r of [plot.x_range, plot.y_range]) for (const k of ["start", "end"]) r.properties[k].change.connect(request);
  for (const k of ["inner_width", "inner_height"]) plot.properties[k].change.connect(request);
  return place;
};
(async () => {
  try {
    const el = document.getElementById(data_id);
    const b64 = el.textContent.replace(/\s+/g, "");
    let z;
    if (Uint8Array.fromBase64) z = Uint8Array.fromBase64(b64);
    else { const s = atob(b64); z = new Uint8Array(s.length); for (let i = 0; i < s.length; i++) z[i] = s.charCodeAt(i); }
    const buf = await new Response(new Blob([z]).stream().pipeThrough(new DecompressionStream("gzip"))).arrayBuffer();
    S.t_inflated = performance.now();
    const hl = new DataView(buf).getUint32(0, true);
    const head = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, hl)));
    const base = 4 + hl + (4 - (4 + hl) % 4) % 4;
    const n = head.n, d = {};
    for (const c of head.columns) {
      const o = base + c.offset;
      if (c.type === "u16q") {
        const q = new Uint16Array(buf, o, n), a = new Float64Array(n);
        for (let i = 0; i < n; i++) a[i] = q[i] === 65535 ? NaN : c.lo + q[i] * c.step;
        d[c.name] = a;
      } else d[c.name] = c.type === "u32" ? new Uint32Array(buf, o, n) : new Uint16Array(buf, o, n);
    }
    // Strings: word tokens (vocabulary + LEB128 ids) -> "\n"-separated lines, column after column.
    // Copy each token's UTF-8 bytes (NUL never occurs inside a UTF-8 character), decode once.
    const vb = new Uint8Array(buf, base + head.vocab.offset, head.vocab.length);
    const vstart = new Uint32Array(head.vocab.count + 1);
    for (let i = 0, j = 1; i < vb.length; i++) if (vb[i] === 0) vstart[j++] = i + 1;
    vstart[head.vocab.count] = vb.length + 1;
    const ids = new Uint8Array(buf, base + head.tokens.offset, head.tokens.length);
    const out = new Uint8Array(head.tokens.text_bytes);
    for (let p = 0, o = 0; p < ids.length;) {
      let b = ids[p++], id = b & 127;
      for (let shift = 7; b >= 128; shift += 7) { b = ids[p++]; id |= (b & 127) << shift; }
      for (let q = vstart[id], e = vstart[id + 1] - 1; q < e; q++) out[o++] = vb[q];
    }
    const lines = new TextDecoder().decode(out).split("\n");
    head.text_columns.forEach((name, j) => { d[name] = lines.slice(j * n, (j + 1) * n); });
    d.main_field = Array.from(d.fcode, c => head.fields[c]);
    // Hover text of the overlays' numbers (BokehJS's hover prints a NaN as "NaN" before any formatter).
    for (const [k, digits] of values) d[k + "_s"] = Array.from(d[k], v => Number.isNaN(v) ? "–" : v.toFixed(digits));
    let smax = 1;
    for (let i = 0; i < n; i++) if (d.size[i] > smax) smax = d.size[i];
    const ms = new Float64Array(n);
    for (let i = 0; i < n; i++) ms[i] = marker[0] + (marker[1] - marker[0]) * Math.sqrt(d.size[i] / smax);
    d.msize = ms;
    S.t_decoded = performance.now();
    src.data = d;
    S.place_labels = placer(d);
    S.place_labels();
    if (table_src !== src) {
      const nt = Math.min(table_rows, n), t = {};
      for (const k of ["label", "size", "main_field", ...values.map(v => v[0])]) t[k] = d[k].slice(0, nt);
      table_src.data = t;
    }
    S.t_filled = performance.now();
    S.n = n;
    S.header = head;
    let hay = null;   // per topic: label and example titles, lower case (built on the first search)
    S.search = (query) => {
      const terms = String(query).toLowerCase().split(/\s+/).filter(t => t.length > 0);
      if (terms.length === 0) { src.selected.indices = []; info.text = ""; return 0; }
      if (hay === null) {
        hay = new Array(n);
        for (let i = 0; i < n; i++) {
          let h = d.label[i];
          for (let j = 1; j < head.text_columns.length; j++) h += "\n" + d[head.text_columns[j]][i];
          hay[i] = h.toLowerCase();
        }
      }
      const hits = [];
      for (let i = 0; i < n; i++) if (terms.every(t => hay[i].includes(t))) hits.push(i);
      src.selected.indices = hits;
      info.text = hits.length.toLocaleString("en") + " of " + n.toLocaleString("en") + " topics match";
      return hits.length;
    };
    // Ready once the plot has been painted with the data (two animation frames after the update).
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
    S.t_ready = performance.now();
    S.ready = true;
  } catch (e) {
    S.error = String(e);
    console.error("sciencemap: could not load the topics:", e);
  }
})();
"""

_OVERLAY_JS = r"""
const key = cb_obj.value;
const spec = {field: key === category ? "fcode" : key, transform: mappers[key]};
for (const g of glyphs) g.fill_color = spec;
legend.visible = key === category;
for (const [k, bar] of Object.entries(bars)) bar.visible = k === key;
"""

_SEARCH_JS = r"""
const S = window.sciencemap;
if (S === undefined || S.search === undefined) return;
clearTimeout(S.search_timer);
if (instant) S.search(cb_obj.value);      // Enter or leaving the box
else S.search_timer = setTimeout(() => S.search(cb_obj.value_input), 200);   // while typing
"""


def _font_px(size: str) -> float:
    """A CSS font size ("12pt" or "16px") in pixels."""
    return float(size[:-2]) * (4 / 3 if size.endswith("pt") else 1)


def _legend_label(name: str, count: int, width: int = 38) -> str:
    return f"{shorten(name, width)} ({count:,})"


def build_html(topics: pd.DataFrame, examples: list[list[str]], background_png: bytes, x_range, y_range, cfg,
               fields: pd.DataFrame | None = None, *, title_chars: int | None = None,
               table_rows: int | None = None, webgl: bool = True, placed: pd.DataFrame | None = None,
               regions: list | None = None) -> str:
    """Self-contained map.html: the background image, the topics as WebGL points with hover, the
    overlay selector (mapping.overlays: main field, mean year, DIV), a title and term search, the topic
    table and labels that never overlap, placed by the page in every view: `fields` (the research areas:
    a DataFrame with label, x, y, size; bold) first, then up to `cfg.labels_on_map` topics, largest first.

    `cfg` is the render stage's RenderConfig (title, html_width, html_height, labels_on_map,
    html_title_chars, html_table_rows; any object with the first four will do). title_chars: example titles are cut to
    this many characters (default TITLE_CHARS). table_rows: the table lists the largest
    table_rows topics (0 = all, the default; BokehJS's table draws only the visible rows).
    `placed` (x, y, paper_id, title, topic: papers placed on the map by mapping.place): a layer of
    black rings with their own hover, switched on and off by a checkbox above the map. `regions`
    ((area label, tint, xs, ys) outlines in data coordinates: mapping.render.write_html): the research
    areas as light shapes under the topic points, switched on and off by a checkbox."""
    from bokeh.document import Document
    from bokeh.embed import file_html
    from bokeh.events import DocumentReady
    from bokeh.layouts import column, row
    from bokeh.models import (CheckboxGroup, ColorBar, ColumnDataSource, CustomJS, DataTable, Div, HoverTool,
                              LabelSet, Legend, LegendItem, LinearColorMapper, NumberFormatter, Scatter, Select,
                              TableColumn, TextInput)
    from bokeh.plotting import figure
    from bokeh.resources import INLINE
    from bokeh.core.properties import value
    from bokeh.core.templates import FILE
    from jinja2 import Template

    title_chars = title_chars if title_chars is not None else getattr(cfg, "html_title_chars", TITLE_CHARS)
    table_rows = table_rows if table_rows is not None else getattr(cfg, "html_table_rows", 0)
    gz, info = pack_topics(topics, examples, title_chars)
    n, k = len(topics), info["examples"]
    fnames, fcounts = info["header"]["fields"], np.asarray(info["header"]["field_counts"], np.int64)

    values, category = _value_overlays(), _category_overlay()
    cols = {c: [] for c in ("x", "y", "msize", "label", "size", "fcode", "main_field")} | \
        {c: [] for ov in values for c in (ov.name, f"{ov.name}_s")} | {f"ex{j}": [] for j in range(k)}
    src = ColumnDataSource(cols, name="topics")
    # Larger markers for small maps; at 100k topics the big ones must not hide the rest.
    marker = (6, 40) if n <= 5000 else (3, 24)
    p = figure(width=cfg.html_width, height=cfg.html_height, x_range=x_range, y_range=y_range,
               tools="pan,wheel_zoom,box_zoom,reset,save", active_scroll="wheel_zoom", title=cfg.title,
               output_backend="webgl" if webgl else "canvas", min_border_right=260)
    p.image_url(url=["data:image/png;base64," + base64.b64encode(background_png).decode()],
                x=x_range[0], y=y_range[1], w=x_range[1] - x_range[0], h=y_range[1] - y_range[0], anchor="top_left")

    m_field = LinearColorMapper(palette=FIELD_PALETTE, low=-0.5, high=len(FIELD_PALETTE) - 0.5,
                                high_color=OTHER_COLOR, name="field_mapper")
    lim = lambda v: (float(np.nanmin(v)), float(np.nanmax(v))) if np.isfinite(v).any() else (0.0, 1.0)  # noqa: E731
    mappers = {category.name: m_field}
    for ov in values:
        v = pd.to_numeric(topics[ov.column], errors="coerce").to_numpy(float)
        mappers[ov.name] = LinearColorMapper(palette=_palette(ov.palette), low=lim(v)[0],
                                             high=lim(v)[1], nan_color="#bbbbbb", name=f"{ov.name}_mapper")
    controls = []
    if regions:
        # drawn first: under the topic points (no hover of their own: the area labels name them). An area
        # often lies in several pieces; its one tint (the PNGs') lets them read as one region.
        rsrc = ColumnDataSource({"xs": [np.asarray(xs, float).tolist() for _, _, xs, _ in regions],
                                 "ys": [np.asarray(ys, float).tolist() for _, _, _, ys in regions],
                                 "area": [clean_text(a) for a, _, _, _ in regions],
                                 "tint": [t for _, t, _, _ in regions]}, name="area_regions")
        regions_r = p.patches("xs", "ys", source=rsrc, fill_color="tint", fill_alpha=0.35, line_color="#6e6e6e",
                              line_alpha=0.7, line_width=1.2, name="area_shapes")
        areas_on = CheckboxGroup(labels=["research areas"], active=[0], name="areas_toggle")
        areas_on.js_on_change("active", CustomJS(args={"r": regions_r}, code="r.visible = cb_obj.active.includes(0);"))
        controls.append(areas_on)
    fill = {"field": "fcode", "transform": m_field}
    lw, la = (0.8, 0.6) if n <= 5000 else (0.4, 0.35)
    glyph = Scatter(x="x", y="y", size="msize", fill_color=fill, fill_alpha=0.5, line_color="#333333",
                    line_alpha=la, line_width=lw)
    # Explicit selection glyphs, so that the overlay switch can recolour them too.
    sel = Scatter(x="x", y="y", size="msize", fill_color=fill, fill_alpha=0.95, line_color="black",
                  line_alpha=1.0, line_width=1.5)
    nonsel = Scatter(x="x", y="y", size="msize", fill_color=fill, fill_alpha=0.08, line_color="#333333",
                     line_alpha=0.06, line_width=lw)
    topics_r = p.add_glyph(src, glyph, selection_glyph=sel, nonselection_glyph=nonsel, name="topic_points")

    # Field values in tuple tooltips are inserted as text by BokehJS (no "{safe}" anywhere).
    p.add_tools(HoverTool(renderers=[topics_r], name="hover", tooltips=[
        ("topic", "@label"), ("papers", "@size{0,0}"), (category.label, "@main_field")]
        + [(ov.label, f"@{ov.name}_s") for ov in values] + [("example", f"@ex{j}") for j in range(k)]))

    if placed is not None and len(placed):
        psrc = ColumnDataSource({"x": placed["x"].astype(float).tolist(), "y": placed["y"].astype(float).tolist(),
                                 "paper_id": [clean_text(v) for v in placed["paper_id"]],
                                 "title": [shorten(clean_text(v), title_chars) for v in placed["title"].fillna("")],
                                 "topic": [clean_text(v) for v in placed["topic"].fillna("")]}, name="placed")
        placed_r = p.scatter(x="x", y="y", source=psrc, size=9, marker="circle", fill_color="#000000",
                             fill_alpha=0.35, line_color="#000000", line_width=1.5, name="placed_points")
        p.add_tools(HoverTool(renderers=[placed_r], name="placed_hover", tooltips=[
            ("placed paper", "@paper_id"), ("title", "@title"), ("topic", "@topic")]))
        toggle = CheckboxGroup(labels=[f"placed papers ({len(placed):,})"], active=[0], name="placed_toggle")
        toggle.js_on_change("active", CustomJS(args={"r": placed_r}, code="r.visible = cb_obj.active.includes(0);"))
        controls.append(toggle)

    # Labels: the page places them (placer in _LOAD_JS), so these sources hold only the labels shown
    # in the current view; candidates are the areas (largest first) and the topics (the blob's order).
    lab_src = ColumnDataSource({"x": [], "y": [], "label": []}, name="map_labels")
    area_src = ColumnDataSource({"x": [], "y": [], "label": []}, name="field_labels")
    area_cand = {"x": [], "y": [], "label": []}
    if fields is not None and len(fields):
        f = fields.sort_values("size", ascending=False, kind="stable")
        area_cand = {"x": f["x"].astype(float).tolist(), "y": f["y"].astype(float).tolist(),
                     "label": [clean_text(s) for s in f["label"]]}
    p.add_layout(LabelSet(x="x", y="y", text="label", source=lab_src, text_font_size=TOPIC_FONT,
                          text_font=value(LABEL_FAMILY), text_align="center", text_baseline="middle",
                          text_color="#111111", background_fill_color="white", background_fill_alpha=0.6,
                          name="topic_label_set"))
    p.add_layout(LabelSet(x="x", y="y", text="label", source=area_src, text_font_size=AREA_FONT,
                          text_font=value(LABEL_FAMILY), text_font_style="bold", text_align="center",
                          text_baseline="middle", text_color="#222222", background_fill_color="white",
                          background_fill_alpha=0.45, name="area_label_set"))

    # Legend of the main fields. Each swatch is a renderer of one patch at NaN (never drawn):
    # Patches, a glyph BokehJS draws on the canvas, as WebGL costs a copy of the GL canvas per
    # renderer and paint; and not an index into the topics, whose swatches would appear only with
    # the data and resize the legend (a second full paint).
    items = []
    swatch = lambda c: p.patches(xs=[[np.nan]], ys=[[np.nan]], fill_color=c, line_color=None)  # noqa: E731
    for i, (name, cnt) in enumerate(zip(fnames[:len(FIELD_PALETTE)], fcounts)):
        items.append(LegendItem(label=_legend_label(name, int(cnt)), renderers=[swatch(FIELD_PALETTE[i])]))
    if len(fnames) > len(FIELD_PALETTE):
        rest = int(fcounts[len(FIELD_PALETTE):].sum())
        items.append(LegendItem(label=f"{len(fnames) - len(FIELD_PALETTE):,} other fields ({rest:,})",
                                renderers=[swatch(OTHER_COLOR)]))
    # In the panel right of the frame, anchored at the panel's left edge: at the default top_right, BokehJS
    # 3.9 drew the demo map's legend 5 px over the frame's right edge (and over the labels there).
    legend = Legend(items=items, title=f"{category.label} (topics)", label_text_font_size="8pt", glyph_height=12,
                    glyph_width=12, spacing=1, name="field_legend", location="top_left")
    p.add_layout(legend, "right")
    bars = {ov.name: ColorBar(color_mapper=mappers[ov.name], title=ov.label, visible=False, name=f"{ov.name}_bar",
                              width=14) for ov in values}
    for bar in bars.values():
        p.add_layout(bar, "right")
    p.xaxis.visible = p.yaxis.visible = False
    p.grid.visible = False

    overlay = Select(title="Colour topics by", value=category.name, name="overlay",
                     options=[(ov.name, ov.label) for ov in OVERLAYS])
    overlay.js_on_change("value", CustomJS(args={"glyphs": [glyph, sel, nonsel], "legend": legend, "bars": bars,
                                                 "mappers": mappers, "category": category.name},
                                           code=_OVERLAY_JS))
    search = TextInput(title="Search titles and topic terms", placeholder="e.g. ribosome", name="search",
                       width=360)
    info = Div(text="", render_as_text=True, name="search_info", width=300, margin=(28, 5, 5, 10))
    search.js_on_change("value_input", CustomJS(args={"instant": False}, code=_SEARCH_JS))
    search.js_on_change("value", CustomJS(args={"instant": True}, code=_SEARCH_JS))

    table_src = src if table_rows <= 0 else ColumnDataSource(
        {c: [] for c in ("label", "size", "main_field", *(ov.name for ov in values))}, name="table")
    nf = dict(nan_format="–")
    table = DataTable(source=table_src, width=cfg.html_width, height=260, index_position=None, name="topic_table",
                      columns=[TableColumn(field="label", title="topic", width=360),
                               TableColumn(field="size", title="papers", width=70,
                                           formatter=NumberFormatter(format="0,0")),
                               TableColumn(field="main_field", title=category.label, width=200)]
                      + [TableColumn(field=ov.name, title=ov.label, width=max(80, min(110, 5 * len(ov.label))),
                                     formatter=NumberFormatter(format="0." + "0" * ov.digits, **nf))
                         for ov in values])
    doc = Document()
    doc.add_root(column(row(overlay, search, info, *controls), p, table))
    doc.js_on_event(DocumentReady, CustomJS(args={
        "src": src, "labels": lab_src, "table_src": table_src, "info": info, "data_id": DATA_ELEMENT_ID,
        "n_labels": int(cfg.labels_on_map), "table_rows": int(table_rows), "marker": list(marker),
        "plot": p, "areas": area_cand, "area_src": area_src, "gap": LABEL_GAP,
        "area_font": f"bold {AREA_FONT} {LABEL_FAMILY}", "topic_font": f"{TOPIC_FONT} {LABEL_FAMILY}",
        "area_px": _font_px(AREA_FONT), "topic_px": _font_px(TOPIC_FONT),
        "values": [[ov.name, ov.digits] for ov in values]}, code=_LOAD_JS))
    doc.title = cfg.title
    page = Template("{% extends base %}{% block postamble %}<script type=\"application/octet-stream\" id=\""
                    + DATA_ELEMENT_ID + "\">{{ blob }}</script>{% endblock %}")
    return file_html(doc, resources=INLINE, title=cfg.title, template=page,
                     template_variables={"base": FILE, "blob": base64.b64encode(gz).decode("ascii")})
