"""`events.fastencode`: pydantic's bytes (`model_dump_json(exclude_none=True)`), written by
msgspec, or None. Whenever it gives bytes they must be pydantic's, for every handled type and
any value a model can hold (validated, `model_construct`ed, or made by the trusted builders of
`services.admission`); it must actually be taken for the hot events; and a model that changes
under it must fail the import rather than be encoded wrongly."""

from __future__ import annotations

import math
import types
import warnings
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import (
    AwareDatetime,
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    computed_field,
    field_serializer,
    model_serializer,
)

from bench.workload import Workload, envelope, gang_event
from events import (
    EVENT_TYPES,
    ClockTicked,
    CycleCompleted,
    EntitlementsComputed,
    Envelope,
    Event,
    GangAdmitted,
    GangEnqueued,
    GangFinished,
    GangMovedToQueue,
    PoolEntitlement,
    PoolStarvationChanged,
    TaskSpec,
    TaskStateChanged,
    decode,
    decode_all,
    fastencode,
)
from events.fastencode import converter, encode_envelope, encode_event_body, encode_model
from services.admission.domain.trusted import entitlements_computed, gang_admitted, pool_entitlement
from services.admission.envelopes import envelope as trusted_envelope
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.tools.scenario.format import load_scenario
from services.tools.scenario.runner import run_on

SCENARIOS = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.yaml")) if SCENARIOS.is_dir() else []

HANDLED = sorted(fastencode.handled_types())
M = TypeVar("M", bound=BaseModel)
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


# -- the comparison ----------------------------------------------------------------------------------

def pydantic_bytes(model: BaseModel) -> bytes | None:
    """What `events.codec.encode` wrote before the fast path (None: pydantic refuses the model)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a model_construct'ed odd value: pydantic warns, and writes
        try:
            return model.model_dump_json(exclude_none=True).encode()
        except Exception:
            return None


def check(env: Envelope) -> tuple[bool, bool]:
    """The fast path gives pydantic's bytes or None, for the envelope and for its event alone (and
    None where pydantic refuses). Returns whether each was taken."""
    fast, slow = encode_envelope(env), pydantic_bytes(env)
    if slow is None:
        assert fast is None
    else:
        assert fast is None or fast == slow, (fast, slow)
    body_fast, body_slow = encode_event_body(env.event), pydantic_bytes(env.event)
    if body_slow is None:
        assert body_fast is None
    else:
        assert body_fast is None or body_fast == body_slow, (body_fast, body_slow)
    return fast is not None, body_fast is not None


# -- values of every awkward kind ------------------------------------------------------------------------

SPECIAL_FLOATS = [0.0, -0.0, 0.1, 0.3, 1.5, 4.0, 1e-7, 1e-5, 1.0e-4, 5e-324, 2.2250738585072014e-308, 1e15,
                  123456789.123, 9999999999999998.0, 1e16, -1e16, 1.0000000000000002e16, 1e17, 1e21, 1e300,
                  1.7976931348623157e308, math.nextafter(1e16, 0), -math.nextafter(1e16, 0), math.inf, -math.inf,
                  math.nan]
_NICE_FLOATS = st.one_of(st.floats(min_value=-1e6, max_value=1e6), st.floats(min_value=0, max_value=1e16,
                                                                            exclude_max=True))
FLOATS = st.one_of(
    _NICE_FLOATS, _NICE_FLOATS, _NICE_FLOATS,  # (most: so that models of many floats are taken too)
    st.floats(),  # any double: subnormal, huge, nan, inf, -0.0
    st.floats(min_value=-1e17, max_value=1e17),
    st.sampled_from(SPECIAL_FLOATS),
    st.integers(min_value=-(2**70), max_value=2**70),  # ints where floats go: pydantic writes 1.0 for 1
    st.booleans(),
)
INTS = st.one_of(st.integers(), st.integers(min_value=-(2**80), max_value=2**80),
                 st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1]),
                 st.booleans())
STRS = st.one_of(
    st.text(max_size=12),  # any code point but surrogates: controls, non-BMP, ...
    st.text(alphabet=st.characters(max_codepoint=0x3F), max_size=8),  # controls, quotes, slashes
    st.sampled_from(["", "/a/b", "é", "\u2028\u2029", "\U0001f600", "\x7f", "</script>", "\\u0000", '"', "\ud800"]),
)


def _offsets() -> st.SearchStrategy[Any]:
    whole = st.builds(lambda m: timezone(timedelta(minutes=m)), st.integers(-1439, 1439))
    seconds = st.builds(lambda s: timezone(timedelta(seconds=s)), st.integers(-86399, 86399))
    micro = st.builds(lambda us: timezone(timedelta(microseconds=us)), st.integers(-86_399_999_999, 86_399_999_999))
    zones = st.timezones() if zoneinfo.available_timezones() else st.just(UTC)
    return st.one_of(st.just(UTC), whole, seconds, micro, zones)


TIMES = st.one_of(st.datetimes(timezones=_offsets()), st.datetimes(timezones=st.just(UTC)),
                  st.datetimes())  # naive: only model_construct can hold one


def values(annotation: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values for a field of this annotation: right and awkward ones (validation may refuse some;
    `model_construct` keeps them)."""
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return values(args[0], depth)
    if origin in (Union, types.UnionType):
        return st.one_of(*(values(a, depth) for a in args))
    if annotation is type(None):
        return st.none()
    if origin is Literal:
        return st.one_of(st.sampled_from(args), STRS)
    if origin is list:
        return st.lists(values(args[0], depth + 1), max_size=4 if depth < 2 else 1)
    if origin is dict:
        return st.dictionaries(STRS, values(args[1], depth + 1), max_size=5)
    if annotation is str:
        return STRS
    if annotation is bool:
        return st.one_of(st.booleans(), st.sampled_from([0, 1]))
    if annotation is int:
        return INTS
    if annotation is float:
        return FLOATS
    if annotation in (AwareDatetime, datetime):
        return TIMES
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return models(annotation)
    raise NotImplementedError(annotation)


TRUSTED: dict[type[BaseModel], Callable[..., Any]] = {
    GangAdmitted: gang_admitted, PoolEntitlement: pool_entitlement, EntitlementsComputed: entitlements_computed,
}


def make(cls: type[BaseModel], how: str, data: dict[str, Any]) -> Any:
    """A model of `data`: validated (if validation takes it), constructed, or by a trusted builder."""
    if how == "validate":
        try:
            return cls.model_validate(data)
        except ValidationError:
            how = "construct"
    if how == "trusted" and cls in TRUSTED:
        full = {name: data.get(name, field.get_default(call_default_factory=True))
                for name, field in cls.model_fields.items() if name not in ("type", "version")}
        try:
            return TRUSTED[cls](**full)
        except TypeError:  # a required field not drawn
            how = "construct"
    return cls.model_construct(**data)


def models(cls: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Models of `cls`: each field left out (if it has a default), None, or a drawn value."""
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for name, field in cls.model_fields.items():
        if name in ("type", "version"):
            continue
        (required if field.is_required() else optional)[name] = st.one_of(values(field.annotation), st.none())
    return st.builds(make, st.just(cls), st.sampled_from(["validate", "validate", "construct", "trusted"]),
                     st.fixed_dictionaries(required, optional=optional))


def envelopes(event: st.SearchStrategy[Any]) -> st.SearchStrategy[Envelope]:
    def build(how: str, id_: str, time: datetime, source: str, causation: str | None, basis: Any,
              trace: dict[str, str] | None, ev: Any) -> Envelope:
        data = {"id": id_, "time": time, "source": source, "causation": causation, "basis": basis, "trace": trace,
                "event": ev}
        if how == "trusted":
            return trusted_envelope(id_, time, source, causation, basis, ev)
        if how == "decoded":  # as read from the log: pydantic's own tzinfo, values as validated from JSON
            raw = pydantic_bytes(Envelope.model_construct(**data))
            try:
                return Envelope.model_validate_json(raw or b"")
            except ValidationError:
                return Envelope.model_construct(**data)
        return make(Envelope, how, data)  # type: ignore[no-any-return]

    return st.builds(build, st.sampled_from(["validate", "construct", "trusted", "decoded"]), STRS, TIMES,
                     st.one_of(STRS, st.none()), st.one_of(STRS, st.none()), st.one_of(INTS, st.none()),
                     st.one_of(st.dictionaries(STRS, STRS, max_size=3), st.none()), event)


# -- the differential tests ------------------------------------------------------------------------------

def test_the_fast_path_is_enabled_and_handles_the_hot_types() -> None:
    assert fastencode.ENABLED  # the import-time probe agreed with pydantic
    hot = {"GangEnqueued", "GangAdmitted", "GangMovedToQueue", "ClockTicked", "CycleCompleted", "TaskStateChanged",
           "GangFinished", "EntitlementsComputed"}
    assert hot <= fastencode.handled_types()
    assert hot - {"EntitlementsComputed"} <= fastencode.handled_types(body=True)
    assert fastencode.handled_types() <= set(EVENT_TYPES)


@pytest.mark.parametrize("type_", HANDLED)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_envelope_encodes_as_pydantic_or_not_at_all(type_: str, data: st.DataObject) -> None:
    env = data.draw(envelopes(models(EVENT_TYPES[type_])))
    check(env)


@pytest.mark.parametrize("value", [*SPECIAL_FLOATS, 0, 1, 2**53 + 1, 2**70, True, False], ids=repr)
def test_floats_and_numbers_where_floats_go(value: Any) -> None:
    for spec in (TaskSpec.model_construct(id="t", resources={"cpu": value}),
                 TaskSpec.model_construct(id="t", resources={"cpu": 1.0, "mem": value})):
        taken, _ = check(Envelope(id="e", time=T0, event=GangAdmitted(tree="t", gang="g", pool="/p", queue="q",
                                                                        tasks=[spec])))
        assert taken == (type(value) is float and abs(value) < 1e16)
    timed = GangEnqueued.model_construct(gang="g", pool="/p", job="j", size=1, tasks=[TaskSpec(id="t", resources={})],
                                         timeout=value)
    taken, _ = check(Envelope(id="e", time=T0, event=timed))
    assert taken == (type(value) is float and abs(value) < 1e16)


def test_every_double_below_1e16_is_written_alike() -> None:
    """The range the fast path takes floats in, densely: random bit patterns and short decimals."""
    import random
    import struct

    rnd = random.Random(7)
    doubles = [struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(50_000)]
    doubles += [float(f"{rnd.randint(0, 10 ** rnd.randint(1, 16))}e{rnd.randint(-30, 0)}") for _ in range(50_000)]
    doubles += [math.nextafter(1e16, 0) - i for i in range(0, 2000, 2)]
    fine = [x for x in doubles if math.isfinite(x) and abs(x) < 1e16]
    event = PoolStarvationChanged(tree="t", pool="/p", status="ok", since=0.0,
                                  usage={str(i): x for i, x in enumerate(fine)})
    fast = encode_event_body(event)
    assert fast is not None
    assert fast == pydantic_bytes(event)


@pytest.mark.parametrize("time", [
    datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
    datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC),
    datetime(2023, 11, 14, 22, 13, 20, 120000, tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone(timedelta(hours=-8))),
    datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone(timedelta(hours=23, minutes=59))),
    datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone(timedelta(0))),
    datetime(2023, 3, 26, 2, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
    decode('{"id":"x","time":"2023-01-01T00:00:00.5+05:30","event":{"type":"ClockTicked"}}').time,
    decode('{"id":"x","time":"2023-01-01T00:00:00Z","event":{"type":"ClockTicked"}}').time,
], ids=str)
def test_times_the_fast_path_writes(time: datetime) -> None:
    assert check(Envelope(id="e", time=time, event=ClockTicked(tree="t"))) == (True, True)


@pytest.mark.parametrize("time", [
    datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone(timedelta(hours=-8, seconds=7))),  # pydantic: -07:59
    datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone(timedelta(microseconds=500_000))),
    datetime(2023, 11, 14, 22, 13, 20),  # naive (only by model_construct)
], ids=str)
def test_times_left_to_pydantic(time: datetime) -> None:
    assert check(Envelope.model_construct(id="e", time=time, event=ClockTicked(tree="t"))) == (False, True)


class _Str(str):
    pass


@dataclass
class _Spec:
    id: str
    resources: dict[str, float]


class _Admitted(GangAdmitted):
    pass


def construct(cls: type[M], **values: Any) -> M:
    """`cls.model_construct(**values)`, of values of any type (that is the point)."""
    return cls.model_construct(**values)


def _admitted(**over: Any) -> GangAdmitted:
    fields = {"tree": "t", "gang": "g", "pool": "/p", "queue": "q", "tasks": [TaskSpec(id="t", resources={"c": 1.0})],
              "attempt": 1, **over}
    return GangAdmitted.model_construct(**fields)


def _with_dict(model: BaseModel, data: dict[str, Any]) -> BaseModel:
    object.__setattr__(model, "__dict__", data)
    return model


@pytest.mark.parametrize(("name", "event"), [
    ("bool in an int field", _admitted(attempt=True)),
    ("a field missing", construct(GangAdmitted, tree="t", pool="/p", queue="q", tasks=[])),
    ("a task's id None", _admitted(tasks=[construct(TaskSpec, id=None, resources={})])),
    ("a task's id missing", _admitted(tasks=[construct(TaskSpec, resources={})])),
    ("a task with an extra key", _admitted(tasks=[_with_dict(construct(TaskSpec), {
        "id": "t", "resources": {}, "extra": 1})])),
    ("a str subclass", _admitted(gang=_Str("g"))),
    ("not a TaskSpec", _admitted(tasks=[_Spec("t", {"c": 1.0})])),
    ("a subclass of the event", _Admitted(tree="t", gang="g", pool="/p", queue="q", tasks=[])),
    ("another type in `type`", _admitted(type="GangEnqueued")),
    ("a lone surrogate", _admitted(gang="\ud800")),
    ("a numpy-like float", _admitted(tasks=[construct(TaskSpec, id="t", resources={"c": type("F", (float,), {})(
        1.0)})])),
], ids=lambda x: x if isinstance(x, str) else "")
def test_odd_models_are_left_to_pydantic(name: str, event: GangAdmitted) -> None:
    assert check(construct(Envelope, id="e", time=T0, event=event)) == (False, False)


def test_none_is_left_out_at_every_level_but_not_inside_dicts_and_lists() -> None:
    env = Envelope(id="e", time=T0, source="s", event=TaskStateChanged(tree="t", gang="g", task="x", state="running"))
    assert check(env) == (True, True)
    assert b"null" not in (encode_envelope(env) or b"")
    # a required field None (only by model_construct): pydantic leaves it out too
    assert check(construct(Envelope, id="e", time=T0, source=None, event=_admitted(gang=None))) == (True, True)
    odd = construct(Envelope, id="e", time=T0, trace={"a": None}, event=construct(GangAdmitted,
        tree="t", gang="g", pool=None, queue="q", tasks=[construct(TaskSpec, id="t", resources={"c": None})]))
    check(odd)  # None in a dict: pydantic writes null, as msgspec does (or the fast path declines)


def test_a_task_dict_in_another_order_is_written_in_that_order_as_pydantic_does() -> None:
    spec = _with_dict(construct(TaskSpec), {"resources": {"c": 1.0}, "id": "t"})
    assert check(Envelope(id="e", time=T0, event=_admitted(tasks=[spec]))) == (True, True)


def test_the_trusted_builders_fill_dicts_in_declaration_order() -> None:
    """The fast path writes a model's fields in declaration order and pydantic in its `__dict__`'s
    order: the two agree because every model's `__dict__` is in declaration order, including those
    the trusted builders fill by hand."""
    spec = TaskSpec(id="t", resources={"c": 1.0})
    pool = pool_entitlement("/p", {"c": 1.0}, {"c": 1.0}, {}, 0.5, 0.25, 0.0, None)
    made: list[Any] = [
        gang_admitted("t", "g", "/p", "q", [spec], 1), pool,
        entitlements_computed("t", {"c": 2.0}, {}, [pool], []),
        trusted_envelope("e", T0, "s", None, 3, ClockTicked()),
    ]
    for model in made:
        assert list(model.__dict__) == list(type(model).model_fields), type(model).__name__
    for event in (made[0], made[2]):
        assert check(trusted_envelope("e", T0, "s", "c", 1, event))[0]
    assert check(made[3]) == (True, True)


# -- the fast path is taken where it matters ----------------------------------------------------------------

def _gang_envelopes() -> list[Envelope]:
    """The gang events as the submitter and admission make them (bench/workload.py, the trusted
    builders), and as they are read back from the log."""
    w = Workload()
    out: list[Envelope] = []
    for index in (0, 1, 12345):
        enqueued = gang_event(w, index)
        out.append(envelope(enqueued, "x" * 32, 1.7e9 + index, source="sdk:bench"))
        admitted = gang_admitted(enqueued.tree, enqueued.gang, enqueued.pool, "pending", enqueued.tasks, 1)
        out.append(trusted_envelope("y" * 32, T0, "admission", "c" * 32, 123456, admitted))
        moved = GangMovedToQueue(tree=w.tree, gang=enqueued.gang, pool=enqueued.pool, queue="non_preemptible",
                                 reason="not preemptible")
        out.append(trusted_envelope("z" * 32, T0, "admission", "c" * 32, 123456, moved))
        timed = GangEnqueued(tree=w.tree, gang=enqueued.gang, pool=enqueued.pool, job="j", size=1, timeout=30.5,
                             tasks=[TaskSpec(id="t", resources={"cpu": 0.25, "gpu": 1.0, "memory": 2.5e9})])
        out.append(envelope(timed, "w" * 32, 1.7e9, source="sdk:bench"))
    out += [Envelope(id="c", time=T0, source="admission", basis=7, event=CycleCompleted(
                tree="t", service="admission", trigger_seq=7, decisions=3)),
            Envelope(id="t", time=T0, source="scenario", event=ClockTicked(tree="t")),
            Envelope(id="t", time=T0, source="scenario", event=ClockTicked()),
            Envelope(id="s", time=T0, source="executor", event=TaskStateChanged(tree="t", gang="g", task="g.0",
                                                                                  state="running")),
            Envelope(id="f", time=T0, source="admission", event=GangFinished(tree="t", gang="g", pool="/p",
                                                                               outcome="done"))]
    return out + [decode(pydantic_bytes(e) or b"") for e in out]


@pytest.mark.parametrize("env", _gang_envelopes(), ids=lambda e: f"{e.type}")
def test_the_fast_path_is_taken_for_the_hot_events(env: Envelope) -> None:
    assert check(env) == (True, True)


def test_entitlements_are_written_fast_in_an_envelope() -> None:
    kinds = ["cpu", "memory", "disk", "gpu"]
    pools = [pool_entitlement(f"/g{i // 32}/l{i % 32}", {k: i * 1.5 for k in kinds}, {k: i / 7 for k in kinds},
                              {k: 0.0 for k in kinds}, i / 100, i / 300, 0.0, "cpu" if i % 2 else None)
             for i in range(100)]
    event = entitlements_computed("bench", {k: 1e6 for k in kinds}, {}, pools, ["a"])
    env = trusted_envelope("e", T0, "admission", "c", 9, event)
    assert check(env) == (True, False)  # the body alone: pydantic's, as fast
    assert check(decode(pydantic_bytes(env) or b"")) == (True, False)


# -- every event of every public scenario ---------------------------------------------------------------------

@pytest.mark.skipif(not FILES, reason="../shared/scenarios is not beside this checkout")
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_event_of_the_public_scenarios(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The services' envelopes as they encode them (decisions by the trusted builders, inputs
    validated), and every event read back from the log."""
    from services.common import decodes, memlog

    made: list[Envelope] = []
    for module in (memlog, decodes):
        original = module.encode

        def spy(env: Envelope, _original: Callable[[Envelope], bytes] = original) -> bytes:
            made.append(env)
            return _original(env)

        monkeypatch.setattr(module, "encode", spy)

    async def main() -> list[Stored]:
        log = MemoryLog()
        report = await run_on(log, load_scenario(path), "fastencode")
        assert report.passed
        return await log.read(1)

    stored = anyio.run(main, backend="asyncio")
    read = [env for item in stored for env in decode_all(item.data)]
    assert made and read
    taken: dict[str, list[bool]] = {}
    for env in made + read:
        taken.setdefault(env.type, []).append(check(env)[0])
    for type_, flags in taken.items():  # the scenarios hold no value the fast path declines
        assert all(flags) == (type_ in fastencode.handled_types()), (type_, flags)


# -- the fast path is derived from the models: a field added needs no edit here ----------------------------------

# Variants of GangAdmitted: a subclass keeps the fields it overrides where they were declared.
class _NewField(GangAdmitted):
    note: str = ""


class _Retyped(GangAdmitted):
    attempt: float = 1  # type: ignore[assignment]


class _Reordered(Event):
    type: Literal["GangAdmitted"] = "GangAdmitted"
    version: Literal[1] = 1
    gang: str
    tree: str
    pool: str
    queue: str
    tasks: list[TaskSpec]
    attempt: int = 1


class _Serialized(GangAdmitted):
    @field_serializer("queue")
    def _queue(self, value: str) -> str:
        return value.upper()


class _Aliased(GangAdmitted):
    queue: str = Field(serialization_alias="q")


class _Computed(GangAdmitted):
    @computed_field  # type: ignore[prop-decorator]
    @property
    def size(self) -> int:
        return len(self.tasks)


class _Unioned(GangAdmitted):
    attempt: int | str = 1  # type: ignore[assignment]


class _Optional(GangAdmitted):
    note: str | None = None
    weight: float | None = Field(default=None, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)


class _NullWritten(GangAdmitted):
    """As TreeOptions writes `gang_retention: null`: a serializer that acts on None alone."""

    note: str | None = "kept"

    @model_serializer(mode="wrap")
    def _null_kept(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        written: dict[str, object] = handler(self)
        if self.note is None:
            written["note"] = None
        return written


@pytest.mark.parametrize("changed", [_Serialized, _Aliased, _Computed, _Unioned, _NullWritten],
                         ids=lambda c: c.__name__)
def test_models_the_fast_path_cannot_write_are_left_to_pydantic(changed: type[Any]) -> None:
    assert converter(GangAdmitted) is not None
    assert converter(changed) is None  # what events.shapes does not read, or a sample written otherwise
    assert encode_model(changed(tree="t", gang="g", pool="/p", queue="q", tasks=[])) is None


@pytest.mark.parametrize("changed", [_NewField, _Retyped, _Reordered, _Optional], ids=lambda c: c.__name__)
def test_a_field_added_to_a_model_is_written_with_no_other_edit(changed: type[Any]) -> None:
    """A throwaway copy of `GangAdmitted` with fields added (or retyped, or reordered) is written
    by the fast path, as pydantic writes it, from its model alone."""
    assert converter(changed) is not None
    tasks = [TaskSpec(id="t", resources={"cpu": 0.5})]
    made = [changed(tree="t", gang="g", pool="/p", queue="q", tasks=tasks)]
    if changed is _Retyped:  # (its default, the int 1, is left to pydantic: it writes 1.0)
        made = [changed(tree="t", gang="g", pool="/p", queue="q", tasks=tasks, attempt=2.5)]
    if changed is _NewField:
        made.append(changed(tree="t", gang="g", pool="/p", queue="q", tasks=tasks, note="n"))
    if changed is _Optional:
        made += [changed(tree="t", gang="g", pool="/p", queue="q", tasks=tasks, note="n", weight=2.5,
                         labels={"a": "b"}),
                 changed(tree="t", gang="g", pool="/p", queue="q", tasks=tasks, weight=1e17)]  # pydantic: 1e+17
    for event in made:
        fast = encode_model(event)
        assert fast == event.model_dump_json(exclude_none=True).encode() or (fast is None and event in made[2:])


def test_an_instance_of_a_changed_model_is_not_encoded() -> None:
    event = _NewField(tree="t", gang="g", pool="/p", queue="q", tasks=[], note="n")
    assert encode_event_body(event) is None
    assert encode_envelope(construct(Envelope, id="e", time=T0, event=event)) is None
