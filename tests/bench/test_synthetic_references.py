"""bench/synthetic.py's references generator: the shares and tails it promises, on a small corpus."""
from __future__ import annotations

import numpy as np
import pyarrow.compute as pc

from sciencemap.contracts import SCHEMAS
from sciencemap.storage import read_table


def test_write_references_shares_and_tails(tmp_path, bench_module):
    syn = bench_module("synthetic")
    n = 4000
    topic = syn.corpus_topics(n)
    info = syn.write_references(tmp_path, topic, shard=1500)
    t = read_table(tmp_path / "references")
    assert t.schema.equals(SCHEMAS["references"]) and t.num_rows == info["references"]
    citing = np.array([int(x.split(":")[1]) for x in t.column("citing_id").to_pylist()])
    cited = t.column("cited_id").to_pylist()
    assert abs(t.num_rows / n - 30) < 1.5                       # lognormal lengths of mean 30
    lengths = np.bincount(citing, minlength=n)
    assert lengths.max() > 3 * 30                                # a long tail of long lists
    assert abs(sum(x is None for x in cited) / len(cited) - 0.03) < 0.01
    resolved = [x for x in cited if x is not None]
    assert abs(sum(x.startswith("ext:") for x in resolved) / len(resolved) - 0.3) < 0.02
    inside = [(c, int(x.split(":")[1])) for c, x in zip(citing, cited) if x is not None and x.startswith("gen:")]
    same = np.mean([topic[a] == topic[b] for a, b in inside])
    assert 0.7 < same < 0.75                                    # 70% drawn in the topic, a few more by chance
    counts = np.bincount([b for _, b in inside], minlength=n)
    assert counts.max() == info["most_cited"] > 20 * np.median(counts)   # preferential: a heavy tail
    assert pc.all(pc.starts_with(t.column("citing_id"), "gen:")).as_py()
