"""A message that nats-server delivers for the first time after later ones is never dropped
(JetStream only). Seen after a reconnect (an in-flight message came again after later ones, with
consecutive consumer sequences); the puller used to skip it as a redelivery whenever no reconnect
came first. Here the delivery order is swapped in the client: the puller's `_on_run` holds back
one message and passes it on after the next one, as the server would have.

- still buffered when the late one comes (the usual case: one pull batch): the consumer is made
  again from the last message handled, and the handler sees every message once, in order;
- `read` gives every message in order;
- the later message handled already: `consume` ends with `OutOfOrderDelivery` naming the late
  message (the service's supervisor starts it again; it never goes on without it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from events import Envelope, GangCancelled
from services.common import jetstream_pull
from services.common.jetstream import JetStreamLog, OutOfOrderDelivery
from services.common.log import Stored

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SAFETY = 60  # seconds: a hung test fails instead of hanging the run (not a timing assertion)


def cancels(n: int) -> list[Envelope]:
    return [Envelope(id=f"late-{i}", time=T0, source="test", event=GangCancelled(tree="t1", gang=f"g{i}"))
            for i in range(n)]


class Swap:
    """Holds back the first delivery of stream sequence `late` and passes it on right after the
    delivery of `late + 1` (or, with `by_hand`, when `release()` is called), with consumer
    sequences following the order of delivery, as the server numbers what it sends: the messages
    after it come with theirs one lower, and it with the next one. It sits where the puller takes
    its messages (`Puller._on_run`, runs of raw messages), one message at a time."""

    def __init__(self, late: int, by_hand: bool = False) -> None:
        self.late = late
        self.by_hand = by_hand
        self.held: tuple[Any, list[bytes], tuple[bytes, bytes, bytes]] | None = None
        self.swapped = 0
        self.last_cseq = 0
        self.original: Callable[..., Any] = jetstream_pull.Puller._on_run

    def on_run(self, puller: Any, run: list[tuple[bytes, bytes, bytes, bytes]]) -> Any:
        later = None
        for subject, reply, headers, data in run:
            later = self.on_data(puller, subject, reply, headers, data)
        return later

    def on_data(self, puller: Any, subject: bytes, reply: bytes, headers: bytes, data: bytes) -> Any:
        tokens = reply.split(b".")  # $JS.ACK[.<domain>.<account>].<stream>.<consumer>.<delivered>.<sseq>.<cseq>...
        at = 5 if len(tokens) == 9 else 7
        sseq = int(tokens[at])
        if sseq == self.late and self.held is None and not self.swapped:
            self.held = (puller, tokens, (subject, headers, data))
            return None
        if self.held is not None:  # numbered as if the held one had not been sent yet
            tokens[at + 1] = str(int(tokens[at + 1]) - 1).encode()
        self.last_cseq = int(tokens[at + 1])
        later = self.original(puller, [(subject, b".".join(tokens), headers, data)])
        if sseq == self.late + 1 and not self.by_hand:
            later = self.release() or later
        return later

    def release(self) -> Any:
        if self.held is None:
            return None
        puller, tokens, (subject, headers, data) = self.held
        self.held = None
        self.swapped += 1
        at = 5 if len(tokens) == 9 else 7
        tokens[at + 1] = str(self.last_cseq + 1).encode()
        return self.original(puller, [(subject, b".".join(tokens), headers, data)])


@pytest.fixture
def swap(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int, bool], Swap]]:
    def make(late: int, by_hand: bool = False) -> Swap:
        made = Swap(late, by_hand)
        monkeypatch.setattr(jetstream_pull.Puller, "_on_run", lambda puller, run: made.on_run(puller, run))
        return made

    yield make


async def test_a_late_first_delivery_still_buffered_is_handled_in_order(
        jetstream_log: JetStreamLog, swap: Callable[[int, bool], Swap]) -> None:
    await jetstream_log.append(cancels(20))
    swapped = swap(7, False)
    seen: list[int] = []

    async def handler(batch: Sequence[Stored]) -> None:
        seen.extend(s.seq for s in batch)
        if seen and seen[-1] >= 20:
            tg.cancel_scope.cancel()

    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: jetstream_log.consume("late", ["poolwise.>"], 0, handler, max_batch=100))
    assert swapped.swapped == 1
    assert seen == list(range(1, 21))  # 7 was not skipped, nothing twice


async def test_read_gives_a_late_first_delivery_in_order(
        jetstream_log: JetStreamLog, swap: Callable[[int, bool], Swap]) -> None:
    await jetstream_log.append(cancels(20))
    swapped = swap(12, False)
    with anyio.fail_after(SAFETY):
        stored = await jetstream_log.read(1)
    assert swapped.swapped == 1
    assert [s.seq for s in stored] == list(range(1, 21))


async def test_a_late_first_delivery_after_later_ones_were_handled_ends_the_consumer(
        jetstream_log: JetStreamLog, swap: Callable[[int, bool], Swap]) -> None:
    await jetstream_log.append(cancels(20))
    swapped = swap(5, True)
    seen: list[int] = []

    async def handler(batch: Sequence[Stored]) -> None:
        seen.extend(s.seq for s in batch)
        if 6 in seen:
            later = swapped.release()  # 5 comes now, after 6 was handled
            if later is not None:  # (the pull request it asks for)
                await later

    with anyio.fail_after(SAFETY), pytest.raises(OutOfOrderDelivery, match="stream sequence 5 was delivered after"):
        await jetstream_log.consume("late", ["poolwise.>"], 0, handler, max_batch=1)
    assert 5 not in seen and 6 in seen
