"""Read-only views of the gang events, decoded by msgspec: what the services' consume loops fold.

Under load three event types are nearly all of the log: `GangEnqueued` (a submitter's packs),
`GangAdmitted` and `GangMovedToQueue` (an admission cycle's packs). Every service reads each of
them, and pydantic builds a model of each (the envelope, the event, every task), where msgspec
decodes the same bytes into structs several times faster: under load, decoding with pydantic
was a large share of every reader's CPU (docs/performance.md, "Wire contract").

`read_envelope(data)` gives an `EnvelopeView` for an envelope of one of these types when msgspec
accepts it, and `events.decode(data)` (the pydantic model) for anything else.

Task reports (`TaskStateChanged`, four a gang of two tasks: the most common event of a whole
lifecycle, and slow for pydantic to read) have a view too, read by default: `read_envelope(data)`
gives a `TaskEnvelopeView` (an `EnvelopeView` whose event may be a `TaskStateChangedView` too;
every envelope it reads is one of these); `read_envelope(data, tasks=False)` the model of a task
report (and `EnvelopeView`s of the gang events), for a reader that tests a task report with
`isinstance(event, TaskStateChanged)`. Every reader of what `read_envelope` gives asks
`event_class` (admission's and the tree's folds, preemption's, the projections: `gangs.py` since
it tells task reports by `event_class`, the replay).

A view

- is derived from its model at import (`view_of`, from what `events.shapes` reads through
  pydantic's public API): its fields, in the same order, with the same defaults and
  constraints; a field added to a model is in its view with no other edit;
- accepts a subset of what the model accepts, with equal values: the same constraints (non-empty
  ids, sizes from 1, amounts finite and not negative: derived, not restated), and stricter
  types: where pydantic would
  coerce (a number in a string, `2.0` for an int, `"true"` for a bool, an int beyond 64 bits)
  msgspec refuses, and `read_envelope` hands the bytes to pydantic, which decides (and names
  the field of a refusal as ever). Duplicate keys: the last one, in both. `tests/events/
  test_views.py` holds a view to its model over valid envelopes and thousands of mutated ones;
- reads `time` only in the form the encoders write (RFC 3339 with `Z` or an offset, at most six
  decimals; pydantic truncates a seventh where msgspec would round), parsed once per distinct
  string (a pack's events share theirs, so they share one `datetime`);
- reads like the model: the same attributes, `type`, `envelope.seconds`; but `isinstance(view,
  GangEnqueued)` does not hold (pydantic's classes ignore virtual subclasses): code that may be
  given a view asks `event_class(event)` (the model class, for tables keyed by it and for
  comparisons), adds the views to a table with `with_views(table)`, or reads `event.type`;
- is not a model: where a rare path needs one (a refusal quoting its input, an encoder falling
  back), `model_dump_json()` and `to_model()` build it (validated); `as_model(value)` gives the
  model of a view (and anything else as it is): a task's view becomes the `TaskSpec` a decision
  lists. A view never equals a model. `view_body(event)` writes a view's event as pydantic
  writes its model (the `event_log`'s `data`).

`POOLWISE_EVENT_VIEWS=0` in the environment turns views off (every envelope decoded by
pydantic), for comparisons.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, cast

import msgspec
from msgspec import Meta, Struct

from events.base import Event, Frozen
from events.codec import PACKABLE, decode
from events.decisions import EntitlementsComputed, GangAdmitted, GangMovedToQueue
from events.envelope import EPOCH, Envelope
from events.inputs import GangEnqueued, TaskSpec, TaskStateChanged
from events.shapes import REQUIRED, Shape, Unsupported, model_fields
from events.trusted import builder

ENABLED = os.environ.get("POOLWISE_EVENT_VIEWS", "1") != "0"

# A view holds only floats strictly inside (-1e16, 1e16), which msgspec and pydantic write alike
# (the shortest repr; from 1e16 up pydantic writes `1e+16`, msgspec `1e16`: events/fastencode.py), so
# a view's event is written by msgspec as its model is by pydantic; one holding another float is
# read by pydantic (rare: 10 PB of memory in bytes).
_LIMIT = 1e16

_V = TypeVar("_V")
_task_spec = builder(TaskSpec)


class _View(Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    """What every view shares: its model class, and building that model."""

    model: ClassVar[type[Frozen]]
    nullable: ClassVar[tuple[bytes, ...]]  # `,"<field>":null` of its fields that may be None (view_body)

    def to_model(self) -> Any:
        """The model of the same values, validated."""
        return self.model.model_validate(msgspec.to_builtins(self))

    def model_dump_json(self, **options: Any) -> str:
        """`to_model().model_dump_json(**options)`: the model's JSON (a rare path: refusals)."""
        return cast(str, self.to_model().model_dump_json(**options))


class _EventView(_View, frozen=True, tag_field="type"):
    type: ClassVar[str]


class _TaskSpecView(_View, frozen=True, kw_only=True):
    def to_model(self) -> TaskSpec:
        """The `TaskSpec`, built without validating again (what the view holds passed the same
        checks; `events.trusted`): equal to a validated one."""
        return _task_spec(**msgspec.structs.asdict(self))


# -- a view is derived from its model (events.shapes) ------------------------------------------------

_DERIVED: dict[type[Frozen], type[_View]] = {}


def _msgspec_type(shape: Shape) -> Any:
    """The msgspec type that accepts what `shape` accepts (a subset, with equal values: msgspec
    does not coerce where pydantic would, and refuses ints beyond 64 bits)."""
    kind = shape.kind
    bounds = dict(shape.bounds)
    if kind == "float":  # only what msgspec and pydantic write alike (also refuses inf, as 1e999 reads)
        low = bounds.get("ge", bounds.get("gt", -_LIMIT))
        high = bounds.get("le", bounds.get("lt", _LIMIT))
        if low <= -_LIMIT:
            bounds.pop("ge", None)
            bounds["gt"] = -_LIMIT
        if high >= _LIMIT:
            bounds.pop("le", None)
            bounds["lt"] = _LIMIT
    found: Any
    if kind in ("str", "int", "float", "bool"):
        found = {"str": str, "int": int, "float": float, "bool": bool}[kind]
    elif kind == "literal":
        found = Literal[shape.values]
    elif kind == "list":
        found = list[_msgspec_type(cast(Shape, shape.item))]  # type: ignore[misc]
    elif kind == "dict":
        found = dict[str, _msgspec_type(cast(Shape, shape.item))]  # type: ignore[misc]
    elif kind == "model":
        found = view_of(cast(type[Frozen], shape.model))
    elif kind == "union":
        found = _union(*(view_of(cast(type[Frozen], choice)) for choice in shape.choices))
    else:  # a datetime is read by its owner (EnvelopeView's `time`)
        raise Unsupported(f"no view of a {kind}")
    if bounds:
        found = Annotated[found, Meta(**bounds)]
    return found | None if shape.nullable else found


def _union(*members: Any) -> Any:
    """`members[0] | members[1] | ...` of types made at run time."""
    return Union.__getitem__(members)


def _tag(model: type[Frozen]) -> str | None:
    """An event's `type`: the literal its view is tagged by (None: not an event)."""
    field = next((f for f in model_fields(model) if f.name == "type"), None)
    if field is None or field.shape.kind != "literal" or field.default != field.shape.values[0]:
        return None
    return cast(str, field.default)


def view_of(model: type[Frozen], base: type[_View] | None = None, name: str | None = None,
            types: Mapping[str, Any] | None = None) -> type[_View]:
    """The view of `model`: a frozen msgspec struct of its fields, in order, with their defaults
    and constraints (an event's `type` as its tag), derived from the model alone (`types`: a
    field read another way, as the envelope's `time` and `event`). Made once per model."""
    if base is None and name is None and types is None and model in _DERIVED:
        return _DERIVED[model]
    tag = _tag(model)
    fields: list[tuple[Any, ...]] = []
    nullable: list[bytes] = []
    for field in model_fields(model):
        if tag is not None and field.name == "type":
            continue
        kind = (types or {}).get(field.name) or _msgspec_type(field.shape)
        if field.shape.nullable:
            nullable.append(f',"{field.name}":null'.encode())
        if field.default_factory is not None:
            fields.append((field.name, kind, msgspec.field(default_factory=field.default_factory)))
        elif field.default is REQUIRED:
            fields.append((field.name, kind))
        else:
            fields.append((field.name, kind, field.default))
    namespace: dict[str, Any] = {"model": model, "nullable": tuple(nullable), "__module__": __name__}
    options: dict[str, Any] = {}
    if tag is not None:
        namespace["type"] = tag
        options["tag"] = tag
    default_base = _EventView if tag is not None else _TaskSpecView if model is TaskSpec else _View
    view = cast(type[_View], msgspec.defstruct(name or f"{model.__name__}View", fields, bases=(base or default_base,),
                                               namespace=namespace, frozen=True, kw_only=True, **options))
    if base is None and name is None and types is None:
        _DERIVED[model] = view
    globals().setdefault(view.__name__, view)  # found by its name: pickled with the folds' snapshots
    return view


GangEnqueuedView = view_of(GangEnqueued)
GangAdmittedView = view_of(GangAdmitted)
GangMovedToQueueView = view_of(GangMovedToQueue)
EntitlementsComputedView = view_of(EntitlementsComputed)
TaskStateChangedView = view_of(TaskStateChanged)
TaskSpecView = view_of(TaskSpec)

# the gang events: nearly all of the log under load (see the module doc)
EventView: Any = _union(GangEnqueuedView, GangAdmittedView, GangMovedToQueueView, EntitlementsComputedView)


class _EnvelopeView(_View, frozen=True, kw_only=True):
    """What an envelope's view adds to its fields: the model's properties, and building it with
    its `datetime`."""

    @property
    def type(self) -> str:
        return cast(str, self.event.type)  # type: ignore[attr-defined]

    @property
    def seconds(self) -> float:
        return cast(float, (self.time - EPOCH).total_seconds())  # type: ignore[attr-defined]

    def to_model(self) -> Envelope:
        return Envelope.model_validate({**msgspec.to_builtins(self), "time": self.time})  # type: ignore[attr-defined]


# An `Envelope` of a gang event. `time` holds the `datetime` (read as the wire's string, then
# replaced: see the module doc).
EnvelopeView = view_of(Envelope, _EnvelopeView, "EnvelopeView", {"time": Any, "event": EventView})
# An `EnvelopeView` that may hold a task report too: what `read_envelope(data)` gives (see the module doc).
TaskEnvelopeView = view_of(Envelope, EnvelopeView, "TaskEnvelopeView",
                           {"time": Any, "event": _union(EventView, TaskStateChangedView)})

VIEWS: dict[type[Frozen], type[_View]] = {**_DERIVED, Envelope: EnvelopeView}
_MODEL_OF: dict[type, type[Frozen]] = {view: model for model, view in VIEWS.items()}
_MODEL_OF[TaskEnvelopeView] = Envelope


# -- reading ------------------------------------------------------------------------------------------

_decoder: Any = msgspec.json.Decoder(EnvelopeView)
_task_decoder: Any = msgspec.json.Decoder(TaskEnvelopeView)
# (the offset's minutes bounded as pydantic bounds them: `fromisoformat` reads +05:99 as +06:39,
# where pydantic refuses it, and a view and its model must read the same log alike)
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)\Z")
_times: dict[str, datetime] = {}  # the last few distinct times read (a pack's events share one)
_force = msgspec.structs.force_setattr


class _Unread(Exception):
    """Not read here: pydantic decides."""


def _time(text: object) -> datetime:
    if type(text) is not str:
        raise _Unread
    found = _times.get(text)
    if found is None:
        if _TIME.match(text) is None:
            raise _Unread
        try:
            found = datetime.fromisoformat(text)
        except ValueError:  # e.g. 2023-02-30: pydantic names the field
            raise _Unread from None
        if len(_times) >= 64:
            _times.clear()
        _times[text] = found
    return found


def read_envelope(data: bytes, tasks: bool = True) -> Envelope:
    """The envelope in `data`: a view for a gang event or a task report that msgspec reads (a
    `TaskEnvelopeView`: see the module doc), else `events.decode(data)` (which raises
    `DecodeError` for what is not one). `tasks=False`: a task report as its model (and the gang
    events as `EnvelopeView`s)."""
    if ENABLED:
        try:
            view = (_task_decoder if tasks else _decoder).decode(data)
            text = view.time  # (`_time`'s look among the times read, without its call: per message)
            found = _times.get(text) if type(text) is str else None
            _force(view, "time", found if found is not None else _time(text))
            return view  # type: ignore[no-any-return]  # (an `Envelope`'s view; no `cast` call per message)
        except (msgspec.DecodeError, _Unread):
            pass
    return decode(data)


_pack_decoder: Any = msgspec.json.Decoder(list.__class_getitem__(EnvelopeView))
_PACKABLE_VIEWS = frozenset(view for model, view in VIEWS.items() if model.__name__ in PACKABLE)


def read_with_tasks(data: bytes) -> Envelope:
    """`read_envelope(data, tasks=True)` (the default): views of the gang events and of task reports."""
    return read_envelope(data, True)


def read_pack(data: bytes) -> list[Envelope] | None:
    """The envelopes of a pack (a JSON array of them), each as `read_envelope` reads it, in one
    msgspec pass: a view of each; None when any of them is not read here, or the pack is empty
    (then it is read part by part, which gives pydantic's models or refusal). Cheaper than
    reading the parts one by one (a decoder call per pack, not per event). What it gives is a
    valid pack: events of packable types (`events.PACKABLE`), at least one."""
    if not ENABLED:
        return None
    try:
        views = _pack_decoder.decode(data)
        for view in views:
            if view.event.__class__ not in _PACKABLE_VIEWS:  # may not be packed: refused part by part
                return None
            text = view.time  # (as `read_envelope`: `_time` called only for a time not read yet)
            found = _times.get(text) if type(text) is str else None
            _force(view, "time", found if found is not None else _time(text))
    except (msgspec.DecodeError, _Unread):
        return None
    return cast(list[Envelope], views) if views else None


def event_class(event: Event) -> type[Event]:
    """The model class of an event: its own class, or the model a view stands for."""
    kind = type(event)
    return _MODEL_OF.get(kind, kind)  # type: ignore[return-value]  # (no `cast` call: asked per event)


def with_views(table: Mapping[type[Event], _V]) -> dict[type[Event], _V]:
    """`table`, keyed by model classes, with each view class mapped as its model is."""
    out = dict(table)
    for model, view in VIEWS.items():
        if model in table:
            out[cast(type[Event], view)] = table[cast(type[Event], model)]
    return out


def as_model(value: _V) -> _V:
    """`value`, or the model a view of it stands for (a `TaskSpec` without validating again)."""
    return cast(_V, value.to_model()) if isinstance(value, _View) else value


# -- writing a view's event as pydantic writes it -------------------------------------------------------

_encode = msgspec.json.Encoder().encode


def _nulls(shape: Shape, seen: tuple[type[Frozen], ...] = ()) -> list[bytes] | None:
    """The `,"<field>":null` a view's value of `shape` may hold for fields left out by pydantic
    (None: it may hold a null pydantic writes, inside a dict or list, or a model's first field)."""
    if shape.kind in ("list", "dict"):
        item = cast(Shape, shape.item)
        return None if item.nullable else _nulls(item, seen)
    models = [shape.model] if shape.kind == "model" else list(shape.choices) if shape.kind == "union" else []
    out: list[bytes] = []
    for model in models:
        if model in seen:
            continue
        fields = model_fields(cast(type[Frozen], model))
        if fields and fields[0].shape.nullable and _tag(cast(type[Frozen], model)) is None:
            return None
        for field in fields:
            inner = _nulls(field.shape, (*seen, cast(type[Frozen], model)))
            if inner is None:
                return None
            out += inner
            if field.shape.nullable:
                out.append(f',"{field.name}":null'.encode())
    return list(dict.fromkeys(out))


def _bodies() -> dict[type, tuple[bytes, ...]]:
    """Per event view whose body is written here: the nulls to cut out."""
    out: dict[type, tuple[bytes, ...]] = {}
    for model, view in VIEWS.items():
        if _tag(model) is not None:
            found = _nulls(Shape("model", model=model))
            if found is not None:
                out[view] = tuple(found)
    return out


_BODIES = _bodies()


def view_body(event: object) -> bytes | None:
    """`event.model_dump_json(exclude_none=True)` of the model a view stands for, as bytes
    (msgspec writes the tag, then the fields in order, as pydantic does, and the fields that are
    None are cut out; a view's floats are written alike: see `_LIMIT`); None if `event` is not a
    view."""
    nulls = _BODIES.get(event.__class__)
    if nulls is None:
        return None
    data = _encode(event)
    for null in nulls:
        if null in data:
            data = data.replace(null, b"")
    return data


__all__ = [
    "ENABLED",
    "VIEWS",
    "EntitlementsComputedView",
    "EnvelopeView",
    "GangAdmittedView",
    "GangEnqueuedView",
    "GangMovedToQueueView",
    "TaskEnvelopeView",
    "TaskSpecView",
    "TaskStateChangedView",
    "as_model",
    "event_class",
    "read_envelope",
    "read_pack",
    "read_with_tasks",
    "view_body",
    "view_of",
    "with_views",
]
