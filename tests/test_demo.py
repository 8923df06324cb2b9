"""`poolwise demo`: the Peloton user guide example gives back 11.67 from RP2 and RP3 each."""

from __future__ import annotations

import anyio

from services.demo.story import scenario
from services.scenario.runner import run_file


def test_demo_story_matches_the_guide() -> None:
    report = anyio.run(run_file, scenario(), "memory", None, 0)
    assert report.passed
    at60 = report.steps[1]
    over = {p: round(r.allocation["cpu"] - r.entitlement["cpu"], 2) for p, r in at60.pools.items()}
    assert over == {"/RP1": -0.33, "/RP2": 11.67, "/RP3": 11.67}
    preempted = [d.pool for d in at60.decisions if d.kind == "preempt"]
    assert preempted.count("/RP2") == 12 and preempted.count("/RP3") == 12
