"""`POOLWISE_TRACE=console`: a service process prints its spans (one per folded batch) on stderr.
Run in a child interpreter: a tracer provider is process-wide and can be set only once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import anyio
    from services.common.tracing import configure, span

    configure("poolwise-admission")
    with span("fold batch", service="admission", events=3):
        pass
    from opentelemetry import trace
    getattr(trace.get_tracer_provider(), "force_flush", lambda: None)()
""")


def _run(trace: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "POOLWISE_TRACE"}
    if trace is not None:
        env["POOLWISE_TRACE"] = trace
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120,
                          check=True)
    return done.stdout + done.stderr


def test_spans_are_printed_when_asked_for() -> None:
    out = _run("console")
    assert '"name": "fold batch"' in out
    assert '"service.name": "poolwise-admission"' in out
    assert '"events": 3' in out


def test_nothing_is_printed_otherwise() -> None:
    assert _run(None) == ""
