import math

import numpy as np
import pytest

from importance.entropy import entropy_weights_numpy, feature_set, score, weights_table

# Hand computation. Column a = 0,1,2: z = 0,.5,1, p = 0,1/3,2/3,
# e_a = -(1/3 ln 1/3 + 2/3 ln 2/3)/ln 3. Column b = 1,1,0: z = 1,1,0, p = .5,.5,0, e_b = ln 2/ln 3.
# Column c constant -> e = 1, weight 0.
E_A = -((1 / 3) * math.log(1 / 3) + (2 / 3) * math.log(2 / 3)) / math.log(3)
E_B = math.log(2) / math.log(3)
W_A = (1 - E_A) / ((1 - E_A) + (1 - E_B))
X = np.array([[0, 1, 4], [1, 1, 4], [2, 0, 4]], dtype=float)


def test_numpy_reference_matches_hand():
    e, w = entropy_weights_numpy(X)
    assert e == pytest.approx([E_A, E_B, 1.0])
    assert w == pytest.approx([W_A, 1 - W_A, 0.0])
    assert round(E_A, 4) == 0.5794 and round(E_B, 4) == 0.6309


def test_spark_two_aggregations_match(spark):
    df = spark.createDataFrame([(int(a), int(b), int(c)) for a, b, c in X], "f_I int, f_R int, S int")
    rows = weights_table(df, ("I", "R", "S"))
    assert [r["entropy"] for r in rows] == pytest.approx([E_A, E_B, 1.0])
    assert [r["weight"] for r in rows] == pytest.approx([W_A, 1 - W_A, 0.0])
    assert rows[0]["mean"] == pytest.approx(1.0) and rows[0]["std"] == pytest.approx(np.std([0, 1, 2]))
    imp = [r.importance for r in score(df, rows).orderBy("f_I").collect()]
    assert imp == pytest.approx([W_A * 0 + (1 - W_A) * 1, W_A * 1 + (1 - W_A), W_A * 2])
    uni = weights_table(df, ("I", "R"), "uniform")
    assert [r["weight"] for r in uni] == [0.5, 0.5]


def test_feature_sets():
    assert feature_set("default") == ("I", "R", "D", "S")
    assert feature_set("no_S") == ("I", "M", "R", "D")
    assert feature_set("I,M") == ("I", "M")
