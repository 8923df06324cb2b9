"""The metrics of admission and preemption, read with the SDK's in-memory reader, are the numbers of
their folds: admission and preemption run on the test nats-server (clock on), two pools get gangs
admitted and one input is refused; every per-pool series equals what a fresh fold of the same log
reports (`pool_numbers`), and the numbers are the ones the scenario makes (allocation 20 cpu each,
reservations 60 and 40, one gang admitted per pool, one refusal)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from bench.workload import envelope
from events import (
    GangEnqueued,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    TaskSpec,
    TreeConfigured,
    TreeOptions,
    decode_all,
)
from events.config import GangTimeoutOptions
from services.admission.domain.views import pool_numbers
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.common import metrics
from services.common.folding import fold_batch
from services.common.jetstream import JetStreamLog
from services.common.memlog import subject_filter
from services.launcher import start_services

pytestmark = pytest.mark.anyio

T0 = 1_767_225_600.0
TREE = "t"
WAIT = 60.0  # seconds: a hung system fails the test instead of hanging the run


@pytest.fixture
def recording() -> Iterator[None]:
    metrics.reset()
    yield
    metrics.reset()
    metrics.RECORDING = False


def gang(name: str, pool: str, tasks: int, cpu: float, preemptible: bool = True) -> GangEnqueued:
    return GangEnqueued(tree=TREE, gang=name, pool=pool, job=f"job-{name}", user="u", size=tasks,
                        preemptible=preemptible,
                        tasks=[TaskSpec(id=f"{name}.{i}", resources={"cpu": cpu}) for i in range(tasks)])


def points(reader: InMemoryMetricReader) -> dict[str, dict[frozenset[tuple[str, Any]], float]]:
    """name -> {labels: value}, from one collection."""
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, dict[frozenset[tuple[str, Any]], float]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    out.setdefault(metric.name, {})[frozenset((point.attributes or {}).items())] = point.value  # type: ignore[union-attr]
    return out


def labels(**values: str) -> frozenset[tuple[str, str]]:
    return frozenset(values.items())


async def test_pool_series_are_the_folds_numbers(jetstream_log: JetStreamLog, nats_url: str, recording: None) -> None:
    log = jetstream_log
    reader = InMemoryMetricReader()
    installed = metrics.install("test", readers=[reader])
    config = [
        TreeConfigured(tree=TREE, options=TreeOptions(
            gang_timeout=GangTimeoutOptions(default=3600.0, limit=3600.0, jitter=0.0))),
        PoolConfigChanged(tree=TREE, path="/A", created=True,
                          config=PoolConfig(reservation={"cpu": 60.0}, limit={"cpu": 100.0},
                                            max_running_jobs=5)),
        PoolConfigChanged(tree=TREE, path="/B", created=True, config=PoolConfig(reservation={"cpu": 40.0})),
        HostRegistered(host="h1", resources={"cpu": 100.0, "memory": 1000.0}),
    ]
    await log.append([envelope(e, f"setup-{i}", T0, source="tree") for i, e in enumerate(config)])
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(metrics.follow_stream, lambda: nats_url, 0.2, log.stream)
            await start_services(tg, log, ["admission", "preemption"], None, leadership=False)
            await log.append([envelope(gang("g1", "/A", 4, 5.0), "g1", T0 + 1),
                              envelope(gang("g2", "/B", 2, 10.0, preemptible=False), "g2", T0 + 1),
                              envelope(gang("g3", "/nowhere", 1, 1.0), "g3", T0 + 1)])
            with anyio.fail_after(WAIT):
                while True:  # both gangs admitted (published), the refusal published, preemption's pass read
                    got = points(reader)
                    admitted = got.get("poolwise_gangs_admitted", {})
                    starvation = got.get("poolwise_pool_starvation_status", {})
                    if sum(admitted.values()) == 2 and got.get("poolwise_inputs_rejected") and len(starvation) == 2 \
                            and got.get("poolwise_consumer_lag_events"):  # (and the log's end asked of NATS)
                        break
                    await anyio.sleep(0.1)
            await anyio.sleep(metrics.CACHE_SECONDS + 0.1)  # the pools' reading of that collection may predate them
            got = points(reader)
            messages = await log.read()
            page = installed.render().decode()
            tg.cancel_scope.cancel()
    finally:
        installed.shutdown()

    # A fresh fold of the same log: the numbers the metrics must repeat, series by series.
    fresh = AdmissionFolder()
    wanted = subject_filter(SUBJECTS)
    fold_batch(fresh, [m for m in messages if wanted(m.subject)], 0)
    expected = pool_numbers(fresh.state, TREE, more=True)
    assert set(expected) == {"/A", "/B"}
    for pool, numbers in expected.items():
        for name, vector in numbers.items():
            series = got.get(f"poolwise_pool_{name}", {})  # (an empty vector: no series)
            for kind, value in vector.items():
                assert series[labels(tree=TREE, pool=pool, kind=kind)] == pytest.approx(value), (name, pool, kind)

    # ... and the scenario's own numbers
    assert got["poolwise_pool_allocation"][labels(tree=TREE, pool="/A", kind="cpu")] == 20.0
    assert got["poolwise_pool_allocation"][labels(tree=TREE, pool="/B", kind="cpu")] == 20.0
    assert got["poolwise_pool_non_preemptible_allocation"] == {labels(tree=TREE, pool="/B", kind="cpu"): 20.0}
    assert got["poolwise_pool_reservation"][labels(tree=TREE, pool="/A", kind="cpu")] == 60.0
    assert got["poolwise_pool_reservation"][labels(tree=TREE, pool="/B", kind="cpu")] == 40.0
    assert got["poolwise_pool_limit"][labels(tree=TREE, pool="/A", kind="cpu")] == 100.0
    entitled = got["poolwise_pool_entitlement"]
    assert entitled[labels(tree=TREE, pool="/A", kind="cpu")] >= 20.0  # at least what it holds
    assert entitled[labels(tree=TREE, pool="/A", kind="cpu")] + entitled[labels(tree=TREE, pool="/B", kind="cpu")] \
        == pytest.approx(100.0)  # the whole cluster is handed out (per_resource, both pools want)
    fair = fresh.state.trees[TREE].entitlements["/A"].fair_share
    assert got["poolwise_pool_fair_share"][labels(tree=TREE, pool="/A")] == pytest.approx(fair)
    assert got["poolwise_gangs_admitted"] == {labels(tree=TREE, pool="/A"): 1, labels(tree=TREE, pool="/B"): 1}
    refusals = [e.event for m in messages for e in decode_all(m.data) if e.event.type == "InputRejected"]
    assert len(refusals) == 1
    assert got["poolwise_inputs_rejected"] == {labels(service="admission", tree=TREE, rule=refusals[0].rule): 1}
    assert got["poolwise_queue_gangs"][labels(tree=TREE, pool="/A", queue="pending")] == 0
    assert got["poolwise_pool_running_jobs"][labels(tree=TREE, pool="/A")] == 1
    assert got["poolwise_pool_max_running_jobs"] == {labels(tree=TREE, pool="/A"): 5}  # set on /A only
    assert set(got["poolwise_pool_starvation_status"].values()) == {0}  # nobody below its fair share
    assert got["poolwise_folded_events"][labels(service="admission")] > 0
    assert got["poolwise_consumer_lag_events"][labels(service="admission")] >= 0
    assert got["poolwise_process_resident_memory_bytes"][labels(service="test")] > 10_000_000

    # The histograms are on the Prometheus page (bucket counts kept by the fold's shell).
    assert 'poolwise_admission_wait_seconds_count{pool="/A",tree="t"} 1.0' in page
    assert 'poolwise_admission_wait_seconds_bucket{le="+Inf",pool="/B",tree="t"} 1.0' in page
    assert 'poolwise_cycle_duration_seconds_count{service="admission"}' in page
    assert 'poolwise_pool_allocation{kind="cpu",pool="/A",tree="t"} 20.0' in page


def test_a_leaf_pool_without_gangs_has_its_counters_at_zero(recording: None) -> None:
    """/B has never had a gang: its counters are there at 0 (as /A's are), so that the first gang
    admitted there counts as an increase from 0 (docs/observability.md)."""
    from events import encode
    from services.common.log import Stored

    inputs = [TreeConfigured(tree=TREE, options=TreeOptions()),
              PoolConfigChanged(tree=TREE, path="/A", created=True, config=PoolConfig()),
              PoolConfigChanged(tree=TREE, path="/B", created=True, config=PoolConfig()),
              PoolConfigChanged(tree=TREE, path="/C", created=True, config=PoolConfig()),
              PoolConfigChanged(tree=TREE, path="/C/D", created=True, config=PoolConfig()),
              HostRegistered(host="h1", resources={"cpu": 100.0}),
              gang("g1", "/A", 1, 1.0)]
    folder = AdmissionFolder()
    fold_batch(folder, [Stored(i + 1, f"poolwise.config.{TREE}", encode(envelope(e, f"e{i}", T0 + i, source="tree")))
                        for i, e in enumerate(inputs)], 0)
    metrics.status("admission").folder = folder
    reader = InMemoryMetricReader()
    installed = metrics.install("test", readers=[reader])
    try:
        got = points(reader)
    finally:
        installed.shutdown()
    for name in ("poolwise_gangs_admitted", "poolwise_gangs_timed_out"):
        assert {dict(key)["pool"] for key in got[name]} == {"/A", "/B", "/C/D"}, name  # leaves only
        assert got[name][labels(tree=TREE, pool="/B")] == 0
    assert got["poolwise_gangs_requeued"][labels(tree=TREE, pool="/B", cause="placement_timeout")] == 0
