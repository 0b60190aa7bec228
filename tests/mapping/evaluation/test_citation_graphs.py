"""mapping.evaluation.citation_graphs on small hand-made reference tables: expected relatedness worked out by hand."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mapping.evaluation.citation_graphs import citation_graphs, read_citations
from sciencemap.storage import dataset

FOCAL = pa.array(["f0", "f1", "f2", "f3", "f4"])

# citing -> cited; f0's duplicate of f1, f3's self-citation and the nulls must not count
ROWS = [("f0", "f1"), ("f0", "f2"), ("f0", "e1"), ("f0", "e2"), ("f0", "f1"),
        ("f1", "f2"), ("f1", "e1"),
        ("f2", "f0"), ("f2", "e3"),
        ("f3", "f3"), ("f3", "f4"), ("f3", "e1"), ("f3", None),
        ("f4", "f3"),
        ("n1", "f3"), ("n1", "f4"), ("n1", "e1"), ("n1", None),
        ("n2", "f1"), ("n2", "f2"),
        (None, "f1")]


def refs_table(rows=ROWS) -> pa.Table:
    return pa.table({"citing_id": pa.array([r[0] for r in rows], pa.string()),
                     "cited_id": pa.array([r[1] for r in rows], pa.string())})


def as_dict(g) -> dict:
    return {(int(i), int(j)): float(a) for i, j, a in zip(g.lo, g.hi, g.a)}


@pytest.fixture(scope="module")
def graphs():
    return citation_graphs(refs_table(), FOCAL)


def test_direct_citation_divides_by_the_focal_references(graphs):
    g = graphs["dc"]
    # R: f0 cites f1, f2 (2); f1 -> f2, f2 -> f0, f3 -> f4, f4 -> f3 (1 each); e*, n* are no nodes
    assert (g.n_focal, g.n) == (5, 5)
    assert as_dict(g) == pytest.approx({(0, 1): 1 / 2, (0, 2): 1 / 2 + 1, (1, 2): 1.0, (3, 4): 1 + 1})
    assert as_dict(g).keys() == {(0, 1), (0, 2), (1, 2), (3, 4)}


def test_counts_in_info(graphs):
    info = graphs["dc"].info
    assert info["references_read"] == len(ROWS)
    assert info["unresolved"] == 3            # two null cited ids, one null citing id
    assert info["duplicates"] == 1
    assert info["self_citations"] == 1
    assert info["without_focal_end"] == 1     # n1 -> e1
    assert info["focal_focal_links"] == 6     # f0->f1, f0->f2, f1->f2, f2->f0, f3->f4, f4->f3
    assert info["edges"] == 4


def test_extended_direct_citation_adds_papers_linked_to_two_focal_ones(graphs):
    g = graphs["edc"]
    # e1 is cited by f0, f1, f3; n1 cites f3, f4; n2 cites f1, f2 -> nodes 5, 6, 7 (sorted ids);
    # e2 (cited by f0 only) and e3 (by f2 only) are not; n1 -> e1 (two externals) is left out
    assert g.info["external_ids"].to_pylist() == ["e1", "n1", "n2"]
    assert (g.n_focal, g.n, g.info["external_nodes"]) == (5, 8, 3)
    assert list(g.node_weights()) == [1, 1, 1, 1, 1, 0, 0, 0]
    # R: f0 {f1, f2, e1} 3; f1 {f2, e1} 2; f2 {f0} 1; f3 {f4, e1} 2; f4 {f3} 1; n1 {f3, f4} 2; n2 {f1, f2} 2
    expect = {(0, 1): 1 / 3, (0, 2): 1 / 3 + 1, (0, 5): 1 / 3,
              (1, 2): 1 / 2, (1, 5): 1 / 2, (1, 7): 1 / 2, (2, 7): 1 / 2,
              (3, 4): 1 / 2 + 1, (3, 5): 1 / 2, (3, 6): 1 / 2, (4, 6): 1 / 2}
    assert as_dict(g).keys() == expect.keys()
    assert as_dict(g) == pytest.approx(expect)


def test_edc_only_cited_externals_when_the_table_has_no_other_citing_papers():
    rows = [r for r in ROWS if r[0] not in ("n1", "n2")]
    g = citation_graphs(refs_table(rows), FOCAL, kinds=("edc",), edc_min_citing=2)["edc"]
    assert g.info["external_ids"].to_pylist() == ["e1"]
    g3 = citation_graphs(refs_table(rows), FOCAL, kinds=("edc",), edc_min_links=4)["edc"]
    assert g3.n == 5 and g3.info["external_ids"].to_pylist() == []


def test_bibliographic_coupling_counts_shared_references(graphs):
    # f0 {f1, f2, e1, e2}, f1 {f2, e1}, f2 {f0, e3}, f3 {f4, e1}, f4 {f3}
    assert as_dict(graphs["bc"]) == {(0, 1): 2.0, (0, 3): 1.0, (1, 3): 1.0}


def test_co_citation_counts_co_citing_papers(graphs):
    # f0 cites f1 and f2, n2 cites f1 and f2, n1 cites f3 and f4; the rest cite one focal paper
    assert as_dict(graphs["cc"]) == {(1, 2): 2.0, (3, 4): 1.0}


def test_the_cap_keeps_each_papers_strongest_partners():
    rows = [("f0", r) for r in ("r1", "r2", "r3", "r4")] + [("f1", r) for r in ("r1", "r2", "r3")] \
        + [("f2", r) for r in ("r4", "r5", "r6")] + [("f3", r) for r in ("r5", "r6")]
    focal = pa.array(["f0", "f1", "f2", "f3"])
    full = citation_graphs(refs_table(rows), focal, kinds=("bc",), max_neighbours=0)["bc"]
    assert as_dict(full) == {(0, 1): 3.0, (0, 2): 1.0, (2, 3): 2.0}
    top1 = citation_graphs(refs_table(rows), focal, kinds=("bc",), max_neighbours=1)["bc"]
    # f0 keeps f1 (3 > 1), f2 keeps f3 (2 > 1): the weak (0, 2) goes
    assert as_dict(top1) == {(0, 1): 3.0, (2, 3): 2.0}
    assert top1.info["partner_entries"] == 6 and top1.info["partner_entries_dropped_by_cap"] == 2


def test_cap_ties_go_to_the_lower_node_and_an_edge_stays_when_either_end_keeps_it():
    rows = [("f0", "r"), ("f1", "r"), ("f2", "r")]
    g = citation_graphs(refs_table(rows), pa.array(["f0", "f1", "f2"]), kinds=("bc",), max_neighbours=1)["bc"]
    # f0 keeps f1, f1 keeps f0, f2 keeps f0: (1, 2) is nobody's choice
    assert as_dict(g) == {(0, 1): 1.0, (0, 2): 1.0}


def test_hub_columns_can_be_dropped():
    rows = [("f0", "hub"), ("f1", "hub"), ("f2", "hub"), ("f0", "r"), ("f1", "r")]
    focal = pa.array(["f0", "f1", "f2"])
    assert as_dict(citation_graphs(refs_table(rows), focal, kinds=("bc",))["bc"]) == \
        {(0, 1): 2.0, (0, 2): 1.0, (1, 2): 1.0}
    g = citation_graphs(refs_table(rows), focal, kinds=("bc",), max_cited_by=2)["bc"]
    assert as_dict(g) == {(0, 1): 1.0} and g.info["hub_columns_dropped"] == 1
    cc_rows = [("c", "f0"), ("c", "f1"), ("c", "f2"), ("d", "f0"), ("d", "f1")]
    g = citation_graphs(refs_table(cc_rows), focal, kinds=("cc",), max_references=2)["cc"]
    assert as_dict(g) == {(0, 1): 1.0}


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        ga, gb = a[k], b[k]
        assert (ga.n_focal, ga.n) == (gb.n_focal, gb.n)
        assert np.array_equal(ga.lo, gb.lo) and np.array_equal(ga.hi, gb.hi)
        assert np.allclose(ga.a, gb.a, rtol=1e-12, atol=0)
        ia, ib = dict(ga.info), dict(gb.info)
        if k == "edc":
            assert ia.pop("external_ids").equals(ib.pop("external_ids"))
        assert ia == ib


def test_a_parquet_dataset_in_small_batches_gives_the_same_graphs(tmp_path):
    rng = np.random.default_rng(3)
    n, pool = 60, 120
    ids = [f"p{i:03d}" for i in range(pool)]
    cit = rng.integers(0, pool, 900)
    ref = (rng.random(900) ** 2 * pool).astype(int)           # a skewed cited distribution
    rows = [(ids[c], ids[r] if rng.random() > 0.05 else None) for c, r in zip(cit, ref)]
    t = refs_table(rows)
    focal = pa.array(rng.permutation(ids)[:n].tolist())
    whole = citation_graphs(t, focal, max_neighbours=5)
    d = tmp_path / "references"
    d.mkdir()
    for i, s in enumerate(range(0, t.num_rows, 250)):
        pq.write_table(t.slice(s, 250), d / f"part-{i:05d}.parquet", row_group_size=70)
    batched = citation_graphs(dataset(d), focal, max_neighbours=5, batch_size=16, chunk_rows=40,
                              block_products=50)
    _same(whole, batched)
    assert whole["edc"].info["external_nodes"] > 0 and whole["cc"].m > 0
    assert whole["bc"].info["partner_entries_dropped_by_cap"] > 0


def test_bad_arguments():
    with pytest.raises(ValueError):
        citation_graphs(refs_table(), FOCAL, kinds=("xx",))
    with pytest.raises(ValueError):
        citation_graphs(refs_table(), pa.array(["f0", "f0"]))
    with pytest.raises(TypeError):
        citation_graphs(refs_table(), FOCAL, max_neigbours=3)


def _random_refs(seed, pool=150, rows=1200):
    rng = np.random.default_rng(seed)
    ids = [f"p{i:03d}" for i in range(pool)]
    cit = rng.integers(0, pool, rows)
    ref = (rng.random(rows) ** 2 * pool).astype(int)
    return ids, refs_table([(ids[c], ids[r] if rng.random() > 0.05 else None) for c, r in zip(cit, ref)])


def test_citations_read_once_serve_every_focal_set_as_a_read_per_set_does(tmp_path):
    """The evaluate stage reads the table once against the vector store's ids and builds each
    criterion's graphs from those codes; each must equal the graphs of a table read for that
    focal set alone (ids in the store or not, focal papers outside the store too)."""
    ids, t = _random_refs(4)
    rng = np.random.default_rng(5)
    store = pa.array(rng.permutation(ids)[:100].tolist())       # 50 of the ids are not in the store
    shared = read_citations(t, store, chunk_rows=300)
    for size in (10, 40, 90):
        focal = pa.array(rng.permutation(ids)[:size].tolist())
        alone = citation_graphs(t, focal, max_neighbours=5)
        got = citation_graphs(shared, focal, max_neighbours=5)
        for g in (alone, got):
            for x in g.values():
                # counted over the rows read: the whole table when shared, the focal set's rows alone
                for k in ("without_focal_end", "distinct_pairs", "duplicates", "self_citations"):
                    x.info.pop(k)
        _same(alone, got)


def test_citation_counts_and_links_against_a_direct_count():
    ids, t = _random_refs(6)
    store = pa.array(ids[:90])
    c = read_citations(t, store, chunk_rows=100)
    rows = [(a, b) for a, b in zip(t.column("citing_id").to_pylist(), t.column("cited_id").to_pylist())]
    resolved = [(a, b) for a, b in rows if a is not None and b is not None]
    distinct = {(a, b) for a, b in resolved if a != b}
    assert c.counts["references_read"] == len(rows) and c.counts["unresolved"] == len(rows) - len(resolved)
    assert c.counts["self_citations"] == sum(a == b for a, b in resolved)
    assert c.counts["distinct_pairs"] == len(distinct) == len(c.keys)
    code = {x: i for i, x in enumerate(store.to_pylist() + c.other.to_pylist())}
    assert sorted((code[a] << 31) | code[b] for a, b in distinct) == c.keys.tolist()
    row = {x: i for i, x in enumerate(store.to_pylist())}
    undirected = {(min(row[a], row[b]), max(row[a], row[b])) for a, b in distinct if a in row and b in row}
    assert c.links_among_ids().tolist() == sorted(lo * 90 + hi for lo, hi in undirected)
    # a focal set's pairs: every distinct pair with a focal end, in focal numbering
    focal = pa.array(ids[80:120])
    cit, ref, other, fc = c.focal_pairs(focal)
    node = {x: i for i, x in enumerate(focal.to_pylist())}
    node.update({x: len(node) + i for i, x in enumerate(other.to_pylist())})
    fset = set(focal.to_pylist())
    want = sorted((node[a], node[b]) for a, b in distinct if a in fset or b in fset)
    assert list(zip(cit.tolist(), ref.tolist())) == want
    assert fc == {"distinct_pairs": len(want), "without_focal_end": len(distinct) - len(want)}
    assert not set(other.to_pylist()) & set(focal.to_pylist())
