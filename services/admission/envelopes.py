"""Decision envelopes, built without validating their values again (`events.trusted`; see
`services/admission/domain/trusted.py`): the admission folder wraps every decision, one or more
per gang, and validation costs several times what building does (docs/performance.md).

Their ids are `events.derived_id(service, basis, tree, key)`; the decisions of one cycle share
service, basis and tree, so `decision_envelopes` hashes that prefix once (`events.DerivedIds`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from events import DerivedIds, Envelope, Event, derived_id
from services.admission.domain.trusted import positional

# (`events.trusted.builder(Envelope)`, positional: one per decision)
_envelope = positional(Envelope, ("id", "time", "source", "causation", "basis", "event"))


class Decided(Protocol):
    """What a decision is before its envelope (`Outcome`): the event and its key."""

    @property
    def event(self) -> Event: ...

    @property
    def key(self) -> str: ...


def envelope(id_: str, time: datetime, source: str, causation: str | None, basis: int | None,
             event: Event) -> Envelope:
    """`Envelope(id=id_, time=time, source=source, causation=causation, basis=basis, event=event)`
    for an aware `time`, an `id_` of 1 to 200 characters and an event model of the wire's types."""
    return _envelope(id_, time, source, causation, basis, event)


def decision_envelope(service: str, event: Event, key: str, basis: int, causation: str, time: datetime) -> Envelope:
    """`services.common.folding.decision_envelope`: the same envelope (the same derived id), not
    validated again (the event is a model already, the time the log's, the rest plain values); a
    test holds the two to each other."""
    tree = getattr(event, "tree", None)
    parts = (service, basis, key) if tree is None else (service, basis, tree, key)
    return _envelope(derived_id(*parts), time, service, causation, basis, event)  # (`envelope`)


def decision_envelopes(service: str, decided: Iterable[Decided], basis: int, causation: str,
                       time: datetime) -> list[Envelope]:
    """`decision_envelope` of each decision, in order (the id's prefix hashed once per tree)."""
    if type(decided) is list and len(decided) == 1:  # (one decision, as of most task reports: one hash, not two)
        made = decided[0]
        return [decision_envelope(service, made.event, made.key, basis, causation, time)]
    ids: dict[str | None, DerivedIds] = {}
    out: list[Envelope] = []
    for made in decided:
        event = made.event
        tree = getattr(event, "tree", None)
        id_of = ids.get(tree)
        if id_of is None:
            id_of = ids[tree] = DerivedIds(service, basis) if tree is None else DerivedIds(service, basis, tree)
        out.append(_envelope(id_of(made.key), time, service, causation, basis, event))  # (`envelope`)
    return out
