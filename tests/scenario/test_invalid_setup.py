"""A scenario whose initial pools the tree service refuses is an invalid file: `scenario run`
exits 2 with the place, the numbers and the rule (SCENARIOS.md), on either bus; it used to exit 1
with `internal error: ScenarioError` (the runner's task group wrapped the error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import one_error_line, run_here

INVALID = """\
name: invalid-setup
resources: [cpu]
capacity: {cpu: 100}
pools:
  - {path: /a, reservation: {cpu: 10}, limit: {cpu: 50}}
  - path: /a/b
    reservation: {cpu: 50}
    limit: {cpu: 10}
steps:
  - at: 0
"""


@pytest.mark.parametrize("bus", ["memory", "nats"])
def test_invalid_initial_pool_is_exit_2_with_place_and_rule(
        bus: str, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "invalid.yaml"
    file.write_text(INVALID)
    result = run_here(capfd, monkeypatch, "scenario", "run", "--bus", bus, str(file))
    line = one_error_line(result)
    assert "internal error" not in line
    assert f"{file}: pools[1] (line 6): " in line, line
    assert "reservation 50 exceeds limit 10 [reservation_exceeds_limit]" in line, line
