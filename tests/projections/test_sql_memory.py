"""The read models' DuckDB has a memory limit of its own (`POOLWISE_SQL_MEMORY`, default 512MB),
not DuckDB's 80% of the machine; `poolwise up|serve --sql-memory` checks and sets it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
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
    assert parse_size(text, name="--sql-memory", least=16 * 2**20) == value
    duckdb.connect(config={"memory_limit": value}).close()  # (and DuckDB takes each)


@pytest.mark.parametrize(("text", "rule"), [("lots", "expected a size like 512MB"), ("512", "expected a size"),
                                            ("-1GB", "expected a size"), ("16MB", "at least 16MiB"),
                                            ("1KB", "at least 16MiB"), ("1024TiB", "less than 1024TiB"),
                                            ("20000000TB", "less than 1024TiB")])
def test_anything_else_is_refused_with_the_rule(text: str, rule: str) -> None:
    """(20000000TB: DuckDB itself refuses it, "Memory value out of range", on every connection.)"""
    with pytest.raises(InputError, match=rule) as refused:
        parse_size(text, name="--sql-memory", least=16 * 2**20)
    assert str(refused.value).startswith("--sql-memory: ")


@pytest.mark.parametrize(("how", "text"), [("option", "plenty"), ("environment", "plenty"),
                                           ("option", "20000000TB"), ("environment", "8MB")])
def test_up_refuses_a_bad_size_before_it_starts_anything(tmp_path: Path, how: str, text: str) -> None:
    argv = [sys.executable, "-m", "services.tools.cli.main", "up", "--data-dir", str(tmp_path / "data")]
    env = {"PATH": "/usr/bin:/bin"}
    if how == "option":
        argv += ["--sql-memory", text]
    else:
        env[SQL_MEMORY_ENV] = text
    done = _run(argv, env)
    setting = "--sql-memory" if how == "option" else SQL_MEMORY_ENV
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {setting}: "), done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("text", ["plenty", "20000000TB", "8MB"])
def test_every_command_refuses_a_bad_size_in_the_environment(tmp_path: Path, text: str) -> None:
    """`poolwise sql` on a stopped data dir opens the read models itself (as `export` and `demo`
    do): the setting is checked with its rule first, not handed to DuckDB's parser."""
    data_dir = tmp_path / "data"
    ProjectionStore(str(_tree_file(data_dir)), [EventLogProjection()]).close()
    done = _run([sys.executable, "-m", "services.tools.cli.main", "sql", "--data-dir", str(data_dir), "SELECT 1"],
                {"PATH": "/usr/bin:/bin", SQL_MEMORY_ENV: text})
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {SQL_MEMORY_ENV}: "), done.stderr
    assert "internal error" not in done.stderr
    fine = _run([sys.executable, "-m", "services.tools.cli.main", "sql", "--data-dir", str(data_dir),
                 "SELECT current_setting('memory_limit') AS m"], {"PATH": "/usr/bin:/bin", SQL_MEMORY_ENV: "64MiB"})
    assert fine.returncode == 0 and "64.0 MiB" in fine.stdout, fine.stdout + fine.stderr


def _tree_file(data_dir: Path) -> Path:
    (data_dir / "tree").mkdir(parents=True)
    return data_dir / "tree" / "tree.duckdb"


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env,
                          cwd=Path(__file__).resolve().parents[2])
