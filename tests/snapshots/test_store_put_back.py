"""`id_runs.store_put_back`: after systems run in one process (tests, the demo), the process's
id-run store is the one it had before them, whatever order their runs end in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from services.common import id_runs
from services.tree.domain import used_ids
from services.tree.domain.used_ids import MemoryRuns


@pytest.fixture
def first() -> Iterator[used_ids.RunStore]:
    store = MemoryRuns()
    before = used_ids.use_store(store)
    yield store
    used_ids.use_store(before)


@pytest.mark.parametrize("order", ["last started ends first", "first started ends first"])
def test_the_store_of_before_is_put_back_whatever_order_the_systems_end_in(
        first: used_ids.RunStore, tmp_path: Path, order: str) -> None:
    a, b = ExitStack(), ExitStack()
    a.enter_context(id_runs.store_put_back())
    store_a = id_runs.install(tmp_path / "a")
    b.enter_context(id_runs.store_put_back())
    store_b = id_runs.install(tmp_path / "b")
    assert used_ids.current_store() is store_b
    if order == "last started ends first":
        b.close()
        assert used_ids.current_store() is store_a  # A still runs on its own store
        a.close()
    else:
        a.close()
        assert used_ids.current_store() is store_b  # B still runs: its store stays
        b.close()
    assert used_ids.current_store() is first
