"""An admission instance deciding per tree (`services.admission.held_trees.HeldTreesFolder`) decides
the cycles of the trees it holds and reads the others' from the log, and whatever it holds, and
whenever its trees change (a tree taken over while its cycle waits: its holder published part of
it, or none), it decides exactly what one service-wide instance decided: every decision it makes
is in the log with the same id and content, and its fold ends in the same state.

The logs are test_interleavings' random ones (three trees, one configured late; packs that start
cycles, ticks naming a tree or none, timeouts, task reports, cancels, preemptions; admission's
decisions landing late, in batches, sometimes out of order), folded in random batch cuts while
the trees held change at random."""

from __future__ import annotations

import pytest

from events import Envelope
from services.admission.held_trees import HeldTreesFolder, WhenSettled
from services.common.folding import fold_batch
from services.common.snapshots import SnapshotPolicy
from tests.admission.builders import without_slot_waits
from tests.admission.test_interleavings import TREES, random_log
from tests.held_trees import fold_in_random_cuts


def same(made: Envelope, found: Envelope) -> bool:
    return (made.basis, made.source, made.event.model_dump(mode="json")) == (
        found.basis, found.source, found.event.model_dump(mode="json"))


@pytest.mark.parametrize("out_of_order", [False, True], ids=["in-order", "out-of-order"])
def test_deciding_the_trees_held_and_reading_the_others_decides_what_one_instance_did(out_of_order: bool) -> None:
    taken_over = 0
    for seed in range(25):
        log = random_log(seed, out_of_order)
        folder = HeldTreesFolder()
        # a tree taken over while its cycle waits is decided by the fold of the next message
        taken_over += fold_in_random_cuts(folder, log.messages, TREES, seed, same).taken_over
        assert without_slot_waits(folder.state) == without_slot_waits(log.admission.state), seed
    assert taken_over > 5  # (the takeover of a waiting cycle was exercised)


def test_an_instance_decides_no_cycle_of_a_tree_it_does_not_hold() -> None:
    log = random_log(7, out_of_order=False)
    folder = HeldTreesFolder()
    folder.held = frozenset({"default"})
    fold_batch(folder, log.messages, 0)
    assert set(folder.decided) <= {"default"}
    assert folder.decided["default"] > 0
    assert set(folder.read) - {"default"}  # the other trees' cycles were read from the log
    assert folder.settled()


def test_a_snapshot_waits_until_nothing_waits() -> None:
    """A snapshot of a fold holding inputs behind another instance's open cycle would not be the
    state at the position it names: `WhenSettled` waits (and a service-wide start can load what it
    saves)."""
    log = random_log(3, out_of_order=False)
    folder = HeldTreesFolder()
    policy = WhenSettled.of(SnapshotPolicy(store=None, every=1, least=1), folder.settled)  # type: ignore[arg-type]
    assert policy.due(10, 0.0)
    for stored in log.messages:  # up to the first trigger whose cycle is read from the log
        fold_batch(folder, [stored], stored.seq - 1)
        if folder.waiting_trees():
            break
    assert not folder.settled()
    assert not policy.due(10_000, 0.0) and not policy.unsaved(10_000)
    fold_batch(folder, log.messages[stored.seq:], stored.seq)
    assert folder.settled() and policy.due(10_000, 0.0)


def test_the_trees_whose_cycles_it_waits_for_are_told_so_each_gets_a_holder() -> None:
    """A tree whose cycle is due but that no subject names would be learnt by no lease: nobody
    would hold it and every instance would wait for its cycle for good (review of 5bdadd2). The
    folder tells `on_waiting` (the service: `TreeLeases.learn`) each tree it waits for."""
    log = random_log(7, out_of_order=False)
    folder = HeldTreesFolder()
    folder.held = frozenset({"default"})
    told: set[str] = set()
    folder.on_waiting = told.update
    fold_batch(folder, log.messages, 0)
    assert told and "default" not in told
    assert set(folder.read) <= told  # every tree whose cycle was read was waited for, and told
