"""One recorded run for every analytics test (`recorded.py`): it is only read."""

from __future__ import annotations

import pytest

from tests.analytics.recorded import Recorded, record


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return record(tmp_path_factory.mktemp("analytics"))
