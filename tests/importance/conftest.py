import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def spark():
    from importance.spark import get_spark

    s = get_spark(app="sciencemap-tests", master="local[2]", shuffle_partitions=4)
    yield s


@pytest.fixture(scope="session")
def repo_root():
    return ROOT
