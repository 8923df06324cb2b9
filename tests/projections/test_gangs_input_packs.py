"""The `gangs` projection with inputs in packs (a submitter's `enqueue_many` as one message):
a refusal names its input by `input_seq` and `input_part`, and only that part is refused."""

from __future__ import annotations

from events import Envelope, InputRejected, TreeConfigured, TreeOptions, encode, encode_pack
from events.subjects import for_event
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
