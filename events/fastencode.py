"""A fast path for `events.codec.encode`: pydantic's bytes, written by msgspec.

- `encode_envelope(envelope)`: `envelope.model_dump_json(exclude_none=True).encode()`, or None;
- `encode_event_body(event)`: `event.model_dump_json(exclude_none=True).encode()`, or None.

None means "not handled here": the caller encodes with pydantic. Bytes are given only where they
are pydantic's exactly. An envelope is written several times faster this way (most of
pydantic's cost is dispatching the event union); an event alone gains less (docs/performance.md,
"Wire contract").

Derived, not restated: each model's converter is made at import from its fields as
`events.shapes` reads them through pydantic's public API (a field added to a model is written
with no edit here); a model with a field of a kind not listed below, or that `events.shapes`
does not read, is left to pydantic. Serializers are not visible through that API: an
import-time probe writes a sample of each model both ways, and a model whose sample differs is
left to pydantic.

Shape. A model is written as a msgspec struct of its fields in declaration order, each defaulting
to None with `omit_defaults`: a None value is left out, as `exclude_none` leaves it out, at every
level of models (not inside dicts and lists: there both write `null`). Its `__dict__` is read by
field name (a field missing: not handled; an extra key is not read, as pydantic does not write
it). Pydantic writes the fields in the `__dict__`'s order: the same, since validation,
`model_construct`, `model_copy` and the trusted builders (`events.trusted`) all fill
`__dict__` in declaration order (tests hold the builders to it; a `__dict__` filled by hand in
another order would be written differently here). A model whose fields are all written as they
are or checked in place (TaskSpec) is written as its `__dict__` itself, so in its order. Models
are recognised by their exact class: a subclass, or anything else where a model is expected,
goes to pydantic, as does an event whose `type` is not its class's.

Values, by the kind of their field (`events.shapes.Shape`; None is left out wherever it is):

- `str`, `bool`, a Literal of strings or of ints, `list[str]`, `dict[str, str]`: written as they
  are, trusting the model's types. The two writers agree on strings (non-ASCII as UTF-8, the
  same escapes); a str subclass is refused by msgspec, a lone surrogate by both;
- `int`: a bool goes to pydantic (it writes `1`, msgspec `true`); ints of any size agree;
- `float`, `dict[str, float]`: only a `float` (not an int or bool: pydantic writes `1.0` for
  `1`; not a subclass) with `-1e16 < x < 1e16`, where both write the same shortest repr
  (`0.1`, `1e-7`, `5e-324`, `-0.0`, `9999999999999998.0`); from 1e16 up pydantic writes `1e+16`
  and msgspec `1e16`. nan and inf go to pydantic too;
- `datetime`: a `datetime` (not a subclass) whose UTC offset is whole minutes (`Z` for UTC,
  `+05:30`, microseconds as 6 digits, alike; pydantic drops the seconds of an offset, msgspec
  rounds them);
- a model, or a list of models: each written as above; a tagged union of models (the
  envelope's event): the converter of the value's own class.

Handled: the envelope and every event type whose fields are of these kinds (`handled_types()`);
an event alone, the same but for `EntitlementsComputed` (`_BODY_BY_PYDANTIC`: pydantic writes
that one as fast). An import-time probe encodes a few awkward envelopes both ways: if pydantic's
or msgspec's format ever differs from what this module expects, `ENABLED` is False and both
functions return None (a test checks that it is True).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from operator import itemgetter
from typing import Any, Final, cast

import msgspec
from pydantic import BaseModel

from events.base import Event
from events.decisions import GangAdmitted, PoolStarvationChanged
from events.envelope import EVENT_TYPES, Envelope
from events.inputs import GangEnqueued, TaskSpec
from events.shapes import FieldShape, Shape, Unsupported, model_fields

# floats strictly inside (-_LIMIT, _LIMIT) are written alike by pydantic (serde/ryu) and msgspec
_LIMIT: Final = 1e16
_float = float


class _Unhandled(Exception):
    """Raised inside a converter: this value goes to pydantic."""


_TIME_SEEN: list[datetime | None] = [None]  # the last time checked, not UTC but fine (often the next one)


def _check_time(time: Any) -> None:
    """A time not in `UTC` (e.g. pydantic's `TzInfo(0)`, as decoded) is written alike if its offset
    is whole minutes. The decisions of a cycle share the time object of the log: it is checked once."""
    if time.__class__ is not datetime:
        raise _Unhandled
    if time.tzinfo is UTC or time is _TIME_SEEN[0]:
        return
    offset = time.utcoffset()
    if offset is None or offset.microseconds or offset.seconds % 60:
        raise _Unhandled
    _TIME_SEEN[0] = time


# -- converters: a model -> what msgspec writes as pydantic would (derived from its fields) --------

_Converter = Callable[[Any], Any]
_PASSED: Final = frozenset({"str", "bool", "literal"})  # kinds written as they are


def _passed(shape: Shape) -> bool:
    """Written as it is: the kinds above, and lists and maps of strings."""
    if shape.kind in ("list", "dict"):
        return cast(Shape, shape.item).kind == "str" and not cast(Shape, shape.item).nullable
    return shape.kind in _PASSED


def _float_map(shape: Shape) -> bool:
    item = shape.item
    return shape.kind == "dict" and item is not None and item.kind == "float" and not item.nullable


_CONVERTERS: dict[type, _Converter] = {}  # by exact model class; the envelope's event union reads it
_MADE: dict[type, _Converter | None] = {}
_encode: Final = msgspec.json.Encoder().encode


def converter(cls: type[BaseModel]) -> _Converter | None:
    """The converter of a model of exactly `cls` to what msgspec writes as pydantic would (it
    raises for a value not handled here), or None if `cls` has a field of a kind not handled."""
    if cls in _MADE:
        return _MADE[cls]
    _MADE[cls] = None  # (a model inside itself: not handled)
    try:
        fields = model_fields(cls)
        made = _make(cls, fields) if len(fields) >= 2 else None  # itemgetter of one key gives no tuple
    except Unsupported:
        made = None
    if made is not None and not _sample_agrees(cls, fields, made):
        made = None
    _MADE[cls] = made
    return made


def _sample(shape: Shape) -> Any:
    """A value of `shape` that the fast path writes (lower-case text: a serializer that changes it shows)."""
    kind = shape.kind
    if kind in ("list", "dict"):
        item = _sample(cast(Shape, shape.item))
        return [item] if kind == "list" else {"k": item}
    if kind == "model":
        return _sample_model(cast(type[BaseModel], shape.model))
    if kind == "union":
        return _sample_model(next(c for c in shape.choices if c in _CONVERTERS))
    return {"str": "x", "int": 7, "float": 0.5, "bool": True, "datetime": datetime(2023, 1, 2, tzinfo=UTC),
            "literal": shape.values[0] if shape.values else None}[kind]


def _sample_model(cls: type[BaseModel], fields: tuple[FieldShape, ...] | None = None,
                  nulls: bool = False) -> BaseModel:
    """A sample of `cls`; with `nulls`, its nullable fields None."""
    values = {f.name: f.default if f.name == "type" else None if nulls and f.shape.nullable else _sample(f.shape)
              for f in fields or model_fields(cls)}
    return cls.model_construct(**values)


def _sample_agrees(cls: type[BaseModel], fields: tuple[FieldShape, ...], made: _Converter) -> bool:
    """Two samples of `cls`, one with its nullable fields None, are written alike by `made` and
    pydantic (what `events.shapes` cannot see, a serializer, shows here: such a model is left to
    pydantic; a serializer acting on None only, as TreeOptions' does, shows only in the second)."""
    try:
        for nulls in (False, True):
            sample = _sample_model(cls, fields, nulls)
            if _encode(made(sample)) != sample.model_dump_json(exclude_none=True).encode():
                return False
        return True
    except Exception:
        return False


def encode_model(model: BaseModel) -> bytes | None:
    """`model.model_dump_json(exclude_none=True).encode()` of any model the fast path can write
    (its converter is made on first use), or None."""
    convert = converter(model.__class__)
    if convert is None or not ENABLED:
        return None
    try:
        return _encode(convert(model))
    except Exception:
        return None


# a converter of models written as their `__dict__` -> its converter of a list of such models
# (`_list_of`: the `__dict__`s of them all, checked in one call)
_AS_DICT: dict[_Converter, _Converter] = {}


def _nested(shape: Shape) -> _Converter | None:
    """The converter of a value of `shape` that is not written as it is (not None: that is left
    out before): a model, a list of models, a tagged union of models (None: not handled)."""
    item = shape.item
    if shape.kind == "model":
        return converter(cast(type[BaseModel], shape.model))
    if shape.kind == "list" and item is not None and item.kind == "model" and not item.nullable:
        found = converter(cast(type[BaseModel], item.model))
        return None if found is None else _list_of(found)
    # a union: each member by its own class's converter (one that has none: pydantic)
    if shape.kind == "union" and any([converter(choice) is not None for choice in shape.choices]):
        convert_of = _CONVERTERS.__getitem__

        def convert_member(value: Any) -> Any:
            return convert_of(type(value))(value)  # KeyError: not handled

        return convert_member
    return None


def _list_of(one: _Converter) -> _Converter:
    """The converter of a list of models converted by `one`. For models written as their
    `__dict__` (a gang's tasks), one call checks and lists them all: a call per item less."""
    dicts_of = _AS_DICT.get(one)
    if dicts_of is None:
        return lambda items: [one(item) for item in items]
    return dicts_of


def _make(cls: type[BaseModel], fields: tuple[FieldShape, ...]) -> _Converter | None:
    """The converter of `cls`, one closure over the indices of the fields each check reads (the
    loops over empty ones skipped: this runs for every event written)."""
    tag: Any = None
    tag_index = -1
    ints: list[int] = []
    floats: list[int] = []
    float_maps: list[int] = []
    times: list[int] = []
    nested: list[tuple[int, _Converter]] = []
    for index, field in enumerate(fields):
        shape = field.shape
        if field.name == "type" and shape.kind == "literal" and issubclass(cls, Event):
            tag, tag_index = field.default, index  # the union picks the serializer by it: it must be the class's
        elif _passed(shape):
            pass
        elif shape.kind == "int":
            ints.append(index)
        elif shape.kind == "float":
            floats.append(index)
        elif _float_map(shape):
            float_maps.append(index)
        elif shape.kind == "datetime":
            times.append(index)
        else:
            found = _nested(shape)
            if found is None:
                return None
            nested.append((index, found))
    names = tuple(field.name for field in fields)
    get = itemgetter(*names)
    size = len(names)
    struct = msgspec.defstruct(f"_{cls.__name__}", [(name, object, None) for name in names], omit_defaults=True,
                               gc=False)
    ints_, floats_, maps_, times_, nested_ = tuple(ints), tuple(floats), tuple(float_maps), tuple(times), tuple(nested)
    map_names = tuple(names[i] for i in float_maps)

    def convert(model: Any) -> Any:
        """The values of the fields that are not written as they are are checked (see the module
        doc; each loop only where the model has such fields), the nested ones converted."""
        if type(model) is not cls:  # a subclass or anything else: pydantic (`type`: cheaper than `__class__`)
            raise _Unhandled
        values = get(model.__dict__)  # a field missing: KeyError, not handled; an extra key: not read (nor by pydantic)
        if tag_index >= 0 and values[tag_index] != tag:
            raise _Unhandled
        if ints_:
            for i in ints_:
                if values[i] is True or values[i] is False:
                    raise _Unhandled
        if floats_:
            for i in floats_:
                x = values[i]
                if x is not None and not (type(x) is _float and -_LIMIT < x < _LIMIT):
                    raise _Unhandled
        if maps_:
            for i in maps_:
                if values[i] is not None:
                    for x in values[i].values():
                        if not (type(x) is _float and -_LIMIT < x < _LIMIT):
                            raise _Unhandled
        if times_:
            for i in times_:
                time = values[i]
                if type(time) is not datetime or (time.tzinfo is not UTC and time is not _TIME_SEEN[0]):
                    _check_time(time)
        if not nested_:
            return struct(*values)
        out = list(values)
        for i, one in nested_:
            if out[i] is not None:
                out[i] = one(out[i])
        return struct(*out)

    def dicts_of(models: Any) -> list[dict[str, Any]]:
        """Models written as their `__dict__` itself (a little faster than a struct): each must then
        hold no other key and no None (pydantic would leave that field out)."""
        out = []
        for model in models:
            if type(model) is not cls:
                raise _Unhandled
            data = model.__dict__
            if len(data) != size or None in get(data):
                raise _Unhandled
            for name in map_names:
                for x in data[name].values():
                    if not (type(x) is _float and -_LIMIT < x < _LIMIT):
                        raise _Unhandled
            out.append(data)
        return out

    def convert_as_dict(model: Any) -> Any:
        return dicts_of((model,))[0]

    if tag_index < 0 and not (ints or floats or times or nested):
        _AS_DICT[convert_as_dict] = dicts_of
        return convert_as_dict
    return convert


for _cls in EVENT_TYPES.values():
    _found = converter(_cls)
    if _found is not None:
        _CONVERTERS[_cls] = _found
_ENVELOPE: Final = cast(_Converter, converter(Envelope))

# Bodies of these events are left to pydantic: without the envelope's union to dispatch, pydantic
# writes them as fast (EntitlementsComputed: its cost is formatting many floats, the same in
# both, and checking them here costs more than pydantic's walk over the model).
_BODY_BY_PYDANTIC: Final = frozenset({"EntitlementsComputed"})
_BODIES: Final[dict[type, _Converter]] = {cls: conv for cls, conv in _CONVERTERS.items()
                                          if cls.__name__ not in _BODY_BY_PYDANTIC}

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
    convert = _BODIES.get(event.__class__)
    if convert is None:
        return None
    try:
        return _encode(convert(event))
    except Exception:
        return None


def handled_types(body: bool = False) -> frozenset[str]:
    """The event types the fast path writes in an envelope (`body`: alone); others give None."""
    return frozenset(cls.__name__ for cls in (_BODIES if body else _CONVERTERS))


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
