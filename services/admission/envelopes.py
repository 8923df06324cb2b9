"""Decision envelopes, built without validating their values again (see
`services/admission/domain/trusted.py`): the admission folder wraps every decision, one or more
per gang, and a validated `Envelope` costs about 2.2 µs where this costs 0.6.

Their ids are `events.derived_id(service, basis, tree, key)`; the decisions of one cycle share
service, basis and tree, so `decision_envelopes` hashes that prefix once and only each key after
it (`derived_id` joins the parts with `\\x1f` and takes the first 32 hex digits of the SHA-256 of
the text: `DerivedIds` does the same arithmetic, which the import checks against `derived_id`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from hashlib import sha256
from typing import Protocol

from events import Envelope, Event, derived_id
from services.admission.domain.trusted import REQUIRED, expect_plain

expect_plain(Envelope, {"id": REQUIRED, "time": REQUIRED, "source": "unknown", "causation": None, "basis": None,
                        "trace": None, "event": REQUIRED})
_FIELDS_SET = frozenset({"id", "time", "source", "causation", "basis", "event"})
_new = object.__new__
_set = object.__setattr__


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
    model = _new(Envelope)
    _set(model, "__dict__", {"id": id_, "time": time, "source": source, "causation": causation, "basis": basis,
                             "trace": None, "event": event})
    _set(model, "__pydantic_fields_set__", set(_FIELDS_SET))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


class DerivedIds:
    """`derived_id(*parts, key)` for many keys after the same `parts`: the hash of the parts is
    taken once, and copied for each key."""

    __slots__ = ("_prefix",)

    def __init__(self, *parts: object) -> None:
        self._prefix = sha256("".join(f"{part}\x1f" for part in parts).encode())

    def __call__(self, key: str) -> str:
        digest = self._prefix.copy()
        digest.update(key.encode())
        return digest.hexdigest()[:32]


def _check_derived_ids() -> None:
    """`DerivedIds` must make `derived_id`'s ids (else the import fails: decision ids are the
    wire's, and a restarted service compares them)."""
    for parts, key in (((), "k"), (("admission", 12), "cycle"), (("admission", 7, "trée"), "admitted:g\x1f1:2")):
        if DerivedIds(*parts)(key) != derived_id(*parts, key):
            raise TypeError("events.derived_id changed: update DerivedIds in services/admission/envelopes.py")


_check_derived_ids()


def decision_envelope(service: str, event: Event, key: str, basis: int, causation: str, time: datetime) -> Envelope:
    """`services.common.folding.decision_envelope`: the same envelope (the same derived id), not
    validated again (the event is a model already, the time the log's, the rest plain values); a
    test holds the two to each other."""
    tree = getattr(event, "tree", None)
    parts = (service, basis, key) if tree is None else (service, basis, tree, key)
    return envelope(derived_id(*parts), time, service, causation, basis, event)


def decision_envelopes(service: str, decided: Iterable[Decided], basis: int, causation: str,
                       time: datetime) -> list[Envelope]:
    """`decision_envelope` of each decision, in order (the id's prefix hashed once per tree)."""
    ids: dict[str | None, DerivedIds] = {}
    out: list[Envelope] = []
    for made in decided:
        event = made.event
        tree = getattr(event, "tree", None)
        id_of = ids.get(tree)
        if id_of is None:
            id_of = ids[tree] = DerivedIds(service, basis) if tree is None else DerivedIds(service, basis, tree)
        out.append(envelope(id_of(made.key), time, service, causation, basis, event))
    return out
