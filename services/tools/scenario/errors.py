"""The one error a scenario file can be: which file, where in it, and what is wrong."""

from __future__ import annotations

from collections.abc import Sequence

Loc = tuple[str | int, ...]


class ScenarioError(Exception):
    """A file that is not a valid scenario (`poolwise scenario run` exits 2 with this text).

    - `file`: the file as it was named;
    - `place`: where in it, as a path into the document (`steps[2].do[1].enqueue.tasks`), or
      `line 3, column 7` for a syntax error; empty when the problem is the whole file;
    - `problem`: a readable sentence;
    - `line`: the line of the place in the file, when known (1-based).
    """

    def __init__(self, file: str, place: str, problem: str, line: int | None = None) -> None:
        super().__init__(file, place, problem, line)
        self.file = file
        self.place = place
        self.problem = problem
        self.line = line

    def __str__(self) -> str:
        where = self.place
        if self.line is not None and not where.startswith("line "):
            where = f"{where} (line {self.line})" if where else f"line {self.line}"
        return f"{self.file}: {where}: {self.problem}" if where else f"{self.file}: {self.problem}"

    def to_dict(self) -> dict[str, str | int | None]:
        return {"file": self.file, "place": self.place, "problem": self.problem, "line": self.line}


def format_place(loc: Sequence[str | int]) -> str:
    """`('steps', 2, 'do', 1, 'enqueue')` -> `steps[2].do[1].enqueue`; odd keys are quoted
    (`expect.entitlement["/RP1"].cpu`)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier():
            out += f".{part}" if out else part
        else:
            out += f'["{part}"]'
    return out


class Problem(Exception):
    """A problem found while checking a loaded document, at a location (turned into a ScenarioError)."""

    def __init__(self, loc: Loc, problem: str) -> None:
        super().__init__(loc, problem)
        self.loc = loc
        self.problem = problem
