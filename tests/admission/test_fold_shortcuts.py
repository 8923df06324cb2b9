"""The admission fold's shortcuts agree with what they stand for."""

from __future__ import annotations

import pytest

from events import ClockTicked, CycleCompleted, GangAdmitted, TaskStateChanged
from events.views import VIEWS
from services.admission.domain.state import CONFIG_FOLDED, CONFIG_FOLDS, AdmissionState
from services.tree.domain import state as tree_state


def test_the_fold_hands_the_tree_state_every_type_it_folds() -> None:
    """`AdmissionState.apply` calls `TreeState.apply` only for `CONFIG_FOLDED`: the tree's own list
    of folded types, with their views."""
    models = {kind for kind in CONFIG_FOLDED if kind not in VIEWS.values()}
    assert models == set(tree_state._FOLDED)
    assert {VIEWS[kind] for kind in models if kind in VIEWS} <= CONFIG_FOLDED


def test_the_folds_of_a_gangs_events_are_the_tree_states_apply() -> None:
    """`CONFIG_FOLDS` hands a gang's events (models and views) to the tree's handler of their
    type: the tree state ends as `TreeState.apply` leaves it (the gang placed; then finished)."""
    from events import GangEnqueued, GangFinished, TaskSpec
    from services.tree.domain.state import TreeState
    from tests.admission.builders import pool, world

    enqueued = GangEnqueued(tree="default", gang="g", pool="/a", job="j", size=1, user="u",
                            tasks=[TaskSpec(id="g/0", resources={"cpu": 1.0})])
    finished = GangFinished(tree="default", gang="g", pool="/a", outcome="done")
    for events in ([enqueued], [enqueued, finished]):
        applied, folded = world(pool("/a")).state.config, world(pool("/a")).state.config
        for seq, event in enumerate(events, start=90):
            applied.apply(event, seq)
            CONFIG_FOLDS[type(event)](folded, event, seq)
        assert (folded.trees, folded.hosts) == (applied.trees, applied.hosts)  # (`last_seq`: the caller's)
        assert list(folded.tree().unfinished) == (["g"] if len(events) == 1 else [])
    assert {CONFIG_FOLDS[VIEWS[GangEnqueued]], CONFIG_FOLDS[GangEnqueued]} == {TreeState.gang_enqueued}


def test_an_event_the_tree_does_not_fold_still_moves_its_position() -> None:
    state = AdmissionState()
    state.apply(ClockTicked(tree="t"), 5, 1.0)
    assert (state.last_seq, state.config.last_seq) == (5, 5)
    state.apply(CycleCompleted(tree="t", service="other", trigger_seq=5, decisions=0), 3, 1.0)
    assert (state.last_seq, state.config.last_seq) == (5, 5)  # (never back)
    for event in (TaskStateChanged(tree="t", gang="g", task="x", state="running"),
                  GangAdmitted(tree="t", gang="g", pool="/p", queue="pending", tasks=[])):
        state.apply(event, 9, 2.0)
    assert state.config.last_seq == 9


@pytest.mark.parametrize("ids", [
    ["g/0", "g/1"],
    ["g/é", "g/1"],  # not ASCII: six bytes a character
    ['g/"q"', "g/1"],  # a quote, a backslash, a character not printable: escaped
    ["g\\0"],
    ["g/\x07", "g/2", "g/3"],
    ["gang/" + "x" * 300],
])
@pytest.mark.parametrize("resources", [{}, {"cpu": 1.0}, {"cpu": 0.5, "memory": 2.0, "gpu": 1.0}])
def test_a_new_gangs_one_walk_agrees_with_the_checks_one_by_one(ids: list[str], resources: dict[str, float]) -> None:
    """`rules._passes` (every check in one walk over the members, their wire bytes counted in it)
    gives what `rules._checks` gives, and the wire bytes are `members_bytes`'s."""
    from events import GangEnqueued, TaskSpec
    from services.admission.domain import rules
    from tests.admission.builders import pool, world

    log = world(pool("/a"), resources=("cpu", "memory", "gpu"), capacity={"cpu": 100.0, "memory": 100.0,
                                                                          "gpu": 10.0})
    event = GangEnqueued(tree="default", gang="g", pool="/a", job="j", size=len(ids),
                         tasks=[TaskSpec(id=task_id, resources=resources) for task_id in ids])
    log.state.config.apply(event, 99)  # (the tree places it first, as `AdmissionState.apply` does)
    passed = rules._passes(log.state.config, log.rt, event)
    assert passed is not None
    assert passed == rules._checks(log.state.config, log.rt, event)
    assert passed.wire_bytes == rules.members_bytes(event.tasks)


@pytest.mark.parametrize("second", [{"cpu": 1.0, "disk": 1.0}, {"disk": 1.0, "cpu": 1.0}, {"disk": 0.0}])
def test_a_new_gangs_one_walk_passes_no_member_of_an_unknown_kind(second: dict[str, float]) -> None:
    """`rules._passes` gives up on a member asking for a kind the tree does not have (wherever it
    stands among the member's kinds), and the checks one by one name it."""
    from events import GangEnqueued, TaskSpec
    from services.admission.domain import rules
    from tests.admission.builders import pool, world

    log = world(pool("/a"), resources=("cpu", "memory"), capacity={"cpu": 100.0, "memory": 100.0})
    event = GangEnqueued(tree="default", gang="g", pool="/a", job="j", size=2,
                         tasks=[TaskSpec(id="g/0", resources={"cpu": 1.0}), TaskSpec(id="g/1", resources=second)])
    log.state.config.apply(event, 99)
    assert rules._passes(log.state.config, log.rt, event) is None
    refusal = rules._checks(log.state.config, log.rt, event)
    assert isinstance(refusal, rules.Refusal) and refusal.rule == "unknown_kind" and "disk" in refusal.message
