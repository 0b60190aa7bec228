"""Author identities (importance.ingest.authors): the pyarrow, Spark and pure-Python matchers agree."""
from importance.ingest.authors import shares_author


def test_spark_author_matching_equals_python(spark):
    """features.shares_author (Spark higher-order functions) == authors.shares_author (Python) on
    names with accents, punctuation, digits, empty names, and ORCID agreements and conflicts."""
    import random

    from pyspark.sql import functions as F

    from importance.ingest.authors import author_keys_spark as author_keys
    from importance.features import shares_author as spark_shares

    rnd = random.Random(0)

    def au():
        return (rnd.choice(["Smith", "Müller", "Muller", "O'Brien", "OBrien", "Lee", "", "123"]),
                rnd.choice(["John", "J.", "jane", "", "Åsa", None]), rnd.choice([None, None, "X", "Y"]))

    rows = [([au() for _ in range(rnd.randint(0, 3))] if rnd.random() > .1 else None,
             [au() for _ in range(rnd.randint(0, 3))]) for _ in range(1500)]
    t = "array<struct<family:string,given:string,orcid:string>>"
    df = spark.createDataFrame(rows, f"a {t}, b {t}")
    got = [r.s for r in df.select(spark_shares(author_keys(F.col("a")), author_keys(F.col("b"))).alias("s")).collect()]
    # the same through the stored columns as the generator writes them (pyarrow)
    import pyarrow as pa

    from importance.ingest.authors import author_keys_arrow
    from sciencemap.contracts import AUTHOR

    arr = {side: author_keys_arrow(pa.array([[dict(family=f, given=g, orcid=o) for f, g, o in r[i]]
                                             if r[i] is not None else None for r in rows], pa.list_(AUTHOR)))
           for i, side in enumerate("ab")}
    stored = spark.createDataFrame(
        [tuple(arr[s][c][i].as_py() for s in "ab" for c in ("author_keys", "orcid_author_keys")) for i in range(len(rows))],
        "ak array<string>, ao array<string>, bk array<string>, bo array<string>")
    got2 = [r.s for r in stored.select(spark_shares(
        {"author_keys": F.col("ak"), "orcid_author_keys": F.col("ao")},
        {"author_keys": F.col("bk"), "orcid_author_keys": F.col("bo")}).alias("s")).collect()]

    def d(x):
        return [dict(family=f, given=g, orcid=o) for f, g, o in (x or [])]
    exp = [shares_author(d(a), d(b)) for a, b in rows]
    from importance.ingest.authors import shares_author_arrow

    got3 = shares_author_arrow(arr["a"], arr["b"]).tolist()  # the generator's entry_shares_author
    assert got == exp and got2 == exp and got3 == exp and 100 < sum(exp) < 1400


def test_arrow_author_keys_equal_spark_keys(spark):
    """The generator's vectorised author_keys (pyarrow) are the same strings as ingest's Spark
    expression, on random awkward names and on every author list of the eLife sample's papers."""
    import random

    import pyarrow as pa
    from pyspark.sql import functions as F

    from importance.ingest.authors import author_keys_arrow, author_keys_spark
    from sciencemap.contracts import AUTHOR

    rnd = random.Random(1)
    names = ["Smith", "Müller", "O'Brien", "Ødegård", "Çelik", "van der Berg", "", None, "李", "Ñúñez", "123"]
    rows = [[dict(family=rnd.choice(names), given=rnd.choice(["John", "é", "", None, "Ånd"]),
                  orcid=rnd.choice([None, None, "0000-0001"])) for _ in range(rnd.randint(0, 4))]
            if rnd.random() > .1 else None for _ in range(800)]
    t = "array<struct<family:string,given:string,orcid:string>>"
    df = spark.createDataFrame([(r,) for r in rows], f"a {t}")
    cols = ("author_keys", "orcid_author_keys")
    spark_keys = df.select(*[e.alias(c) for c, e in author_keys_spark(F.col("a")).items()]).collect()
    arrow_keys = author_keys_arrow(pa.array(rows, pa.list_(AUTHOR)))
    for c in cols:
        assert arrow_keys[c].to_pylist() == [r[c] for r in spark_keys], c
    assert sum(len(r.author_keys) for r in spark_keys) > 500 and sum(len(r.orcid_author_keys) for r in spark_keys) > 50
