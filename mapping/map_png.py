"""Map PNGs: papers datashaded by a colour category or a value, with a title, a legend or colour
bar, and labels of the largest topics placed without overlapping (METHODS.md §5.3).

Datashader does the per-pixel aggregation chunk by chunk (counts per category, or sum and count
of a value per pixel, added over chunks), so the cost is one pass over float32 positions however
many papers there are; PIL draws the frame, the legend and the labels on top.

Image layout, width × height in all: a title band on top, the map below it on the left, the
legend strip (legend_width) on the right.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

# Distinct colours (Tableau 10, then a few more) for categories such as `source` or main field.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]
# A grey layer underneath the named categories (cited-only papers, papers whose topic has no value).
UNDER_COLOR = "#c4c4c4"
# Light tints of the research areas' shapes (ColorBrewer Pastel1 and Set3, greys left out), by area number.
AREA_TINTS = ["#fbb4ae", "#b3cde3", "#ccebc5", "#decbe4", "#fed9a6", "#ffffcc", "#e5d8bd", "#fddaec",
              "#8dd3c7", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#bc80bd"]
TITLE_H = 30


@dataclass
class Frame:
    """Pixel geometry of one map PNG and the data ranges it shows."""
    width: int
    height: int
    legend_width: int
    x_range: tuple[float, float]
    y_range: tuple[float, float]

    @property
    def map_w(self) -> int:
        return self.width - self.legend_width

    @property
    def map_h(self) -> int:
        return self.height - TITLE_H

    def to_px(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Data → pixel coordinates of the whole image (datashader's rows run from y max down)."""
        (x0, x1), (y0, y1) = self.x_range, self.y_range
        px = (np.asarray(x, float) - x0) / (x1 - x0) * self.map_w
        py = TITLE_H + (y1 - np.asarray(y, float)) / (y1 - y0) * self.map_h
        return px, py

    def to_data(self, px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The inverse of to_px: pixel coordinates of the whole image → data coordinates."""
        (x0, x1), (y0, y1) = self.x_range, self.y_range
        x = x0 + np.asarray(px, float) / self.map_w * (x1 - x0)
        y = y1 - (np.asarray(py, float) - TITLE_H) / self.map_h * (y1 - y0)
        return x, y


def bounds(x: np.ndarray, y: np.ndarray, margin: float = 0.05):
    x0, x1 = float(np.nanmin(x)), float(np.nanmax(x))
    y0, y1 = float(np.nanmin(y)), float(np.nanmax(y))
    dx, dy = (x1 - x0) or 1.0, (y1 - y0) or 1.0
    return (x0 - margin * dx, x1 + margin * dx), (y0 - margin * dy, y1 + margin * dy)


def font(size: int = 13):
    from PIL import ImageFont

    try:  # matplotlib ships DejaVu Sans; PIL's built-in bitmap font is the fallback
        from matplotlib import font_manager

        return ImageFont.truetype(font_manager.findfont("DejaVu Sans"), size)
    except Exception:  # noqa: BLE001
        return ImageFont.load_default()


def palette_of(cmap: str, n: int = 256) -> list[str]:
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    cm = colormaps[cmap]
    return [to_hex(cm(i / (n - 1))) for i in range(n)]


def _canvas(frame: Frame):
    import datashader as ds

    return ds.Canvas(plot_width=frame.map_w, plot_height=frame.map_h, x_range=frame.x_range, y_range=frame.y_range)


# Papers drawn as discs whose size follows the number drawn and the map's pixels (METHODS.md §5.3):
# the discs alone would cover POINT_COVER of the map if none overlapped; radius 1 to MAX_POINT_RADIUS
# px while there are fewer papers than pixels, single pixels (a density image) beyond.
POINT_COVER = 0.12
MAX_POINT_RADIUS = 4


def point_radius(n: int, frame: Frame) -> int:
    """Disc radius in pixels (0 = one pixel) for n papers drawn on the frame's map."""
    area = frame.map_w * frame.map_h
    if n <= 0 or n > area:
        return 0
    return int(min(max(math.ceil((math.sqrt(POINT_COVER * area / n) - 1) / 2), 1), MAX_POINT_RADIUS))


def _spread(img, radius: int):
    import datashader.transfer_functions as tf

    return tf.spread(img, px=radius) if radius > 0 else img


def shade_categories(x, y, codes, names: list[str], colors: dict[str, str], frame: Frame, under: str | None = None,
                     chunk: int = 2_000_000, progress=None):
    """Papers coloured by category (`codes` index `names`; -1 = not drawn), counts per pixel added
    chunk by chunk; the category `under` (if any) is a grey layer beneath the others. PIL RGBA."""
    import datashader as ds
    import datashader.transfer_functions as tf

    cvs = _canvas(frame)
    codes = np.asarray(codes)
    under_code = names.index(under) if under in names else -2
    radius = point_radius(int(np.count_nonzero(codes >= 0)), frame)
    layers = []
    for is_under in (True, False):
        keys = {c: v for c, v in colors.items() if (c == under) == is_under}
        if not keys:
            continue
        cats = sorted(keys)
        to_cat = np.full(len(names), -1, np.int32)          # global code -> position in this layer's cats
        for i, c in enumerate(names):
            if c in keys:
                to_cat[i] = cats.index(c)
        total = None
        for lo in range(0, len(codes), chunk):
            c = codes[lo:lo + chunk]
            sel = np.flatnonzero(((c == under_code) == is_under) & (c >= 0))
            sel = sel[to_cat[c[sel]] >= 0]
            if len(sel):
                df = pd.DataFrame({"x": x[lo:lo + chunk][sel], "y": y[lo:lo + chunk][sel],
                                   "c": pd.Categorical.from_codes(to_cat[c[sel]], categories=cats)})
                agg = cvs.points(df, "x", "y", ds.count_cat("c"))
                if total is None:
                    total = agg
                else:
                    total.data += agg.data
            if progress is not None:
                progress.advance(min(chunk, len(codes) - lo))
        if total is None:
            continue
        img = tf.shade(total, color_key=keys, how="eq_hist", min_alpha=120 if is_under else 220)
        layers.append(_spread(img, radius))
    if not layers:
        return _blank(frame)
    return tf.stack(*layers).to_pil()


def _blank(frame: Frame):
    from PIL import Image

    return Image.new("RGBA", (frame.map_w, frame.map_h), (255, 255, 255, 0))


def shade_values(x, y, values, frame: Frame, cmap: list[str], span: tuple[float, float],
                 chunk: int = 2_000_000, progress=None):
    """Papers coloured by the mean of a per-paper value in each pixel (linear colour map over
    `span`); papers whose value is NaN form a grey layer beneath. PIL RGBA."""
    import datashader as ds
    import datashader.transfer_functions as tf

    cvs = _canvas(frame)
    values = np.asarray(values, np.float32)
    template = None
    vsum = np.zeros((frame.map_h, frame.map_w))
    vcnt = np.zeros((frame.map_h, frame.map_w))
    grey = np.zeros((frame.map_h, frame.map_w))
    for lo in range(0, len(values), chunk):
        v = values[lo:lo + chunk]
        nan = np.isnan(v)
        df = pd.DataFrame({"x": x[lo:lo + chunk], "y": y[lo:lo + chunk], "v": v})
        for part, is_nan in ((df[~nan], False), (df[nan], True)):
            if not len(part):
                continue
            c = cvs.points(part, "x", "y", ds.count())
            template = c
            if is_nan:
                grey += c.values
            else:
                vcnt += c.values
                vsum += np.nan_to_num(cvs.points(part, "x", "y", ds.sum("v")).values)
        if progress is not None:
            progress.advance(min(chunk, len(values) - lo))
    layers = []
    if template is None:
        return _blank(frame)
    radius = point_radius(len(values), frame)
    if grey.any():
        layers.append(_spread(tf.shade(template.copy(data=np.where(grey > 0, grey, np.nan)),
                                       cmap=[UNDER_COLOR, UNDER_COLOR], min_alpha=120), radius))
    if vcnt.any():
        lo_, hi_ = span
        mean = template.copy(data=np.where(vcnt > 0, vsum / np.maximum(vcnt, 1), np.nan))
        layers.append(_spread(tf.shade(mean, cmap=cmap, how="linear", span=[lo_, max(hi_, lo_ + 1e-9)],
                                       min_alpha=255), radius))
    return tf.stack(*layers).to_pil() if layers else _blank(frame)


# ---------------------------------------------------------------- frame, legend, colour bar, labels

def compose(img, frame: Frame, title: str, under=None):
    """White canvas: title band, the map image under it (over `under`, an RGBA image of the map's size,
    if given), an empty legend strip. Returns (image, draw)."""
    from PIL import Image, ImageDraw

    out = Image.new("RGB", (frame.width, frame.height), "white")
    if under is not None:
        out.paste(under, (0, TITLE_H), under)
    out.paste(img, (0, TITLE_H), img)
    draw = ImageDraw.Draw(out)
    f = font(14)
    draw.text((10, 7), _fit(draw, title, f, frame.width - 20), fill="black", font=f)
    draw.line([(0, TITLE_H - 1), (frame.width, TITLE_H - 1)], fill="#dddddd")
    return out, draw


def _fit(draw, text: str, f, max_w: int) -> str:
    """`text`, shortened with an ellipsis to fit max_w pixels."""
    if draw.textlength(text, font=f) <= max_w:
        return text
    while text and draw.textlength(text + "…", font=f) > max_w:
        text = text[:-1]
    return text + "…"


def legend(draw, frame: Frame, heading: str, items: list[tuple[str, str, int]]) -> None:
    """Swatches with 'name (count)' in the legend strip; as many as fit, then a '+ N more' line."""
    f, fh = font(12), font(13)
    x0 = frame.map_w + 10
    wmax = frame.legend_width - 16
    draw.text((x0, TITLE_H + 8), _fit(draw, heading, fh, wmax), fill="#222222", font=fh)
    yy = TITLE_H + 32
    for i, (name, color, count) in enumerate(items):
        if yy > frame.height - 36 and i < len(items) - 1:
            draw.text((x0, yy), f"+ {len(items) - i} more", fill="#444444", font=f)
            break
        draw.rectangle([x0, yy, x0 + 12, yy + 12], fill=color)
        draw.text((x0 + 18, yy - 1), _fit(draw, f"{name} ({count:,})", f, wmax - 18), fill="black", font=f)
        yy += 19


def colour_bar(draw, frame: Frame, heading: str, cmap: list[str], span: tuple[float, float], fmt: str,
               note: str = "") -> None:
    """A vertical colour bar in the legend strip: the value's name, the scale and its ticks."""
    f, fh = font(12), font(13)
    x0 = frame.map_w + 10
    wmax = frame.legend_width - 16
    words, lines = heading.split(), [""]
    for w in words:                                   # wrap the heading into the strip
        if lines[-1] and draw.textlength(lines[-1] + " " + w, font=fh) > wmax:
            lines.append(w)
        else:
            lines[-1] = (lines[-1] + " " + w).strip()
    yy = TITLE_H + 8
    for ln in lines[:3]:
        draw.text((x0, yy), ln, fill="#222222", font=fh)
        yy += 17
    top, bottom = yy + 8, min(frame.height - 60, yy + 8 + 260)
    bar_w = 18
    n = len(cmap)
    for py in range(top, bottom):                      # high values on top
        c = cmap[int(round((bottom - 1 - py) / max(bottom - 1 - top, 1) * (n - 1)))]
        draw.line([(x0, py), (x0 + bar_w, py)], fill=c)
    draw.rectangle([x0, top, x0 + bar_w, bottom - 1], outline="#555555")
    lo, hi = span
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        py = bottom - 1 - (bottom - 1 - top) * k / 4
        draw.line([(x0 + bar_w, py), (x0 + bar_w + 4, py)], fill="#555555")
        draw.text((x0 + bar_w + 7, py - 7), format(v, fmt), fill="black", font=f)
    if note:
        draw.rectangle([x0, bottom + 14, x0 + 12, bottom + 26], fill=UNDER_COLOR)
        draw.text((x0 + 18, bottom + 13), _fit(draw, note, f, wmax - 18), fill="black", font=f)


def place_labels(draw, frame: Frame, texts: list[str], x: np.ndarray, y: np.ndarray, size: int = 11,
                 bold: bool = False, boxes: list | None = None) -> int:
    """Draw labels at data points (in the given order = priority) where their box overlaps no box
    drawn before (`boxes`, shared between calls, is extended): centred on the point, else just
    above, below, right or left of it. Returns how many were drawn."""
    f = font(size + 2 if bold else size)
    px, py = frame.to_px(x, y)
    boxes = [] if boxes is None else boxes
    drawn = 0
    for t, cx, cy in zip(texts, px.tolist(), py.tolist()):
        if not t or not np.isfinite(cx) or not np.isfinite(cy):
            continue
        l, tp, r, b = draw.textbbox((0, 0), t, font=f)
        w, h = r - l + 6, b - tp + 4
        for dx, dy in ((0, 0), (0, -h), (0, h), (w * 0.6, 0), (-w * 0.6, 0)):
            x0, y0 = cx - w / 2 + dx, cy - h / 2 + dy
            box = (x0, y0, x0 + w, y0 + h)
            if box[0] < 0 or box[2] > frame.map_w or box[1] < TITLE_H or box[3] > frame.height:
                continue
            if any(box[0] < o[2] and o[0] < box[2] and box[1] < o[3] and o[1] < box[3] for o in boxes):
                continue
            boxes.append(box)
            draw.rectangle(box, fill=(255, 255, 255) if not bold else (245, 245, 245))
            draw.text((x0 + 3 - l, y0 + 2 - tp), t, fill="#111111" if not bold else "#000000", font=f)
            drawn += 1
            break
    return drawn
