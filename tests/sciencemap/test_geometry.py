"""Embedding geometry (sciencemap.geometry): alignment, uniformity and the singular-spectrum
deviation on vectors whose values are known."""
from __future__ import annotations

import numpy as np
import pytest

from sciencemap.geometry import alignment, geometry, spectrum, uniformity


def test_alignment_is_zero_for_the_same_vectors_and_four_for_opposite_ones():
    x = np.random.default_rng(0).normal(size=(50, 16))
    assert alignment(x, 3 * x) == pytest.approx(0.0, abs=1e-12)     # scale does not count: unit vectors
    assert alignment(x, -x) == pytest.approx(4.0)
    y = np.random.default_rng(1).normal(size=(50, 16))
    assert 0.0 < alignment(x, x + 0.1 * y) < alignment(x, y)


def test_uniformity_from_one_point_to_an_even_spread():
    rng = np.random.default_rng(0)
    spread = rng.normal(size=(400, 256))               # about uniform on the sphere: ||x - y||² ≈ 2
    assert uniformity(spread) == pytest.approx(-4.0, abs=0.1)
    point = np.tile(rng.normal(size=(1, 256)), (400, 1))
    assert uniformity(point) == pytest.approx(0.0, abs=1e-9)
    clustered = np.repeat(rng.normal(size=(4, 256)), 100, axis=0) + 0.05 * rng.normal(size=(400, 256))
    assert uniformity(point) > uniformity(clustered) > uniformity(spread)
    # the sampled estimate agrees with the exact one
    assert uniformity(spread, max_pairs=20_000) == pytest.approx(uniformity(spread), abs=0.05)


def test_spectrum_deviation_is_zero_when_isotropic_and_log_d_on_a_line():
    rng = np.random.default_rng(0)
    iso = spectrum(rng.normal(size=(20_000, 8)))
    assert iso["deviation"] < 0.01 and iso["effective_rank"] > 7.9
    line = spectrum(rng.normal(size=(500, 1)) * rng.normal(size=(1, 8)))   # signs vary: a line through 0
    assert line["deviation"] == pytest.approx(np.log(8), abs=1e-6) and line["effective_rank"] == pytest.approx(1.0)
    two = spectrum(np.concatenate([rng.normal(size=(5000, 2)), np.zeros((5000, 6))], axis=1))
    assert two["effective_rank"] == pytest.approx(2.0, abs=0.05)
    g = geometry(rng.normal(size=(100, 8)), rng.normal(size=(10, 8)), rng.normal(size=(10, 8)))
    assert set(g) == {"uniformity", "spectrum_deviation", "spectrum_effective_rank", "spectrum_dim", "alignment"}
