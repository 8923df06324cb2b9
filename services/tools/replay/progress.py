"""How far a replay has got: what the reader (and the verifier's own process, through it) reports
after each piece, for the CLI's progress bar."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Progress:
    position: int  # the last position verified
    end: int  # the last position to fold: the stream's last sequence when the replay started, or `to_seq`
    messages: int
    events: int
    elapsed: float  # seconds since the replay started

    @property
    def events_per_second(self) -> float:
        return self.events / self.elapsed if self.elapsed > 0 else 0.0


OnProgress = Callable[[Progress], None]
