"""The look-up command (mapping/lookup.py) on a small run built by the real knn, cluster and render
stages, with a hand-made references table whose links are known: citation flags, exact search
against the vector store and the edges table, title search, topics at the map's resolution, errors."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sciencemap import cli
from sciencemap.contracts import SCHEMAS
from sciencemap.layout import RunLayout
from sciencemap.runtime import UserError
from sciencemap.storage import read_table, write_table_atomic
from sciencemap.vectors import open_vectors

from mapping.cluster import ClusterConfig, run_cluster
from mapping.knn import KnnConfig, run_knn
from mapping.lookup import find_by_title, format_table, lookup, main, nearest
from mapping.render import RenderConfig, run_render

FOCAL = "p:0"
RESOLUTIONS = [0.01, 0.2]
MAP_RES = 0.2          # not the render default (the middle one, 0.01): the recorded choice must win


def _edges_of(layout, row: int) -> tuple[np.ndarray, np.ndarray]:
    e = read_table(layout.table("edges")).filter(pc.field("src") == row).sort_by("rank")
    return e.column("dst").to_numpy().astype(np.int64), e.column("similarity").to_numpy()


def _reference(citing, cited):
    return {"citing_id": citing, "ref_key": f"{citing}>{cited}", "cited_id": cited, "title": "t"}


@pytest.fixture(scope="module")
def run(tmp_path_factory, make_run):
    """A run through knn (k = 20), cluster and render, plus references planted around p:0's
    neighbours: p:0 cites neighbours 2 and 5, a far paper known only as a cited title, an
    unresolved entry and a paper outside the store; neighbours 3 and 5 and a far paper cite p:0;
    neighbour 4 cites neighbour 6."""
    layout, _ = make_run(tmp_path_factory.mktemp("lookup") / "r", n_clusters=6, per=30, dim=16, noise=0.3)
    run_knn(KnnConfig(k=20), layout)
    run_cluster(ClusterConfig(resolutions=RESOLUTIONS, min_cluster_size=2), layout)
    run_render(RenderConfig(map_resolution=MAP_RES, layout_method="pca", width=300, height=200, legend_width=100),
               layout)
    ids = open_vectors(layout).ids()
    row = int(np.flatnonzero(ids == FOCAL)[0])
    nb, _ = _edges_of(layout, row)
    near = {rank: str(ids[nb[rank - 1]]) for rank in range(1, 21)}
    far = [str(p) for p in ids if p not in set(near.values()) | {FOCAL}]
    title_only = next(p for p in far if int(p[2:]) % 7 == 6)     # make_run: no record of its own
    refs = [_reference(FOCAL, near[2]), _reference(FOCAL, near[5]), _reference(FOCAL, title_only),
            _reference(FOCAL, None), _reference(FOCAL, "x:not-in-store"),
            _reference(near[3], FOCAL), _reference(near[5], FOCAL), _reference(far[1], FOCAL),
            _reference(near[4], near[6])]
    write_table_atomic(pa.Table.from_pylist(refs, schema=SCHEMAS["references"]), layout.table("references"))
    return layout


def _truth(layout) -> tuple[set[str], set[str]]:
    """(papers FOCAL cites, papers citing FOCAL), straight from the references table."""
    t = read_table(layout.table("references"), ["citing_id", "cited_id"]).to_pylist()
    return ({r["cited_id"] for r in t if r["citing_id"] == FOCAL and r["cited_id"]},
            {r["citing_id"] for r in t if r["cited_id"] == FOCAL})


def _printed_table(out: str) -> list[dict]:
    """The readable table's rows, cut at its header's column starts (empty cells stay empty)."""
    lines = out.splitlines()
    h = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    head = lines[h]
    cut = {c: head.index(c) for c in ("cited", "citing", "topic", "paper_id", "title")}
    return [{"rank": int(line[:head.index("similarity")]), "cited": line[cut["cited"]:cut["citing"]].strip(),
             "citing": line[cut["citing"]:cut["topic"]].strip(),
             "paper_id": line[cut["paper_id"]:cut["title"]].strip()} for line in lines[h + 1:]]


def test_the_printed_flags_agree_with_the_references_table(run, capsys):
    assert main(["--run", str(run.root), "--paper-id", FOCAL, "--k", "20"]) == 0
    out = capsys.readouterr().out
    cited, citing = _truth(run)
    rows = _printed_table(out)
    assert [r["rank"] for r in rows] == list(range(1, 21))
    assert [r["cited"] == "yes" for r in rows] == [r["paper_id"] in cited for r in rows]
    assert [r["citing"] == "yes" for r in rows] == [r["paper_id"] in citing for r in rows]
    # the planted links: neighbours 2 and 5 cited, 3 and 5 citing; 4 -> 6 is no link of p:0
    assert [r["rank"] for r in rows if r["cited"]] == [2, 5] and [r["rank"] for r in rows if r["citing"]] == [3, 5]
    # header: 5 reference entries, resolved to 3 papers of the run (not the unresolved one, not
    # the paper outside the store), those with a record of their own; 3 papers cite it
    records = {r["paper_id"] for r in read_table(run.table("papers")).to_pylist() if r["source_file"]}
    in_corpus = len({c for c in cited if c.startswith("p:")} & records)
    assert in_corpus <= 2                    # the title-only paper is not counted
    assert f"5 references, to 3 papers of the run ({in_corpus} with a record of their own); " \
           "cited by 3 papers of the run" in out

    assert main(["--run", str(run.root), "--paper-id", FOCAL, "--k", "20", "--tsv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split("\t")
    tsv = [dict(zip(head, line.split("\t"))) for line in lines[1:]]
    assert [r["paper_id"] for r in tsv] == [r["paper_id"] for r in rows]
    assert [r["paper_cites_it"] == "yes" for r in tsv] == [r["paper_id"] in cited for r in tsv]
    assert [r["it_cites_paper"] == "yes" for r in tsv] == [r["paper_id"] in citing for r in tsv]


def test_similarities_are_exact_sorted_and_match_the_edges(run):
    vec = open_vectors(run)
    X = np.asarray(vec.X, np.float64)
    ids = vec.ids()
    row = int(np.flatnonzero(ids == FOCAL)[0])
    res = lookup(run, FOCAL, k=20)
    got_rows = np.array([nb["row"] for nb in res["neighbours"]])
    sims = np.array([nb["similarity"] for nb in res["neighbours"]])
    assert row not in got_rows and FOCAL not in [nb["paper_id"] for nb in res["neighbours"]]
    assert np.all(np.diff(sims) <= 0)
    np.testing.assert_allclose(sims, X[got_rows] @ X[row], atol=1e-5)
    assert [nb["paper_id"] for nb in res["neighbours"]] == ids[got_rows].tolist()
    # the kNN graph's 20 neighbours of the paper are the same papers with the same similarities
    dst, esim = _edges_of(run, row)
    assert set(dst.tolist()) == set(got_rows.tolist())
    np.testing.assert_allclose(np.sort(esim)[::-1], sims, atol=1e-5)
    # the exact top k from all dot products (ties: lower row first)
    d = X @ X[row]
    d[row] = -np.inf
    want = np.lexsort((np.arange(len(d)), -d))
    np.testing.assert_array_equal(got_rows, want[:20])


def test_any_k_and_any_block_size_give_the_same_ranking(run):
    vec = open_vectors(run)
    row = int(np.flatnonzero(vec.ids() == FOCAL)[0])
    s_all, r_all = nearest(vec, row, vec.n - 1, block=7)          # everyone but the paper, once
    assert sorted(r_all.tolist()) == [r for r in range(vec.n) if r != row]
    # BLAS may round the last bit differently for another block shape: same rows, sims to rounding
    s50, r50 = nearest(vec, row, 50)
    np.testing.assert_array_equal(r50, r_all[:50])
    np.testing.assert_allclose(s50, s_all[:50], rtol=1e-6)
    s5, r5 = nearest(vec, row, 5, block=3)
    np.testing.assert_array_equal(r5, r_all[:5])
    for k in (0, vec.n):
        with pytest.raises(UserError, match="--k must be between 1 and"):
            nearest(vec, row, k)


def test_topics_at_the_recorded_map_resolution_or_the_one_asked_for(run):
    clusters = read_table(run.table("clusters")).to_pylist()
    topics = read_table(run.table("topics")).to_pylist()

    def expected(paper_id, res):
        c = next(r["cluster"] for r in clusters if r["paper_id"] == paper_id and r["resolution"] == res)
        t = next(t for t in topics if t["resolution"] == res and t["cluster"] == c)
        members = sum(r["cluster"] == c and r["resolution"] == res for r in clusters)
        return c, t["label"], members, t["size"]

    for asked, res in ((None, MAP_RES), (0.01, 0.01)):
        out = lookup(run, FOCAL, k=5, resolution=asked)
        assert out["resolution"] == res
        for d in [out["paper"], *out["neighbours"]]:
            assert (d["cluster"], d["topic"], d["topic_members"], d["topic_size"]) == expected(d["paper_id"], res)
        members, size = out["paper"]["topic_members"], out["paper"]["topic_size"]
        assert members >= size   # title-only papers are in the graph's topic, not shown on the map
        assert f"({members:,} papers in the graph, {size:,} of them with a record of their own; " in format_table(out)
    with pytest.raises(UserError, match="use --resolution with one of"):
        lookup(run, FOCAL, k=5, resolution=0.5)


def test_runs_rendered_before_the_resolution_was_recorded(tmp_path, run):
    """No map_layout.npz: the run's config.toml [render] map_resolution, else the render stage's
    default (the middle resolution)."""
    import shutil

    layout = RunLayout(tmp_path / "copy")
    shutil.copytree(run.root, layout.root)
    layout.map_layout.unlink()
    assert lookup(layout, FOCAL, k=3)["resolution"] == 0.01
    layout.config_used.write_text(f"[render]\nmap_resolution = {MAP_RES}\n")
    assert lookup(layout, FOCAL, k=3)["resolution"] == MAP_RES


def test_title_search(run, capsys):
    titles = {r["paper_id"]: r["title"] for r in read_table(run.table("papers")).to_pylist()}
    # the whole title, in other case and spacing, beats the titles that contain it as a phrase
    query = "  " + titles["p:17"].upper().replace(" ", "   ") + " "
    matches, counts = find_by_title(run, query)
    assert counts[0] == 1 and matches[0].paper_id == "p:17"
    assert main(["--run", str(run.root), "--title", query, "--k", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["paper"]["paper_id"] == "p:17"
    # a unique phrase match is taken
    assert main(["--run", str(run.root), "--title", "MODEL 123", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["paper"]["paper_id"] == "p:123"
    # whole words: "model 17" is not found in "model 170"
    assert main(["--run", str(run.root), "--title", "model 17", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["paper"]["paper_id"] == "p:17"
    # several phrase matches: listed, and the command asks for an id
    want = sorted(p for p, t in titles.items() if " neuron cortex " in f" {t.lower()} ")
    assert 1 < len(want) <= 20             # all of them listed
    assert main(["--run", str(run.root), "--title", "Neuron  CORTEX"]) == 2
    cap = capsys.readouterr()
    assert f"{len(want)} papers match" in cap.out and all(p in cap.out for p in want)
    assert cap.err.strip() == f"error: {len(want)} papers match 'Neuron  CORTEX'; choose one with --paper-id"
    # every word, in any order, when no title holds the phrase
    matches, counts = find_by_title(run, "123 model")
    assert counts == [0, 0, 1] and matches[0].paper_id == "p:123"
    for query in ("no such words", "euron"):          # nor a piece of a word
        assert main(["--run", str(run.root), "--title", query]) == 2
        assert "no paper title contains every word" in capsys.readouterr().err


def test_an_unknown_paper_is_one_clear_error(run, capsys):
    with pytest.raises(UserError, match="'p:nope' is not among the 180 papers"):
        lookup(run, "p:nope")
    assert main(["--run", str(run.root), "--paper-id", "p:nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: paper 'p:nope' is not among")
    assert main(["--run", str(run.root / "missing"), "--paper-id", FOCAL]) == 2


def test_the_console_script_finds_the_command_by_entry_point(tmp_path, run, capsys, monkeypatch):
    """`sciencemap lookup` goes through the entry-point group sciencemap.commands (a distribution
    on the import path declares it here, as setup.cfg does for the installed project)."""
    dist = tmp_path / "lookup_check-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lookup-check\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[{cli.COMMAND_GROUP}]\nlookup = mapping.lookup:main\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "lookup" in cli.commands()
    assert cli.main(["lookup", "--run", str(run.root), "--paper-id", FOCAL, "--k", "4", "--tsv"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5


def test_ids_as_users_write_them_are_found_and_a_near_one_suggested(tmp_path, capsys):
    """The readers' ids (doi: lowercase, pmid:, pmc: digits) found from a printed DOI, a bare DOI or
    PMID and a PMC id; an id one character off names the nearest ones."""
    from mapping.lookup import find_paper
    from sciencemap.contracts import embeddings_schema
    from sciencemap.vectors import ensure_vectors

    import pyarrow.parquet as pq

    layout = RunLayout(tmp_path / "r")
    ids = ["doi:10.7554/elife.06197", "doi:10.7554/elife.06198", "pmid:25855408", "pmc:4399415", "acl:p14-1011"]
    ids += [f"doi:10.1000/other.{i}" for i in range(40)]
    X = np.random.default_rng(0).normal(size=(len(ids), 8)).astype(np.float32)
    layout.embeddings_dir.mkdir(parents=True)
    pq.write_table(pa.table({"paper_id": ids, "vector": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 8)},
                            schema=embeddings_schema(8)), layout.embeddings_dir / "part-00000.parquet")
    vec = ensure_vectors(layout)
    for text, want in [("doi:10.7554/eLife.06197", 0), ("10.7554/elife.06197", 0), ("https://doi.org/10.7554/ELIFE.06198", 1),
                       ("25855408", 2), ("PMC4399415", 3), ("ACL:P14-1011", 4), ("doi:10.1000/other.7", 12)]:
        assert find_paper(vec, text) == (ids[want], want), text
    with pytest.raises(UserError) as e:
        find_paper(vec, "10.7554/eLife.06190")
    msg = str(e.value)
    assert msg.startswith("paper '10.7554/eLife.06190' (as an id: 'doi:10.7554/elife.06190') is not among the 45 papers")
    hint = msg.split("did you mean ")[1].split("?")[0]
    assert sorted(hint.split(" or ")) == ["doi:10.7554/elife.06197", "doi:10.7554/elife.06198"]
    with pytest.raises(UserError, match="45 papers of this run's vector store; check the id"):
        find_paper(vec, "pmid:1")
