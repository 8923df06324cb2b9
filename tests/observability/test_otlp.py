"""The OTLP export, end to end: `poolwise up` (each service in a process of its own, on its embedded
nats-server) and the CLI, with `OTEL_EXPORTER_OTLP_ENDPOINT` naming a real OTLP/HTTP receiver of
the test's (`otlp_receiver`: protobuf decoded with opentelemetry-proto). A gang's trace arrives
with the spans docs/observability.md promises (names, parents, links, the gang's attribute), from
the CLI, the tree service, admission and preemption; the metrics arrive too. Then a restart: a gang enqueued before
it and decided after it is still in one trace."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import Result, Up, wait_for
from tests.observability.otlp_receiver import Point, Received, Span, otlp_receiver

# (about 25 CLI runs and two starts of up each: minutes on the loaded 2-core machine)
pytestmark = [pytest.mark.nats, pytest.mark.timeout(300)]

# hdrf: nothing idle that a waiting job could use (per_resource keeps /b's unused reservation back from
# a0 once a cycle has seen /b, which may come before a0's cycle or after it)
TREE_OPTIONS = """\
policy: hdrf
resources: [cpu]
preemption: {grace: 0}
gang_timeout: {default: 3600, limit: 3600, jitter: 0}
"""


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Received]:
    """The receiver, and the environment that sends it everything: every process the test starts
    (`up`, its children, the CLI) inherits it. Short export periods: the test waits less."""
    with otlp_receiver() as (endpoint, received):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "300")
        monkeypatch.setenv("POOLWISE_LOG", "info")  # (the services say where they started from)
        for name in ("POOLWISE_TRACE", "OTEL_TRACES_EXPORTER", "OTEL_TRACES_SAMPLER", "POOLWISE_TRACE_RATIO"):
            monkeypatch.delenv(name, raising=False)
        yield received


def ok(result: Result) -> Result:
    assert result.code == 0, result
    return result


def setup_cluster(up: Up, tmp_path: Path) -> None:
    """One host of 10 cpu; /a (no reservation) and /b (reserves 5): a gang of /a holding all 10 is
    over its entitlement once /b asks."""
    options = tmp_path / "tree.yaml"
    options.write_text(TREE_OPTIONS)
    ok(up.cli("tree", "configure", "default", "--file", str(options)))
    ok(up.cli("host", "add", "h1", "--resources", "cpu=10"))
    ok(up.cli("pool", "create", "/a"))
    ok(up.cli("pool", "create", "/b", "--reservation", "cpu=5"))


def submit(up: Up, gang: str, pool: str, tasks: int, *more: str) -> Result:
    return ok(up.cli("submit", "--gang", gang, "--pool", pool, "--tasks", str(tasks), "--resources", "cpu=5",
                     *more))


def one(spans: list[Span], what: str, check: Callable[[Span], bool]) -> Span:
    found = [span for span in spans if check(span)]
    assert len(found) == 1, (what, found)
    return found[0]


def spans_where(received: Received, check: Callable[[list[Span]], bool], what: str) -> list[Span]:
    """The spans received once `check` holds of them (waits for the exporters' next batches)."""
    return wait_for(lambda: (spans := received.snapshot()[0]) and check(spans) and spans, what)  # type: ignore[no-any-return]


def gang_span(spans: list[Span], name: str, gang: str) -> Span:
    return one(spans, f"{name} of {gang}", lambda s: s.name == name and s.attributes.get("poolwise.gang") == gang)


def child_of(spans: list[Span], parent: Span) -> Span:
    return one(spans, f"the child of {parent.name}", lambda s: s.parent_id == parent.span_id)


def has(name: str, gang: str) -> Callable[[list[Span]], bool]:
    return lambda spans: any(s.name == name and s.attributes.get("poolwise.gang") == gang for s in spans)


def a0_running(up: Up, tmp_path: Path, receiver: Received) -> None:
    """Start, configure the cluster, submit a0 (2 cpu on /a), wait for its admission at the
    receiver and report both its tasks running."""
    up.start()
    setup_cluster(up, tmp_path)
    submit(up, "a0", "/a", 2)  # (admitted by the cycle after the one that sees its demand: waited for)
    spans_where(receiver, has("admission GangAdmitted", "a0"), "a0's admission at the receiver")
    for task in ("a0/0", "a0/1"):
        ok(up.cli("task", "set", task, "running", "--gang", "a0"))


def test_a_gangs_trace_and_the_metrics_reach_an_otlp_receiver(tmp_path: Path, receiver: Received) -> None:
    with Up(tmp_path / "data", tmp_path) as up:
        a0_running(up, tmp_path, receiver)
        submit(up, "b0", "/b", 1, "--no-preemptible")
        spans = spans_where(receiver, lambda spans: has("preemption requested", "a0")(spans)
                            and len([s for s in spans if s.name == "admission TaskStateChanged"]) == 2
                            and any(s.service == "poolwise-tree" for s in spans),
                            "a0's trace through preemption at the receiver")

        enqueue = gang_span(spans, "enqueue", "a0")
        assert enqueue.service == "poolwise-cli"
        assert (enqueue.attributes["poolwise.tree"], enqueue.attributes["poolwise.pool"]) == ("default", "/a")
        admitted = gang_span(spans, "admission GangAdmitted", "a0")
        assert admitted.service == "poolwise-admission"
        assert (admitted.trace_id, admitted.parent_id) == (enqueue.trace_id, enqueue.span_id)
        assert admitted.attributes["poolwise.pool"] == "/a" and admitted.attributes["poolwise.decision"]
        # the cycle that decided it: linked both ways, a child of its batch's span
        assert len(admitted.links) == 1
        cycle = one(spans, "a0's cycle", lambda s: s.span_id == admitted.links[0].span_id)
        assert cycle.name == "admission cycle" and cycle.service == "poolwise-admission"
        assert cycle.trace_id != enqueue.trace_id  # (the cycle is the admission process's own trace)
        assert [(link.trace_id, link.span_id) for link in cycle.links] == [(enqueue.trace_id, enqueue.span_id)]
        assert cycle.attributes["poolwise.gangs_traced"] == 1 and cycle.attributes["poolwise.tree"] == "default"
        batch = one(spans, "the cycle's batch", lambda s: s.span_id == cycle.parent_id)
        assert batch.name == "fold batch" and batch.attributes["service"] == "admission"
        assert batch.attributes["decisions"] >= 1
        # preemption asks a0 back: in a0's trace, below admission's decision
        preempted = gang_span(spans, "preemption requested", "a0")
        assert preempted.service == "poolwise-preemption"
        assert (preempted.trace_id, preempted.parent_id) == (enqueue.trace_id, admitted.span_id)
        assert preempted.attributes["poolwise.tasks"] == 2
        assert preempted.attributes["poolwise.reason"].startswith("over ")
        # each task report: a span in its sender's trace, linked to a0's (admission's decision)
        reports = [s for s in spans if s.name == "task state"]
        assert {s.attributes["poolwise.task"] for s in reports} == {"a0/0", "a0/1"}
        for report in reports:
            folded = child_of(spans, report)
            assert folded.name == "admission TaskStateChanged" and folded.trace_id == report.trace_id
            assert [(link.trace_id, link.span_id) for link in folded.links] == [(admitted.trace_id,
                                                                                 admitted.span_id)]
        # the tree service folds a0's enqueue and admission's decision: its batch is in a0's trace
        # (a child of the first sampled envelope of the batch, linked to the others)
        tree = [s for s in spans if s.service == "poolwise-tree"]
        assert tree and {s.name for s in tree} == {"fold batch"}
        for cause in (enqueue, admitted):
            folds = [s for s in tree if s.parent_id == cause.span_id
                     or (cause.trace_id, cause.span_id) in {(link.trace_id, link.span_id) for link in s.links}]
            assert len(folds) == 1, (cause.name, tree)
            assert folds[0].attributes["service"] == "tree" and folds[0].attributes["events"] >= 1
            if folds[0].parent_id == cause.span_id:
                assert folds[0].trace_id == cause.trace_id
        # b0 is a trace of its own
        b0 = gang_span(spans, "enqueue", "b0")
        assert b0.trace_id != enqueue.trace_id

        # the metrics: the pool series, the counters and the histograms, from admission's process
        def exported(points: list[Point], metric: str, **labels: str) -> list[float]:
            return [p.value for p in points if p.metric == metric and p.service == "poolwise-admission"
                    and all(p.attributes.get(k) == v for k, v in labels.items())]

        def metrics_in() -> list[Point] | None:
            points = receiver.snapshot()[1]
            admitted = exported(points, "poolwise_gangs_admitted", pool="/a")
            return points if admitted and admitted[-1] > 0 else None  # (not only the export at 0)

        points = wait_for(metrics_in, "admission's metrics at the receiver")
        # (each export carries the series' values then: a counter is exported at 0 before its first
        # gang, so the last value received is the one to compare)
        assert exported(points, "poolwise_pool_reservation", tree="default", pool="/b", kind="cpu")[-1] == 5.0
        assert exported(points, "poolwise_gangs_admitted", tree="default", pool="/a")[-1] == 1.0
        assert exported(points, "poolwise_admission_wait_seconds", tree="default", pool="/a")[-1] == 1.0
        assert exported(points, "poolwise_cycle_duration_seconds", service="admission")
        assert "Traceback" not in up.stderr


def test_a_gang_enqueued_before_a_restart_and_decided_after_it_keeps_its_trace(tmp_path: Path,
                                                                               receiver: Received) -> None:
    """a0 runs (all 10 cpu) and c0 waits behind it; up stops cleanly (each service keeps a snapshot
    of its fold) and starts again from those snapshots. Then b0 makes preemption ask a0 back, and
    a0's end lets c0 in: both decisions, made after the restart, are in the gangs' traces (the
    contexts read back from their enqueues on the log)."""
    with Up(tmp_path / "data", tmp_path) as up:
        a0_running(up, tmp_path, receiver)
        submit(up, "c0", "/a", 1)
        before = spans_where(receiver, has("enqueue", "c0"), "c0's enqueue at the receiver")
        assert up.stop() == 0
        up.start()
        wait_for(lambda: "admission: started from its snapshot" in up.stderr, "admission started from its snapshot")
        submit(up, "b0", "/b", 1, "--no-preemptible")
        wait_for(lambda: has("preemption requested", "a0")(receiver.snapshot()[0]) or None,
                 "a0's preemption after the restart, in its trace")
        for task in ("a0/0", "a0/1"):
            ok(up.cli("task", "set", task, "succeeded", "--gang", "a0"))
        spans = spans_where(receiver, has("admission GangAdmitted", "c0"), "c0's admission after the restart")

        a0, c0 = gang_span(spans, "enqueue", "a0"), gang_span(before, "enqueue", "c0")
        admitted = gang_span(spans, "admission GangAdmitted", "c0")
        assert (admitted.trace_id, admitted.parent_id) == (c0.trace_id, c0.span_id)
        cycle = one(spans, "c0's cycle", lambda s: s.span_id == admitted.links[0].span_id)
        assert (c0.trace_id, c0.span_id) in {(link.trace_id, link.span_id) for link in cycle.links}
        # a0 was admitted before the restart: preemption joins it to its enqueue (what the log keeps),
        # or to admission's decision where its fold read that after its snapshot
        preempted = gang_span(spans, "preemption requested", "a0")
        decided = gang_span(spans, "admission GangAdmitted", "a0")
        assert preempted.trace_id == a0.trace_id and preempted.parent_id in (a0.span_id, decided.span_id)
        assert "Traceback" not in up.stderr
