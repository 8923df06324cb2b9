"""The admission fold's shortcuts agree with what they stand for."""

from __future__ import annotations

from events import ClockTicked, CycleCompleted, GangAdmitted, TaskStateChanged
from events.views import VIEWS
from services.admission.domain.state import CONFIG_FOLDED, AdmissionState
from services.tree.domain import state as tree_state


def test_the_fold_hands_the_tree_state_every_type_it_folds() -> None:
    """`AdmissionState.apply` calls `TreeState.apply` only for `CONFIG_FOLDED`: the tree's own list
    of folded types, with their views."""
    models = {kind for kind in CONFIG_FOLDED if kind not in VIEWS.values()}
    assert models == set(tree_state._FOLDED)
    assert {VIEWS[kind] for kind in models if kind in VIEWS} <= CONFIG_FOLDED


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
