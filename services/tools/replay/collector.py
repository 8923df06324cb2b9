"""`fewer_collections()`: the cyclic garbage collector's youngest generation collected rarely while
a replay verifies a long log in two processes.

The parent reads every message of the log into a `Stored` (and the child's rows, and each piece's
decoded envelopes): many small objects, nearly all freed by reference counting a piece later. With
the default threshold (700 allocations) that made 1,426 collections, ~0.5 CPU s of the parent's
~11 on the 100k-gang soak history; with 100,000, one, and the parent ~0.35 s cheaper
(docs/performance.md, "Replay"). The folds themselves run with the collector off already
(`folding.gc_paused`). Process-wide, as the collector is: counted, so that overlapping replays in
one process (a service's) leave the thresholds as they found them when the last one ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNGEST = 100_000  # allocations between two collections of the youngest generation while held


class _Held:
    depth = 0
    before: tuple[int, int, int] = (700, 10, 10)


@contextmanager
def fewer_collections() -> Iterator[None]:
    if _Held.depth == 0:
        _Held.before = gc.get_threshold()
        gc.set_threshold(max(YOUNGEST, _Held.before[0]), *_Held.before[1:])
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
        if _Held.depth == 0:
            gc.set_threshold(*_Held.before)
