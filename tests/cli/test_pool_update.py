"""`poolwise pool update` merges; `--replace` makes the given options the whole config."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import Up


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    root = tmp_path_factory.mktemp("cli-update")
    with Up(root / "data", root) as up:
        up.start()
        yield up


def test_update_merges_and_replace_unsets(system: Up, tmp_path: Path) -> None:
    assert system.cli("pool", "create", "/u", "--reservation", "cpu=10", "--limit", "cpu=50",
                      "--max-jobs", "7").code == 0
    assert system.cli("pool", "update", "/u", "--share", "3").code == 0
    assert system.pool_config("/u") == {"reservation": {"cpu": 10.0}, "limit": {"cpu": 50.0}, "share": 3.0,
                                     "max_jobs": 7}
    assert system.cli("pool", "update", "/u", "--replace", "--reservation", "cpu=5").code == 0
    assert system.pool_config("/u") == {"reservation": {"cpu": 5.0}}
