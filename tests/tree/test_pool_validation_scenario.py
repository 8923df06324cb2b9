"""shared/scenarios/pool-validation.yaml, steps at 0 and 1 (the config parts), as a table:
given its pools, when each upsert/delete in order (accepted ones applied), then exactly the
expected refs are refused, and the refused pools do not exist."""

from __future__ import annotations

import pytest

from events.commands import PoolDelete, PoolUpsert
from services.tree.domain import Decision, Refused
from tests.tree.builders import ORG, delete, given, run, upsert

STEP_0: list[tuple[PoolUpsert | PoolDelete, str | None]] = [
    (upsert("/org/c", reservation={"cpu": 20}), "children_reservation_exceeds_parent"),  # 30+20+20 > 60
    (upsert("/org/d", reservation={"cpu": 10}, limit={"cpu": 5}), "reservation_exceeds_limit"),
    (upsert("/nope/x"), "parent_missing"),
    (upsert("/org/e", limit={"cpu": 200}), "limit_exceeds_parent"),
    (upsert("/org/f", controller_limit=150), "percent_range"),
    (upsert("/org/g", max_running_jobs=10, max_jobs=5), "job_limits_order"),
    (upsert("/org/h", reservation={"tpu": 1}), "unknown_kind"),
    (upsert("/org/i", reservation={"cpu": -1}), "negative_value"),
    (upsert("/"), "path_root"),
    (upsert("/org/bad name!"), "name_charset"),
    (delete("/org"), "delete_has_children"),
]
STEP_0_REJECTED = ["/org/c", "/org/d", "/nope/x", "/org/e", "/org/f", "/org/g", "/org/h", "/org/i", "/",
                   "/org/bad name!", "/org"]
STEP_0_ABSENT = ["/org/c", "/org/d", "/nope", "/nope/x", "/org/e", "/org/f", "/org/g", "/org/h", "/org/i"]

STEP_1: list[tuple[PoolUpsert | PoolDelete, str | None]] = [
    (upsert("/org/a", reservation={"cpu": 35, "memory": 300}, limit={"cpu": 50, "memory": 500}), None),
    (upsert("/org/b", reservation={"cpu": 30, "memory": 200}, limit={"cpu": 100, "memory": 1000}),
     "children_reservation_exceeds_parent"),  # 35+30 > 60
    (upsert("/org/c", reservation={"cpu": 5}), None),  # 35+20+5 <= 60
]


def _refs(decisions: list[Decision]) -> list[str]:
    return [d.ref for d in decisions if isinstance(d, Refused)]


@pytest.mark.parametrize(("command", "rule"), STEP_0, ids=[c.path for c, _ in STEP_0])
def test_step_0_each_refused_for_its_rule(command: PoolUpsert | PoolDelete, rule: str) -> None:
    (decision,) = run(given(*ORG), command)
    assert isinstance(decision, Refused) and decision.rule == rule, decision


def test_step_0_then_step_1() -> None:
    state = given(*ORG)
    step0 = run(state, *(c for c, _ in STEP_0))
    assert _refs(step0) == STEP_0_REJECTED
    assert all(p not in state.tree().pools for p in STEP_0_ABSENT)
    assert state.tree().version == 5  # nothing was appended

    step1 = run(state, *(c for c, _ in STEP_1))
    assert _refs(step1) == ["/org/b"]
    assert [d.rule for d in step1 if isinstance(d, Refused)] == ["children_reservation_exceeds_parent"]
    tree = state.tree()
    assert tree.pools["/org/a"].config.reservation == {"cpu": 35, "memory": 300}
    assert tree.pools["/org/b"].config.reservation == {"cpu": 20, "memory": 200}  # unchanged
    assert tree.pools["/org/c"].config.reservation == {"cpu": 5}
    assert tree.version == 7
