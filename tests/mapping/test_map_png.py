"""Map PNG drawing (mapping.map_png) on generated maps: papers stay visible on a small map and a
large one stays a density image (METHODS.md §5.3: point size by papers drawn and map pixels)."""
from __future__ import annotations

import numpy as np
import pytest

from mapping.map_png import Frame, bounds, point_radius, shade_categories, shade_values

# The documented range (METHODS.md §5.3) of the share of map pixels that show a paper.
SHARE_RANGE = (0.03, 0.60)
COLOURS = {"a": "#1f77b4", "b": "#ff7f0e", "c": "#2ca02c", "d": "#d62728", "e": "#9467bd"}


def generated_map(n: int, seed: int = 0):
    """n papers in ~sqrt(n)/2 Gaussian topics of lognormal sizes and spreads, as a layout draws them."""
    rng = np.random.default_rng(seed)
    k = max(5, int(np.sqrt(n) / 2))
    centres, share = rng.normal(0, 10, (k, 2)), rng.lognormal(0, 1, k)
    topic = rng.choice(k, n, p=share / share.sum())
    xy = centres[topic] + rng.normal(0, 1, (n, 2)) * rng.uniform(0.3, 1.5, k)[topic, None]
    return xy[:, 0].astype(np.float32), xy[:, 1].astype(np.float32), topic % len(COLOURS)


@pytest.mark.parametrize("n", [2_000, 1_000_000])
def test_share_of_painted_pixels_stays_in_the_documented_range(n):
    x, y, codes = generated_map(n)
    frame = Frame(1200, 900, 220, *bounds(x, y))
    img = shade_categories(x, y, codes, list(COLOURS), COLOURS, frame)
    share = float(np.mean(np.asarray(img)[..., 3] > 0))
    assert SHARE_RANGE[0] <= share <= SHARE_RANGE[1], share
    values = np.where(codes == 0, np.nan, codes.astype(np.float32))     # the value maps follow the same rule
    img_v = shade_values(x, y, values, frame, ["#000000", "#ffffff"], (1.0, 4.0))
    share_v = float(np.mean(np.asarray(img_v)[..., 3] > 0))
    assert abs(share_v - share) < 0.02, (share_v, share)


def test_point_radius_shrinks_with_papers_to_single_pixels():
    frame = Frame(1200, 900, 220, (0.0, 1.0), (0.0, 1.0))
    pixels = frame.map_w * frame.map_h
    radii = [point_radius(n, frame) for n in (50, 2_000, 20_000, 200_000, pixels, pixels + 1, 33_000_000)]
    assert radii == sorted(radii, reverse=True)
    assert radii[0] == 4 and radii[1] >= 3 and radii[4] >= 1          # discs while papers < pixels
    assert radii[5] == radii[6] == 0                                   # then a density image
    assert point_radius(0, frame) == 0
