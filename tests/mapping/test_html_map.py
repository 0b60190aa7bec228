"""mapping.html_map without a browser: the topics blob (packing, word coding, quantization) and the
page's size per topic. The page in Chromium: test_render_browser.py."""
from __future__ import annotations

import io
import re

import numpy as np
import pandas as pd
from PIL import Image

from mapping.html_map import (MISSING_Q, TITLE_CHARS, build_html, encode_text, pack_topics, payload_of, quantize,
                              shorten, unpack_topics, varint_decode, varint_encode)
from mapping.render import RenderConfig

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (20, 20), "white").save(buf, format="PNG")
    return buf.getvalue()


def test_word_coding_is_lossless():
    text = "\n".join([EVIL, "Über-große  Proteine: 日本語 — x²   tabs\tand_underscores", "", "a\nb", "😀 emoji end ",
                      "word " * 50])
    vocab, ids = encode_text(text)
    assert "".join(vocab[i] for i in varint_decode(ids)) == text
    assert len(set(vocab)) == len(vocab)
    words = text.split()
    assert len(vocab) < len(words)                       # repeated words share one entry
    v = np.array([0, 1, 127, 128, 255, 16383, 16384, 2 ** 21 - 1, 2 ** 21, 2 ** 28 - 1, 5])
    b = varint_encode(v)
    assert len(b) == 1 + 1 + 1 + 2 + 2 + 2 + 3 + 3 + 4 + 4 + 1
    np.testing.assert_array_equal(varint_decode(b), v)


def test_quantize_error_and_missing():
    v = np.array([1923.7, 2012.4, np.nan, 2005.0, 1999.99])
    q, lo, step = quantize(v)
    assert q.dtype == np.uint16 and q[2] == MISSING_Q
    back = np.where(q == MISSING_Q, np.nan, lo + q * step)
    ok = np.isfinite(v)
    assert np.isnan(back[2]) and np.abs(back[ok] - v[ok]).max() <= (2012.4 - 1923.7) / 131068 + 1e-9
    assert q[ok].max() == MISSING_Q - 1 and q[ok].min() == 0
    q1, _, _ = quantize(np.array([3.0, 3.0]))               # one value: no division by zero
    assert (q1 == 0).all()
    assert (quantize(np.array([np.nan]))[0] == MISSING_Q).all()


def test_shorten():
    s = "Upregulation of plakophilin-2 and its acquisition to adherens junctions identifies a novel ensemble"
    out = shorten(s, 40)
    assert len(out) <= 40 and out.endswith("…") and s.startswith(out[:-1]) and not out[:-1].endswith(" ")
    assert s[len(out) - 1] == " "                          # cut at a word boundary
    assert shorten("short", 40) == "short"
    assert len(shorten("x" * 100, 40)) == 40                # no boundary: a hard cut


def test_pack_and_unpack_round_trip():
    topics = pd.DataFrame({"cluster": np.arange(5), "size": [10, 50, 30, 50, 7],
                           "label": [EVIL, "line\nbreak, tab\there", None, "日本語, ü", "ok"],
                           "x": [0.0, 1.5, -2.25, 3.0, 0.5], "y": [1.0, 0.0, 2.0, -1.0, 0.25],
                           "main_field": ["Bio", None, "CS", "Bio", ""],
                           "mean_year": [2001.0, np.nan, 2010.5, 2015.0, 1990.0],
                           "interdisciplinarity": [0.0, 0.5, np.nan, 1.0, 0.25]})
    examples = [[EVIL, "A title"], ["Protein " * 40], [], ["x"], [None, float("nan"), "third"]]
    gz, info = pack_topics(topics, examples, title_chars=30)
    df, head = unpack_topics(gz)
    order = [1, 3, 2, 0, 4]                                # by size, ties in input order
    assert head["n"] == 5 and info["examples"] == 3 and head["text_columns"] == ["label", "ex0", "ex1", "ex2"]
    assert df["size"].tolist() == [50, 50, 30, 10, 7]
    assert df["label"].tolist() == ["line break, tab here", "日本語, ü", "", EVIL, "ok"]
    assert df["main_field"].tolist() == ["(no field)", "Bio", "CS", "Bio", "(no field)"]
    assert head["fields"] == ["(no field)", "Bio", "CS"] and head["field_counts"] == [2, 2, 1]   # ties: by name
    assert df["ex0"].tolist() == [shorten("Protein " * 40, 30).strip(), "x", "", shorten(EVIL, 30), ""]
    assert df["ex0"].str.len().max() <= 30 and df["ex1"].tolist() == ["", "", "", "A title", ""]
    assert df["ex2"].tolist()[4] == "third"
    for col, src in (("x", "x"), ("y", "y"), ("year", "mean_year"), ("interdisciplinarity", "interdisciplinarity")):
        want = topics[src].to_numpy(float)[order]
        ok = np.isfinite(want)
        np.testing.assert_array_equal(np.isnan(df[col].to_numpy()), ~ok)
        rng = np.nanmax(want) - np.nanmin(want)
        assert np.abs(df[col].to_numpy()[ok] - want[ok]).max() <= rng / 131068 + 1e-12, col


def test_page_bytes_per_topic_are_bounded(generated_topics):
    """The budget: 15 MB for 100k topics, less BokehJS (~2.2 MB) and the background image (~1.6 MB
    for the stage's 980 × 900 datashader image), leaves ~112 bytes per topic. 2,000 generated
    topics with titles of up to ~250 characters must stay under 110 bytes each (measured: ~97),
    and the Bokeh document itself must not grow with the topics (no per-topic data or colours in
    it: everything is in the blob)."""
    cfg = RenderConfig()
    pages = {}
    for n in (200, 2000):
        t, ex = generated_topics(n)
        html = build_html(t, ex, _png(), (-20, 20), (-20, 20), cfg)
        doc = sum(len(m) for m in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', html, re.S))
        pages[n] = (len(html.encode()), doc, html)
    per_topic = (pages[2000][0] - pages[200][0]) / 1800
    assert per_topic < 110, per_topic
    assert abs(pages[2000][1] - pages[200][1]) < 1000, (pages[2000][1], pages[200][1])
    df, _ = unpack_topics(payload_of(pages[2000][2]))
    assert len(df) == 2000 and df[["ex0", "ex1", "ex2"]].map(len).to_numpy().max() <= TITLE_CHARS
    # shorter titles, smaller page: the blob grows with title_chars
    t, ex = generated_topics(2000)
    short = build_html(t, ex, _png(), (-20, 20), (-20, 20), cfg, title_chars=40)
    assert len(short) < pages[2000][0] - 2000 * 15
