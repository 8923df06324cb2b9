"""`poolwise bench`: refuses unknown names; a tiny run prints JSON and writes its docs section."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.tools.cli.main import app


def test_an_unknown_benchmark_is_refused() -> None:
    result = CliRunner().invoke(app, ["bench", "everything"])
    assert result.exit_code == 2
    assert "unknown benchmark" in result.output


def test_entitlement_quick_as_json_and_into_the_docs(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    result = CliRunner().invoke(app, ["bench", "entitlement", "--quick", "--json", "--write-docs", "--docs", str(doc)])
    assert result.exit_code == 0, result.output
    sections = json.loads(result.stdout.strip().splitlines()[-1])
    assert [s["key"] for s in sections] == ["entitlement"]
    assert any(r["met"] is not None for r in sections[0]["rows"])  # the 10k goal is judged
    assert "<!-- bench:entitlement:start -->" in doc.read_text()
