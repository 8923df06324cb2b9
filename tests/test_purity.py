"""Pure core, thin shell: domain code and the wire contract import no adapters, clock or random."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN_IN_DOMAIN = {"nats", "duckdb", "pyarrow", "anyio", "asyncio", "opentelemetry", "random", "time",
                       "datetime", "projections", "services.common", "threading", "socket", "os", "secrets", "uuid"}
FORBIDDEN_IN_EVENTS = {"nats", "duckdb", "anyio", "opentelemetry", "projections", "services"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _violations(files: list[Path], forbidden: set[str]) -> list[str]:
    found = []
    for file in files:
        for name in _imports(file):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{file.relative_to(REPO)} imports {name}")
    return found


def _domain_files() -> list[Path]:
    # the entitlement engine is pure too, in a room of its own (no domain/ folder)
    folders = [*REPO.glob("services/*/domain"), REPO / "services" / "entitlement"]
    return sorted(p for d in folders for p in d.rglob("*.py"))


def test_domain_packages_exist() -> None:
    assert {p.parent.name for p in REPO.glob("services/*/domain")} >= {"tree", "admission", "preemption"}


@pytest.mark.parametrize("forbidden", [sorted(FORBIDDEN_IN_DOMAIN)])
def test_domain_code_is_pure(forbidden: list[str]) -> None:
    assert _violations(_domain_files(), set(forbidden)) == []


def test_events_imports_nothing_else_of_ours() -> None:
    files = sorted((REPO / "events").rglob("*.py"))
    assert _violations(files, FORBIDDEN_IN_EVENTS) == []


def test_purity_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom nats.js import api\n")
    assert len(_violations_outside(bad)) == 2


def _violations_outside(path: Path) -> list[str]:
    return [n for n in _imports(path) if any(n == f or n.startswith(f + ".") for f in FORBIDDEN_IN_DOMAIN)]


def test_nothing_below_the_cli_imports_it() -> None:
    """The CLI is the top layer: services, projections and events never import it (an error type
    they raise lives below it: services/common/input_error.py)."""
    files = sorted(p for top in ("services", "projections", "events") for p in (REPO / top).rglob("*.py")
                   if "cli" not in p.relative_to(REPO).parts)
    assert len(files) > 100
    assert _violations(files, {"services.tools.cli"}) == []
