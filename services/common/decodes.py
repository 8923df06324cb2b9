"""Decoded envelopes shared within one process: decode once, and never decode what we encoded.

Decoding is a pure function of a message's bytes, and envelopes are immutable values, so a
process may hand the same envelope to everyone who reads the same bytes:

- services in one process (`poolwise up --single-process`, the tests) consume the same messages,
  each with its own durable consumer: the first folder to fold a message decodes it, the others
  take that envelope;
- a service reads back its own decisions (they take effect where they land in the log): the
  log adapters encode through `SHARED.encode`, which remembers the envelope it encoded while a
  folder of this process consumes the log, so reading the decision back costs a dictionary look-up
  instead of a decode (docs/performance.md, "Wire contract derived from the models").

An entry is dropped once every folder of the process has taken it, or when `limit` newer ones push
it out (a folder that lags far behind, or does not fold that subject, decodes for itself: the
limit bounds the memory a lagging folder can hold here, measured in docs/performance.md, "Wire
contract derived from the models"). Malformed messages are not kept: each folder decodes them and gets the same
`DecodeError`. Used from one thread (the event loop's).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from events import Envelope, encode, read_envelope, read_pack
from events.codec import PACK_SEPARATOR


class SharedDecodes:
    def __init__(self, limit: int = 65_536) -> None:
        self.limit = limit
        self.users = 0  # folders of this process consuming the log now
        self._found: dict[bytes, tuple[Envelope, list[int]]] = {}  # data -> (envelope, [takes left])

    def decode(self, data: bytes) -> Envelope:
        """`events.read_envelope(data)` (a view of a gang event or a task report, else
        `events.decode(data)`), or the envelope another reader of this process decoded (or this
        process encoded) from the same bytes."""
        found = self._found.get(data) if self._found else None
        if found is not None:
            envelope, left = found
            left[0] -= 1
            if left[0] <= 0:
                del self._found[data]
            return envelope
        envelope = read_envelope(data)
        if self.users >= 2:
            self._keep(data, envelope, self.users - 1)
        return envelope

    def decode_pack(self, data: bytes) -> list[Envelope] | None:
        """A whole pack at once (`events.read_pack`), unless its parts are to be shared: with other
        folders of this process, or ours (its first part is one this process encoded or decoded
        already); None then, for `decode` part by part."""
        if self.users >= 2:
            return None
        if self._found:
            end = data.find(PACK_SEPARATOR)  # the first part ends there (events.encode_pack)
            if end < 0 or data[1:end] in self._found:
                return None
        return read_pack(data)

    def encode(self, envelope: Envelope) -> bytes:
        """`events.encode(envelope)`; while folders of this process consume the log, the bytes are
        remembered for them to take this envelope back when they read it."""
        data = encode(envelope)
        if self.users:
            self._keep(data, envelope, self.users)
        return data

    def _keep(self, data: bytes, envelope: Envelope, takes: int) -> None:
        self._found[data] = (envelope, [takes])
        if len(self._found) > self.limit:
            del self._found[next(iter(self._found))]

    @contextmanager
    def user(self) -> Iterator[None]:
        """While a folder of this process consumes the log."""
        self.users += 1
        try:
            yield
        finally:
            self.users -= 1
            if self.users == 0:
                self._found.clear()


SHARED = SharedDecodes()
