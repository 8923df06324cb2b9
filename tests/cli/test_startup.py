"""The CLI starts without the heavy parts of poolwise: every command imports what it needs when
it runs, so `poolwise --help`, `poolwise gangs` or `poolwise explain` do not load the services'
domains, NumPy, DuckDB or PyArrow (about a third of a second of the command's start, measured)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("numpy", "duckdb", "pyarrow", "services.admission.domain.state", "services.admission.domain.explain",
         "services.tree.domain.state", "projections")


def test_importing_the_cli_loads_no_domain_numpy_duckdb_or_arrow() -> None:
    code = ("import json, sys, services.tools.cli.main; "
            f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert json.loads(done.stdout) == []


def test_serving_admission_or_preemption_loads_no_duckdb_or_arrow() -> None:
    # they keep no read models (the tree service projects the log once): about 40 MB less a process
    code = ("import json, sys, services.tools.cli.serve_cmd, services.launcher, services.admission.service, "
            "services.preemption.service; "
            "print(json.dumps([m for m in ('duckdb', 'pyarrow', 'projections.store') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert json.loads(done.stdout) == []


def test_the_cli_imports_a_command_only_when_it_runs() -> None:
    # each `poolwise serve` process of `poolwise up` starts through the CLI: every module imported
    # there is imported by every service process (docs/performance.md, "Start-up")
    code = ("import json, sys, services.tools.cli.main; print(json.dumps([m for m in ('events', 'nats', 'pydantic', "
            "'services.tools.scenario', 'services.sdk', 'rich.table', 'yaml') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert json.loads(done.stdout) == []
