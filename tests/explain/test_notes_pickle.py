"""Explain's notes in a snapshot (issue 21): `History` pickles each gang's `GangNotes` as a plain
tuple and keeps them so after a load until the gang's notes are read; what explain reads, and a
note added after the load, are as before."""

from __future__ import annotations

import copy
import pickle
from dataclasses import fields

from events import GangCancelled, GangFinished, GangRequeued, PreemptionRequested
from services.admission.domain.explain_history import GangNotes, History, packed


def history() -> History:
    h = History()
    h.observe(GangRequeued(tree="t", gang="g1", pool="/A", cause="preempted", reason="its tasks were preempted"), 10.0)
    h.observe(PreemptionRequested(tree="t", gang="g1", pool="/A", tasks=["g1/0"], reason="over"), 9.0)
    h.observe(GangCancelled(tree="t", gang="g2", reason="the user"), 11.0)
    h.observe(GangFinished(tree="t", gang="g2", pool="/A", outcome="cancelled"), 12.0)
    h.admitted[("t", "g1")] = "pending"
    return h


def test_packed_is_every_field_in_order() -> None:
    notes = GangNotes(admitted_queue="q", rejection="r", refusal="f", cancel_reason="c", cancelled_at=1.0,
                      requeue_reason="rq", requeued_at=2.0, finished_at=3.0, preempted_reason="p", preempted_at=4.0)
    assert packed(notes) == tuple(getattr(notes, f.name) for f in fields(GangNotes))
    assert len(set(packed(notes))) == len(fields(GangNotes))  # every field given a value of its own
    assert GangNotes(*packed(notes)) == notes


def test_a_loaded_history_reads_as_the_saved_one_and_takes_new_notes() -> None:
    saved = history()
    wanted = {g: saved.get("t", g) for g in ("g1", "g2", "g3")}
    loaded = pickle.loads(pickle.dumps(saved, protocol=5))
    assert all(isinstance(n, tuple) for n in loaded.notes.values())  # no GangNotes made by the load
    assert {g: loaded.get("t", g) for g in ("g1", "g2", "g3")} == wanted
    assert wanted["g1"].requeue_reason == "preempted: its tasks were preempted" and wanted["g1"].requeued_at == 10.0
    assert wanted["g1"].admitted_queue == "pending" and wanted["g2"].cancelled_at == 12.0

    loaded.observe(GangFinished(tree="t", gang="g2", pool="/A", outcome="done"), 20.0)  # a note on a packed gang
    assert loaded.get("t", "g2").finished_at == 20.0 and loaded.get("t", "g2").cancel_reason == "the user"
    again = pickle.loads(pickle.dumps(loaded, protocol=5))  # read and unread notes alike
    assert {g: again.get("t", g) for g in ("g1", "g2")} == {g: loaded.get("t", g) for g in ("g1", "g2")}
    loaded.forget("t", "g1")
    assert loaded.get("t", "g1") == GangNotes()
    assert copy.deepcopy(again).get("t", "g1") == wanted["g1"]
