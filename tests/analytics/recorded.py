"""The recorded run the analytics tests ask questions of: `recorded.yaml` run on the real services
(a MemoryLog), its whole log projected into a data dir laid out as `poolwise up` lays it out
(`<data_dir>/tree/tree.duckdb`), closed: a stopped system's data dir."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from projections import EventLogProjection, PoolTreeProjection, ProjectionStore
from projections.read_models import read_models
from services.common.log import Stored
from services.tools.scenario.report import ScenarioReport
from tests.projections.test_read_models_scenarios import run

SCENARIO = Path(__file__).with_name("recorded.yaml")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # a scenario's time 0


def at(seconds: float) -> datetime:
    """A scenario time as the log has it."""
    return EPOCH + timedelta(seconds=seconds)


@dataclass(frozen=True)
class Recorded:
    data_dir: Path
    report: ScenarioReport
    log: list[Stored]


def record(data_dir: Path) -> Recorded:
    done = run(SCENARIO)
    report, log = done.report, done.log
    path = data_dir / "tree" / "tree.duckdb"
    path.parent.mkdir(parents=True)
    with ProjectionStore(path, [PoolTreeProjection(), EventLogProjection(), *read_models()]) as store:
        store.apply(log)
    return Recorded(data_dir, report, log)
