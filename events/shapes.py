"""The shape of a model's fields, read from the model through pydantic's public API.

The pydantic models are the one statement of the wire contract. The fast paths (msgspec views
that decode, converters that encode) are derived from them at import, from what this module
reads: `model_fields` (each `FieldInfo`'s annotation, default or default factory, and its
`metadata`: `annotated_types` bounds and `pydantic.types.AllowInfNan`) and `model_config`. A
model, or a field, that uses anything else (aliases, computed fields, a union other than
`X | None` or a tagged union of models, a constraint not listed here) is `Unsupported`: the fast
paths leave it to pydantic. Validators and serializers are not visible through this API: the
encoder's import-time probe and the views' differential tests are what catch them.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import AwareDatetime, BaseModel
from pydantic.fields import FieldInfo
from pydantic.types import AllowInfNan

# model_config keys that change neither what a model accepts (beyond what is read here) nor what it writes
_CONFIG_KEYS = frozenset({"frozen", "extra", "allow_inf_nan", "title"})
_BOUNDS = {annotated_types.Ge: "ge", annotated_types.Gt: "gt", annotated_types.Le: "le", annotated_types.Lt: "lt",
           annotated_types.MinLen: "min_length", annotated_types.MaxLen: "max_length"}


class Unsupported(TypeError):
    """A model or field the derived fast paths do not handle (pydantic does)."""


REQUIRED: Any = object()  # `FieldShape.default` of a field without a default


@dataclass(frozen=True, slots=True)
class Shape:
    """A value's type: `kind` is one of `str`, `int`, `float`, `bool`, `literal` (of `values`),
    `datetime` (aware), `list` and `dict` (str keys; of `item`), `model` (`model`), `union`
    (`choices`, models tagged by their field `tag`). `nullable`: None is allowed too. `bounds`:
    `ge`/`gt`/`le`/`lt` for numbers, `min_length`/`max_length` for strings and lists. `finite`: a
    float that may not be inf or nan."""

    kind: str
    nullable: bool = False
    item: Shape | None = None
    model: type[BaseModel] | None = None
    choices: tuple[type[BaseModel], ...] = ()
    tag: str | None = None
    values: tuple[Any, ...] = ()
    bounds: tuple[tuple[str, Any], ...] = ()
    finite: bool = False


@dataclass(frozen=True, slots=True)
class FieldShape:
    """One field of a model, in declaration order: its shape and its default (`REQUIRED`: none),
    or the factory of its default."""

    name: str
    shape: Shape
    default: Any = REQUIRED
    default_factory: Callable[[], Any] | None = field(default=None)


def model_fields(cls: type[BaseModel]) -> tuple[FieldShape, ...]:
    """The fields of `cls` in declaration order (else `Unsupported`, naming what is not handled)."""
    config = cls.model_config
    unknown = set(config) - _CONFIG_KEYS
    if unknown or config.get("extra") not in ("forbid", "ignore") or cls.model_computed_fields:
        raise Unsupported(f"{cls.__name__}: config {sorted(unknown)} or computed fields")
    finite = config.get("allow_inf_nan") is False
    out: list[FieldShape] = []
    for name, info in cls.model_fields.items():
        if info.alias is not None or info.validation_alias is not None or info.serialization_alias is not None \
                or info.exclude or info.validate_default:
            raise Unsupported(f"{cls.__name__}.{name}: aliases, exclude or validate_default")
        try:
            shape = _shape(info.annotation, list(info.metadata), finite, info.discriminator)
        except Unsupported as exc:
            raise Unsupported(f"{cls.__name__}.{name}: {exc}") from None
        factory = info.default_factory
        if factory is not None:
            out.append(FieldShape(name, shape, REQUIRED, factory))  # type: ignore[arg-type]
        else:
            out.append(FieldShape(name, shape, REQUIRED if info.is_required() else info.default))
    return tuple(out)


def _shape(annotation: Any, metadata: list[Any], finite: bool, discriminator: Any = None) -> Shape:
    """The shape of `annotation` with the constraints in `metadata` (a field's, or an `Annotated`'s)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _shape(args[0], [*metadata, *args[1:]], finite, discriminator)
    bounds: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, FieldInfo):  # Annotated[float, Field(ge=0)] inside a generic
            inner = item.metadata
            if item.discriminator is not None:
                discriminator = item.discriminator
        else:
            inner = [item]
        for constraint in inner:
            if isinstance(constraint, AllowInfNan):
                finite = not constraint.allow_inf_nan
            elif type(constraint) in _BOUNDS:
                key = _BOUNDS[type(constraint)]
                bounds[key] = getattr(constraint, key)
            else:
                raise Unsupported(f"constraint {constraint!r}")
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        if len(members) == 1:
            inner_shape = _shape(members[0], [], finite)
            if bounds:
                inner_shape = replace(inner_shape, bounds=tuple(sorted(bounds.items())))
            return replace(inner_shape, nullable=nullable)
        models = tuple(m for m in members if isinstance(m, type) and issubclass(m, BaseModel))
        if not isinstance(discriminator, str) or len(models) != len(members) or bounds:
            raise Unsupported(f"union {annotation!r}")
        return Shape("union", nullable, choices=models, tag=discriminator)
    bound = tuple(sorted(bounds.items()))
    if origin is Literal:
        if not (all(type(v) is str for v in args) or all(type(v) is int for v in args)) or bound:
            raise Unsupported(f"literal {annotation!r}")
        return Shape("literal", values=args)
    if origin is list:
        return Shape("list", item=_shape(args[0], [], finite), bounds=bound)
    if origin is dict:
        if args[0] is not str or bound:
            raise Unsupported(f"dict {annotation!r}")
        return Shape("dict", item=_shape(args[1], [], finite))
    if annotation in (str, int, bool):
        return Shape(annotation.__name__, bounds=bound)
    if annotation is float:
        return Shape("float", bounds=bound, finite=finite)
    if annotation is AwareDatetime and not bound:
        return Shape("datetime")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and not bound:
        return Shape("model", model=annotation)
    if annotation is datetime:
        raise Unsupported("a naive-or-aware datetime (only AwareDatetime is)")
    raise Unsupported(f"type {annotation!r}")

