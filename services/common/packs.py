"""How a batch of envelopes becomes log messages: runs of packable decisions share one message.

`outgoing(envelopes, ...)` groups consecutive envelopes whose type is in `events.PACKABLE` and
that go to the same subject into packs (`events.encode_pack`) of at most `PACK_EVENTS` events
and `PACK_BYTES` bytes (well under NATS's 1 MiB default payload limit); every other envelope is a
message of its own, as before. A pack's message id (JetStream de-duplicates on it) is derived from
the ids of its events, so sending the same pack again stores it once; a restarted service does
not rely on it: it compares event ids (`services.common.folding.rebuild`).

Both log adapters append through this, so the in-memory log and JetStream store the same messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from events import PACKABLE, Envelope, derived_id, encode_pack

PACK_EVENTS = 1000
PACK_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to append: its subject, bytes, message id, and which envelopes it carries
    (`first`, `count`: a slice of the appended sequence)."""

    subject: str
    data: bytes
    msg_id: str
    first: int
    count: int


def outgoing(envelopes: Sequence[Envelope], subject_of: Callable[[Envelope], str],
             encode_one: Callable[[Envelope], bytes], *, max_events: int = PACK_EVENTS,
             max_bytes: int = PACK_BYTES) -> list[Outgoing]:
    out: list[Outgoing] = []
    run: list[bytes] = []
    run_first, run_subject, run_bytes = 0, "", 0

    def close() -> None:
        nonlocal run
        if run:
            first, last = envelopes[run_first], envelopes[run_first + len(run) - 1]
            msg_id = first.id if len(run) == 1 else derived_id("pack", first.id, last.id, len(run))
            out.append(Outgoing(run_subject, encode_pack(run), msg_id, run_first, len(run)))
            run = []

    for index, envelope in enumerate(envelopes):
        subject = subject_of(envelope)
        data = encode_one(envelope)
        if envelope.event.type not in PACKABLE:
            close()
            out.append(Outgoing(subject, data, envelope.id, index, 1))
            continue
        if run and (subject != run_subject or len(run) >= max_events or run_bytes + len(data) + 2 > max_bytes):
            close()
        if not run:
            run_first, run_subject, run_bytes = index, subject, 2
        run.append(data)
        run_bytes += len(data) + 2
    close()
    return out
