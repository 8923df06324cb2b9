"""`poolwise replay --verify --from SEQ` on a real JetStream log with snapshots in the server's
object store (saved as the services save them: `Snapshot(...).encode()`, anchored to the log, in
`ObjectStoreSnapshots`): it says from which snapshots it started, passes over corrupt and other-code
ones (and says why), finds forged and changed decisions after them, reports nothing on a clean log,
and falls back to the start when there is no usable snapshot at or before SEQ."""

from __future__ import annotations

import json
from contextlib import suppress
from typing import Any

import anyio
import pytest

from events import Envelope, GangAdmitted, decode_all
from services.common.folding import anchor_of
from services.common.jetstream import JetStreamLog
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.common.snapshots import ObjectStoreSnapshots, Snapshot, code_fingerprint
from services.tools.replay.verify import Verifier, command_refusals
from tests.replay.biglog import build, copy
from tests.replay.test_replay_cli import replay
from tests.service.test_replay import holding, rewritten

pytestmark = pytest.mark.anyio


async def lifecycle() -> list[Stored]:
    log = MemoryLog()
    await build(log, 60, per_round=12, leaves=3)
    return await log.read(1)


def state_at(messages: list[Stored], service: str, cut: int) -> Any:
    """What the service's fold holds through `cut` (admission as the live service exports it)."""
    verifier = Verifier(command_refusals(messages))
    verifier.feed([m for m in messages if m.seq <= cut])
    if service == "admission":
        from services.admission.domain.explain_history import History

        return (verifier.derivation.admission.export(), History())  # type: ignore[union-attr,attr-defined]
    if service == "preemption":
        return verifier.derivation.preemption.export()  # type: ignore[union-attr,attr-defined]
    return verifier.view


async def save(store: ObjectStoreSnapshots, log: JetStreamLog, messages: list[Stored], service: str, seq: int,
               fingerprint: str | None = None, anchor: int | None = None) -> None:
    """A snapshot of the service's fold through `seq`, saved as the service saves one."""
    snapshot = Snapshot(service, seq, fingerprint or code_fingerprint(), state_at(messages, service, seq),
                        anchor=anchor if anchor is not None else await anchor_of(log, seq))
    await store.save(service, seq, snapshot.encode())


def admitted_after(messages: list[Stored], seq: int) -> Envelope:
    for stored in messages:
        for envelope in decode_all(stored.data):
            if isinstance(envelope.event, GangAdmitted) and (envelope.basis or 0) > seq:
                return envelope
    raise AssertionError(f"no admission based after {seq}")


async def test_from_starts_at_the_snapshots_and_checks_what_follows(fresh_stream: str) -> None:
    messages = await lifecycle()
    last = messages[-1].seq
    at = last // 2  # --from
    starts = {"admission": at - 7, "preemption": at - 20, "tree": at - 3}
    # tampered after the snapshots: an admission changed, and one forged at the end
    real = admitted_after(messages, at)
    index = holding(messages, real.id)
    event = real.event
    assert isinstance(event, GangAdmitted)
    tampered = list(messages)
    tampered[index] = rewritten(messages[index], real.id,
                                real.model_copy(update={"event": event.model_copy(update={"pool": "/nowhere"})}))
    forged = real.model_copy(update={"id": "forged-after", "event": event.model_copy(update={"gang": "g999"})})
    await copy(tampered, fresh_stream)
    log = await JetStreamLog.connect(fresh_stream)
    try:
        js = log.nc.jetstream()
        with suppress(Exception):
            await js.delete_object_store("poolwise_snapshots")
        store = ObjectStoreSnapshots(js, log.stream)
        for service, seq in starts.items():
            await save(store, log, messages, service, seq)
        # newer ones at or before --from that must be passed over, and one after it (not looked at)
        good = await store.fetch("admission", starts["admission"])
        assert good is not None
        await store.save("admission", at - 1, good[:-40] + b"x" * 40)  # corrupt
        await save(store, log, messages, "preemption", at, fingerprint="other-code")
        await save(store, log, messages, "tree", at + 5)

        code, out, err = await replay(fresh_stream, "--from", str(at))
        assert code == 1 and err == "", out + err
        assert (f"--from {at}: from snapshots admission@{starts['admission']}, preemption@{starts['preemption']}, "
                f"tree@{starts['tree']}") in out, out
        assert f"snapshot passed over: admission@{at - 1}: corrupt" in out, out
        assert f"snapshot passed over: preemption@{at}: made by other code" in out, out
        assert f"tree@{at + 5}" not in out
        (line,) = [x for x in out.splitlines() if x.startswith("differs")]
        assert real.id in line and "event.pool" in line and '"/nowhere" recorded' in line, line

        await log.append([forged])
        report = json.loads((await replay(fresh_stream, "--from", str(at), "--json"))[1])
        assert sorted((f["kind"], f["id"]) for f in report["findings"]) == \
            [("differs", real.id), ("unexpected", "forged-after")]
        assert "gang=g999" in next(f["about"] for f in report["findings"] if f["id"] == "forged-after")
        assert report["scope"]["from_seq"] == at and report["scope"]["snapshots"] == starts
        assert report["scope"]["unchecked"] > 0
        assert report["messages"] == last + 1 - starts["preemption"]  # read from the earliest snapshot on
        for extra in (("--process-from", "1"), ("--chunk", "7")):  # the verifier's own process; other pieces
            same = json.loads((await replay(fresh_stream, "--from", str(at), "--json", *extra))[1])
            assert same["findings"] == report["findings"] and same["counts"] == report["counts"], extra

        # --from before every snapshot: no usable one, verified from the start (the same findings)
        code, out, _ = await replay(fresh_stream, "--from", str(starts["preemption"] - 1))
        assert code == 1 and "no usable snapshot at or before it: verified from the start" in out, out
        whole = json.loads((await replay(fresh_stream, "--json"))[1])
        assert sorted(f["id"] for f in whole["findings"]) == sorted(f["id"] for f in report["findings"])

        code, out, err = await replay(fresh_stream, "--from", "10", "--to", "5")
        assert code == 2 and "before --from" in out + err
        code, out, err = await replay(fresh_stream, "--from", "0")
        assert code == 2 and "--from 0" in out + err
    finally:
        await log.close()


async def test_from_on_a_clean_log_reports_nothing(fresh_stream: str) -> None:
    messages = await lifecycle()
    await copy(messages, fresh_stream)
    log = await JetStreamLog.connect(fresh_stream)
    try:
        js = log.nc.jetstream()
        with suppress(Exception):
            await js.delete_object_store("poolwise_snapshots")
        code, out, _ = await replay(fresh_stream, "--from", "50")  # no bucket at all: from the start
        assert code == 0 and "no usable snapshot at or before it" in out and "no snapshots on this server" in out
        with anyio.fail_after(10):
            assert not [s async for s in _buckets(js)]  # a replay creates no bucket
        store = ObjectStoreSnapshots(js, log.stream)
        last = messages[-1].seq
        for cut in (last // 4, last // 2):
            for service in ("admission", "preemption", "tree"):
                await save(store, log, messages, service, cut)
        for at, used in ((last // 2 - 1, last // 4), (last // 2, last // 2), (last, last // 2)):
            code, out, _ = await replay(fresh_stream, "--from", str(at), "--json")
            report = json.loads(out)
            assert code == 0 and report["ok"], out
            assert report["scope"]["snapshots"] == dict.fromkeys(("admission", "preemption", "tree"), used)
            assert sum(c["matched"] for c in report["counts"].values()) > 0
        # a snapshot made from another log (its anchor does not match) is passed over
        await save(store, log, messages, "tree", last - 1, anchor=12345)
        code, out, _ = await replay(fresh_stream, "--from", str(last))
        assert code == 0 and f"tree@{last - 1}: made from another log" in out and f"tree@{last // 2}" in out, out
    finally:
        await log.close()


async def _buckets(js: Any) -> Any:
    from nats.js.errors import BucketNotFoundError, NotFoundError

    try:
        yield await js.object_store("poolwise_snapshots")
    except (BucketNotFoundError, NotFoundError):
        return
