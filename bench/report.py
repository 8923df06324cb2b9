"""Benchmark results as sections of rows: shown as rich tables, written as markdown into
docs/performance.md between markers, one section per benchmark (nothing runs at import).

    <!-- bench:admission:start -->
    ... generated ...
    <!-- bench:admission:end -->

`update_doc(path, section)` replaces that block (or appends it at the end of the file), so the
hand-written text around the blocks is kept.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table


@dataclass(frozen=True, slots=True)
class Row:
    """One number. `ratio` is `value / reference` (or reference / value for times) against
    `against`, a rate or time measured in the same run; `goal` and `met` when there is a goal."""

    name: str
    value: float
    unit: str
    ratio: float | None = None
    against: str = ""
    goal: str = ""
    met: bool | None = None
    note: str = ""


@dataclass
class Section:
    key: str  # the marker name: entitlement, admission, pipeline, projection, raw
    title: str
    rows: list[Row] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    machine: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0  # how long the benchmark ran

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def goals(self) -> list[Row]:
        return [r for r in self.rows if r.met is not None]


def machine_facts() -> dict[str, str]:
    """Where, when and on what code: the numbers mean little without them."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
        "machine": f"{platform.system()} {platform.machine()}",
        "load": f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        "code": _revision(),
    }


def _revision() -> str:
    """`git describe` of the checkout the benchmarks run from (`+changes` when the tree is dirty)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def fmt_value(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.3f}" if value < 100 else f"{value:,.0f}"
    if unit == "ms":
        return f"{value:.2f}" if value < 10 else f"{value:,.1f}"
    if unit in ("B", "count") or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None:
        return ""
    return f"{ratio:.2f}x" if ratio < 100 else f"{ratio:,.0f}x"


def _met(row: Row) -> str:
    if row.met is None:
        return ""
    return "met" if row.met else "NOT met"


def rich_table(section: Section) -> Table:
    params = ", ".join(f"{k}={v}" for k, v in section.params.items())
    table = Table(title=f"{section.title}" + (f"  [dim]({params})[/dim]" if params else ""), title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("unit")
    table.add_column("ratio", justify="right")
    table.add_column("against")
    table.add_column("goal")
    table.add_column("")
    for row in section.rows:
        met = _met(row)
        style = "" if row.met is None else ("green" if row.met else "bold red")
        table.add_row(row.name, fmt_value(row.value, row.unit), row.unit, fmt_ratio(row.ratio), row.against,
                      row.goal, f"[{style}]{met}[/{style}]" if style else met)
    return table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(section: Section) -> str:
    """The generated block for docs/performance.md (without its markers)."""
    facts = section.machine or machine_facts()
    lines = [f"### {section.title}", ""]
    lines.append(f"Run {facts.get('date', '?')}, Python {facts.get('python', '?')}, {facts.get('cpus', '?')} CPUs "
                 f"({facts.get('machine', '?')}), code {facts.get('code', '?')}, load average at start "
                 f"{facts.get('load', '?')}; took {section.seconds:.1f} s.")
    if section.params:
        lines.append("Parameters: " + ", ".join(f"`{k}={v}`" for k, v in section.params.items()) + ".")
    lines += ["", "| measure | value | unit | ratio | against | goal | |",
              "| --- | ---: | --- | ---: | --- | --- | --- |"]
    for row in section.rows:
        met = _met(row)
        lines.append("| " + " | ".join(_cell(c) for c in (
            row.name, fmt_value(row.value, row.unit), row.unit, fmt_ratio(row.ratio), row.against, row.goal,
            f"**{met}**" if met == "NOT met" else met)) + " |")
    if section.notes:
        lines.append("")
        lines += [f"- {_cell(n)}" for n in section.notes]
    return "\n".join(lines) + "\n"


def _markers(key: str) -> tuple[str, str]:
    return f"<!-- bench:{key}:start -->", f"<!-- bench:{key}:end -->"


def update_doc(path: Path, section: Section) -> None:
    """Replace the section's generated block in `path` (append it when missing)."""
    start, end = _markers(section.key)
    block = f"{start}\n{markdown(section)}{end}"
    text = path.read_text() if path.exists() else "# Performance\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
