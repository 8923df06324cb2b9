"""How explanations spell their numbers for people: resource vectors, counts of task states,
plurals, and log times as calendar dates (pure: no datetime, so no time zone or clock is read)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from services.tree.domain.amounts import spell


def vector_text(values: Mapping[str, float]) -> str:
    shown = {k: v for k, v in values.items() if v}
    return ",".join(f"{k}={spell(v)}" for k, v in sorted(shown.items())) or "nothing"


def states_text(states: Iterable[str]) -> str:
    counts = Counter(states)
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def count_text(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def at_text(seconds: float | None) -> str:
    return "" if seconds is None else f"at {clock_text(seconds)} "


def clock_text(seconds: float) -> str:
    """Log time (seconds since the epoch) as `YYYY-MM-DD HH:MM:SS UTC` (pure: no datetime)."""
    whole = int(seconds // 1)
    days, rest = divmod(whole, 86400)
    hour, rest = divmod(rest, 3600)
    minute, second = divmod(rest, 60)
    year, month, day = _civil(days)
    return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d} UTC"


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01 (H. Hinnant's `civil_from_days`)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if month <= 2 else 0), month, day
