"""Parsing of the CLI's compact argument forms (`cpu=100,memory=1000`)."""

from __future__ import annotations

import math
import re

# (re-exported: InputError lives below the CLI, where the launcher raises it too)
from services.common.input_error import InputError as InputError


class ServiceError(Exception):
    """The service refused a command: `rule` names the broken rule. (Here, not in
    `services.tools.cli.client`, which re-exports it: the CLI's error handling needs the class, and
    every command's start would otherwise import NATS and the event contract with it.)"""

    def __init__(self, rule: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.field = field


def parse_resources(text: str, *, option: str = "resources") -> dict[str, float]:
    """`cpu=100,memory=1000` -> {"cpu": 100.0, "memory": 1000.0}. Negative values pass through
    (the service refuses them, naming the rule); a malformed pair is an InputError naming the option."""
    result: dict[str, float] = {}
    if not text.strip():
        return result
    for pair in text.split(","):
        kind, sep, amount = pair.partition("=")
        kind = kind.strip()
        if not sep or not kind:
            raise InputError(f"--{option}: expected kind=amount pairs like cpu=100,memory=1000, got {pair!r}")
        if kind in result:
            raise InputError(f"--{option}: kind {kind!r} given twice")
        try:
            value = float(amount)
        except ValueError:
            raise InputError(f"--{option}: amount of {kind!r} must be a number, got {amount.strip()!r}") from None
        if not math.isfinite(value):
            raise InputError(f"--{option}: amount of {kind!r} must be finite, got {amount.strip()!r}")
        result[kind] = value
    return result


def parse_share(text: str) -> float | dict[str, float]:
    """`2` -> 2.0; `cpu=2,gpu=1` -> per-kind shares."""
    try:
        return float(text)
    except ValueError:
        return parse_resources(text, option="share")


def parse_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def format_resources(values: dict[str, float] | None, kinds: list[str] | None = None) -> str:
    """{"cpu": 100.0} -> `cpu=100`; kinds fixes the order and shows zeros for missing kinds."""
    if not values:
        return "-"
    keys = [k for k in (kinds or sorted(values)) if k in values] if kinds else sorted(values)
    return ",".join(f"{k}={_num(values[k])}" for k in keys)


def _num(value: float) -> str:
    if math.isinf(value):
        return "inf"
    return f"{value:g}" if abs(value) < 1e15 else str(value)


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)")


def parse_duration(text: str | None, *, option: str = "duration") -> float | None:
    """`30d`, `12h`, `1h30m`, `90s`, `3600` (seconds) -> seconds; `off`, `none` or empty -> None."""
    if text is None or text.strip().lower() in ("", "off", "none"):
        return None
    compact = text.strip().lower()
    pos, total = 0, 0.0
    while pos < len(compact):
        found = _DURATION.match(compact, pos)
        if found is None or (not found.group(2) and found.end() < len(compact)):
            raise InputError(f"--{option}: expected a duration like 30d, 12h, 1h30m, 90s or 3600 (seconds), "
                             f"or off; got {text!r}")
        total += float(found.group(1)) * _DURATION_UNITS[found.group(2) or "s"]
        pos = found.end()
        while pos < len(compact) and compact[pos] == " ":
            pos += 1
    if not math.isfinite(total):
        raise InputError(f"--{option}: must be finite, got {text!r}")
    return total


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)
MOST_SIZE = 2**50  # (1024TiB: DuckDB refuses a limit from ~16 EiB on; anything near this is a typo)


def parse_size(text: str, *, name: str, least: int = 0) -> str:
    """A memory size as DuckDB reads it (`512MB`, `2GiB`, `1.5GB`: decimal or binary units), at
    least `least` bytes and under 1024TiB; returned as given, without blanks. `name`: the setting,
    as the error names it (`--sql-memory`, `POOLWISE_SQL_MEMORY`)."""
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        raise InputError(f"{name}: expected a size like 512MB, 2GB or 1GiB (a number and a unit of KB, MB, "
                         f"GB, TB, KiB, MiB, GiB or TiB); got {text!r}")
    unit = found[2].upper()
    power = "KMGT".index(unit[0]) + 1
    size = float(found[1]) * (2 ** (10 * power) if unit.endswith("IB") else 10 ** (3 * power))
    if size < least:
        raise InputError(f"{name}: at least {least / 2**20:g}MiB; got {text!r}")
    if size >= MOST_SIZE:
        raise InputError(f"{name}: less than 1024TiB; got {text!r}")
    return f"{found[1]}{found[2]}"
