"""Read-only views of the gang events, decoded by msgspec: what the services' consume loops fold.

Under load three event types are nearly all of the log: `GangEnqueued` (a submitter's packs),
`GangAdmitted` and `GangMovedToQueue` (an admission cycle's packs). Every service reads each of
them, and pydantic builds a model of each (the envelope, the event, every task) for about 5 µs;
msgspec decodes the same bytes into structs for about 1 µs. In a 50k-gang burst decoding was a
fifth of the tree service's CPU and a third of preemption's; at 5,000 gangs/s, two fifths of both.

`read_envelope(data)` gives an `EnvelopeView` for an envelope of one of these types when msgspec
accepts it, and `events.decode(data)` (the pydantic model) for anything else.

Task reports (`TaskStateChanged`, four a gang of two tasks: the most common event of a whole
lifecycle; pydantic reads one in 14-22 µs) have a view too, read by default: `read_envelope(data)`
gives a `TaskEnvelopeView` (an `EnvelopeView` whose event may be a `TaskStateChangedView` too;
every envelope it reads is one of these); `read_envelope(data, tasks=False)` the model of a task
report (and `EnvelopeView`s of the gang events), for a reader that tests a task report with
`isinstance(event, TaskStateChanged)`. Every reader of what `read_envelope` gives asks
`event_class` (admission's and the tree's folds, preemption's, the projections: `gangs.py` since
it tells task reports by `event_class`, the replay).

A view

- has its model's fields, in the same order, with the same defaults (checked at import: a field
  added, removed or retyped in a model fails the import until its view follows);
- accepts a subset of what the model accepts, with equal values: the same constraints (non-empty
  ids, sizes from 1, amounts finite and not negative), and stricter types: where pydantic would
  coerce (a number in a string, `2.0` for an int, `"true"` for a bool, an int beyond 64 bits)
  msgspec refuses, and `read_envelope` hands the bytes to pydantic, which decides (and names
  the field of a refusal as ever). Duplicate keys: the last one, in both. `tests/wire/
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
from typing import Annotated, Any, ClassVar, Literal, TypeVar, cast

import msgspec
from msgspec import Meta, Struct

from events.base import Event, Frozen
from events.codec import PACKABLE, decode
from events.decisions import (
    EntitlementsComputed,
    GangAdmitted,
    GangMovedToQueue,
    LendingFactor,
    LentPool,
    PoolEntitlement,
)
from events.envelope import EPOCH, Envelope
from events.inputs import GangEnqueued, TaskSpec, TaskState, TaskStateChanged

ENABLED = os.environ.get("POOLWISE_EVENT_VIEWS", "1") != "0"

_FINITE = 1.7976931348623157e308  # the largest float: `le` it refuses inf (msgspec reads 1e999 as inf)
Amount = Annotated[float, Meta(ge=0, le=_FINITE)]  # events.base.NonNegative
Finite = Annotated[float, Meta(ge=-_FINITE, le=_FINITE)]  # a float of a model (allow_inf_nan=False)
Name = Annotated[str, Meta(min_length=1)]

_V = TypeVar("_V")
_new = object.__new__
_set = object.__setattr__


class _View(Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    """What every view shares: its model class, and building that model."""

    model: ClassVar[type[Frozen]]

    def to_model(self) -> Any:
        """The model of the same values, validated."""
        return self.model.model_validate(msgspec.to_builtins(self))

    def model_dump_json(self, **options: Any) -> str:
        """`to_model().model_dump_json(**options)`: the model's JSON (a rare path: refusals)."""
        return cast(str, self.to_model().model_dump_json(**options))


class TaskSpecView(_View, frozen=True, kw_only=True):
    model = TaskSpec
    id: Name
    resources: dict[str, Amount]

    def to_model(self) -> TaskSpec:
        """The `TaskSpec`, built without validating again (what the view holds passed the same
        checks), as `services/admission/domain/trusted.py` builds models: equal to a validated one."""
        spec = _new(TaskSpec)
        _set(spec, "__dict__", {"id": self.id, "resources": self.resources})
        _set(spec, "__pydantic_fields_set__", {"id", "resources"})
        _set(spec, "__pydantic_extra__", None)
        _set(spec, "__pydantic_private__", None)
        return spec


class _EventView(_View, frozen=True, tag_field="type"):
    type: ClassVar[str]


class GangEnqueuedView(_EventView, tag="GangEnqueued", frozen=True, kw_only=True):
    model = GangEnqueued
    type = "GangEnqueued"
    version: Literal[1] = 1
    tree: str = "default"
    gang: Name
    pool: str
    job: str
    user: str = "anonymous"
    size: Annotated[int, Meta(ge=1)]
    priority: int = 0
    preemptible: bool = True
    revocable: bool = False
    controller: bool = False
    timeout: Annotated[float, Meta(ge=0, le=_FINITE)] | None = None
    tasks: Annotated[list[TaskSpecView], Meta(min_length=1)]


class GangAdmittedView(_EventView, tag="GangAdmitted", frozen=True, kw_only=True):
    model = GangAdmitted
    type = "GangAdmitted"
    version: Literal[1] = 1
    tree: str
    gang: str
    pool: str
    queue: str
    tasks: list[TaskSpecView]
    attempt: int = 1


class GangMovedToQueueView(_EventView, tag="GangMovedToQueue", frozen=True, kw_only=True):
    model = GangMovedToQueue
    type = "GangMovedToQueue"
    version: Literal[1] = 1
    tree: str
    gang: str
    pool: str
    queue: Literal["non_preemptible", "controller", "revocable", "pending"]
    reason: str


class PoolEntitlementView(_View, frozen=True, kw_only=True):
    model = PoolEntitlement
    path: str
    entitlement: dict[str, Finite]
    non_slack_entitlement: dict[str, Finite]
    slack_entitlement: dict[str, Finite]
    fair_share: Finite = 0.0
    usage_share: Finite = 0.0
    demand_share: Finite = 0.0
    dominant_kind: str | None = None


class LentPoolView(_View, frozen=True, kw_only=True):
    model = LentPool
    path: str
    given: dict[str, Finite]
    share: dict[str, Finite]
    limit: dict[str, Finite] = msgspec.field(default_factory=dict)


class LendingFactorView(_View, frozen=True, kw_only=True):
    model = LendingFactor
    group: str
    factor: dict[str, Finite]


class EntitlementsComputedView(_EventView, tag="EntitlementsComputed", frozen=True, kw_only=True):
    model = EntitlementsComputed
    type = "EntitlementsComputed"
    version: Literal[3] = 3
    tree: str
    capacity: dict[str, Finite]
    slack_capacity: dict[str, Finite] = msgspec.field(default_factory=dict)
    pools: list[PoolEntitlementView]
    alerts: list[str] = msgspec.field(default_factory=list)
    removed: list[str] = msgspec.field(default_factory=list)
    replace: bool = True
    part: Annotated[int, Meta(ge=1)] = 1
    parts: Annotated[int, Meta(ge=1)] = 1
    factors: list[LendingFactorView] | None = None
    lent: list[LentPoolView] | None = None


class TaskStateChangedView(_EventView, tag="TaskStateChanged", frozen=True, kw_only=True):
    model = TaskStateChanged
    type = "TaskStateChanged"
    version: Literal[1] = 1
    tree: str = "default"
    gang: str
    task: str
    state: TaskState
    message: str | None = None


EventView = GangEnqueuedView | GangAdmittedView | GangMovedToQueueView | EntitlementsComputedView


class EnvelopeView(_View, frozen=True, kw_only=True):
    """An `Envelope` of a gang event. `time` holds the `datetime` (read as the wire's string,
    then replaced: see the module doc)."""

    model = Envelope
    id: Annotated[str, Meta(min_length=1, max_length=200)]
    time: Any
    source: str = "unknown"
    causation: str | None = None
    basis: int | None = None
    trace: dict[str, str] | None = None
    event: EventView

    @property
    def type(self) -> str:
        return self.event.type

    @property
    def seconds(self) -> float:
        return cast(float, (self.time - EPOCH).total_seconds())

    def to_model(self) -> Envelope:
        return Envelope.model_validate({**msgspec.to_builtins(self), "time": self.time})


class TaskEnvelopeView(EnvelopeView, frozen=True, kw_only=True):
    """An `EnvelopeView` that may hold a task report too: what `read_envelope(data)` gives (see
    the module doc)."""

    event: EventView | TaskStateChangedView  # type: ignore[assignment]  # (wider: msgspec reads it so)


VIEWS: dict[type[Frozen], type[_View]] = {GangEnqueued: GangEnqueuedView, GangAdmitted: GangAdmittedView,
                                          GangMovedToQueue: GangMovedToQueueView, TaskSpec: TaskSpecView,
                                          EntitlementsComputed: EntitlementsComputedView,
                                          PoolEntitlement: PoolEntitlementView, Envelope: EnvelopeView,
                                          TaskStateChanged: TaskStateChangedView}
_MODEL_OF: dict[type, type[Frozen]] = {view: model for model, view in VIEWS.items()}
_MODEL_OF[TaskEnvelopeView] = Envelope


# -- each view has its model's fields, in order, with its defaults ---------------------------------

class SchemaChanged(TypeError):
    """A model no longer has the fields its view was written for."""


def _fields_of_view(view: type[_View]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for f in msgspec.structs.fields(view):
        if f.default_factory is not msgspec.NODEFAULT:
            out.append((f.name, ("factory", f.default_factory)))
        else:
            out.append((f.name, "required" if f.required else f.default))
    return out


def _fields_of_model(model: type[Frozen]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, f in model.model_fields.items():
        if name == "type" and model is not Envelope:
            continue  # the view's tag
        if f.default_factory is not None:
            out.append((name, ("factory", f.default_factory)))
        else:
            out.append((name, "required" if f.is_required() else f.default))
    return out


def expect_view(model: type[Frozen], view: type[_View]) -> None:
    """`view` has `model`'s fields, in order, with its defaults (else SchemaChanged)."""
    if _fields_of_view(view) != _fields_of_model(model):
        raise SchemaChanged(f"{model.__name__} changed: its fields are {_fields_of_model(model)}, its view in "
                            f"events/views.py has {_fields_of_view(view)}; update the view (and its tests)")


for _model, _view in VIEWS.items():
    expect_view(_model, _view)


# -- reading ------------------------------------------------------------------------------------------

_decoder = msgspec.json.Decoder(EnvelopeView)
_task_decoder = msgspec.json.Decoder(TaskEnvelopeView)
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)\Z")
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
            _force(view, "time", _time(view.time))
            return cast(Envelope, view)
        except (msgspec.DecodeError, _Unread):
            pass
    return decode(data)


_pack_decoder = msgspec.json.Decoder(list[EnvelopeView])
_PACKABLE_VIEWS = frozenset(view for model, view in VIEWS.items() if model.__name__ in PACKABLE)


def read_with_tasks(data: bytes) -> Envelope:
    """`read_envelope(data, tasks=True)` (the default): views of the gang events and of task reports."""
    return read_envelope(data, True)


def read_pack(data: bytes) -> list[Envelope] | None:
    """The envelopes of a pack (a JSON array of them), each as `read_envelope` reads it, in one
    msgspec pass: a view of each; None when any of them is not read here, or the pack is empty
    (then it is read part by part, which gives pydantic's models or refusal). About 1 µs per event
    cheaper than reading the parts one by one. What it gives is a valid pack: events of packable
    types (`events.PACKABLE`), at least one."""
    if not ENABLED:
        return None
    try:
        views = _pack_decoder.decode(data)
        for view in views:
            if view.event.__class__ not in _PACKABLE_VIEWS:  # may not be packed: refused part by part
                return None
            _force(view, "time", _time(view.time))
    except (msgspec.DecodeError, _Unread):
        return None
    return cast(list[Envelope], views) if views else None


def event_class(event: Event) -> type[Event]:
    """The model class of an event: its own class, or the model a view stands for."""
    kind = type(event)
    return cast(type[Event], _MODEL_OF.get(kind, kind))


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
_LIMIT = 1e16  # floats strictly inside (-1e16, 1e16) are written alike by pydantic and msgspec (fastencode)


def _floats_ok(tasks: list[TaskSpecView]) -> bool:
    for task in tasks:
        for amount in task.resources.values():
            if not amount < _LIMIT:
                return False
    return True


def view_body(event: object) -> bytes | None:
    """`event.model_dump_json(exclude_none=True)` of the model a view stands for, as bytes
    (msgspec writes the tag, then the fields in order, as pydantic does); None if `event` is not
    a view, or holds a float the two write differently (from 1e16 up)."""
    cls = event.__class__
    if cls is GangAdmittedView:
        admitted = cast(GangAdmittedView, event)
        return _encode(admitted) if _floats_ok(admitted.tasks) else None
    if cls is GangEnqueuedView:
        enqueued = cast(GangEnqueuedView, event)
        if not _floats_ok(enqueued.tasks):
            return None
        if enqueued.timeout is None:  # the one field of these that may be None: pydantic leaves it out
            return _encode(enqueued).replace(b',"timeout":null,"tasks":', b',"tasks":', 1)
        return _encode(enqueued) if enqueued.timeout < _LIMIT else None
    if cls is GangMovedToQueueView:
        return _encode(event)
    if cls is TaskStateChangedView:  # (`message`, its last field, the one that may be None: left out)
        data = _encode(event)
        return data[:-len(_NO_MESSAGE)] + b"}" if data.endswith(_NO_MESSAGE) else data
    if cls is EntitlementsComputedView:
        return _entitlements_body(cast(EntitlementsComputedView, event))
    return None


_NO_MESSAGE = b',"message":null}'
_POSITIVE_EXPONENT = re.compile(rb"\de\d")  # how msgspec writes a float from 1e16 up (`1e16`, `1.5e22`)


def _entitlements_body(event: EntitlementsComputedView) -> bytes | None:
    """An `EntitlementsComputed` as pydantic writes it: its fields that may be None
    (`dominant_kind`, last of a pool's fields; `factors` and `lent`, the event's last two) left
    out where None (a string of it cannot hold these bytes: its quotes are escaped); None when a
    float of it is from 1e16 up (pydantic writes `1e+16`), or anything in it reads as one (a name
    like `l1e2`: written by pydantic then, the rare slow way)."""
    data = _encode(event)
    if _POSITIVE_EXPONENT.search(data) is not None:
        return None
    if event.lent is None:
        data = data[:-len(_NO_LENT)] + b"}"
    if event.factors is None:
        data = data.replace(b',"factors":null', b"", 1)
    return data.replace(b',"dominant_kind":null}', b"}")


_NO_LENT = b',"lent":null}'


__all__ = [
    "ENABLED",
    "VIEWS",
    "EntitlementsComputedView",
    "EnvelopeView",
    "GangAdmittedView",
    "GangEnqueuedView",
    "GangMovedToQueueView",
    "PoolEntitlementView",
    "SchemaChanged",
    "TaskEnvelopeView",
    "TaskSpecView",
    "TaskStateChangedView",
    "as_model",
    "event_class",
    "read_envelope",
    "read_pack",
    "read_with_tasks",
    "view_body",
    "with_views",
]
