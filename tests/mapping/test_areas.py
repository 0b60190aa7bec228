"""The map's second level: the topic graph from kNN edges, areas by Leiden, regions on a grid."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sciencemap.storage import write_table_atomic
from mapping.areas import area_membership, area_regions, topic_graph


def test_topic_graph_sums_similarities_between_different_topics(tmp_path):
    topic_of_row = np.array([0, 0, 1, 1, 2, -1])
    edges = pa.table({"src": pa.array([0, 1, 0, 2, 3, 4, 5], pa.int32()), "dst": pa.array([2, 3, 1, 4, 4, 0, 0], pa.int32()),
                      "similarity": pa.array([0.5, 0.25, 0.9, 0.2, 0.3, 0.1, 0.7], pa.float32()),
                      "rank": pa.array([1] * 7, pa.int16())})
    write_table_atomic(edges, tmp_path / "edges")
    W = topic_graph(tmp_path / "edges", topic_of_row, 3, batch_size=3).toarray()
    want = np.zeros((3, 3))
    want[0, 1] = want[1, 0] = 0.5 + 0.25           # rows 0-2 and 1-3; 0-1 is inside topic 0
    want[1, 2] = want[2, 1] = 0.2 + 0.3
    want[0, 2] = want[2, 0] = 0.1                  # the edge from row 5 (no topic) does not count
    np.testing.assert_allclose(W, want, rtol=1e-6)


def test_areas_group_densely_linked_topics_and_regions_follow_them():
    # two groups of 4 topics, strongly linked inside, one weak link between them
    W = np.zeros((8, 8))
    for g in (range(0, 4), range(4, 8)):
        for a in g:
            for b in g:
                if a != b:
                    W[a, b] = 1.0
    W[3, 4] = W[4, 3] = 0.05
    import scipy.sparse as sp

    area = area_membership(sp.csr_matrix(W), 1.0, seed=0)
    assert len(set(area[:4])) == 1 and len(set(area[4:])) == 1 and area[0] != area[4]
    assert np.array_equal(area, area_membership(sp.csr_matrix(W), 1.0, seed=0))
    # regions: topics of area 0 on the left, area 1 on the right: the change of area sits half way
    px = np.array([[10, 10], [10, 30], [30, 10], [30, 30], [70, 10], [70, 30], [90, 10], [90, 30]], float)
    grid = area_regions(px, area, 100, 40, cell=4, reach=3.0)
    assert grid[2, 1] == area[0] and grid[2, 23] == area[4]
    cols = np.nonzero((grid[:, 1:] != grid[:, :-1]).any(axis=0))[0]
    assert cols.min() >= 11 and cols.max() <= 13           # one vertical border, x ≈ 50 px


def test_area_outlines_are_closed_smooth_shapes_around_their_own_topics():
    from matplotlib.path import Path

    from mapping.areas import area_outlines

    # two areas of four topics each, and a third area of one topic far off
    px = np.array([[10, 10], [10, 30], [30, 10], [30, 30], [70, 10], [70, 30], [90, 10], [90, 30], [160, 20]], float)
    area = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2])
    grid = area_regions(px, area, 200, 40, cell=4, reach=1.0)
    shapes = area_outlines(grid, cell=4)
    by_area = {}
    for a, xy in shapes:
        assert np.allclose(xy[0], xy[-1])                                     # closed
        by_area.setdefault(a, []).append(Path(xy))
    assert sorted(by_area) == [0, 1, 2]
    for t, (x, y) in enumerate(px):
        inside = {a for a, paths in by_area.items() if any(p.contains_point((x, y)) for p in paths)}
        assert inside == {area[t]}, (t, inside)                                # each topic in its own area only
    # the lone topic's area is a disc: its outline keeps one distance from the topic, to within a cell
    (ring,) = [xy for a, xy in shapes if a == 2]
    r = np.hypot(ring[:, 0] - 160, ring[:, 1] - 20)
    assert r.max() - r.min() < 4.0, (r.min(), r.max())
    # smooth: no step of the 4-px grid survives (turns between successive segments stay small)
    seg = np.diff(ring, axis=0)
    turn = np.abs(np.angle(np.exp(1j * np.diff(np.arctan2(seg[:, 1], seg[:, 0])))))
    assert np.degrees(turn).max() < 45
