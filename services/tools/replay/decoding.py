"""A piece of the log decoded once for every fold of a replay (`Decoded`), and a service's fold of
it (`fold_service`): what the verifier (verify.py) and the derivation (derive.py, maybe in a
process of its own) share."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from sys import intern
from typing import Any, NamedTuple, get_args

from events import DecodeError, Envelope, Event, decode, decode_all, encode, read_envelope, read_pack
from events.envelope import DecisionEvent
from events.subjects import for_event
from events.views import VIEWS
from services.common.folding import Folder, rejection_of_fault, rejection_of_malformed
from services.common.log import Stored

DECISION_TYPES: frozenset[str] = frozenset(cls.model_fields["type"].default for cls in get_args(DecisionEvent))
IGNORED_ENVELOPE_FIELDS: frozenset[str] = frozenset({"trace"})  # not compared (`verify.py`)

_VIEWED: frozenset[bytes] = frozenset(model.__name__.encode() for model in VIEWS if issubclass(model, Event))
_TYPE_AT = b'"event":{"type":"'  # where `events.encode` writes an event's type


def read_one(data: bytes) -> Envelope:
    """`events.read_envelope(data, tasks=True)` (views of task reports too: every reader of what
    it gives asks `event_class`), without its attempt at a view for a type that has none (it falls
    back to `decode` then, after the attempt)."""
    at = data.find(_TYPE_AT)
    if at >= 0:
        start = at + len(_TYPE_AT)
        if data[start:data.find(b'"', start)] not in _VIEWED:
            return decode(data)
    return read_envelope(data, True)


_SUBJECTS: dict[tuple[str, str | None, str], str] = {}  # (type, tree, source) -> its subject
_SUBJECTS_HELD = 65_536  # (a log has few trees and sources; a forged one may have many: then not kept)


def subject_of(event_type: str, tree: str | None, source: str) -> str:
    """The one subject a decision is recorded on: `events.subjects.for_event`, where the services
    append it (`services.common.memlog.envelope_subject`, the tree's commands too). Kept per
    (type, tree, source), interned: the child asks it of every record it takes (derive.py)."""
    key = (event_type, tree, source)
    found = _SUBJECTS.get(key)
    if found is None:
        found = intern(for_event(event_type, tree, source))
        if len(_SUBJECTS) < _SUBJECTS_HELD:
            _SUBJECTS[key] = found
    return found


class Decoded:
    """One piece's messages, each decoded once (as the live services decode: views of the gang
    events and of task reports, pydantic's models of the rest), handed to every folder (admission
    and preemption through `fold_service`, the tree through `TreeView.fold`'s `read`)."""

    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found: dict[int, list[Envelope] | DecodeError] = {}

    def put(self, stored: Stored) -> list[Envelope] | DecodeError:
        try:
            result: list[Envelope] | DecodeError = decode_all(stored.data, read_one, read_pack)
        except DecodeError as error:
            result = error
        self.found[id(stored.data)] = result
        return result

    def of(self, stored: Stored) -> list[Envelope]:
        found = self.found[id(stored.data)]
        if isinstance(found, DecodeError):
            raise found
        return found


def records_decisions(envelopes: list[Envelope] | DecodeError) -> bool:
    """Whether a message (as decoded) records an event of a decision type (what is compared)."""
    return not isinstance(envelopes, DecodeError) and any(e.event.type in DECISION_TYPES for e in envelopes)


def fold_service(folder: Folder, piece: Sequence[Stored], decoded: Decoded, after: int,
                 wants: Callable[[str], bool]) -> list[Envelope]:
    """`fold_batch(folder, [s for s in piece if wants(s.subject)], after, ...)`'s decisions, on the
    messages decoded once: the same steps (a message's events in order, `last` on its last), the
    same refusals (a malformed message on a subject the folder owns; an event whose step raises:
    `internal_error`), without `decode_all` again per message and folder."""
    out: list[Envelope] = []
    owns, service, found = folder.owns, folder.service, decoded.found
    for stored in piece:
        seq = stored.seq
        if seq <= after or not wants(stored.subject):
            continue
        envelopes = found[id(stored.data)]
        if isinstance(envelopes, DecodeError):
            if owns(stored.subject):
                out.append(rejection_of_malformed(service, stored, envelopes, folder.now))
            continue
        step_message(folder, envelopes, seq, out)
    return out


def step_message(folder: Folder, envelopes: list[Envelope], seq: int, out: list[Envelope]) -> None:
    """A message's events stepped in order (`last` on its last), their decisions added to `out`;
    an event whose step raises is refused (`internal_error`) and the fold goes on (as
    `fold_batch`: a poison input)."""
    end = len(envelopes) - 1
    for part, envelope in enumerate(envelopes):
        try:
            out += folder.step(envelope, seq, part, part == end)
        except Exception as error:
            out.append(rejection_of_fault(folder.service, envelope, seq, part, error, folder.now))


class Made(NamedTuple):
    """A re-derived decision as compared: its keys and its bytes as the service would write them
    (plain values: it may come from a folder in another process, as a plain tuple). A named
    tuple: one is made per decision, in the process that derives it and again in the verifier's,
    and a frozen dataclass cost a call per field to make."""

    id: str
    type: str
    source: str
    basis: int | None
    tree: str | None
    data: bytes

    @classmethod
    def of(cls, decision: Envelope) -> Made:
        tree = getattr(decision.event, "tree", None)
        return cls(decision.id, decision.type, decision.source, decision.basis, tree if isinstance(tree, str) else None,
                   encode(decision))

    def wire(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.data)
        for name in IGNORED_ENVELOPE_FIELDS:
            data.pop(name, None)
        return data
