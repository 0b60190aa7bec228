"""Network statistics of the kNN graph on a graph small enough to count by hand."""
from __future__ import annotations

import numpy as np
import pytest

from mapping.cluster import build_graph
from mapping.netstats import network_stats


def test_network_stats_on_known_graph():
    # two triangles and one separate edge; node "z" embedded but without edges
    src = np.array(["a", "b", "c", "d", "e", "f", "g"], object)
    dst = np.array(["b", "c", "a", "e", "f", "d", "h"], object)
    g = build_graph(src, dst, np.ones(7))
    s = network_stats(g, extra_isolated=1, path_sample=10,
                      citation_pairs=(np.array([0, 0]), np.array([1, 3])))
    assert s["nodes"] == 9 and s["edges"] == 7
    assert s["connected_components"] == 4 and s["isolated_nodes"] == 1
    assert s["average_degree"] == pytest.approx(14 / 9)
    assert s["density"] == pytest.approx(7 / 36)
    assert s["average_clustering"] == pytest.approx(6 / 8)   # triangle nodes 1, pair nodes 0 (8 graph nodes)
    assert s["average_shortest_path"] == pytest.approx(1.0)
    assert s["citation_links_in_knn"] == 1 and s["citation_overlap"] == pytest.approx(0.5)
