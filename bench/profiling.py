"""Where the time goes: summaries of cProfile runs and of py-spy's collapsed stacks, as rows of
(function, share of samples or time). Nothing runs at import.

- `profiled(fn)`: run `fn()` under cProfile (this thread only) and return its result and the
  `pstats.Stats`;
- `top_cprofile(stats, n)`: the `n` functions with the most own time, with their share of the
  total and their cumulative time;
- `top_collapsed(path, n)`: the same from `py-spy record --format raw` output (every thread of
  the process, sampled): own share (the function was on top of the stack) and inclusive share
  (anywhere on the stack).

    py-spy record --format raw -o stacks.txt -- python -m bench.pipeline 20000 100
    python -m bench.profiling stacks.txt
"""

from __future__ import annotations

import cProfile
import pstats
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


@dataclass(frozen=True, slots=True)
class Hotspot:
    function: str  # "file:function"
    own: float  # share of the total (0..1): own time / samples on top
    inclusive: float  # share of the total with callees
    calls: int = 0  # cProfile only


def profiled(fn: Callable[[], T]) -> tuple[T, pstats.Stats]:
    profile = cProfile.Profile()
    profile.enable()
    try:
        result = fn()
    finally:
        profile.disable()
    return result, pstats.Stats(profile)


def _short(path: str) -> str:
    """A path without its site-packages, checkout or standard-library prefix."""
    if "/site-packages/" in path:
        return path.split("/site-packages/", 1)[1]
    root = str(Path(__file__).resolve().parent.parent) + "/"
    if path.startswith(root):
        return path[len(root):]
    if "/lib/python3" in path:
        return path.split("/lib/python3", 1)[1].partition("/")[2]
    return path


def top_cprofile(stats: pstats.Stats, n: int = 15) -> list[Hotspot]:
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, tt, _, _) in raw.values()) or 1.0
    rows = []
    for (file, line, func), (_, calls, tt, ct, _) in raw.items():
        name = f"{_short(file)}:{line}:{func}" if line else func
        rows.append(Hotspot(name, tt / total, ct / total, calls))
    rows.sort(key=lambda h: h.own, reverse=True)
    return rows[:n]


def _frame_name(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    return f"{_short(match.group('file'))}:{match.group('func')}"


_IDLE = frozenset({"wait", "select", "poll", "_do_waitpid", "acquire", "sleep", "_wait_for_tstate_lock"})


def _idle(frame: str) -> bool:
    """A thread blocked in a wait (py-spy counts some GIL-free waits as active)."""
    return frame.rsplit(":", 1)[-1].rsplit(".", 1)[-1] in _IDLE


def top_collapsed(path: Path | str, n: int = 15, *, skip_idle: bool = True) -> tuple[list[Hotspot], int]:
    """Own and inclusive shares per function from py-spy raw (collapsed) stacks; and the sample count."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    samples = 0
    for line in Path(path).read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if skip_idle and frames and _idle(frames[-1]):
            continue
        samples += count
        if frames:
            own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    total = samples or 1
    rows = [Hotspot(name, own[name] / total, inclusive[name] / total) for name, _ in own.most_common(n)]
    return rows, samples


def top_inclusive(path: Path | str, names: list[str]) -> dict[str, float]:
    """Inclusive shares of the given functions (as `file:function`) in py-spy raw stacks."""
    hits: Counter[str] = Counter()
    samples = 0
    for line in Path(path).read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = {_frame_name(f) for f in stack.split(";") if f}
        if not frames or _idle(_frame_name(stack.split(";")[-1])):
            continue
        samples += count
        for name in names:
            if any(f.endswith(name) for f in frames):
                hits[name] += count
    return {name: hits[name] / (samples or 1) for name in names}


def main(argv: list[str]) -> None:
    path = argv[0]
    count = int(argv[1]) if len(argv) > 1 else 25
    rows, samples = top_collapsed(path, count)
    print(f"{samples} samples (idle waits left out)")
    for row in rows:
        print(f"{row.own * 100:6.1f}% own {row.inclusive * 100:6.1f}% incl  {row.function}")


if __name__ == "__main__":
    main(sys.argv[1:])
