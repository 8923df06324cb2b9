"""bench.projection_speed runs and reports positive rates (no timing assertions)."""

from __future__ import annotations

from bench.projection_speed import measure, synthetic_log
from events import decode


def test_the_synthetic_log_decodes() -> None:
    log = synthetic_log(8)
    assert [m.seq for m in log] == list(range(1, 9))
    types = {decode(m.data).type for m in log}
    assert types == {"GangEnqueued", "GangAdmitted", "TaskStateChanged", "ClockTicked"}


def test_measure_reports_rates() -> None:
    speed = measure(300, batch=100)
    assert speed.events == 300
    assert min(speed.store_rows_per_s, speed.projection_rows_per_s, speed.decode_per_s) > 0
    assert speed.arrow_insert_rows_per_s > 0
