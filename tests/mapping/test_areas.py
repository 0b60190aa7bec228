"""The map's second level: the topic graph from kNN edges, areas by Leiden, regions on a grid."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from sciencemap.storage import write_table_atomic
from mapping.areas import area_membership, area_regions, region_borders, topic_graph


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
    # regions: topics of area 0 on the left, area 1 on the right: one vertical border between them
    px = np.array([[10, 10], [10, 30], [30, 10], [30, 30], [70, 10], [70, 30], [90, 10], [90, 30]], float)
    grid = area_regions(px, area, 100, 40, cell=4, reach=3.0)
    assert grid[2, 1] == area[0] and grid[2, 23] == area[4]
    cols = np.nonzero(region_borders(grid).any(axis=0))[0]
    assert cols.min() >= 11 and cols.max() <= 14           # the border sits half way, x ≈ 50 px
