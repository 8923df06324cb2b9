"""A JetStream object store's stand-in for `ObjectStoreSnapshots` (`_store` set to it): objects in
a dict with their description and time, a hook run before a put, and a record of puts of one name
that overlapped (what leaves a real bucket with chunks no object names)."""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import anyio


class FakeBucket:
    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, str | None, datetime]] = {}
        self.clock = datetime.now(UTC)
        self.before_put: Callable[[str], Awaitable[None]] | None = None  # run once, before the next put
        self.putting: set[str] = set()  # names being put now
        self.overlapped: list[str] = []  # names put while a put of theirs was going on
        self.puts: list[str] = []

    async def list(self, ignore_deletes: bool = True) -> list[SimpleNamespace]:
        return [SimpleNamespace(name=name, description=description, mtime=mtime.isoformat())
                for name, (_, description, mtime) in self.objects.items()]

    async def put(self, name: str, data: Any, meta: Any = None) -> None:
        if self.before_put is not None:
            hook, self.before_put = self.before_put, None
            await hook(name)
        if name in self.putting:
            self.overlapped.append(name)
        self.putting.add(name)
        self.puts.append(name)
        try:
            await anyio.sleep(0)  # (a put is many messages: others run meanwhile)
            body = data if isinstance(data, bytes) else data.read()
            self.objects[name] = (body, getattr(meta, "description", None), self.clock)
        finally:
            self.putting.discard(name)

    async def delete(self, name: str) -> None:
        del self.objects[name]

    async def get(self, name: str, writeinto: io.BytesIO) -> None:
        from nats.js.errors import NotFoundError

        if name not in self.objects:
            raise NotFoundError
        writeinto.write(self.objects[name][0])
