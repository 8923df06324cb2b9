"""How many copies of the log a NATS cluster keeps (issue 19): `--replicas N` of `poolwise up` and
`poolwise serve` (or `POOLWISE_STREAM_REPLICAS`; default 1).

`prepare(log, replicas)` runs when a service (or `up`) starts, before anything reads or writes:

- the stream (`JetStreamLog.ensure_stream`), the lease bucket (`KV_poolwise_leases`) and, with more
  than one replica, the snapshot object store (`OBJ_poolwise_snapshots`; with one it is created
  when first used, as before) are created with `replicas` replicas; the buckets with as many as the
  stream has, if that is more (a `serve` without --replicas on an R3 log makes no R1 bucket);
- one that exists with fewer replicas is raised to `replicas` by a stream update (what nats-server
  supports for a stream, and buckets are streams: the new replicas catch up from the leader in the
  background), and one line says so (`say`; the log's warning otherwise). Never used as it is: a
  3-node cluster carrying an R1 log loses the whole history with one disk;
- one with more replicas than asked is kept (lowering the copies of the history is an operator's
  decision: `nats stream edit --replicas`), so a `poolwise serve` started without `--replicas`
  leaves an R3 deployment R3;
- more replicas than the cluster has JetStream servers up (or any above 1 on a server outside a
  cluster) is a `ReplicasError`: one line naming the option, what NATS said and what it needs.

A cluster just started may answer "JetStream not available" (or nothing) until its meta leader is
elected: that is waited for (`SETTLE` seconds at most).

`NATS_URL=... python -m services.common.replicas` prints, for the stream and the two buckets, the
replicas, the leader and whether each other replica is current (as the stream leaders tell)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

import anyio
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import APIError, ServiceUnavailableError

from services.common.input_error import InputError

ENV = "POOLWISE_STREAM_REPLICAS"
OPTION = "--replicas"
MAX = 5  # nats-server's limit for a stream's replicas
SETTLE = 60.0  # seconds to wait for a cluster's JetStream to be available at the start
REQUEST_TIMEOUT = 10.0  # seconds per JetStream API request
API = "$JS.API"

# nats-server's codes for a placement it cannot make: replicas > 1 on a server outside a cluster,
# too few servers (or too few up) for the replicas asked, no peers matching.
NOT_PLACED = {10074, 10023, 10005, 10082}
UNAVAILABLE = {10008}  # JetStream not (yet) available: a cluster without a meta leader
# "stream not found": for a stream `prepare` has just created, a server of a cluster that has not
# applied the creation yet (its meta layer a step behind) answers this for a moment (seen on CI:
# the snapshot store's STREAM.INFO right after its creation): asked again, as while unavailable.
NOT_FOUND = 10059

_log = logging.getLogger("poolwise.replicas")


class ReplicasError(InputError):
    """The replicas asked cannot be had: printed as one line naming the option."""


def parse_replicas(value: object, *, option: str = OPTION) -> int:
    """`value` (an option's or `POOLWISE_STREAM_REPLICAS`' text, or a number) as a number of
    replicas, 1 to 5; `InputError` naming the option and the rule otherwise."""
    text = str(value).strip()
    try:
        number = int(text)
    except ValueError:
        raise InputError(f"{option} (or {ENV}): a whole number of replicas from 1 to {MAX}, got {text!r}") from None
    if not 1 <= number <= MAX:
        raise InputError(f"{option} (or {ENV}): replicas must be from 1 to {MAX} (NATS keeps at most {MAX} "
                         f"copies of a stream), got {number}")
    return number


async def prepare(log: Any, replicas: int = 1, say: Callable[[str], None] | None = None) -> None:
    """The stream, the lease bucket and (`replicas` > 1) the snapshot store of `log` (a
    `JetStreamLog`), each with at least `replicas` replicas (see the module's doc)."""
    from services.common.lease_bucket import BUCKET as LEASES
    from services.common.lease_bucket import open_leases
    from services.common.snapshots import BUCKET as SNAPSHOTS
    from services.common.snapshots import ObjectStoreSnapshots

    tell = say or _log.warning
    await _settled(lambda: log.ensure_stream(replicas=replicas), replicas, f"stream {log.stream}")
    copies = await raise_replicas(log.nc, log.stream, replicas, f"stream {log.stream}", tell)
    # The buckets follow the stream: as many replicas as it has (more than asked when it has more,
    # so that a `serve` without --replicas on an R3 log does not make R1 buckets).
    why = f"{OPTION} {replicas}" if copies == replicas else f"as the stream {log.stream}"
    await _settled(lambda: open_leases(log.nc, replicas=copies), copies, f"lease bucket {LEASES}")
    await raise_replicas(log.nc, f"KV_{LEASES}", copies, f"lease bucket {LEASES}", tell, why)
    if copies > 1:
        store = ObjectStoreSnapshots(log.nc.jetstream(), log.stream, replicas=copies)
        await _settled(store.opened, copies, f"snapshot store {SNAPSHOTS}")
        await raise_replicas(log.nc, f"OBJ_{SNAPSHOTS}", copies, f"snapshot store {SNAPSHOTS}", tell, why)


async def raise_replicas(nc: Any, stream: str, replicas: int, what: str,
                         say: Callable[[str], None] | None = None, why: str | None = None) -> int:
    """Raise the replicas of `stream` (named `what` in messages) to `replicas` if it has fewer,
    saying so; return how many it has now. The stream's configuration is sent back as the server
    gave it (every field, known to nats-py or not), with only `num_replicas` changed."""
    info = await _request(nc, f"STREAM.INFO.{stream}", None, replicas, what, just_created=True)
    config = dict(info["config"])
    had = int(config.get("num_replicas") or 1)
    if had >= replicas:
        if had > replicas:
            _log.debug("%s has %d replicas, more than the %d asked: kept", what, had, replicas)
        return had
    config["num_replicas"] = replicas
    await _request(nc, f"STREAM.UPDATE.{stream}", config, replicas, what, just_created=True)
    (say or _log.warning)(f"poolwise: {what} had {had} replica{'s' if had != 1 else ''}; raised to {replicas} "
                          f"({why or f'{OPTION} {replicas}'}): the new replicas copy it from the leader in the "
                          "background")
    return replicas


async def stream_replicas(nc: Any, stream: str) -> dict[str, Any]:
    """`stream`'s cluster as the server reports it: {"replicas": n, "leader": name, "peers":
    [{"name", "current", "lag", ...}, ...]} (the peers other than the leader)."""
    info = await _request(nc, f"STREAM.INFO.{stream}", None, 1, f"stream {stream}")
    cluster = info.get("cluster") or {}
    return {"replicas": int(info["config"].get("num_replicas") or 1), "leader": cluster.get("leader"),
            "peers": list(cluster.get("replicas") or [])}


async def _request(nc: Any, subject: str, payload: dict[str, Any] | None, replicas: int, what: str,
                   just_created: bool = False) -> dict[str, Any]:
    """A JetStream API request (asked again while JetStream is not available yet, `_settled`;
    `just_created`: the stream was made a moment ago, so "not found" is a cluster catching up)."""
    data = json.dumps(payload).encode() if payload is not None else b""

    async def ask() -> dict[str, Any]:
        response = await nc.request(f"{API}.{subject}", data, timeout=REQUEST_TIMEOUT)
        reply: dict[str, Any] = json.loads(response.data)
        error = reply.get("error")
        if not error:
            return reply
        if (error.get("err_code") in UNAVAILABLE or error.get("code") == 503
                or (just_created and error.get("err_code") == NOT_FOUND)):
            raise _NotYet(str(error.get("description")))
        if error.get("err_code") in NOT_PLACED:
            raise ReplicasError(_not_placed(replicas, what, str(error.get("description"))))
        raise RuntimeError(f"{what}: {error.get('description')} (NATS error {error.get('err_code')})")

    result: dict[str, Any] = await _settled(ask, replicas, what)
    return result


class _NotYet(Exception):
    """JetStream is not available (yet): no meta leader, no stream leader."""


async def _settled(make: Callable[[], Any], replicas: int, what: str) -> Any:
    """`await make()`, asked again for up to `SETTLE` seconds while JetStream does not answer or
    is not available yet (a cluster electing its leaders: requests may go unanswered a while); a
    placement NATS cannot make is a `ReplicasError`; no answer in time a `ConnectionError` (one line)."""
    deadline = anyio.current_time() + SETTLE
    while True:
        try:
            return await make()
        except (ServiceUnavailableError, _NotYet, NatsTimeoutError, NoRespondersError, TimeoutError) as exc:
            why = f"{exc.__class__.__name__} {exc}".strip()
        except APIError as exc:
            if exc.err_code in NOT_PLACED:
                raise ReplicasError(_not_placed(replicas, what, str(exc.description))) from None
            if exc.err_code not in UNAVAILABLE:
                raise
            why = str(exc.description)
        if anyio.current_time() > deadline:
            raise ConnectionError(f"the {what}: JetStream did not answer within {SETTLE:g} s ({why}); "
                                  "is a majority of the cluster's servers up?")
        await anyio.sleep(0.5)


def _not_placed(replicas: int, what: str, why: str) -> str:
    return (f"{OPTION} {replicas}: NATS cannot keep {replicas} replicas of the {what} ({why}); it needs a "
            f"cluster of at least {replicas} JetStream servers, all up (or ask for fewer replicas)")


STREAMS = ("POOLWISE", "KV_poolwise_leases", "OBJ_poolwise_snapshots")


def describe(name: str, cluster: dict[str, Any]) -> str:
    """One line for a stream's `stream_replicas`: its replicas, leader and how the others are."""
    others = ", ".join(f"{peer['name']} {'current' if peer.get('current') else 'behind'}"
                       + (f" (lag {peer['lag']})" if peer.get("lag") else "") for peer in cluster["peers"])
    return f"{name}: {cluster['replicas']} replica(s), leader {cluster['leader'] or '(none)'}" + (
        f"; {others}" if others else "")


async def _main() -> None:
    from services.common.connection import connect_nats

    nc = await connect_nats(os.environ.get("NATS_URL") or "nats://127.0.0.1:4222")
    try:
        for name in STREAMS:
            try:
                print(describe(name, await stream_replicas(nc, name)))
            except RuntimeError as exc:
                print(f"{name}: {exc}")
    finally:
        await nc.close()


if __name__ == "__main__":  # `NATS_URL=... python -m services.common.replicas`: how the streams are replicated
    anyio.run(_main)
