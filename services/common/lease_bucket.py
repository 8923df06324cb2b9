"""The lease bucket (`poolwise_leases`, a JetStream key-value bucket whose records live TTL
seconds after their last write) and the key of each lease in it: services/common/leadership.py
has the design."""

from __future__ import annotations

import anyio
from nats.aio.client import Client as NATS
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BadRequestError, BucketNotFoundError, ServerError
from nats.js.kv import KeyValue

from services.common.jetstream_setup import DELETE_SETTLE

BUCKET = "poolwise_leases"
# Seconds a record lives after its last write (the bucket's max age): how long a crashed leader's
# lease outlives it, so most of a failover after a kill -9 (a warm standby decides within moments
# of taking over). 2 s: renewals every 0.4 s from a thread of their own, valid 1.6 s; a process
# that holds the GIL longer than that in one call loses its lease (and stands by: fencing keeps it
# from publishing). Was 5 s; a deployment may create the bucket with another TTL.
TTL = 2.0
CREATE_ATTEMPTS = 5  # to create the bucket (see `JetStreamLog.delete_stream` on a server still deleting one)


def lease_key(stream: str, service: str, tree: str | None = None) -> str:
    """The lease of `service` on the deployment whose log is `stream` (per tree: the scale-out path)."""
    return f"{stream}.{service}" if tree is None else f"{stream}.{service}.{tree}"


async def open_leases(nc: NATS, *, bucket: str = BUCKET, ttl: float = TTL, replicas: int = 1) -> KeyValue:
    """The lease bucket, created (file storage, history 1, records living `ttl` s) if missing.
    An existing bucket is used as it is: `bucket_ttl` reads the TTL the leases must follow."""
    js = nc.jetstream()
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        pass
    config = KeyValueConfig(bucket=bucket, ttl=ttl, history=1, replicas=replicas, storage=StorageType.FILE,
                            description="poolwise leadership leases: one active instance per service")
    for attempt in range(CREATE_ATTEMPTS):
        try:
            return await js.create_key_value(config)
        except BadRequestError:  # created a moment ago by another instance, maybe configured otherwise
            return await js.key_value(bucket)
        except ServerError:  # the server still tidying the files of a bucket deleted a moment ago
            if attempt == CREATE_ATTEMPTS - 1:
                raise
            await anyio.sleep(DELETE_SETTLE * (attempt + 1))
    raise AssertionError("unreachable")


async def bucket_ttl(kv: KeyValue) -> float:
    """How long the bucket keeps a record after its last write; a bucket without one cannot hold leases."""
    return (await bucket_of(kv))[1]


async def bucket_of(kv: KeyValue) -> tuple[str, float]:
    """The bucket's name and TTL."""
    status = await kv.status()
    ttl = status.stream_info.config.max_age
    if not ttl or ttl <= 0:
        raise ValueError(f"lease bucket {status.bucket} keeps records forever (no TTL): leases could never expire")
    return status.bucket, float(ttl)


__all__ = ["BUCKET", "CREATE_ATTEMPTS", "TTL", "bucket_of", "bucket_ttl", "lease_key", "open_leases"]
