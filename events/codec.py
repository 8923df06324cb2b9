"""Bytes <-> events. Anything malformed, unknown or too new becomes a `DecodeError` that names
the field and the rule; the consumer turns it into an `InputRejected` event and moves on."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from events.envelope import CURRENT_VERSIONS, Envelope
from events.fastencode import encode_envelope
from events.upcasters import UPCASTERS, Upcaster, upcast


@dataclass  # not frozen: Python sets __traceback__ on an exception as it propagates
class DecodeError(Exception):
    """Why a message is not a valid event: `field` is a dotted path (or None), `rule` a short
    stable name (`json`, `unknown_type`, `unknown_version`, or pydantic's error type)."""

    field: str | None
    rule: str
    message: str
    event_type: str | None = None
    event_id: str | None = None

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"{where}{self.message} [{self.rule}]"


def encode(envelope: Envelope) -> bytes:
    """`envelope.model_dump_json(exclude_none=True)`, the same bytes written by msgspec where
    `events.fastencode` handles the envelope (the gang events and decisions: about half the cost)."""
    fast = encode_envelope(envelope)
    return fast if fast is not None else envelope.model_dump_json(exclude_none=True).encode()


# -- packs: several events in one log message ----------------------------------------------------
#
# An admission cycle decides thousands of gangs at once, and a submitter may enqueue thousands in
# one call; one log message per event made the message traffic (publish, acknowledgement, one
# delivery per consumer) a third of the cost of a gang. So a run of such events on one subject is
# appended as one message, a *pack*: a JSON array of envelopes, `[e1,\ne2,\n...]` as written
# here (each envelope compact, so `,\n` only separates them). A pack lands atomically: its events
# share the message's stream sequence and are told apart by their place in it (`part`, from 0).
# Only the event types in `PACKABLE` may be packed (read models key everything else on the
# sequence alone); anything else in an array is a malformed message. A refusal of one input of
# a pack names it by `input_seq` and `input_part`; a pack that does not decode is refused whole
# (its error names the part: `[3].event.size`).

PACKABLE: frozenset[str] = frozenset({"GangAdmitted", "GangMovedToQueue", "GangEnqueued"})
PACK_SEPARATOR = b",\n"


def encode_pack(parts: list[bytes]) -> bytes:
    """One message of already encoded envelopes (each from `encode`): a pack if more than one."""
    if len(parts) == 1:
        return parts[0]
    return b"[" + PACK_SEPARATOR.join(parts) + b"]"


def is_pack(data: bytes | str) -> bool:
    raw = data if isinstance(data, bytes) else data.encode()
    head = raw[:1]
    if head.isspace():  # rare: only the first byte is looked at otherwise (this runs for every message)
        head = raw.lstrip()[:1]
    return head == b"["


def pack_parts(data: bytes) -> list[bytes]:
    """The encoded envelopes of a message as written by `encode_pack` (a single event: itself).
    A pack in another layout gives one part that is not a valid envelope: `decode_all` reads it."""
    if data[:1] != b"[":
        return [data]
    return data[1:-1].split(PACK_SEPARATOR) if data[-1:] == b"]" else [data]


def decode_all(data: bytes | str, decode_one: Callable[[bytes], Envelope] | None = None,
               decode_pack: Callable[[bytes], list[Envelope] | None] | None = None) -> list[Envelope]:
    """The events of one log message: one, or the envelopes of a pack, in order. Raises
    `DecodeError` for the whole message if any of them is not a valid event, or a pack holds a
    type that may not be packed. `decode_one` decodes one envelope's bytes (default `decode`);
    `decode_pack`, if given, a whole pack at once, or None (read part by part then): what it gives
    must be a valid pack, of packable types and not empty (`events.read_pack`)."""
    raw = data if isinstance(data, bytes) else data.encode()
    one = decode_one or decode
    if not is_pack(raw):
        return [one(raw)]
    whole = decode_pack(raw) if decode_pack is not None else None
    if whole is not None:
        return whole  # a valid pack: packable types, not empty (decode_pack's promise)
    try:
        envelopes = [one(part) for part in pack_parts(raw)]
    except DecodeError:
        envelopes = _decode_pack_slow(raw)
    for index, envelope in enumerate(envelopes):
        if envelope.event.type not in PACKABLE:
            raise DecodeError(f"[{index}].event.type", "not_packable",
                              f"{envelope.event.type} may not be packed with other events (packable: "
                              f"{', '.join(sorted(PACKABLE))})", envelope.event.type, envelope.id)
    if not envelopes:
        raise DecodeError(None, "json", "an empty pack holds no event")
    return envelopes


def _decode_pack_slow(raw: bytes) -> list[Envelope]:
    """A pack in any JSON layout: each element decoded alone; the first bad one names the message."""
    try:
        items = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise DecodeError(None, "json", f"not valid JSON: {exc}") from None
    if not isinstance(items, list):
        raise DecodeError(None, "json", "an event must be a JSON object")
    out: list[Envelope] = []
    for index, item in enumerate(items):
        try:
            out.append(decode(json.dumps(item)))
        except DecodeError as exc:
            where = f"[{index}]" + (f".{exc.field}" if exc.field else "")
            raise DecodeError(where, exc.rule, exc.message, exc.event_type, exc.event_id) from None
    return out


def decode(data: bytes | str, upcasters: dict[tuple[str, int], Upcaster] | None = None) -> Envelope:
    """Parse one event. Current versions take the fast path (one pydantic pass over the bytes)."""
    try:
        return Envelope.model_validate_json(data)
    except ValidationError as fast_error:
        return _decode_slow(data, fast_error, UPCASTERS if upcasters is None else upcasters)
    except (RecursionError, ValueError) as exc:  # absurdly nested or otherwise unreadable input
        raise DecodeError(None, "json", f"unreadable: {exc.__class__.__name__}") from None


def _decode_slow(
    data: bytes | str, fast_error: ValidationError, upcasters: dict[tuple[str, int], Upcaster]
) -> Envelope:
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise DecodeError(None, "json", f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise DecodeError(None, "json", "an event must be a JSON object")
    event_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    body = raw.get("event")
    if not isinstance(body, dict):
        raise DecodeError("event", "missing", "field required: an object with `type` and `version`", None, event_id)
    etype = body.get("type")
    if not isinstance(etype, str) or etype not in CURRENT_VERSIONS:
        known = ", ".join(sorted(CURRENT_VERSIONS))
        raise DecodeError("event.type", "unknown_type", f"unknown event type {etype!r} (known: {known})", None,
                          event_id)
    current = CURRENT_VERSIONS[etype]
    version = body.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise DecodeError("event.version", "invalid_version", f"version must be a positive integer, got {version!r}",
                          etype, event_id)
    if version > current:
        raise DecodeError("event.version", "unknown_version",
                          f"{etype} v{version} is newer than this reader (v{current})", etype, event_id)
    if version < current:
        try:
            raw = {**raw, "event": upcast(body, current, upcasters)}
        except KeyError as exc:
            raise DecodeError("event.version", "no_upcaster", str(exc.args[0]), etype, event_id) from None
        try:
            return Envelope.model_validate(raw)
        except ValidationError as exc:
            raise _from_validation(exc, etype, event_id) from None
    raise _from_validation(fast_error, etype, event_id)


_TYPE_TAGS = frozenset({"float", "int", "str", "bool", "none", "list", "dict"})


def _from_validation(exc: ValidationError, etype: str | None, event_id: str | None) -> DecodeError:
    first: dict[str, Any] = dict(exc.errors(include_url=False)[0])
    loc = [str(p) for p in first.get("loc", ())]
    # pydantic puts the union tag in the location (event.GangEnqueued.tasks.0); drop it, and the
    # member type it tried last for a union field (event.config.share.float -> event.config.share).
    if len(loc) >= 2 and loc[0] == "event" and loc[1] == etype:
        loc = [loc[0], *loc[2:]]
    while len(loc) > 1 and (loc[-1] in _TYPE_TAGS or "[" in loc[-1]):
        loc.pop()
    field = ".".join(loc) or None
    message = str(first.get("msg", "invalid"))
    extra = len(exc.errors()) - 1
    if extra > 0:
        message += f" (and {extra} more error{'s' if extra > 1 else ''})"
    return DecodeError(field, str(first.get("type", "invalid")), message, etype, event_id)


def peek_type(data: bytes | str) -> str | None:
    """The `event.type` of a message, if it can be read at all (for routing rejections)."""
    try:
        raw = json.loads(data)
        value = raw.get("event", {}).get("type")
        return value if isinstance(value, str) else None
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
