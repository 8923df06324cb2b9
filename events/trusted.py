"""Models built from values that are valid already, without validating them again.

A service that builds a model per gang from values it took from validated events or made itself
(admission's `GangAdmitted` and decision envelopes: `services/admission/domain/trusted.py`,
`services/admission/envelopes.py`) pays pydantic's validation for nothing. `builder(cls)` gives
`build(**values)`, the model `cls.model_validate(values)` would give for such values: equal, the
same fields set (the names given), the `__dict__` in declaration order with the defaults in
place, so encoded to the same bytes. It writes the instance as pydantic's public
`model_construct` does (its `__dict__` and the other slots of `BaseModel`), without
`model_construct`'s per-field work (aliases, defaults looked up per call); the values are not
checked (types, bounds): the caller vouches for them.

Derived, not restated: the fields, their order and defaults are read from the model
(`events.shapes`), so a field added to a model with a default is filled in with no edit here or
in the builders. A name that is not a field raises `TypeError`; a required field is not looked
for (a check per call: the builders' tests give every field they name).

What it relies on is checked when a builder is made, through public API only: the model has no
validators (`__pydantic_decorators__`), post-init or root model, and a model built here matches
`model_construct`'s from the same values in every slot of `BaseModel` (`__slots__`). If either
fails (a model given a validator, a pydantic release that lays instances out otherwise), the
builder validates instead: slower, never wrong. `tests/events/test_trusted.py` fails if that
happens to the models admission builds, and pins the layout (`BaseModel.__slots__`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

from pydantic import BaseModel

from events.shapes import REQUIRED, Unsupported, model_fields

M = TypeVar("M", bound=BaseModel)

_new = object.__new__
_set = object.__setattr__
# The slots `model_construct` writes: `__dict__` and these three (checked by `_agrees` for every builder).
_SLOTS: Final = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
_FACTORY = object()  # in a builder's defaults: a field whose default comes from a factory


def _plain(cls: type[BaseModel]) -> bool:
    """Nothing validation would do beyond checking the values: no validators, no post-init, not a root model."""
    decorators = cls.__pydantic_decorators__
    return (cls.__pydantic_post_init__ is None and not cls.__pydantic_root_model__
            and not (decorators.validators or decorators.field_validators or decorators.model_validators
                     or decorators.root_validators))


def _agrees(cls: type[M], build: Callable[..., M], names: tuple[str, ...]) -> bool:
    """`build` and `model_construct` make the same instance of placeholder values (neither
    checks them) in every slot, for every field given and for the required ones alone."""
    if tuple(BaseModel.__slots__) != _SLOTS:
        return False
    try:
        for given in (names, tuple(n for n in names if n in _required(cls))):
            values: dict[str, Any] = {name: object() for name in given}
            built, constructed = build(**values), cls.model_construct(**values)
            for slot in _SLOTS:
                a, b = getattr(built, slot), getattr(constructed, slot)
                if a != b or (slot == "__dict__" and list(a) != list(b)):
                    return False
    except Exception:  # e.g. a default factory that wants the validated data
        return False
    return True


def _required(cls: type[BaseModel]) -> frozenset[str]:
    return frozenset(f.name for f in model_fields(cls) if f.default is REQUIRED and f.default_factory is None)


def builder(cls: type[M]) -> Callable[..., M]:
    """`build(**values)`: `cls.model_validate(values)` for values validation keeps as they are
    (see the module doc), made without validating when `cls` allows it."""
    try:
        fields = model_fields(cls)
    except Unsupported:
        fields = ()
    if not fields or not _plain(cls):
        return _validating(cls)
    defaults = {f.name: _FACTORY if f.default_factory is not None else f.default for f in fields}
    factories = tuple((f.name, f.default_factory) for f in fields if f.default_factory is not None)
    size = len(defaults)
    required = _required(cls)

    def build(**values: Any) -> M:
        data = {**defaults, **values}  # in declaration order: the given values replace the defaults in place
        if len(data) != size:
            raise TypeError(f"{cls.__name__} has no field {sorted(set(data) - set(defaults))}")
        if len(values) < size and not required <= values.keys():
            # (a model left holding the sentinel would fail only when published: a crash loop)
            raise TypeError(f"{cls.__name__} needs field {sorted(required - values.keys())}")
        model = _new(cls)
        _set(model, "__dict__", data)
        _set(model, "__pydantic_fields_set__", set(values))
        _set(model, "__pydantic_extra__", None)
        _set(model, "__pydantic_private__", None)
        return model

    def build_with_factories(**values: Any) -> M:
        model = build(**values)
        data = model.__dict__
        for name, factory in factories:
            if data[name] is _FACTORY:
                data[name] = factory()
        return model

    made = build_with_factories if factories else build
    return made if _agrees(cls, made, tuple(defaults)) else _validating(cls)


def _validating(cls: type[M]) -> Callable[..., M]:
    def build(**values: Any) -> M:
        return cls.model_validate(values)

    build.validates = True  # type: ignore[attr-defined]  # read by tests: this model is not built fast
    return build


def validates(build: Callable[..., Any]) -> bool:
    """Whether `build` (made by `builder`) validates, instead of building fast."""
    return getattr(build, "validates", False)


__all__ = ["builder", "validates"]
