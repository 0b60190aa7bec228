"""Missing text is one thing (sciencemap.text): None, NaN, pandas.NA and blanks all become ""."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from sciencemap.text import clean_text, clean_texts, paper_text, text_column

MISSING = [None, float("nan"), math.nan, np.nan, np.float64("nan"), pd.NA, pd.NaT, "", "   ", "\n\t"]


@pytest.mark.parametrize("value", MISSING, ids=repr)
def test_missing_values_are_empty_text(value):
    assert clean_text(value) == ""
    assert paper_text(value, value) == ""
    assert paper_text("A title", value) == "A title"
    assert paper_text(value, " An abstract ") == "An abstract"


def test_text_is_stripped_bytes_decoded_and_non_text_dropped():
    assert clean_text("  Protein folding \n") == "Protein folding"
    assert clean_text("Zürich".encode()) == "Zürich"
    assert clean_text(b"bad \xff byte") == "bad \ufffd byte"
    assert clean_text(42) == "" and clean_text(["a"]) == ""
    assert clean_text("nan") == "nan"                  # a real word is kept; only missing values vanish
    assert paper_text(" T ", " A ") == "T [SEP] A"
    assert paper_text("T", "A", sep="</s>") == "T </s> A"


def test_pandas_and_arrow_columns_with_missing_values():
    titles = ["Cells", None, np.nan, "", " Genes "]
    frame = pd.DataFrame({"title": titles})
    assert text_column(frame, "title") == ["Cells", "", "", "", "Genes"]
    # the pandas 3 string dtype (NaN for missing), and the nullable one (pd.NA for missing)
    for dtype in (pd.StringDtype(na_value=np.nan), pd.StringDtype("python"), "object"):
        col = pd.Series(titles, dtype=dtype)
        assert clean_texts(col) == ["Cells", "", "", "", "Genes"], dtype
    table = pa.table({"title": pa.array(["Cells", None, " Genes "])})
    assert text_column(table, "title") == ["Cells", "", "Genes"]
    # the way the stages meet it: a papers table with gaps, reindexed by ids it does not hold
    papers = pd.DataFrame({"paper_id": ["a", "b"], "title": ["Cells", None]}).set_index("paper_id")
    meta = papers.reindex(["a", "b", "zz"]).reset_index()
    assert text_column(meta, "title") == ["Cells", "", ""]


def test_the_encoder_uses_the_same_function():
    from encoders.model import paper_text as encoder_paper_text

    assert encoder_paper_text is paper_text
