"""The rooms of the code and what each may import, as docs/architecture.md's table "Rooms: what
each may import" says them: every module of ours is in a room (the longest room path its file
starts with), and every import of ours it makes (at top level, in a function, or under
TYPE_CHECKING) is of its own room or of one its row names. A new dependency between rooms is a
change to that table first."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = ("events", "projections", "services", "bench")
HEADING = "### Rooms: what each may import"
EVERYTHING = "everything"


def rooms_table(text: str) -> dict[str, set[str]]:
    """room -> the rooms it may import (`{EVERYTHING}`: any), from the table under `HEADING`."""
    lines = text.split(HEADING, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table: dict[str, set[str]] = {}
    for row in lines[start + 2:]:  # after the header and its rule
        if not row.startswith("|"):
            break
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        room = cells[0].strip("`")
        allowed = cells[-1]
        table[room] = {EVERYTHING} if allowed.startswith(EVERYTHING) else set(re.findall(r"`([\w/]+/)`", allowed))
    return table


def room_of(path: str, rooms: set[str]) -> str | None:
    """The room of a file or module path (`services/tree/domain/state.py`): the longest room it is in."""
    found = [room for room in rooms if path.startswith(room)]
    return max(found, key=len) if found else None


def imported(source: str) -> set[str]:
    """The module paths of ours that `source` imports (`events/codec`, `services/common`), each as a
    path with a trailing `/`, so that `room_of` places it."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name.replace(".", "/") + "/" for name in names if name.split(".")[0] in OURS}


def trespasses(files: dict[str, str], table: dict[str, set[str]]) -> list[str]:
    """`files` (path -> source) against `table`: each import of a room its file's room may not
    import, and each file in no room."""
    rooms = set(table)
    found: list[str] = []
    for path, source in sorted(files.items()):
        home = room_of(path, rooms)
        if home is None:
            found.append(f"{path} is in no room")
            continue
        allowed = table[home]
        for target in sorted(imported(source)):
            room = room_of(target, rooms)
            if room is not None and room != home and EVERYTHING not in allowed and room not in allowed:
                found.append(f"{path} ({home}) imports {target.rstrip('/')} ({room})")
    return found


def _ours() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for top in OURS for p in (REPO / top).rglob("*.py")}


def test_every_import_between_rooms_is_one_the_table_allows() -> None:
    table = rooms_table((REPO / "docs" / "architecture.md").read_text())
    assert {"events/", "services/tools/cli/", "bench/"} <= set(table)
    assert all((REPO / room).is_dir() for room in table), [room for room in table if not (REPO / room).is_dir()]
    files = _ours()
    assert len(files) > 200
    assert trespasses(files, table) == []


def test_every_room_of_the_table_holds_a_module() -> None:
    table = rooms_table((REPO / "docs" / "architecture.md").read_text())
    homes = {room_of(path, set(table)) for path in _ours()}
    assert set(table) <= homes, set(table) - homes


def test_the_check_finds_an_import_the_table_does_not_allow() -> None:
    doc = f"""{HEADING}

| room | holds | may import, of ours |
| --- | --- | --- |
| `events/` | the contract | nothing |
| `services/tree/domain/` | a domain | `events/` |
| `services/` | the rest | `events/`, `services/tree/domain/` (its state) |
| `bench/` | benchmarks | everything |

After the table.
"""
    table = rooms_table(doc)
    assert table == {"events/": set(), "services/tree/domain/": {"events/"},
                     "services/": {"events/", "services/tree/domain/"}, "bench/": {EVERYTHING}}
    files = {
        "events/codec.py": "import json\nfrom events.base import Event\n",
        "services/tree/domain/state.py": "def f():\n    from services.common import log\n",
        "services/tools/cli/main.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import bench.soak\n",
        "bench/soak.py": "from services.tools.cli import main\nimport events\n",
        "projections/gangs.py": "import events\n",
    }
    assert trespasses(files, table) == [
        "projections/gangs.py is in no room",
        "services/tools/cli/main.py (services/) imports bench/soak (bench/)",
        "services/tree/domain/state.py (services/tree/domain/) imports services/common/log (services/)",
    ]
