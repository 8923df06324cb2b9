"""The file rules (services/tools/scenario/checks.py) and the format that calls them depend one way:
format -> checks. The rules read a file through `checks.ScenarioFile`, never the format's models
(issue 22: the two imported each other, one side behind TYPE_CHECKING)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from services.tools.scenario.checks import check_setup
from services.tools.scenario.errors import Problem
from services.tools.scenario.format import Step, parse_scenario

CHECKS = Path(__file__).resolve().parents[2] / "services" / "tools" / "scenario" / "checks.py"


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):  # every import, at any level
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_rules_import_nothing_of_the_scenario_package_but_its_errors() -> None:
    ours = {name for name in _imported(CHECKS) if name.startswith("services.tools.scenario")}
    assert ours == {"services.tools.scenario.errors"}


def test_the_rules_read_the_formats_scenario() -> None:
    scenario = parse_scenario("name: s\ncapacity: {cpu: 4}\npools: [{path: /a}]\n", fmt="yaml")
    check_setup(scenario)
    backwards = scenario.model_copy(update={"steps": [Step(at=2.0), Step(at=1.5)]})
    with pytest.raises(Problem, match=r"at 1\.5 comes before the previous step's 2") as caught:
        check_setup(backwards)
    assert caught.value.loc == ("steps", 1, "at")
