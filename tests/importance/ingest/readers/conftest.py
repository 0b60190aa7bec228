"""What the reader tests share: parsing a file of tests/data, and picking records of one kind
(readers yield (kind, record) pairs: paper, ref, mention, reject...)."""
from __future__ import annotations

import pytest

from importance.ingest.readers import parse_file


@pytest.fixture
def of_kind():
    def pick(recs, kind):
        return [d for k, d in recs if k == kind]
    return pick


@pytest.fixture
def parse_data(test_data):
    """parse_data(format, file name in tests/data, source) -> the reader's records."""
    def parse(fmt, name, source="x"):
        p = test_data / name
        return list(parse_file(fmt, source, str(p), p.read_bytes()))
    return parse
