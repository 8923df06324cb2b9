"""Turning a pydantic ValidationError into one readable problem at one place of the document.

pydantic puts union member tags in error locations (`tasks.constrained-int`,
`tasks.list[EnqueueTask].0`); they are dropped by walking the location along the input data:
a step that is not a key (or index) of the data there is a tag.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from services.tools.scenario.errors import Loc

# What a type error says the value should have been.
_EXPECTED = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "string_type": "text",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "none_required": "nothing (null)",
}


def describe(exc: ValidationError, data: Any, root: type[BaseModel]) -> tuple[Loc, str]:
    """The place and a readable problem for the most telling error of `exc`."""
    errors: list[dict[str, Any]] = [dict(e) for e in exc.errors(include_url=False)]
    # An unknown key (a typo) usually explains the rest (`pol: /p` also leaves `pool` missing).
    errors.sort(key=lambda e: e.get("type") != "extra_forbidden")
    cleaned = [(_clean(tuple(e.get("loc") or ()), data, str(e.get("type", ""))), e) for e in errors]
    first_loc = cleaned[0][0]
    # Prefer the deepest error under the first one's place (a union's matching branch).
    loc = max((c for c, _ in cleaned if c[: len(first_loc)] == first_loc), key=len)
    group = [e for c, e in cleaned if c == loc]
    constraint = [e for e in group if e.get("type") not in _EXPECTED]
    if constraint:
        return _place_and_message(loc, constraint[0], root)
    expected = list(dict.fromkeys(_EXPECTED[str(e["type"])] for e in group))
    return loc, f"expected {' or '.join(expected)}, got {_show(group[0].get('input'))}"


def _place_and_message(loc: Loc, error: dict[str, Any], root: type[BaseModel]) -> tuple[Loc, str]:
    kind = str(error.get("type", ""))
    ctx: dict[str, Any] = error.get("ctx") or {}
    value = error.get("input")
    if kind == "missing":
        return loc[:-1], f"missing required key `{loc[-1]}`" if loc else "missing a required value"
    if kind == "extra_forbidden":
        allowed = allowed_keys(root, loc[:-1])
        known = f"; known keys here: {', '.join(allowed)}" if allowed else ""
        return loc, f"unknown key `{loc[-1]}`{known}" if loc else f"unknown key{known}"
    if kind == "literal_error":
        return loc, f"expected one of {ctx.get('expected', '?')}, got {_show(value)}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        words = {"greater_than_equal": "at least", "greater_than": "more than",
                 "less_than_equal": "at most", "less_than": "less than"}[kind]
        bound = next(iter(ctx.values()), "?")
        return loc, f"must be {words} {bound}, got {_show(value)}"
    if kind == "too_short":
        return loc, f"must have at least {ctx.get('min_length', 1)} item(s)"
    if kind == "string_too_short":
        return loc, "must not be empty"
    if kind in ("value_error", "assertion_error"):
        message = str(error.get("msg", ""))
        for prefix in ("Value error, ", "Assertion failed, "):
            message = message.removeprefix(prefix)
        return loc, message
    return loc, str(error.get("msg", "invalid value"))


def _clean(loc: Loc, data: Any, kind: str) -> Loc:
    out: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            out.append(part)
            node = node[part]
        elif isinstance(node, dict) and last and kind == "missing":
            out.append(part)
        # anything else is a union tag: skip it
    return tuple(out)


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


def allowed_keys(root: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The field names of the model at `loc` below `root`, if the walk finds one."""
    current: Any = root
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    model = _model_of(current)
    return list(model.model_fields) if model is not None else []


def _members(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _members(typing.get_args(tp)[0])
    if origin is typing.Union or origin is types.UnionType:
        out: list[Any] = []
        for arg in typing.get_args(tp):
            if arg is not type(None):
                out.extend(_members(arg))
        return out
    return [tp]


def _model_of(tp: Any) -> type[BaseModel] | None:
    for member in _members(tp):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _step(tp: Any, part: str | int) -> Any:
    for member in _members(tp):
        if isinstance(member, type) and issubclass(member, BaseModel):
            if isinstance(part, str) and part in member.model_fields:
                return member.model_fields[part].annotation
            continue
        origin = typing.get_origin(member)
        args = typing.get_args(member)
        if origin is list and isinstance(part, int) and args:
            return args[0]
        if origin is dict and len(args) == 2:
            return args[1]
    return None
