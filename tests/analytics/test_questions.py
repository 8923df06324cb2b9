"""docs/analytics.md's questions, each query run as the page writes it against the recorded run
(`recorded.yaml`, projected into a stopped data dir), through `poolwise sql --format json`, with
the answers worked out by hand on that page. And: the page documents every column of every table
a store has."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from projections import EventLogProjection, PoolTreeProjection, ProjectionStore
from projections.answers import INTERNAL
from projections.read_models import read_models
from services.tools.cli.main import app
from tests.analytics.recorded import Recorded

DOC = Path(__file__).resolve().parents[2] / "docs" / "analytics.md"
QUERY = re.compile(r"<!-- query: (\w+) -->\n```sql\n(.*?)```", re.S)


def queries() -> dict[str, str]:
    return dict(QUERY.findall(DOC.read_text()))


def ask(recorded: Recorded, name: str, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.delenv("NATS_URL", raising=False)
    result = CliRunner().invoke(app, ["sql", queries()[name], "--format", "json", "--data-dir",
                                      str(recorded.data_dir)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    found: list[dict[str, Any]] = json.loads(result.stdout)
    return found


def test_the_page_names_every_question() -> None:
    assert sorted(queries()) == ["entitlement_at", "entitlement_over_time", "held_by_job_limits",
                                 "preempted_for_whom", "rejections_by_rule", "reservation_lent",
                                 "wait_to_admission"]


def test_p50_and_p95_wait_to_admission_per_pool_over_the_last_hour(recorded: Recorded,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ask(recorded, "wait_to_admission", monkeypatch)
    assert [(r["tree"], r["pool"], r["admitted"], r["p50_s"], r["p95_s"]) for r in rows] == [
        ("default", "/A", 19, 0.0, 20.0),  # 14 admitted on arrival at 10, 5 after 20 s at 30
        ("jobs", "/L", 1, 0.0, 0.0),  # the gang of 3605 (j1 of 0 is older than the hour)
        ("jobs", "/P", 1, 10.0, 10.0),  # high: came at 10, admitted at 20
    ]


def test_who_was_preempted_from_which_pool_for_whom(recorded: Recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ask(recorded, "preempted_for_whom", monkeypatch)
    assert [(r["tree"], r["pool"], r["cause"], r["for_gang"], r["for_pools"], r["gangs"], r["tasks"], r["first"],
             r["last"]) for r in rows] == [
        ("default", "/B", "over_entitlement", None, ["/A"], 7, 7, "1970-01-01T00:00:10+00:00",
         "1970-01-01T00:00:10+00:00"),
        ("default", "/C", "over_entitlement", None, ["/A"], 7, 7, "1970-01-01T00:00:10+00:00",
         "1970-01-01T00:00:10+00:00"),
        ("jobs", "/P", "lower_priority", "high", ["/P"], 1, 4, "1970-01-01T00:00:10+00:00",
         "1970-01-01T00:00:10+00:00"),
    ]
    # and they are the tasks the run's report says were preempted
    preempted = {d.task for step in recorded.report.steps for d in step.decisions if d.kind == "preempt"}
    assert len(preempted) == 18


def test_which_pool_lends_the_most_reservation_and_to_whom(recorded: Recorded,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ask(recorded, "reservation_lent", monkeypatch)
    assert [(r["tree"], r["lender"], r["borrower"], r["kind"]) for r in rows] == [
        ("default", "/A", "/B", "cpu"), ("default", "/A", "/C", "cpu")]
    for row in rows:  # 4 lent, 17 + 17 borrowed: 4 * 17 / 34 each, from 0 to 10
        assert row["most_lent"] == pytest.approx(2.0)
        assert row["lent_seconds"] == pytest.approx(20.0)


def test_jobs_held_by_running_job_limits(recorded: Recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ask(recorded, "held_by_job_limits", monkeypatch)
    assert [(r["tree"], r["limited_pool"], r["max_running_jobs"], r["running_jobs"], r["job"], r["gang"])
            for r in rows] == [("jobs", "/L", 1, ["j1"], "j2", "l2"), ("jobs", "/L", 1, ["j1"], "j3", "l3")]


def test_rejected_inputs_by_rule_and_source(recorded: Recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ask(recorded, "rejections_by_rule", monkeypatch)
    assert [(r["source"], r["rule"], r["input_type"], r["refused"]) for r in rows] == [
        ("admission", "pool_missing", "GangEnqueued", 1),
        ("tree", "reservation_exceeds_limit", "PoolUpsert", 1),
    ]


def test_entitlement_of_a_pool_over_time(recorded: Recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ask(recorded, "entitlement_over_time", monkeypatch)
    assert [(r["computed_at"], r["kind"], r["entitlement"]) for r in rows] == [
        ("1970-01-01T00:00:00+00:00", "cpu", 6.0), ("1970-01-01T00:00:10+00:00", "cpu", 20.0)]
    rows = ask(recorded, "entitlement_at", monkeypatch)
    assert [(r["path"], r["cpu"]) for r in rows] == [("/", 60.0), ("/A", 6.0), ("/B", 27.0), ("/C", 27.0)]


SECTION = re.compile(r"^\| `([^`|]+(?:`, `[^`|]+)*)` \|", re.M)


def documented() -> set[str]:
    """Every column name the page's tables name (`a`, `b` in one cell names both)."""
    names: set[str] = set()
    for cell in SECTION.findall(DOC.read_text()):
        names |= {name.strip() for name in cell.split("`, `")}
    return names


def test_the_page_documents_every_column_of_every_table() -> None:
    with ProjectionStore(":memory:", [PoolTreeProjection(), EventLogProjection(), *read_models()]) as store:
        _, tables = store.query("SELECT table_name FROM duckdb_tables() ORDER BY 1")
        text = DOC.read_text()
        missing = []
        for (table,) in tables:
            if table in INTERNAL:
                assert f"`{table}`" in text, f"docs/analytics.md: name the internal table {table}"
                continue
            assert f"### {table}" in text or f", {table}" in text or f"`{table}`" in text, table
            _, columns = store.query(f'DESCRIBE "{table}"')
            missing += [f"{table}.{name}" for name, *_ in columns if name not in documented()]
    assert not missing, f"docs/analytics.md does not document: {', '.join(missing)}"
