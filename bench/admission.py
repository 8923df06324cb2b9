"""The admission domain alone: fold N enqueues, then run admission cycles until nothing moves.

`bench_admission(workload)` returns an `AdmissionSpeed` (it prints nothing). It drives
`AdmissionState.apply` and `decide_tree` directly, as the service's folder does, with the log
positions a real log would give:

1. the tree, pools and hosts are folded (not timed);
2. `decode_per_s`: `events.decode` of encoded gang envelopes (a sample of up to 20k): what the
   service pays per event before folding it;
3. `fold_per_s`: `AdmissionState.apply` of every `GangEnqueued` (validation, placement, queues,
   ledgers);
4. cycles: a `ClockTicked` is folded, `decide_tree` runs the cycle of the tree (entitlements,
   then the queues), and its decisions are folded back (as the service does when it reads them
   from the log), until a cycle admits and moves nothing (at most `max_cycles`);
5. `entitlement_s`: `compute_for` (the entitlement part of a cycle) on the state after the fold;
   `wrap_encode_per_s`: turning the first cycle's outcomes into encoded envelopes (what the
   service publishes).

Run directly for a quick look: `python -m bench.admission [gangs] [leaves]`.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from bench.workload import Workload, config_events, envelope, gang_events
from events import ClockTicked, Event, GangAdmitted, GangMovedToQueue, at_seconds, decode, encode
from services.admission.domain.decide import decide_tree
from services.admission.domain.entitle import compute_for
from services.admission.domain.state import SERVICE, AdmissionState, Outcome
from services.admission.envelopes import decision_envelope  # as the service wraps its decisions

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: event time of everything folded here
DECODE_SAMPLE = 20_000


@dataclass(frozen=True, slots=True)
class CycleTiming:
    """One admission cycle: `decide_s` in `decide_tree`, `readback_s` applying its decisions to the
    state (as the service does at the cycle's trigger, `run_cycles`; before session 9, when it
    read them back)."""

    decide_s: float
    readback_s: float
    admitted: int
    moved: int
    decisions: int


@dataclass(frozen=True)
class AdmissionSpeed:
    workload: Workload
    build_s: float  # building the gang events (not part of any rate)
    decode_per_s: float
    fold_s: float
    entitlement_s: float
    wrap_encode_per_s: float
    cycles: list[CycleTiming] = field(default_factory=list)
    pending_left: int = 0

    @property
    def gangs(self) -> int:
        return self.workload.gangs

    @property
    def fold_per_s(self) -> float:
        return self.gangs / self.fold_s if self.fold_s > 0 else 0.0

    @property
    def admitted(self) -> int:
        return sum(c.admitted for c in self.cycles)

    @property
    def moved(self) -> int:
        return sum(c.moved for c in self.cycles)

    @property
    def cycle_s(self) -> float:
        """Every cycle's decide and apply time."""
        return sum(c.decide_s + c.readback_s for c in self.cycles)

    @property
    def first_cycle_s(self) -> float:
        return self.cycles[0].decide_s if self.cycles else 0.0

    @property
    def cycle_gangs_per_s(self) -> float:
        """Gangs decided (admitted or moved) per second of cycle work (decide + apply)."""
        return (self.admitted + self.moved) / self.cycle_s if self.cycle_s > 0 else 0.0

    @property
    def overall_gangs_per_s(self) -> float:
        """Gangs decided per second of fold plus cycles: the domain's ceiling for a burst."""
        total = self.fold_s + self.cycle_s
        return (self.admitted + self.moved) / total if total > 0 else 0.0


@contextmanager
def _gc_paused() -> Iterator[None]:
    """As the projection store does while it applies: the fold makes many small objects."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _decode_rate(events: Sequence[Event]) -> float:
    data = [encode(envelope(e, f"d{i}", T0, source="sdk:bench")) for i, e in enumerate(events)]
    start = time.perf_counter()
    for item in data:
        decode(item)
    elapsed = time.perf_counter() - start
    return len(data) / elapsed if elapsed > 0 else 0.0


def wrap_and_encode(outcomes: list[Outcome], basis: int, now: float) -> list[bytes]:
    """What the service does with a cycle's outcomes before publishing (`AdmissionFolder._wrap`)."""
    time_ = at_seconds(now)
    return [encode(decision_envelope(SERVICE, o.event, o.key, basis, "tick", time_)) for o in outcomes]


def bench_admission(workload: Workload | None = None, *, max_cycles: int = 50) -> AdmissionSpeed:
    """Fold `workload.gangs` enqueues over `workload.leaves` leaf pools, then cycle until settled."""
    w = workload or Workload()
    state = AdmissionState()
    seq = 0
    for event in config_events(w):
        seq += 1
        state.apply(event, seq, T0)
    start = time.perf_counter()
    gangs = list(gang_events(w))
    build_s = time.perf_counter() - start
    decode_per_s = _decode_rate(gangs[:DECODE_SAMPLE])

    with _gc_paused():
        start = time.perf_counter()
        for event in gangs:
            seq += 1
            state.apply(event, seq, T0)
        fold_s = time.perf_counter() - start
        del gangs

        start = time.perf_counter()
        compute_for(state, w.tree)
        entitlement_s = time.perf_counter() - start

        cycles: list[CycleTiming] = []
        wrap_rate = 0.0
        for _ in range(max(1, max_cycles)):
            seq += 1
            state.apply(ClockTicked(tree=w.tree), seq, T0)
            due = state.take_due()
            if w.tree not in due:
                break
            tick = seq
            start = time.perf_counter()
            outcomes = decide_tree(state, w.tree, tick)
            decide_s = time.perf_counter() - start
            if not cycles:
                start = time.perf_counter()
                wrap_and_encode(outcomes, tick, T0)
                wrap_rate = len(outcomes) / max(time.perf_counter() - start, 1e-9)
            start = time.perf_counter()
            for outcome in outcomes:
                seq += 1
                state.apply(outcome.event, seq, T0)
            readback_s = time.perf_counter() - start
            admitted = sum(isinstance(o.event, GangAdmitted) for o in outcomes)
            moved = sum(isinstance(o.event, GangMovedToQueue) for o in outcomes)
            cycles.append(CycleTiming(decide_s, readback_s, admitted, moved, len(outcomes)))
            if admitted == 0 and moved == 0:
                break
    runtime = state.trees.get(w.tree)
    pending = sum(1 for g in runtime.gangs.values() if g.state == "pending") if runtime else 0
    return AdmissionSpeed(workload=w, build_s=build_s, decode_per_s=decode_per_s, fold_s=fold_s,
                          entitlement_s=entitlement_s, wrap_encode_per_s=wrap_rate, cycles=cycles,
                          pending_left=pending)


def main(argv: list[str]) -> None:
    gangs = int(argv[0]) if argv else 100_000
    leaves = int(argv[1]) if len(argv) > 1 else 1000
    speed = bench_admission(Workload(gangs=gangs, leaves=leaves))
    print(f"{gangs} gangs over {leaves} leaves: fold {speed.fold_per_s:,.0f} events/s, "
          f"decode {speed.decode_per_s:,.0f}/s, {len(speed.cycles)} cycles "
          f"(first {speed.first_cycle_s * 1e3:.1f} ms), admitted {speed.admitted}, moved {speed.moved}, "
          f"pending {speed.pending_left}, cycle {speed.cycle_gangs_per_s:,.0f} gangs/s, "
          f"overall {speed.overall_gangs_per_s:,.0f} gangs/s")


if __name__ == "__main__":
    main(sys.argv[1:])
