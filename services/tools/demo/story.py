"""`poolwise demo`: the Peloton user guide's sharing example, told step by step on the real system.

Three pools with equal reservations (20 cpu) share 100 cpu. RP1 wants 10, RP2 and RP3 want 80:
RP1's unused reservation is lent to RP2 and RP3 (10/45/45). When RP1's demand rises to 50, every
entitlement becomes 33.33, and RP2 and RP3 each give back 11.67: 12 one-cpu tasks each, preempted.
"""

from __future__ import annotations

from importlib import resources

from rich.console import Console
from rich.table import Table

from services.tools.scenario.format import Scenario, parse_scenario
from services.tools.scenario.report import ScenarioReport, StepReport

NARRATION: dict[float, str] = {
    0: "RP1 asks for 10 cpu, RP2 and RP3 for 80 each: RP1's unused reservation is lent out.",
    60: "RP1's demand rises by 40: entitlements become 33.33 each; RP2 and RP3 are 11.67 over and are preempted.",
    70: "The executors report the preempted tasks stopped: their allocation is released.",
}


def scenario() -> Scenario:
    text = resources.files("services.tools.demo").joinpath("peloton.yaml").read_text()
    return parse_scenario(text, file="peloton-guide-sharing (built in)")


def render(report: ScenarioReport, out: Console) -> None:
    for step in report.steps:
        out.rule(f"t = {step.at:g} s")
        out.print(NARRATION.get(step.at, ""))
        out.print(_table(step))
        preempted: dict[str, int] = {}
        for decision in step.decisions:
            if decision.kind == "preempt" and decision.pool:
                preempted[decision.pool] = preempted.get(decision.pool, 0) + 1
        admitted = sum(1 for d in step.decisions if d.kind == "admitted")
        out.print(f"admitted {admitted} gangs; preemption requests: "
                  + (", ".join(f"{p} {n} tasks" for p, n in sorted(preempted.items())) or "none"))
        for failure in step.failures:
            out.print(f"[red]unexpected: {failure}[/red]")
    out.rule()
    out.print("[green]as in the Peloton user guide[/green]" if report.passed else "[red]differs from the guide[/red]")


def _table(step: StepReport) -> Table:
    table = Table("pool", "reservation", "demand", "entitlement", "allocation", "over by")
    for path, pool in sorted(step.pools.items()):
        cpu = {name: pool.get(name).get("cpu", 0.0) for name in
               ("reservation", "demand", "entitlement", "allocation")}
        over = max(0.0, cpu["allocation"] - cpu["entitlement"])
        table.add_row(path, f"{cpu['reservation']:g}", f"{cpu['demand']:g}", f"{cpu['entitlement']:.2f}",
                      f"{cpu['allocation']:g}", f"{over:.2f}" if over > 0.005 else "-")
    return table
