"""Readiness from what a process knows of its services: the role, and the fold's lag behind the
log's end (`services.common.metrics.readiness`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from services.common import metrics


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    metrics.reset()
    yield
    metrics.reset()


def test_ready_when_leading_or_standing_by_and_caught_up() -> None:
    found = metrics.status("admission")
    assert metrics.readiness(found, 100) == (False, "starting")
    metrics.set_role("admission", "standby")
    found.folder = object()  # a warm fold: its lag counts
    assert metrics.readiness(found, 100) == (False, "the log's end is not known yet")
    metrics.STREAM.last_seq, found.folded = 5000, 4950
    metrics.STREAM.asked_at = time.monotonic()
    assert metrics.readiness(found, 100) == (True, "standby")
    metrics.STREAM.asked_at = time.monotonic() - metrics.STALE_AFTER - 5  # NATS silent since
    ready, why = metrics.readiness(found, 100)
    assert not ready and why.startswith("NATS has not said where the log ends")
    metrics.STREAM.asked_at = time.monotonic()
    found.folded = 10
    assert metrics.readiness(found, 100) == (False, "4990 positions behind the log (more than 100)")
    metrics.set_role("admission", "lost")
    assert metrics.readiness(found, 10_000) == (False, "lost")


def test_a_service_that_folds_nothing_here_is_ready_by_its_role() -> None:
    metrics.set_role("tree", "standby")  # the tree service's standby starts from its snapshot on takeover
    assert metrics.readiness(metrics.status("tree"), 0) == (True, "standby")
    assert metrics.lag(metrics.status("tree")) is None


def test_lease_held_per_role() -> None:
    metrics.set_role("admission", "per-tree", 0)
    assert not metrics.status("admission").lease_held
    metrics.set_role("admission", "per-tree", 2)
    assert metrics.status("admission").lease_held
    metrics.set_role("preemption", "leading")
    assert metrics.status("preemption").lease_held
