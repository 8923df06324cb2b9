"""Every public scenario passes, on the in-memory log and on JetStream (the outside contract)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from services.common.natsserver import EmbeddedNats
from services.tools.scenario.format import load_scenario
from services.tools.scenario.report import ScenarioReport
from services.tools.scenario.runner import run_file

SCENARIOS = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios"
SHARED = sorted(SCENARIOS.glob("*.yaml")) if SCENARIOS.is_dir() else []
OWN = Path(__file__).resolve().parent / "files"
"""Copies of scenarios of issues done here while they wait in `../shared/scenarios/next/` (a CI
clone has no `../shared`); one that has moved up beside the public ones is run from there."""
FILES = SHARED + [p for p in sorted(OWN.glob("*.yaml")) if p.name not in {s.name for s in SHARED}]


@pytest.fixture(scope="module")
def private_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server of our own: the runner replaces the POOLWISE stream, which other tests' streams
    on the shared server could overlap."""
    with EmbeddedNats(tmp_path_factory.mktemp("scenario-nats")) as server:
        yield server.url


def _run(path: Path, bus: str, url: str | None) -> ScenarioReport:
    return anyio.run(run_file, load_scenario(path), bus, url, 0)


def _failures(report: ScenarioReport) -> list[str]:
    return [f for step in report.steps for f in step.failures]


@pytest.mark.skipif(not FILES, reason="no scenario: ../shared/scenarios is not beside this checkout")
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_public_scenario_on_memory_bus(path: Path) -> None:
    report = _run(path, "memory", None)
    assert _failures(report) == []
    assert report.passed


@pytest.mark.nats
@pytest.mark.skipif(not FILES, reason="no scenario: ../shared/scenarios is not beside this checkout")
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_public_scenario_on_nats_bus(path: Path, private_nats: str) -> None:
    report = _run(path, "nats", private_nats)
    assert _failures(report) == []
    assert report.passed


def test_a_failing_expectation_fails_the_report(tmp_path: Path) -> None:
    scenario = tmp_path / "wrong.yaml"
    scenario.write_text(
        "name: wrong\nresources: [cpu]\ncapacity: {cpu: 100}\n"
        "pools:\n  - {path: /a, reservation: {cpu: 20}}\n"
        "steps:\n  - at: 0\n    do:\n      - enqueue: {gang: g, pool: /a, tasks: 1, resources: {cpu: 1}}\n"
        "    expect:\n      allocation: {/a: {cpu: 2}}\n      admitted: [g]\n"
    )
    report = _run(scenario, "memory", None)
    assert not report.passed
    assert _failures(report) == ["step at=0: allocation /a cpu: expected 2.0, observed 1.0"]


def test_decisions_read_back_while_resolving_a_selector_belong_to_the_step(tmp_path: Path) -> None:
    scenario = tmp_path / "selector.yaml"
    scenario.write_text(
        "name: selector\nresources: [cpu]\ncapacity: {cpu: 10}\n"
        "pools:\n  - {path: /a, reservation: {cpu: 5}}\n"
        "steps:\n  - at: 0\n    do:\n      - enqueue: {gang: g, pool: /a, tasks: 1, resources: {cpu: 1}}\n"
        "    expect: {admitted: [g]}\n"
        "  - at: 1\n    do:\n      - enqueue: {gang: nowhere, pool: /zzz, tasks: 1, resources: {cpu: 1}}\n"
        "      - task: {gang: g, state: running}\n    expect: {rejected: [nowhere]}\n"
    )
    report = _run(scenario, "memory", None)
    assert _failures(report) == []
    assert [d.ref for d in report.steps[1].decisions if d.kind == "rejected"] == ["nowhere"]
