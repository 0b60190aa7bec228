"""Fixtures every test folder shares: where the sample and test data live, one SparkSession, and a
headless Chromium to open the HTML map in.

Tests import the project as installed (`make install` installs it editable); pytest runs with
--import-mode=importlib (setup.cfg), so test modules cannot import each other: what they share is
here, as fixtures.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def repo_root(pytestconfig) -> Path:
    """The checkout under test (pytest's rootdir, where setup.cfg is): sample/ and tests/data live there."""
    return Path(pytestconfig.rootpath)


@pytest.fixture(scope="session")
def sample_dir(repo_root) -> Path:
    return repo_root / "sample"


@pytest.fixture(scope="session")
def test_data(repo_root) -> Path:
    return repo_root / "tests" / "data"


@pytest.fixture(scope="session")
def pubmed_records(sample_dir):
    """records(n) -> the first n PubMed papers of the embedded sample as dicts (paper_id, title, abstract)."""
    import pandas as pd

    def records(n: int) -> list[dict]:
        df = pd.read_csv(sample_dir / "pubmed" / "train-data-small.csv.gz", usecols=["Title", "abstractText", "pmid"],
                         nrows=n)
        return [{"paper_id": f"pmid:{r.pmid}", "title": r.Title, "abstract": r.abstractText} for r in df.itertuples()]
    return records


def skip_unless_ci(reason: str) -> None:
    """Skip a test that cannot run here, except under CI (the CI variable set), where it fails: a
    missing browser or data set must not turn a CI run green by skipping."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so this fails instead of skipping", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def shared_data(repo_root) -> Path:
    """../shared/data beside the checkout (the larger real data sets); a test that needs it is
    skipped where it is missing, and fails under CI."""
    root = repo_root.parent / "shared" / "data"
    if not root.is_dir():
        skip_unless_ci(f"{root} not here (the shared data sets beside the checkout)")
    return root


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession (2 cores) for every Spark test of the session."""
    from importance.ingest.spark import get_spark

    s = get_spark(app="sciencemap-tests", master="local[2]", shuffle_partitions=4)
    yield s


# ---------------------------------------------------------------- headless Chromium (DevTools protocol)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The Debian launcher script is fine, but the binary behind it avoids its shell checks.
if Path("/usr/lib/chromium/chromium").exists():
    CHROMIUM = "/usr/lib/chromium/chromium"

# BokehJS has rendered the DataTable's cells (inside shadow roots) once a slick-cell exists.
TABLE_RENDERED = """(() => { let f = false; const w = n => { if (n.shadowRoot) w(n.shadowRoot);
  if (n.classList && n.classList.contains('slick-cell')) f = true; for (const c of n.childNodes) w(c); };
  w(document.documentElement); return f; })()"""

# All text under the document, descending into shadow roots (BokehJS renders inside them).
DEEP_TEXT_JS = r"""
(() => {
  const out = [];
  const walk = (node) => {
    if (node.nodeType === Node.TEXT_NODE) { out.push(node.nodeValue); return; }
    if (node.nodeType === Node.ELEMENT_NODE && ['SCRIPT', 'STYLE', 'TEMPLATE'].includes(node.tagName)) return;
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const c of node.childNodes) walk(c);
  };
  walk(document.documentElement);
  return out.join("\n");
})()
"""
# Every element tag name (lower case), shadow roots included.
DEEP_TAGS_JS = r"""
(() => {
  const out = [];
  const walk = (node) => {
    if (node.nodeType === Node.ELEMENT_NODE) out.push(node.tagName.toLowerCase() + (node.getAttribute('src') ? '[src=' + node.getAttribute('src').slice(0, 20) + ']' : '') + (node.tagName === 'SCRIPT' && node.type !== 'application/json' && node.textContent.includes('__pwned') ? '[pwned]' : ''));
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const c of node.childNodes) walk(c);
  };
  walk(document.documentElement);
  return out;
})()
"""


class Chromium:
    """Headless Chromium driven over --remote-debugging-pipe: it reads CDP messages from fd 3 and
    writes to fd 4, each a JSON object ending in a NUL byte."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="cdp-")
        r_in, w_in = os.pipe()    # we write -> chromium fd 3
        r_out, w_out = os.pipe()  # chromium fd 4 -> we read

        # Move both ends above fd 4 first so that the dup2 calls cannot clobber each other.
        r_in, w_out = self._above_4(r_in), self._above_4(w_out)

        def child_fds():
            os.dup2(r_in, 3)      # dup2 makes 3 and 4 inheritable; Python opens others non-inheritable
            os.dup2(w_out, 4)     # (PEP 446), so close_fds=False hands chromium these two. (pass_fds=(3, 4)
                                  # fails with EBADF unless 3 and 4 happen to be open in this process.)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage",
             f"--user-data-dir={self.tmp}", "--remote-debugging-pipe", "about:blank"],
            close_fds=False, preexec_fn=child_fds, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if not os.environ.get("CDP_DEBUG") else None)
        os.close(r_in)
        os.close(w_out)
        self.w, self.r = w_in, r_out
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []

    @staticmethod
    def _above_4(fd: int) -> int:
        """The same pipe end as a descriptor above 4 (fd closed)."""
        held = []
        while fd <= 4:
            held.append(fd)
            fd = os.dup(fd)
        for f in held:
            os.close(f)
        return fd

    def _read_message(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.r], [], [], left)
            if ready:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(max(0.0, deadline - time.monotonic()))
            if m is None:
                raise TimeoutError(f"no reply to {method}")
            if m.get("id") == mid:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def pump(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            m = self._read_message(deadline - time.monotonic())
            if m is not None:
                self.events.append(m)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self.w)
        os.close(self.r)
        shutil.rmtree(self.tmp, ignore_errors=True)


def page_errors(events: list[dict]) -> list[str]:
    """The uncaught exceptions, console errors and error log entries among a page's CDP events
    (Runtime and Log enabled)."""
    errors = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            errors.append("uncaught: " + (d.get("exception", {}).get("description") or d.get("text", "")))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append("console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append("log: " + p["entry"].get("text", ""))
    return errors


def open_page(path: Path, wait_js: str | None = None, timeout: float = 30.0, settle: float = 1.0,
              probes: dict[str, str] | None = None, init_js: str | None = None,
              viewport: tuple[int, int] | None = None) -> dict:
    """Load file://path; wait until `wait_js` evaluates truthy (or timeout); return
    {"errors": [...], "text": deep text, "tags": [...], "ready": bool, "pwned": window.__pwned,
    "probes": {name: value of each probe expression, evaluated in order after loading; a probe that
    gives a Promise is awaited}}. `init_js` runs in the page before its own scripts (e.g. to take a
    browser feature away); `viewport` = (width, height) of the window in CSS pixels."""
    c = Chromium()
    try:
        target = c.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sess = c.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for dom in ("Runtime.enable", "Log.enable", "Page.enable"):
            c.send(dom, session=sess)
        if init_js:
            c.send("Page.addScriptToEvaluateOnNewDocument", {"source": init_js}, session=sess)
        if viewport:
            c.send("Emulation.setDeviceMetricsOverride", {"width": viewport[0], "height": viewport[1],
                                                          "deviceScaleFactor": 1, "mobile": False}, session=sess)
        c.send("Page.navigate", {"url": Path(path).resolve().as_uri()}, session=sess)
        ready = wait_js is None
        deadline = time.monotonic() + timeout
        while not ready and time.monotonic() < deadline:
            c.pump(0.25)
            r = c.send("Runtime.evaluate", {"expression": wait_js, "returnByValue": True}, session=sess)
            ready = bool(r.get("result", {}).get("value"))
        c.pump(settle)

        def ev(expr):
            return c.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True},
                          session=sess).get("result", {}).get("value")

        probe_values = {k: ev(js) for k, js in (probes or {}).items()}
        if probes:
            c.pump(0.5)  # errors raised by the probes' side effects arrive as events
        text, tags, pwned = ev(DEEP_TEXT_JS), ev(DEEP_TAGS_JS), ev("window.__pwned === undefined ? null : window.__pwned")
        return {"errors": page_errors(c.events), "text": text or "", "tags": tags or [], "ready": ready, "pwned": pwned,
                "probes": probe_values}
    finally:
        c.close()


# The map page (mapping.html_map) in a browser test.
# The page has decoded its blob, filled the sources and painted (or failed: then errors say why).
MAP_READY = "window.sciencemap && (window.sciencemap.ready || window.sciencemap.error !== undefined)"
# Page helpers for the probes: the BokehJS view of a named model, and hovering over topic i.
MAP_HELPERS = r"""(() => {
  const doc = Bokeh.documents[0];
  window.__model = (name) => doc.get_model_by_name(name);
  window.__view = (name) => { const m = __model(name); const st = [...Bokeh.index.roots];
    while (st.length) { const v = st.pop(); if (v.model === m) return v; st.push(...v.children()); } return null; };
  // The fill colours BokehJS computed for the topic points (RGBA as uint32), as drawn.
  window.__colours = () => { const f = __view('topic_points').glyph.fill_color; return Array.from({length: f.length}, (_, i) => f.get(i)); };
  window.__hover = (i) => { const pv = __view('topic_points').parent, d = __model('topics').data;
    const el = pv.canvas_view.events_el, r = el.getBoundingClientRect();
    const at = {clientX: r.left + pv.frame.x_scale.compute(d.x[i]), clientY: r.top + pv.frame.y_scale.compute(d.y[i]),
                bubbles: true, pointerType: 'mouse', isPrimary: true};
    for (const t of ['pointerenter', 'pointermove']) el.dispatchEvent(new PointerEvent(t, at)); return d.label[i]; };
  return true; })()"""

# Zoom the map into the middle quarter of its current view (after MAP_HELPERS).
MAP_ZOOM_IN = ("(() => { const m = __view('topic_points').parent.model; for (const r of [m.x_range, m.y_range]) {"
               " const c = (r.start + r.end) / 2, h = (r.end - r.start) / 4; r.setv({start: c - h, end: c + h}); }"
               " return true; })()")

# The label boxes as drawn: each label set's source mapped through the plot's own scales, the text
# measured with the label set's own font (not the page's placement bookkeeping), the plot frame and
# the legend from their BokehJS views; after two frames, so that a placement requested by a range
# change has run.
LABEL_BOXES = r"""new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
  const pv = __view('topic_points').parent, fr = pv.frame.bbox, lg = __view('field_legend').bbox;
  const ctx = document.createElement('canvas').getContext('2d');
  const val = v => (v !== null && typeof v === 'object' && 'value' in v) ? v.value : v;
  const boxes = [];
  for (const name of ['area_label_set', 'topic_label_set']) {
    const m = __model(name), d = m.source.data, size = val(m.text_font_size);
    ctx.font = `${val(m.text_font_style)} ${size} ${val(m.text_font)}`;
    const h = parseFloat(size) * 4 / 3 * val(m.text_line_height);
    for (let i = 0; i < d.label.length; i++) {
      const sx = pv.frame.x_scale.compute(d.x[i]), sy = pv.frame.y_scale.compute(d.y[i]), w = ctx.measureText(d.label[i]).width;
      boxes.push({set: name, label: d.label[i], box: [sx - w / 2, sy - h / 2, sx + w / 2, sy + h / 2]});
    }
  }
  done(JSON.stringify({boxes, frame: [fr.x0, fr.y0, fr.x1, fr.y1], legend: [lg.x0, lg.y0, lg.x1, lg.y1]}));
})))"""


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def check_map_labels(view: dict, max_topics: int) -> tuple[set, set]:
    """No two label boxes intersect, each lies inside the plot frame, none under the legend (which
    lies outside the frame). Returns (area labels, topic labels) shown."""
    boxes, frame, legend = view["boxes"], view["frame"], view["legend"]
    assert not _overlaps(frame, legend), (frame, legend)
    for b in boxes:
        x0, y0, x1, y1 = b["box"]
        assert frame[0] <= x0 and x1 <= frame[2] and frame[1] <= y0 and y1 <= frame[3], (b, frame)
        assert not _overlaps(b["box"], legend), (b, legend)
    clash = [(a["label"], b["label"]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _overlaps(a["box"], b["box"])]
    assert not clash, clash[:5]
    areas = {b["label"] for b in boxes if b["set"] == "area_label_set"}
    topics = {b["label"] for b in boxes if b["set"] == "topic_label_set"}
    assert 0 < len(topics) <= max_topics
    return areas, topics


class Browser:
    """What a browser test gets: open_page(path, wait_js=..., ...), the wait conditions for a rendered
    map table and a loaded map, the map page's probe helpers and its label check."""

    TABLE_RENDERED = TABLE_RENDERED
    MAP_READY = MAP_READY
    MAP_HELPERS = MAP_HELPERS
    MAP_ZOOM_IN = MAP_ZOOM_IN
    LABEL_BOXES = LABEL_BOXES
    open_page = staticmethod(open_page)
    check_labels = staticmethod(check_map_labels)


@pytest.fixture(scope="session")
def browser() -> Browser:
    """Headless Chromium; the test is skipped where it is not installed (and fails under CI)."""
    if not os.path.exists(CHROMIUM):
        skip_unless_ci(f"headless Chromium not installed ({CHROMIUM}); apt-get install chromium to run the browser tests")
    return Browser()
