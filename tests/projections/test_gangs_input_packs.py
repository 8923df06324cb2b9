"""The `gangs` projection with inputs in packs (a submitter's `enqueue_many` as one message):
a refusal names its input by `input_seq` and `input_part`, and only that part is refused."""

from __future__ import annotations

from events import ClockTicked, Envelope, InputRejected, TreeConfigured, TreeOptions, at_seconds, encode, encode_pack
from events.subjects import for_event
from projections import ProjectionStore
from projections.gangs import GangsProjection
from services.common.log import Stored
from tests.projections.make import T0
from tests.projections.test_gangs import History, admitted, applied, enqueue, gangs


def _pack(h: History, *gang_events: object) -> int:
    seq = h.seq + 1
    parts = [encode(Envelope(id=f"in-{seq}-{i}", time=T0, source="sdk", event=e))  # type: ignore[arg-type]
             for i, e in enumerate(gang_events)]
    h.messages.append(Stored(seq, for_event("GangEnqueued", "default", "sdk"), encode_pack(parts), f"pack-{seq}"))
    return seq


def test_a_refusal_of_one_part_refuses_that_gang_only() -> None:
    h = History()
    h.add(TreeConfigured(tree="default", options=TreeOptions()), source="tree")
    seq = _pack(h, enqueue("p0"), enqueue("p1", pool="/nowhere"), enqueue("p2"))
    h.decide(InputRejected(tree="default", ref="p1", input_type="GangEnqueued", rule="pool_missing",
                           reason="pool /nowhere does not exist", input_seq=seq, input_part=1), basis=seq)
    with applied(h.messages) as store:
        assert gangs(store, "state") == {}  # p0 waits for admission's answer, and what follows it too
        h.cycle(admitted("p0"), admitted("p2"))
        store.apply(h.messages)
        assert gangs(store, "state") == {"p0": ("admitted",), "p1": ("rejected",), "p2": ("admitted",)}


def test_a_refusal_that_comes_late_finds_its_part_among_the_held() -> None:
    h = History()
    h.add(TreeConfigured(tree="default", options=TreeOptions()), source="tree")
    seq = _pack(h, enqueue("p0"), enqueue("p1"), enqueue("p2", pool="/nowhere"))
    with applied(h.messages) as store:  # held, unanswered
        h.decide(InputRejected(tree="default", ref="p2", input_type="GangEnqueued", rule="pool_missing",
                               reason="pool /nowhere does not exist", input_seq=seq, input_part=2), basis=seq)
        store.apply(h.messages)
        h.cycle(admitted("p0"))
        store.apply(h.messages)
        assert gangs(store, "state") == {"p0": ("admitted",), "p1": ("pending",), "p2": ("rejected",)}


def test_a_timer_that_fires_inside_a_pack_takes_effect_before_that_part_only() -> None:
    """A submitter stamps each part of a pack with its own time: a deadline that falls between two
    parts fires before the later part (admission's fold), not before the whole pack."""
    from services.admission.folder import AdmissionFolder
    from services.common.folding import fold_batch
    from tests.admission.builders import gang, host, pool, tree

    t0 = 1_767_225_600.0
    log: list[Stored] = []

    def put(envelope: Envelope) -> None:
        subject = for_event(envelope.event.type, getattr(envelope.event, "tree", None), envelope.source)
        log.append(Stored(len(log) + 1, subject, encode(envelope), envelope.id))

    def at(event: object, seconds: float, n: str, source: str = "sdk") -> Envelope:
        return Envelope(id=n, time=at_seconds(seconds), source=source, event=event)  # type: ignore[arg-type]

    for n, event in enumerate([tree(), host(cpu=10), pool("/a")]):
        put(at(event, t0, f"c{n}", "tree"))
    parts = [encode(at(gang("g", "/a", tasks=1, size=2, timeout=0.0), t0 + 1.0, "p0")),  # waits: due at once
             encode(at(gang("h", "/a"), t0 + 1.000004, "p1"))]  # 4 µs later: g times out before it
    log.append(Stored(len(log) + 1, for_event("GangEnqueued", "default", "sdk"), encode_pack(parts), "pack"))
    admission = AdmissionFolder()
    decided = fold_batch(admission, log, 0)
    for envelope in decided.decisions:
        put(envelope)
    put(at(ClockTicked(), t0 + 2.0, "tick", "admission:clock"))
    for envelope in fold_batch(admission, log, decided.last_seq).decisions:
        put(envelope)
    rt = admission.state.runtime("default")
    assert (rt.gangs["g"].state, len(rt.gangs["g"].tasks)) == ("timed_out", 1)
    with ProjectionStore(":memory:", [GangsProjection()]) as store:
        store.apply(log)
        assert store.query("SELECT gang, state, members, size FROM gangs ORDER BY gang")[1] == [
            ("g", "timed_out", 1, 2), ("h", "admitted", 1, 1)]
        assert [row[0] for row in store.query("SELECT task FROM tasks ORDER BY task")[1]] == ["g/0", "h/0"]
        assert store.query("SELECT count(*) FROM gangs_held")[1] == [(0,)]
