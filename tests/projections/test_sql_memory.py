"""The read models' DuckDB has a memory limit of its own (`POOLWISE_SQL_MEMORY`, default 512MB),
not DuckDB's 80% of the machine; `poolwise up|serve --sql-memory` checks and sets it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from projections import EventLogProjection, PoolTreeProjection, ProjectionStore
from projections.read_models import read_models
from projections.store import DEFAULT_SQL_MEMORY, SQL_MEMORY_ENV
from services.common.log import Stored
from services.tools.cli.args import InputError, parse_size
from tests.projections.make import gangs


def limit(store: ProjectionStore) -> str:
    _, rows = store.query("SELECT current_setting('memory_limit')")
    return str(rows[0][0])


def test_the_default_limit_is_512mb_not_duckdbs_share_of_the_machine(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SQL_MEMORY_ENV, raising=False)
    assert DEFAULT_SQL_MEMORY == "512MB"
    with ProjectionStore(str(tmp_path / "tree.duckdb"), [EventLogProjection()]) as store:
        assert limit(store) == "488.2 MiB"  # (DuckDB shows 512 * 10^6 bytes in binary units)
    with ProjectionStore.open_read_only(tmp_path / "tree.duckdb") as store:
        assert limit(store) == "488.2 MiB"  # (`poolwise sql` on a stopped data dir: the same)


def test_the_environment_sets_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SQL_MEMORY_ENV, "64MiB")
    with ProjectionStore(str(tmp_path / "tree.duckdb"), [EventLogProjection()]) as store:
        assert limit(store) == "64.0 MiB"


def test_the_least_allowed_limit_still_takes_a_large_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """16MiB, the least `--sql-memory` takes: every read model of the tree service applies a batch
    of 20,000 gangs in one transaction to a file."""
    monkeypatch.setenv(SQL_MEMORY_ENV, "16MiB")
    batch = gangs(1, 20_000)
    with ProjectionStore(str(tmp_path / "tree.duckdb"),
                         [PoolTreeProjection(), EventLogProjection(), *read_models()]) as store:
        assert limit(store) == "16.0 MiB"
        assert store.apply(batch) == 20_000
        _, rows = store.query("SELECT count(*), max(seq) FROM event_log")
        assert rows == [(20_000, 20_000)]
        assert store.apply([Stored(20_001, "poolwise.gang.default", b"garbage")]) == 20_001  # (the checkpoint)


@pytest.mark.parametrize(("text", "value"), [("512MB", "512MB"), (" 2GiB ", "2GiB"), ("1.5gb", "1.5gb"),
                                             ("16MiB", "16MiB")])
def test_sizes_as_duckdb_reads_them(text: str, value: str) -> None:
    assert parse_size(text, option="sql-memory", least=16 * 2**20) == value


@pytest.mark.parametrize(("text", "rule"), [("lots", "expected a size like 512MB"), ("512", "expected a size"),
                                            ("-1GB", "expected a size"), ("16MB", "at least 16MiB"),
                                            ("1KB", "at least 16MiB")])
def test_anything_else_is_refused_with_the_rule(text: str, rule: str) -> None:
    with pytest.raises(InputError, match=rule) as refused:
        parse_size(text, option="sql-memory", least=16 * 2**20)
    assert str(refused.value).startswith("--sql-memory: ")


@pytest.mark.parametrize("how", ["option", "environment"])
def test_up_refuses_a_bad_size_before_it_starts_anything(tmp_path: Path, how: str) -> None:
    argv = [sys.executable, "-m", "services.tools.cli.main", "up", "--data-dir", str(tmp_path / "data")]
    env = {"PATH": "/usr/bin:/bin"}
    if how == "option":
        argv += ["--sql-memory", "plenty"]
    else:
        env[SQL_MEMORY_ENV] = "plenty"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--sql-memory: expected a size like 512MB" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()
