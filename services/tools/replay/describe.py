"""How a finding says what it is about and what differs: a decision as compared (`wire`: as encoded
on the wire, minus what is ignored), the fields that differ between two (`differences`), a record
on another subject than its decision's (`on_subject`), the key fields of its event (`about`), and
what each kind of finding says (its `detail`): written here once, for the verifier (verify.py) and
the whole-list verifier the tests keep as a reference (tests/replay/reference.py)."""

from __future__ import annotations

import json
from typing import Any

from events import Envelope, encode
from services.tools.replay.decoding import IGNORED_ENVELOPE_FIELDS


def wire(envelope: Envelope) -> dict[str, Any]:
    """The envelope as compared: as encoded on the wire (numbers as rounded there), minus what is ignored."""
    data: dict[str, Any] = json.loads(encode(envelope))
    for name in IGNORED_ENVELOPE_FIELDS:
        data.pop(name, None)
    return data


def differences(recorded: Any, derived: Any, path: str = "", limit: int = 5) -> list[str]:
    """Where two JSON values differ, as `path: recorded != re-derived` (at most `limit`)."""
    if isinstance(recorded, dict) and isinstance(derived, dict):
        out: list[str] = []
        for key in sorted(set(recorded) | set(derived)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in derived:
                out.append(f"{sub}: {_short(recorded[key])} recorded, absent re-derived")
            elif key not in recorded:
                out.append(f"{sub}: absent recorded, {_short(derived[key])} re-derived")
            else:
                out.extend(differences(recorded[key], derived[key], sub, limit - len(out)))
            if len(out) >= limit:
                return out[:limit]
        return out
    if isinstance(recorded, list) and isinstance(derived, list) and len(recorded) == len(derived):
        out = []
        for i, (a, b) in enumerate(zip(recorded, derived, strict=True)):
            out.extend(differences(a, b, f"{path}[{i}]", limit - len(out)))
            if len(out) >= limit:
                return out[:limit]
        return out
    if recorded == derived:
        return []
    return [f"{path or '(value)'}: {_short(recorded)} recorded != {_short(derived)} re-derived"]


def on_subject(recorded: str, expected: str) -> str:
    """A record on another subject than the one its decision is recorded on (`decoding.subject_of`),
    worded as `differences` words a field: `subject: "X" recorded != "Y" re-derived`."""
    return differences({"subject": recorded}, {"subject": expected})[0]


# --- what a finding says (its `detail`, besides what differs) ------------------------------------------------

RECORDED_TWICE = "the id is recorded more than once"  # duplicate
NOT_DECIDED = "recorded, but no service decides it from this log"  # unexpected
BEFORE_BASIS = "recorded at or before its basis"  # unexpected: moved there (a service records after its basis)
NOT_RECORDED = "re-derived, but not in the log"  # missing


def derived_times(times: int) -> str:
    """A duplicate re-derivation: a service would publish it once (de-duplicated)."""
    return f"re-derived {times} times"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


# --- what a decision is about -----------------------------------------------------------------------

ABOUT_LIMIT = 240  # characters of a finding's `about`
_TEXT = 48  # characters of one string field
_ITEMS = 3  # items of a list shown (then `…`)


def about(wired: dict[str, Any] | None) -> str:
    """The key fields of a decision's event, generically from its fields in declaration order
    (`tree=default gang=g2 pool=/p queue=pending tasks=[2: g2/0, g2/1] attempt=1`): scalars as they
    are (long texts cut), lists as their length and first items (an item with an `id` or a `path`
    by it), mappings as `{k: v}`; `type` and `version` left out (the finding names the type)."""
    event = (wired or {}).get("event")
    if not isinstance(event, dict):
        return ""
    parts: list[str] = []
    for name, value in event.items():
        if name in ("type", "version") or value is None or value == [] or value == {}:
            continue
        parts.append(f"{name}={_brief(value)}")
    text = " ".join(parts)
    return text if len(text) <= ABOUT_LIMIT else text[:ABOUT_LIMIT - 1] + "…"


def _brief(value: Any, depth: int = 0) -> str:
    if isinstance(value, str):
        text = value if len(value) <= _TEXT else value[:_TEXT - 1] + "…"
        return text if text and " " not in text and "=" not in text else json.dumps(text, ensure_ascii=False)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        items = [_item(v, depth) for v in value[:_ITEMS]]
        more = ", …" if len(value) > _ITEMS else ""
        return f"[{len(value)}: {', '.join(items)}{more}]"
    if isinstance(value, dict):
        if depth:
            return "{…}"
        items = [f"{k}: {_brief(v, depth + 1)}" for k, v in list(value.items())[:_ITEMS]]
        more = ", …" if len(value) > _ITEMS else ""
        return "{" + ", ".join(items) + more + "}"
    return json.dumps(value)


def _item(value: Any, depth: int) -> str:
    if isinstance(value, dict):
        for key in ("id", "path", "gang", "task", "name"):
            if isinstance(value.get(key), str):
                return _brief(value[key], depth + 1)
    return _brief(value, depth + 1)
