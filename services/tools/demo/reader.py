"""The demo's view of the system: admission's state folded from the log, as any reader folds it.

`LogReader` follows the log (a durable consumer of the whole stream, `follow`), folds each event
into an `AdmissionState` in the order admission applies them (`CycleOrder`: a cycle's decisions at
its trigger), hands what it reads to the `Recorder`, and notes the gangs the step's decisions
touched (admitted, asked to stop) for the executor simulator. `settle(tick)` waits until the
preemption pass that follows the tick's admission cycle is closed: then every decision of the
tick is in the state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import anyio

from events import (
    CycleCompleted,
    DecodeError,
    Envelope,
    GangAdmitted,
    GangEnqueued,
    PreemptionRequested,
    decode_all,
    event_class,
    read_envelope,
    read_pack,
)
from events.subjects import STREAM_SUBJECTS
from services.admission.domain.cycle_order import CycleOrder
from services.admission.domain.state import AdmissionState, trees_ticked
from services.admission.folder import seconds_of
from services.common.log import EventLog, Stored
from services.tools.demo.record import Recorder

DURABLE = "demo-reader"
SETTLE_TIMEOUT = 60.0  # seconds a tick's cycle and pass may take to be read back
# counted as read (the gang events as msgspec views: events.views); the fold's own outcomes besides
LOGGED = frozenset({GangEnqueued, GangAdmitted, PreemptionRequested})


class NotSettled(Exception):
    """A tick's decisions were not read back in time: the services are stuck or gone."""


class LogReader:
    def __init__(self, log: EventLog, recorder: Recorder) -> None:
        self.log = log
        self.recorder = recorder
        self.state = AdmissionState(reader=True)
        self.order: CycleOrder[None] = CycleOrder(self._fold, self.state.take_due)
        self.position = 0
        self.touched: set[str] = set()  # gangs admitted or asked to stop since last taken
        self._closed: set[tuple[str, int]] = set()  # (tree, trigger) of the preemption passes read
        self._arrived: list[Stored] = []  # read, not folded yet
        self._moved = anyio.Event()  # set when a batch arrived

    def _fold(self, envelope: Envelope, seq: int) -> list[None]:
        event, at = envelope.event, seconds_of(envelope)
        outcomes = self.state.apply(event, seq, at)
        kind = event_class(event)
        if kind in LOGGED:
            self.recorder.event(event, at)
            if kind is not GangEnqueued:
                self.touched.add(cast(GangAdmitted, event).gang)  # (a request names its gang too)
        for outcome in outcomes:  # what the fold decides itself: refusals, finished gangs, requeues
            self.recorder.event(outcome.event, self.state.now)
        return []

    async def follow(self) -> None:
        """Fold the log as it grows (a durable consumer of the whole stream), until cancelled."""
        await self.log.consume(DURABLE, STREAM_SUBJECTS, self.position, self._batch)

    async def _batch(self, batch: Sequence[Stored]) -> None:
        """Kept until `settle` folds it: the state changes only there, so what the driver reads of
        it between two ticks does not depend on how fast the log comes back (the same run, the
        same reports)."""
        self._arrived.extend(batch)
        self._moved.set()

    def _fold_arrived(self) -> None:
        arrived, self._arrived = self._arrived, []
        for stored in arrived:
            self.position = stored.seq
            try:
                envelopes = decode_all(stored.data, read_envelope, read_pack)
            except DecodeError:
                continue  # admission refuses it; nothing for the demo to fold
            end = len(envelopes) - 1
            for part, envelope in enumerate(envelopes):
                event = envelope.event
                if event_class(event) is CycleCompleted:
                    closed = cast(CycleCompleted, event)
                    if closed.service == "preemption":
                        self._closed.add((closed.tree, closed.trigger_seq))
                self.order.feed(envelope, stored.seq, part == end)

    async def settle(self, tick_seq: int) -> None:
        """Fold what came until every tree the tick cycles has its preemption pass closed (`follow`
        runs meanwhile)."""
        with anyio.move_on_after(SETTLE_TIMEOUT):
            while True:
                self._fold_arrived()
                if self.position >= tick_seq and all(
                        (tree, tick_seq) in self._closed for tree in trees_ticked(self.state, None)):
                    self._closed = {c for c in self._closed if c[1] > tick_seq}
                    return
                self._moved = anyio.Event()
                await self._moved.wait()
        raise NotSettled(f"the decisions of the tick at log position {tick_seq} were not read back within "
                         f"{SETTLE_TIMEOUT:g} s")

    def take_touched(self) -> set[str]:
        touched, self.touched = self.touched, set()
        return touched
