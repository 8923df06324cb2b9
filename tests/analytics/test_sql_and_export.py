"""`poolwise sql` and `poolwise export` on the recorded run: on a stopped data dir (its files) and
on a running system (the real tree service on a real nats-server, the run's log published to its
stream, asked over NATS): the formats, the row cap and its message, refusals as one line and exit
2, an answer cut to one message, and Parquet files that hold the tables."""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pyarrow.parquet as pq
import pytest

from events.subjects import command
from projections import ProjectionStore
from projections.answers import from_ipc, unb64
from services.common.jetstream import JetStreamLog
from services.common.natsserver import write_url_file
from services.tools.cli.answers import Service
from services.tree.projection import answer_sql
from services.tree.service import serve_tree
from tests.analytics.recorded import Recorded
from tests.cli.helpers import Result, run_here

WAIT = 60.0  # seconds: a hung service fails the test instead of hanging the run (not a timing assertion)
COUNTS = "SELECT state, count(*) AS n FROM gangs GROUP BY state ORDER BY state"
GANG_STATES = [("admitted", 63), ("done", 5), ("pending", 48), ("rejected", 1)]


def sql(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, recorded: Recorded,
        *args: str) -> Result:
    return run_here(capfd, monkeypatch, "sql", *args, "--data-dir", str(recorded.data_dir))


def test_a_stopped_data_dir_answers_in_every_format(capfd: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch, recorded: Recorded,
                                                    tmp_path: Path) -> None:
    found = sql(capfd, monkeypatch, recorded, COUNTS, "--format", "json")
    assert (found.code, found.err) == (0, "")
    # /A 20 + 5 + 5, /B and /C 20 + 20 each, lost; /L 2 + 2, /P 1 + 1
    assert [(r["state"], r["n"]) for r in found.json()] == GANG_STATES

    found = sql(capfd, monkeypatch, recorded, "SELECT gang, resources, enqueued_at FROM gangs WHERE gang = 'l1'",
                "-f", "csv")
    assert list(csv.reader(io.StringIO(found.out))) == [["gang", "resources", "enqueued_at"],
                                                         ["l1", '{"cpu": 1.0}', "1970-01-01T00:00:00+00:00"]]

    found = sql(capfd, monkeypatch, recorded, COUNTS)
    assert found.code == 0 and "admitted" in found.out and "63" in found.out

    out = tmp_path / "counts.parquet"
    found = sql(capfd, monkeypatch, recorded, COUNTS, "-f", "parquet", "-o", str(out))
    assert found.code == 0
    assert pq.read_table(out).to_pylist() == [{"state": s, "n": n} for s, n in GANG_STATES]


def test_the_row_cap_cuts_and_says_so(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                      recorded: Recorded) -> None:
    found = sql(capfd, monkeypatch, recorded, "SELECT gang FROM gangs ORDER BY gang", "--limit", "3", "--json")
    assert [r["gang"] for r in found.json()] == ["a-0", "a-1", "a-2"]
    assert found.err_lines == ["showing 3 of at least 4 rows; use --limit or `poolwise export`"]
    found = sql(capfd, monkeypatch, recorded, "SELECT gang FROM gangs", "--limit", "117", "--json")
    assert (len(found.json()), found.err) == (117, "")  # exactly the cap: nothing cut, nothing said


@pytest.mark.parametrize(("query", "says"), [
    ("SELECT * FROM nowhere", "Table with name nowhere does not exist"),
    ("SELEC 1", "syntax error"),
    ("COPY gangs TO 'x.csv'", "only read-only statements (SELECT, EXPLAIN) are allowed, got COPY"),
    ("ATTACH 'x.duckdb' AS x", "only read-only statements (SELECT, EXPLAIN) are allowed, got ATTACH"),
    ("INSTALL httpfs", "only read-only statements (SELECT, EXPLAIN) are allowed, got LOAD"),
    ("SELECT * FROM read_csv('/etc/hostname')", "file system operations are disabled"),
    ("SELECT * FROM glob('/*')", "file system operations are disabled"),
    ("SELECT 1; SELECT 2", "give exactly one statement, got 2"),
])
def test_bad_or_unsafe_sql_is_one_line_and_exit_2(capfd: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch, recorded: Recorded,
                                                  query: str, says: str) -> None:
    found = sql(capfd, monkeypatch, recorded, query)
    assert found.code == 2 and found.out == ""
    assert len(found.err_lines) == 1 and found.err_lines[0].startswith("error: sql: ") and says in found.err


def test_parquet_needs_a_file(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                              recorded: Recorded) -> None:
    found = sql(capfd, monkeypatch, recorded, COUNTS, "-f", "parquet")
    assert (found.code, found.err_lines) == (2, ["error: --format parquet: give the file to write with -o FILE"])


def exported(directory: Path) -> dict[str, int]:
    return {path.stem: pq.read_metadata(path).num_rows for path in sorted(directory.glob("*.parquet"))}


def test_export_of_a_stopped_data_dir(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                      recorded: Recorded, tmp_path: Path) -> None:
    found = run_here(capfd, monkeypatch, "export", "--parquet", str(tmp_path / "all"), "--data-dir",
                     str(recorded.data_dir))
    assert found.code == 0, found.err
    counts = exported(tmp_path / "all")
    with ProjectionStore.open_read_only(recorded.data_dir / "tree" / "tree.duckdb") as store:
        for table, rows in counts.items():
            assert store.query(f'SELECT count(*) FROM "{table}"')[1] == [(rows,)], table
    assert counts["gangs"] == 117 and counts["preemptions"] == 18 and counts["rejections"] == 2
    assert "gangs_held" not in counts and "preemption_wants" not in counts  # internal
    assert duckdb.sql(f"SELECT state, count(*) FROM '{tmp_path / 'all' / 'gangs.parquet'}' "
                      "GROUP BY state ORDER BY state").fetchall() == GANG_STATES

    found = run_here(capfd, monkeypatch, "export", "--parquet", str(tmp_path / "some"), "--tables",
                     "gangs,nope", "--data-dir", str(recorded.data_dir))
    assert found.code == 2 and found.err_lines[0].startswith("error: --tables: no table nope; known: checkpoints")
    assert not (tmp_path / "some").exists()


# --- a running system -----------------------------------------------------------------------------


async def projected(log: JetStreamLog, recorded: Recorded, data_dir: Path) -> None:
    for message in recorded.log:
        await log.append_raw(message.subject, message.data, message.msg_id)
    last = recorded.log[-1].seq
    query = json.dumps({"sql": "SELECT min(last_seq) FROM checkpoints"}).encode()
    with anyio.fail_after(WAIT):
        while True:
            reply = json.loads((await log.nc.request(command("tree", "sql"), query, timeout=5.0)).data)
            rows = reply.get("data", {}).get("rows") or [[None]]
            if rows[0][0] is not None and int(rows[0][0]) >= last:
                return
            await anyio.sleep(0.1)


async def cli(data_dir: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
              *args: str) -> Result:
    """`poolwise ARGS --data-dir DATA_DIR` in this process, on a worker thread (the service runs on
    the event loop; a subprocess takes seconds to start on a busy machine). The data dir names the
    running server, as `poolwise up` leaves it."""
    return await anyio.to_thread.run_sync(lambda: run_here(capfd, monkeypatch, *args, "--data-dir", str(data_dir)))


@pytest.mark.anyio
async def test_a_running_system_answers_and_exports_over_nats(recorded: Recorded, jetstream_log: JetStreamLog,
                                                              nats_url: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capfd: pytest.CaptureFixture[str]) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_tree(jetstream_log, tmp_path / "live" / "tree"))
        await projected(jetstream_log, recorded, tmp_path / "live")
        write_url_file(tmp_path / "live", nats_url)

        found = await cli(tmp_path / "live", capfd, monkeypatch, "sql", COUNTS, "--format", "json")
        assert (found.code, found.err) == (0, "")
        assert [(r["state"], r["n"]) for r in found.json()] == GANG_STATES

        found = await cli(tmp_path / "live", capfd, monkeypatch, "sql", "SELECT gang FROM gangs ORDER BY gang",
                          "--limit", "2", "-f", "csv")
        assert found.out.splitlines() == ["gang", "a-0", "a-1"]
        assert found.err_lines == ["showing 2 of at least 3 rows; use --limit or `poolwise export`"]

        found = await cli(tmp_path / "live", capfd, monkeypatch, "sql", "COPY gangs TO 'x.csv'")
        assert found.code == 2 and found.err_lines == [
            "error: sql: only read-only statements (SELECT, EXPLAIN) are allowed, got COPY [sql]"]

        found = await cli(tmp_path / "live", capfd, monkeypatch, "export", "--parquet", str(tmp_path / "all"))
        assert found.code == 0, found.err
        counts = exported(tmp_path / "all")
        assert counts["gangs"] == 117 and counts["event_log"] == sum(1 for _ in _events(recorded))

        # pages of 50 rows: keyset order over a composite key, and over a table with no primary key
        from services.tools.cli import export_cmd

        monkeypatch.setattr(export_cmd, "PAGE_ROWS", 50)
        for table in ("gangs", "event_log", "pools"):
            path = tmp_path / f"paged-{table}.parquet"
            rows = await anyio.to_thread.run_sync(lambda t=table, p=path: export_cmd._export(Service(nats_url), t, p))
            assert rows == counts[table]
            assert pq.read_table(path).equals(pq.read_table(tmp_path / "all" / f"{table}.parquet"))
        tg.cancel_scope.cancel()


def _events(recorded: Recorded) -> Iterator[Any]:
    from events import decode_all

    for message in recorded.log:
        yield from decode_all(message.data)


@pytest.mark.anyio
async def test_an_answer_longer_than_one_message_is_cut_to_what_fits(recorded: Recorded) -> None:
    with ProjectionStore.open_read_only(recorded.data_dir / "tree" / "tree.duckdb") as store:
        ask = json.dumps({"sql": "SELECT * FROM event_log ORDER BY seq, part", "format": "arrow",
                          "max_rows": 1000}).encode()
        events = sum(1 for _ in _events(recorded))
        whole = await answer_sql(store, ask, None)
        assert whole.ok and whole.data["rows"] == events and not whole.data["cut"]
        cut = await answer_sql(store, ask, 16_000)
        assert cut.ok and cut.data["cut"] and 0 < cut.data["rows"] < events
        assert len(cut.model_dump_json()) <= 16_000
        table = from_ipc(unb64(cut.data["arrow"]))
        assert table.equals(from_ipc(unb64(whole.data["arrow"])).slice(0, cut.data["rows"]))
        bad = await answer_sql(store, json.dumps({"sql": "SELECT 1", "max_rows": -1}).encode(), None)
        assert not bad.ok and bad.error is not None and bad.error.field == "max_rows"


@pytest.mark.anyio
async def test_a_query_that_runs_too_long_is_stopped(recorded: Recorded) -> None:
    with ProjectionStore.open_read_only(recorded.data_dir / "tree" / "tree.duckdb") as store:
        ask = json.dumps({"sql": "SELECT count(*) FROM range(1000000000000) a", "format": "arrow"}).encode()
        reply = await answer_sql(store, ask, None, timeout=0.3)
        assert not reply.ok and reply.error is not None and reply.error.rule == "sql"
        assert reply.error.message.startswith("the query ran 0.3 s and was stopped")
        assert store.query("SELECT count(*) FROM gangs")[1] == [(117,)]  # the store answers on


def test_another_services_store_file_is_attached_under_its_name(capfd: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               recorded: Recorded, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(recorded.data_dir, data_dir)
    (data_dir / "admission").mkdir()
    with duckdb.connect(str(data_dir / "admission" / "admission.duckdb")) as conn:
        conn.execute("CREATE TABLE waits AS SELECT 42 AS seconds")
    found = run_here(capfd, monkeypatch, "sql", "SELECT seconds, (SELECT count(*) FROM gangs) AS gangs, "
                     "(SELECT count(*) FROM tree.gangs) AS same FROM admission.waits", "--json", "--data-dir",
                     str(data_dir))
    assert found.json() == [{"seconds": 42, "gangs": 117, "same": 117}]
    found = run_here(capfd, monkeypatch, "sql", "SELECT * FROM read_csv('/etc/hostname')", "--data-dir",
                     str(data_dir))  # attaching needed file access: it is off again once attached
    assert found.code == 2 and "file system operations are disabled" in found.err
