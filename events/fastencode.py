"""A fast path for `events.codec.encode`: pydantic's bytes, written by msgspec.

- `encode_envelope(envelope)`: `envelope.model_dump_json(exclude_none=True).encode()`, or None;
- `encode_event_body(event)`: `event.model_dump_json(exclude_none=True).encode()`, or None.

None means "not handled here": the caller encodes with pydantic. Bytes are given only where they
are pydantic's exactly. An envelope is 2 to 3 times faster this way (most of pydantic's cost is
dispatching the event union); an event alone 1.1 (gang events, whose tasks are checked one by
one here) to 3 times (small flat events).

Shape. A model is written as a msgspec struct of its fields in declaration order, each defaulting
to None with `omit_defaults`: a None value is left out, as `exclude_none` leaves it out, at every
level of models (not inside dicts and lists: there both write `null`). Its `__dict__` is read by
field name (a field missing: not handled; an extra key is not read, as pydantic does not write
it). Pydantic writes the fields in the `__dict__`'s order: the same, since validation,
`model_construct`, `model_copy` and the trusted builders of `services.admission` all fill
`__dict__` in declaration order (tests hold the builders to it; a `__dict__` filled by hand in
another order would be written differently here). A `TaskSpec` is written as its `__dict__`
itself, so in its order. Models are recognised by their exact class: a subclass, or anything
else where a model is expected, goes to pydantic, as does an event whose `type` is not its class's.

Values, by the kind of their field (read from the model's core schema; `_EXPECTED` lists the
kinds this module was written for, and the import fails if a model no longer has them; a kind
`x?` allows None):

- `str`, `bool`, `lit` (a Literal of strings or of ints), `strs` (list[str]), `strmap`
  (dict[str, str]): written as they are, trusting the model's types. The two writers agree on
  strings (non-ASCII as UTF-8, the same escapes); a str subclass is refused by msgspec, a lone
  surrogate by both;
- `int`: a bool goes to pydantic (it writes `1`, msgspec `true`); ints of any size agree;
- `float`, `floats` (dict[str, float]): only a `float` (not an int or bool: pydantic writes `1.0`
  for `1`; not a subclass) with `-1e16 < x < 1e16`, where both write the same shortest repr
  (`0.1`, `1e-7`, `5e-324`, `-0.0`, `9999999999999998.0`); from 1e16 up pydantic writes `1e+16`
  and msgspec `1e16`. nan and inf go to pydantic too;
- `datetime`: a `datetime` (not a subclass) whose UTC offset is whole minutes (`Z` for UTC,
  `+05:30`, microseconds as 6 digits, alike; pydantic drops the seconds of an offset, msgspec
  rounds them);
- `list:<Model>`: a list of that model, each written as above; `event`: the envelope's event.

Handled: the envelope and the event types in `_EXPECTED` (all but `TreeConfigured` and
`PoolConfigChanged`, whose nested configs go to pydantic); an event alone, the same but for
`EntitlementsComputed` (`_BODY_BY_PYDANTIC`: pydantic writes that one as fast). An import-time
probe encodes a few awkward envelopes both ways: if pydantic's or msgspec's format ever differs
from what this module expects, `ENABLED` is False and both functions return None (a test checks
that it is True).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from operator import itemgetter
from typing import Any, Final

import msgspec

from events.base import Event, Frozen
from events.decisions import GangAdmitted, LendingFactor, LentPool, PoolEntitlement, PoolStarvationChanged
from events.envelope import EVENT_TYPES, Envelope
from events.inputs import GangEnqueued, TaskSpec

# -- what this module was written for --------------------------------------------------------------
#
# Each handled model's fields, in declaration order, with their kinds (see the module docstring).
# The import fails if a model's fields or their kinds differ: update this table, and the tests.

_EXPECTED: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "TaskSpec": (("id", "str"), ("resources", "floats")),
    "PoolEntitlement": (("path", "str"), ("entitlement", "floats"), ("non_slack_entitlement", "floats"),
                        ("slack_entitlement", "floats"), ("fair_share", "float"), ("usage_share", "float"),
                        ("demand_share", "float"), ("dominant_kind", "str?")),
    "LentPool": (("path", "str"), ("given", "floats"), ("share", "floats"), ("limit", "floats")),
    "LendingFactor": (("group", "str"), ("factor", "floats")),
    "Envelope": (("id", "str"), ("time", "datetime"), ("source", "str"), ("causation", "str?"), ("basis", "int?"),
                 ("trace", "strmap?"), ("event", "event")),
    # inputs
    "PoolDeleted": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("path", "str")),
    "HostRegistered": (("type", "lit"), ("version", "lit"), ("host", "str"), ("resources", "floats"),
                       ("revocable", "floats"), ("tags", "strs")),
    "HostRemoved": (("type", "lit"), ("version", "lit"), ("host", "str")),
    "GangEnqueued": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("gang", "str"), ("pool", "str"),
                     ("job", "str"), ("user", "str"), ("size", "int"), ("priority", "int"), ("preemptible", "bool"),
                     ("revocable", "bool"), ("controller", "bool"), ("timeout", "float?"),
                     ("tasks", "list:TaskSpec")),
    "TaskStateChanged": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("gang", "str"), ("task", "str"),
                         ("state", "lit"), ("message", "str?")),
    "GangCancelled": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("gang", "str"), ("reason", "str?")),
    "ClockTicked": (("type", "lit"), ("version", "lit"), ("tree", "str?")),
    # decisions
    "EntitlementsComputed": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("capacity", "floats"),
                             ("slack_capacity", "floats"), ("pools", "list:PoolEntitlement"), ("alerts", "strs"),
                             ("removed", "strs"), ("replace", "bool"), ("part", "int"), ("parts", "int"),
                             ("factors", "list:LendingFactor?"), ("lent", "list:LentPool?")),
    "CycleCompleted": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("service", "str"),
                       ("trigger_seq", "int"), ("decisions", "int")),
    "GangAdmitted": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("gang", "str"), ("pool", "str"),
                     ("queue", "str"), ("tasks", "list:TaskSpec"), ("attempt", "int")),
    "GangFinished": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("gang", "str"), ("pool", "str"),
                     ("outcome", "lit")),
    "GangMovedToQueue": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("gang", "str"), ("pool", "str"),
                         ("queue", "lit"), ("reason", "str")),
    "GangTimedOut": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("gang", "str"), ("pool", "str"),
                     ("members", "int"), ("size", "int"), ("deadline", "float")),
    "GangRequeued": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("gang", "str"), ("pool", "str"),
                     ("reason", "str"), ("cause", "lit")),
    "PreemptionRequested": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("pool", "str"), ("gang", "str"),
                            ("tasks", "strs"), ("reason", "str"), ("excess", "floats"), ("entitlement", "floats"),
                            ("allocation", "floats"), ("grace_period", "float")),
    "PoolStarvationChanged": (("type", "lit"), ("version", "lit"), ("tree", "str"), ("pool", "str"),
                              ("status", "lit"), ("previous", "lit"), ("since", "float"), ("below_since", "float?"),
                              ("kinds", "strs"), ("usage", "floats"), ("entitlement", "floats"),
                              ("demand", "floats")),
    "InputRejected": (("type", "lit"), ("version", "lit"), ("tree", "str?"), ("ref", "str"), ("input_type", "str"),
                      ("reason", "str"), ("rule", "str"), ("field", "str?"), ("input", "str"), ("input_id", "str?"),
                      ("input_seq", "int?"), ("input_part", "int?")),
}

_MODELS: Final[dict[str, type[Frozen]]] = {"TaskSpec": TaskSpec, "PoolEntitlement": PoolEntitlement,
                                           "LentPool": LentPool, "LendingFactor": LendingFactor,
                                           "Envelope": Envelope, **EVENT_TYPES}

# floats strictly inside (-_LIMIT, _LIMIT) are written alike by pydantic (serde/ryu) and msgspec
_LIMIT: Final = 1e16


# -- the kinds of a model's fields, read from its core schema ---------------------------------------

_CONFIG_KEYS: Final = frozenset({"title", "allow_inf_nan", "extra_fields_behavior"})  # none changes the output
_FIELD_KEYS: Final = frozenset({"type", "schema", "metadata", "frozen", "validation_alias"})
_PLAIN_KEYS: Final = frozenset({"type", "metadata", "strict", "ref",  # what a value's schema may hold
                                "min_length", "max_length", "pattern", "strip_whitespace", "to_lower", "to_upper",
                                "ge", "gt", "le", "lt", "multiple_of", "allow_inf_nan",
                                "microseconds_precision", "tz_constraint", "now_op", "now_utc_offset",
                                "expected", "keys_schema", "values_schema", "items_schema", "schema",
                                "default", "default_factory", "default_factory_takes_data", "validate_default",
                                "fail_fast", "on_error"})


class SchemaChanged(TypeError):
    """A model this module handles is not what it was written for (see `_EXPECTED`)."""


def _plain(schema: dict[str, Any]) -> bool:
    return set(schema) <= _PLAIN_KEYS


def _value_kind(schema: dict[str, Any], event_union: bool) -> str | None:
    """The kind of a field's value schema (`?` after it: None is allowed too), or None if this
    module does not write it."""
    nullable = False
    while schema.get("type") in ("default", "nullable") and _plain(schema):
        nullable = nullable or schema["type"] == "nullable"
        schema = schema["schema"]
    kind = _kind(schema, event_union)
    return f"{kind}?" if kind is not None and nullable else kind


def _kind(schema: dict[str, Any], event_union: bool) -> str | None:
    if event_union and schema.get("type") == "tagged-union":
        return "event" if _is_event_union(schema) else None
    if not _plain(schema):  # e.g. a custom serializer
        return None
    kind = schema.get("type")
    if kind in ("str", "bool", "int", "float", "datetime"):
        return str(kind)
    if kind == "literal":
        expected = schema.get("expected", [])
        ok = all(type(v) is str for v in expected) or all(type(v) is int for v in expected)
        return "lit" if expected and ok else None
    if kind == "dict":
        keys, values = schema.get("keys_schema", {}), schema.get("values_schema", {})
        if keys.get("type") == "str" and _plain(keys):
            value = _value_kind(values, False)
            return {"float": "floats", "str": "strmap"}.get(value or "")
        return None
    if kind == "list":
        items = schema.get("items_schema", {})
        item = _value_kind(items, False)
        if item == "str":
            return "strs"
        if items.get("type") == "model" and _model_schema_ok(items):
            return f"list:{items['cls'].__name__}"
        return None
    return None


def _is_event_union(schema: dict[str, Any]) -> bool:
    """The envelope's `event`: a union tagged by `type` whose members are the event types (so an
    event is written by its own class's serializer, as it is here)."""
    choices: dict[str, Any] = schema.get("choices", {})
    return (set(schema) <= {"type", "choices", "discriminator", "from_attributes", "strict", "metadata", "ref"}
            and schema.get("discriminator") == "type"
            and all(EVENT_TYPES.get(tag) is choice.get("cls") for tag, choice in choices.items()))


def _model_schema_ok(schema: dict[str, Any]) -> bool:
    inner = schema.get("schema", {})
    return (schema.get("type") == "model" and not schema.get("root_model")
            and set(schema.get("config", {})) <= _CONFIG_KEYS
            and schema.get("config", {}).get("extra_fields_behavior") in ("forbid", "ignore")
            and "serialization" not in schema and "serialization" not in inner
            and inner.get("type") == "model-fields" and not inner.get("computed_fields")
            and not inner.get("extras_schema"))


def field_kinds(cls: type[Frozen]) -> tuple[tuple[str, str | None], ...] | None:
    """Each field of `cls` with the kind of its value (None: a kind this module does not write),
    in declaration order; None if the model as a whole is not one this module writes."""
    schema: dict[str, Any] = dict(cls.__pydantic_core_schema__)
    if schema.get("type") == "definitions":
        schema = schema["schema"]
    if schema.get("cls") is not cls or not _model_schema_ok(schema):
        return None
    fields: dict[str, dict[str, Any]] = schema["schema"]["fields"]
    if list(fields) != list(cls.__pydantic_fields__):
        return None
    out: list[tuple[str, str | None]] = []
    for name, field in fields.items():
        plain_field = field.get("type") == "model-field" and set(field) <= _FIELD_KEYS
        out.append((name, _value_kind(field["schema"], cls is Envelope) if plain_field else None))
    return tuple(out)


def expect_kinds(cls: type[Frozen], expected: tuple[tuple[str, str], ...]) -> None:
    """`cls` has exactly the `expected` fields, in this order, of these kinds (else SchemaChanged:
    a field added, removed, reordered or retyped must be looked at here before it is encoded)."""
    found = field_kinds(cls)
    if found != expected:
        raise SchemaChanged(f"{cls.__name__} changed: its fields are now {found}, events/fastencode.py was "
                            f"written for {expected}; update _EXPECTED there (and its tests)")


for _name, _expected in _EXPECTED.items():
    expect_kinds(_MODELS[_name], _expected)


# -- converters: a model -> a msgspec struct of the same fields (generated from the table) ----------

class _Unhandled(Exception):
    """Raised inside a converter: this value goes to pydantic."""


_TIME_SEEN: list[datetime | None] = [None]  # the last time checked, not UTC but fine (often the next one)


def _check_offset(time: datetime) -> None:
    """A time not in `UTC` (e.g. pydantic's `TzInfo(0)`, as decoded) is written alike if its offset
    is whole minutes. The decisions of a cycle share the time object of the log: it is checked once."""
    offset = time.utcoffset()
    if offset is None or offset.microseconds or offset.seconds % 60:
        raise _Unhandled
    _TIME_SEEN[0] = time


_Converter = Callable[[Any], Any]
_NAMESPACE: dict[str, Any] = {"_Unhandled": _Unhandled, "_float": float, "_datetime": datetime, "_UTC": UTC,
                              "_check_offset": _check_offset, "_TIME_SEEN": _TIME_SEEN}


_PASSED: Final = ("str", "bool", "lit", "strs", "strmap")  # kinds written as they are, None or not


def _body(cls: type[Frozen], indent: str, make: str, var: str = "v", item: str = "m",
          as_dict: bool = False) -> list[str]:
    """Lines that read the model `{item}` (of exactly `cls`) into its struct, and `make` it (a
    format of one `{}`: the expression that gives the struct). Field values go in `{var}0`, ...

    `as_dict`: a model whose fields are all plain and never None (TaskSpec) is written as its
    `__dict__` itself (in the dict's order, as pydantic writes it), a little faster than a struct;
    it must then hold no other key and no None (pydantic would leave that field out)."""
    name = cls.__name__
    fields = _EXPECTED[name]
    if len(fields) < 2:  # pragma: no cover - itemgetter of one key gives no tuple; no such model yet
        raise SchemaChanged(f"{name}: a model of fewer than two fields is not handled")
    if f"_S_{name}" not in _NAMESPACE:
        _NAMESPACE[f"_C_{name}"] = cls
        _NAMESPACE[f"_G_{name}"] = itemgetter(*(f for f, _ in fields))
        _NAMESPACE[f"_S_{name}"] = msgspec.defstruct(f"_{name}", [(f, object, None) for f, _ in fields],
                                                      omit_defaults=True, gc=False)
    names = [f"{var}{i}" for i in range(len(fields))]
    as_dict = as_dict and all(k in (*_PASSED, "int", "float", "floats") for _, k in fields)
    lines = [f"if {item}.__class__ is not _C_{name}: raise _Unhandled",  # a subclass or anything else: pydantic
             # a field missing: KeyError, not handled; an extra key: not read (pydantic ignores it too)
             f"{', '.join(names)} = _G_{name}({f'{item}_dict := ' if as_dict else ''}{item}.__dict__)"]
    if as_dict:
        unchecked = "".join(f" or {v} is None" for v, (_, k) in zip(names, fields, strict=True)
                            if k not in ("float", "floats"))
        lines.append(f"if len({item}_dict) != {len(fields)}{unchecked}: raise _Unhandled")
    bounded = f"-{_LIMIT!r} < {{0}} < {_LIMIT!r}"  # (one loop over all the floats of a model is slower)
    for v, (field, kind) in zip(names, fields, strict=True):
        if field == "type" and kind == "lit":  # the union picks the serializer by it: it must be the class's
            lines.append(f"if {v} != {cls.model_fields['type'].default!r}: raise _Unhandled")
        elif kind.rstrip("?") in _PASSED:
            pass
        elif kind in ("int", "int?"):
            lines.append(f"if {v} is True or {v} is False: raise _Unhandled")
        elif kind in ("float", "float?"):
            check = f"not ({v}.__class__ is _float and {bounded.format(v)})"
            lines.append(f"if {f'{v} is not None and ' if kind == 'float?' else ''}{check}: raise _Unhandled")
        elif kind in ("floats", "floats?"):
            loop = [f"for x in {v}.values():",
                    f"    if not (x.__class__ is _float and {bounded.format('x')}): raise _Unhandled"]
            lines += [f"if {v} is not None:", *("    " + line for line in loop)] if kind == "floats?" else loop
        elif kind == "datetime":
            lines += [f"if {v}.__class__ is not _datetime: raise _Unhandled",
                      f"if {v}.tzinfo is not _UTC and {v} is not _TIME_SEEN[0]: _check_offset({v})"]
        elif kind == "event":
            lines.append(f"{v} = _EVENTS[{v}.__class__]({v})")  # KeyError: not handled
        elif kind.startswith("list:"):  # the items converted in a loop, in line
            step = [f"{v}_out = []",
                    f"{v}_add = {v}_out.append",
                    f"for {v}_item in {v}:",
                    *_body(_MODELS[kind[5:].rstrip("?")], "    ", f"{v}_add({{}})", f"{v}_", f"{v}_item", True),
                    f"{v} = {v}_out"]
            lines += [f"if {v} is not None:", *("    " + line for line in step)] if kind.endswith("?") else step
        else:  # pragma: no cover - _EXPECTED has no other kinds
            raise SchemaChanged(f"no converter for kind {kind!r}")
    lines.append(make.format(f"{item}_dict" if as_dict else f"_S_{name}({', '.join(names)})"))
    return [indent + line for line in lines]


def _converter(cls: type[Frozen]) -> _Converter:
    """The converter of a model of exactly `cls` to what msgspec writes as pydantic would (it
    raises if the model is not handled here)."""
    name = f"_M_{cls.__name__}"
    exec("\n".join([f"def {name}(m):", *_body(cls, "    ", "return {}")]), _NAMESPACE)  # our own source
    converter: _Converter = _NAMESPACE[name]
    return converter


_EVENTS: Final[dict[type, _Converter]] = {}
_NAMESPACE["_EVENTS"] = _EVENTS
for _name in _EXPECTED:
    if _name in EVENT_TYPES:
        _EVENTS[EVENT_TYPES[_name]] = _converter(EVENT_TYPES[_name])
_ENVELOPE: Final = _converter(Envelope)

# Bodies of these events are left to pydantic: without the envelope's union to dispatch, pydantic
# writes them as fast (EntitlementsComputed: its cost is formatting ~1500 floats at 100 pools, the
# same in both, and checking them here costs more than pydantic's walk over the model).
_BODY_BY_PYDANTIC: Final = frozenset({"EntitlementsComputed"})
_BODIES: Final[dict[type, _Converter]] = {cls: conv for cls, conv in _EVENTS.items()
                                          if cls.__name__ not in _BODY_BY_PYDANTIC}

_encode: Final = msgspec.json.Encoder().encode

ENABLED = True


def encode_envelope(envelope: Envelope) -> bytes | None:
    """`envelope.model_dump_json(exclude_none=True).encode()`, or None if not handled here."""
    if not ENABLED:
        return None
    try:
        return _encode(_ENVELOPE(envelope))
    except Exception:  # _Unhandled, or anything else unexpected: pydantic decides
        return None


def encode_event_body(event: Event) -> bytes | None:
    """`event.model_dump_json(exclude_none=True).encode()` (the event alone), or None."""
    if not ENABLED:
        return None
    converter = _BODIES.get(event.__class__)
    if converter is None:
        return None
    try:
        return _encode(converter(event))
    except Exception:
        return None


def handled_types(body: bool = False) -> frozenset[str]:
    """The event types the fast path writes in an envelope (`body`: alone); others give None."""
    return frozenset(cls.__name__ for cls in (_BODIES if body else _EVENTS))


# -- the probe: pydantic's format as this module expects it -------------------------------------------

def _probe_envelopes() -> list[Envelope]:
    """Envelopes of awkward values that the fast path writes (floats near both ends of the range,
    every escape, non-BMP text, huge ints, offsets, microseconds, pydantic's own tzinfo)."""
    text = "t\u00e9\u2028\U0001f600\x00\x1f\x7f\"\\/<&>"
    tasks = [TaskSpec(id=text, resources={"a": 0.1, "b": 1e-7, "c": 5e-324, "d": 9999999999999998.0, "e": 0.0,
                                          "f": 123456.789, "g": 1e15, "h": 2.5e-5})]
    times = [datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC), datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
             datetime(2023, 11, 14, 22, 13, 20, 120000, tzinfo=timezone(timedelta(hours=-8, minutes=-30))),
             Envelope.model_validate_json('{"id":"x","time":"2023-01-01T00:00:00.5+05:30","event":'
                                          '{"type":"ClockTicked"}}').time]
    events: list[Event] = [
        GangEnqueued(gang=text, pool="/p", job="j", size=2**70, priority=-(2**63), timeout=1e-300, tasks=tasks),
        GangAdmitted(tree="t", gang="g", pool="/p", queue="q", tasks=tasks, attempt=2),
        PoolStarvationChanged(tree="t", pool="/p", status="starving", since=-0.0, usage={"cpu": -1.5e15}),
    ]
    return [Envelope(id=text, time=time, source="s", causation="c", basis=2**64, trace={"k": text}, event=event)
            for time in times for event in events]


def _probe() -> bool:
    """The fast path writes pydantic's bytes for the probe envelopes (and their events)."""
    try:
        for envelope in _probe_envelopes():
            if encode_envelope(envelope) != envelope.model_dump_json(exclude_none=True).encode():
                return False
            if encode_event_body(envelope.event) != envelope.event.model_dump_json(exclude_none=True).encode():
                return False
    except Exception:
        return False
    return True


ENABLED = _probe()
