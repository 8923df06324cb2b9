"""A TCP proxy that cuts its connections on demand: for tests of what a lost connection does."""

from __future__ import annotations

import asyncio


class CuttingProxy:
    """Forwards TCP between clients and `upstream`; `cut(after, upstream=True)` drops the
    connection once `after` more bytes went towards the server (or towards the client)."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = 0
        self.cuts = 0
        self._budget: dict[bool, int | None] = {True: None, False: None}
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.transport.abort()

    def cut(self, after: int, *, upstream: bool = True) -> None:
        self._budget[upstream] = after

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        writers = (client_w, server_w)
        self._writers.update(writers)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: bool) -> None:
            try:
                while data := await reader.read(16384):
                    budget = self._budget[upstream]
                    if budget is not None:
                        if budget < len(data):  # this chunk is lost, and the connection with it
                            self._budget[upstream] = None
                            self.cuts += 1
                            for w in writers:
                                w.transport.abort()
                            return
                        self._budget[upstream] = budget - len(data)
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                for w in writers:
                    w.close()
                    self._writers.discard(w)

        try:
            await asyncio.gather(pipe(client_r, server_w, True), pipe(server_r, client_w, False),
                                 return_exceptions=True)
        except asyncio.CancelledError:  # the loop ends: the connections go with it
            for w in writers:
                w.transport.abort()
