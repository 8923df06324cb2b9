"""Sections render as tables and markdown; the document keeps its prose around the generated blocks."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from bench.profiling import profiled, top_collapsed, top_cprofile
from bench.report import Row, Section, markdown, rich_table, update_doc
from bench.submitter import percentile


def _section(value: float = 1234.5) -> Section:
    s = Section("admission", "Admission", params={"gangs": 10})
    s.add(Row("fold", value, "events/s", ratio=0.5, against="raw consume"))
    s.add(Row("p99", 70.0, "ms", goal="<= 50 ms", met=False))
    s.notes.append("a | note")
    return s


def test_markdown_has_every_row_and_the_goal_verdict() -> None:
    text = markdown(_section())
    assert "| fold | 1,234 | events/s | 0.50x | raw consume |" in text
    assert "**NOT met**" in text and "a \\| note" in text and "`gangs=10`" in text


def test_the_rich_table_renders() -> None:
    console = Console(width=200, record=True)
    console.print(rich_table(_section()))
    assert "NOT met" in console.export_text()


def test_update_doc_replaces_only_its_block(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nprose before\n")
    update_doc(doc, _section(1.5))
    update_doc(doc, Section("raw", "Raw"))
    doc.write_text(doc.read_text() + "\nprose after\n")
    update_doc(doc, _section(2.5))
    text = doc.read_text()
    assert text.count("<!-- bench:admission:start -->") == 1 and text.count("<!-- bench:raw:end -->") == 1
    assert "| fold | 2.5 |" in text and "| fold | 1.5 |" not in text
    assert text.index("prose before") < text.index("bench:admission") < text.index("prose after")


def test_percentile_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0 and percentile(values, 0.99) == 99.0 and percentile([], 0.9) == 0.0


def test_profiles_summarise(tmp_path: Path) -> None:
    result, stats = profiled(lambda: sum(i * i for i in range(1000)))
    assert result == sum(i * i for i in range(1000))
    rows = top_cprofile(stats, 5)
    assert rows and all(0.0 <= r.own <= 1.0 for r in rows)
    stacks = tmp_path / "stacks.txt"
    stacks.write_text("main (app.py:1);work (app.py:5) 30\nmain (app.py:1);idle (lib.py:2);select (selectors.py:9) 50\n"
                      "main (app.py:1) 10\n")
    hot, samples = top_collapsed(stacks, 5)
    assert samples == 40  # the blocked select is left out
    assert hot[0].function == "app.py:work" and abs(hot[0].own - 0.75) < 1e-9
