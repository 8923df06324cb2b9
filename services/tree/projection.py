"""The tree service's answers to SQL over its read models (`poolwise.cmd.tree.sql`): the tree
service holds every read model of the system, in `<data_dir>/tree/tree.duckdb`
(`projections/read_models.py`; admission and preemption keep none).

A request is JSON: `sql` (one read-only statement), `params` (a list, optional), `max_rows` (the
row cap, optional) and `format`: `rows` (the default: columns and rows as JSON values) or `arrow`
(the answer as Arrow IPC, base64, with the types kept: what `poolwise sql` and `poolwise export`
ask for). An `arrow` answer longer than one message (the server's max_payload) is cut to the rows
that fit, and says so (`cut`): the asker pages on or lowers its cap.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import duckdb

from events.commands import Reply
from projections.answers import b64, fit
from projections.store import NotReadOnly, ProjectionStore, QueryTimeout
from services.common.requests import REPLY_ROOM, error_reply

MAX_ROWS = 1_000_000  # the most rows one request may ask for (an answer is built whole in memory)
# Seconds a query may run: one that runs longer is stopped (its worker thread and a core are the
# tree service's, which projects the log meanwhile).
SQL_TIMEOUT = 30.0


async def answer_sql(store: ProjectionStore | None, data: bytes, max_payload: int | None,
                     timeout: float = SQL_TIMEOUT) -> Reply:
    if store is None:
        return error_reply("no_store", "this tree service keeps no projections")
    try:
        request: dict[str, Any] = json.loads(data or b"{}")
        sql = str(request.get("sql", ""))
        params = request.get("params")
        cap = request.get("max_rows")
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or not 0 <= cap <= MAX_ROWS):
            return error_reply("invalid_command", f"max_rows: a whole number from 0 to {MAX_ROWS:,}", "max_rows")
        if params is not None and not isinstance(params, list):
            return error_reply("invalid_command", "params: a list of values", "params")
        if request.get("format", "rows") == "arrow":
            room = None if max_payload is None else (max_payload - REPLY_ROOM - 256) * 3 // 4  # base64: 4/3
            table = await anyio.to_thread.run_sync(lambda: store.query_arrow(sql, params, max_rows=cap,
                                                                             timeout=timeout))
            page = await anyio.to_thread.run_sync(fit, table, room)
            return Reply(ok=True, data={"arrow": b64(page.data), "rows": page.rows, "cut": page.cut})
        columns, rows = await anyio.to_thread.run_sync(lambda: store.query(sql, params, max_rows=cap,
                                                                           timeout=timeout))
    except (duckdb.Error, NotReadOnly, QueryTimeout) as exc:  # a bad query is the asker's problem, reported
        return error_reply("sql", str(exc))
    except Exception as exc:  # and nothing else crashes the service either
        return error_reply("sql", f"{exc.__class__.__name__}: {exc}")
    return Reply(ok=True, data={"columns": list(columns), "rows": [list(r) for r in rows]})
