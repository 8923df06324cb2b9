"""Where `poolwise sql` and `poolwise export` get their answers: the running tree service (it
holds every read model; asked over NATS, `services/tree/projection.py`), or, with nothing
running, the data dir's store files opened read-only: `<data_dir>/tree/tree.duckdb` with its
tables under their plain names, and any other service's `<data_dir>/<service>/<service>.duckdb`
attached under the service's name."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from services.common.natsserver import resolve_nats_url
from services.tools.cli.args import InputError, ServiceError

HOLDER = "tree"  # the service that holds the read models


@dataclass(frozen=True, slots=True)
class Answer:
    """The first rows of an answer; `cut`: one message could not hold `max_rows` of them."""

    table: pa.Table
    cut: bool = False


class SqlRequest(BaseModel):
    """The tree service's `sql` request (`services/tree/projection.py`: `answer_sql`); `format`
    arrow (an Arrow IPC stream, base64) or rows (columns and rows as JSON)."""

    op: str = "sql"
    sql: str
    params: list[Any] | None = None
    max_rows: int
    format: str = "arrow"


class Source:
    """The read models of a running system, or of a stopped data dir (`open_source`)."""

    def ask(self, sql: str, max_rows: int, params: Sequence[object] | None = None) -> Answer:
        raise NotImplementedError

    def batches(self, sql: str) -> Iterator[pa.RecordBatch]:
        """The whole answer, batch by batch (a stopped data dir only)."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return False


class Service(Source):
    def __init__(self, url: str) -> None:
        self.url = url

    @property
    def running(self) -> bool:
        return True

    def ask(self, sql: str, max_rows: int, params: Sequence[object] | None = None) -> Answer:
        import anyio

        from projections.answers import from_ipc, unb64
        from services.tools.cli.client import request

        async def ask() -> dict[str, Any]:
            reply = await request(self.url, HOLDER, SqlRequest(sql=sql, params=None if params is None else list(params),
                                                               max_rows=max_rows))
            data: dict[str, Any] = reply.data
            return data

        try:
            data = anyio.run(ask)
        except ServiceError as exc:  # the service's refusal of the query: as a stopped data dir says it
            raise InputError(f"sql: {exc} [{exc.rule}]") from None
        if "arrow" not in data:
            raise InputError("the tree service answers SQL without Arrow: it runs an older poolwise; restart it")
        return Answer(from_ipc(unb64(data["arrow"])), bool(data.get("cut")))


class Files(Source):
    def __init__(self, store: Any) -> None:
        self.store = store

    def ask(self, sql: str, max_rows: int, params: Sequence[object] | None = None) -> Answer:
        try:
            return Answer(self.store.query_arrow(sql, params, max_rows=max_rows))
        except Exception as exc:
            raise InputError(f"sql: {exc}") from None

    def batches(self, sql: str) -> Iterator[pa.RecordBatch]:
        try:
            yield from self.store.query_batches(sql)
        except Exception as exc:
            raise InputError(f"sql: {exc}") from None


def store_files(data_dir: Path) -> tuple[Path, dict[str, Path]]:
    """The holder's store file and the other services' (by service name) in `data_dir`."""
    main = data_dir / HOLDER / f"{HOLDER}.duckdb"
    others = {path.parent.name: path for path in sorted(data_dir.glob("*/*.duckdb"))
              if path.stem == path.parent.name and path.parent.name != HOLDER}
    return main, others


@contextmanager
def open_source(data_dir: Path) -> Iterator[Source]:
    """The running system's tree service if one is found (`NATS_URL`, or the data dir's server),
    else the data dir's files."""
    url = resolve_nats_url(data_dir)
    if url:
        yield Service(url)
        return
    from projections.store import ProjectionStore, StoreBusy

    main, others = store_files(data_dir)
    if not main.exists():
        raise InputError(f"no projections at {main}: start `poolwise up` first")
    try:
        store = ProjectionStore.open_read_only(main, others)
    except StoreBusy as exc:
        raise InputError(str(exc)) from None
    try:
        yield Files(store)
    finally:
        store.close()
