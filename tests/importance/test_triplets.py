from pyspark.sql import functions as F

from importance.triplets import TripletConfig, sample_triplets


def _data(spark):
    # Anchor A cites r1..r6 with importance 6..1; B cites r1, r2 with equal importance (tie).
    pairs = [("A", f"r{i}", float(7 - i), i * 11) for i in range(1, 7)] + [("B", "r1", 1.0, 5), ("B", "r2", 1.0, 3)]
    pdf = spark.createDataFrame(pairs, "citing_id string, cited_id string, importance double, tie_hash long")
    papers = [(p, f"title {p}") for p in ["A", "B"] + [f"r{i}" for i in range(1, 7)] + [f"u{i}" for i in range(40)]]
    papers.append(("notext", None))
    return pdf, spark.createDataFrame(papers, "paper_id string, title string")


def test_algorithm1_hand_case(spark):
    pairs, papers = _data(spark)
    rows = sample_triplets(pairs, papers, TripletConfig(K=5, H=2, seed=1)).collect()
    a = sorted([r for r in rows if r.anchor_id == "A"], key=lambda r: r.positive_id)
    # n = 6: t0 (r1, r6 hard), t1 (r2, r5 hard), t2 r3 easy, t3 r4 easy; t4 would need n >= 7.
    assert [(r.positive_id, r.negative_kind) for r in a] == [("r1", "hard"), ("r2", "hard"), ("r3", "easy"), ("r4", "easy")]
    assert [r.negative_id for r in a[:2]] == ["r6", "r5"]  # hard negatives = least important
    assert all(r.negative_id.startswith("u") for r in a[2:])  # easy negatives: uncited papers with text
    assert a[2].negative_id != a[3].negative_id  # distinct easy negatives within an anchor
    assert len({r.positive_id for r in a}) == len(a)  # positives never reused
    b = [r for r in rows if r.anchor_id == "B"]
    # tie broken by tie_hash ascending: r2 (3) before r1 (5)
    assert [(r.positive_id, r.negative_id) for r in b] == [("r2", "r1")]
    # H = 0: SPECTER-style, only easy negatives, K positives when available
    rows0 = sample_triplets(pairs, papers, TripletConfig(K=5, H=0, seed=1)).where("anchor_id = 'A'").collect()
    assert sorted(r.positive_id for r in rows0) == ["r1", "r2", "r3", "r4", "r5"]
    assert {r.negative_kind for r in rows0} == {"easy"}


def test_deterministic_across_partitions(spark):
    import random

    rnd = random.Random(0)
    pairs = [(f"a{i}", f"p{j}", float(rnd.randint(0, 3)), rnd.getrandbits(40)) for i in range(30)
             for j in rnd.sample(range(200), rnd.randint(1, 9))]
    pdf = spark.createDataFrame(pairs, "citing_id string, cited_id string, importance double, tie_hash long")
    papers = spark.createDataFrame([(f"p{j}", "t") for j in range(200)] + [(f"a{i}", "t") for i in range(30)],
                                   "paper_id string, title string")
    cfg = TripletConfig(seed=7)
    one = sample_triplets(pdf.repartition(1), papers.repartition(1), cfg)
    seven = sample_triplets(pdf.repartition(7), papers.repartition(3), cfg)
    cols = ["anchor_id", "positive_id", "negative_id", "negative_kind", "split"]
    r1 = sorted(tuple(r) for r in one.select(cols).collect())
    r7 = sorted(tuple(r) for r in seven.select(cols).collect())
    assert r1 == r7 and len(r1) > 30
    # easy negatives: never cited by their anchor, never the anchor, distinct within an anchor
    cited = {(a, c) for a, c, _, _ in pairs}
    easy = [r for r in r1 if r[3] == "easy"]
    assert easy and not [r for r in easy if (r[0], r[2]) in cited or r[0] == r[2]]
    assert len({(r[0], r[2]) for r in easy}) == len(easy)
    assert {r[4] for r in r1} == {"train", "val"}
    # every anchor's rows are in one split
    assert one.groupBy("anchor_id").agg(F.countDistinct("split").alias("k")).where("k > 1").count() == 0


def test_contradictory_triplets_are_removed(spark):
    """A pairs table with a repeated (anchor, cited) row: C cites x twice (most and least
    important), so x would be both the positive and the hard negative of step 0. That triplet goes;
    no kept triplet of C has a document that is also a positive/negative of C elsewhere."""
    pairs = [("C", "x", 9.0, 1), ("C", "y", 5.0, 2), ("C", "z", 4.0, 3), ("C", "w", 3.0, 4), ("C", "x", 0.0, 5)]
    pdf = spark.createDataFrame(pairs, "citing_id string, cited_id string, importance double, tie_hash long")
    papers = spark.createDataFrame([(p, "t") for p in ["C", "x", "y", "z", "w"] + [f"u{i}" for i in range(40)]],
                                   "paper_id string, title string")
    rows = sample_triplets(pdf, papers, TripletConfig(K=5, H=2, seed=3)).collect()
    got = sorted((r.positive_id, r.negative_id, r.negative_kind) for r in rows)
    # L = [x, y, z, w, x]: t0 (x, x) contradicts -> dropped; t1 (y, w) hard kept; t2 needs n >= 5: (z, easy)
    assert [g[:1] + g[2:] for g in got] == [("y", "hard"), ("z", "easy")]
    assert ("y", "w", "hard") in got
    positives = {g[0] for g in got}
    assert not positives & {g[1] for g in got}
