"""Reading a scenario document (YAML, or JSON) into plain data, with the line of every place.

Duplicate keys are refused (PyYAML would silently keep the last one). Syntax errors become a
`ScenarioError` with the line and column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

from services.tools.scenario.errors import Loc, ScenarioError


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys in a mapping."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            try:
                key = self.construct_object(key_node, deep=True)
                hash(key)
            except (ConstructorError, TypeError):
                continue  # reported by the base class with its own message
            if key in seen and key != "<<":
                problem = f"duplicate key {key!r} (first given on line {seen[key]})"
                raise ConstructorError(None, None, problem, key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True)
class Source:
    """A parsed document: its data and, when it could be composed as YAML, its node tree."""

    file: str
    data: Any
    root: Node | None = None

    def line_of(self, loc: Loc) -> int | None:
        """The 1-based line of the deepest node `loc` reaches (the key's line for a mapping entry)."""
        node = self.root
        if node is None:
            return None
        line: int = node.start_mark.line + 1
        for part in loc:
            if isinstance(node, MappingNode):
                for key_node, value_node in node.value:
                    if str(getattr(key_node, "value", None)) == str(part):
                        line = key_node.start_mark.line + 1
                        node = value_node
                        break
                else:
                    return line
            elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return line
        return line


def parse_text(text: str, file: str, fmt: str | None = None) -> Source:
    """Parse `text` as JSON (`fmt == "json"`, or a `.json` file) or YAML (anything else)."""
    is_json = fmt == "json" or (fmt is None and file.lower().endswith(".json"))
    if is_json:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioError(file, f"line {exc.lineno}, column {exc.colno}", f"invalid JSON: {exc.msg}",
                                exc.lineno) from None
        return Source(file, data, _compose_quietly(text))
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "not valid YAML"
        if exc.context and exc.problem:
            problem = f"{problem} ({exc.context})"
        if mark is None:
            raise ScenarioError(file, "", f"invalid YAML: {problem}") from None
        place = f"line {mark.line + 1}, column {mark.column + 1}"
        raise ScenarioError(file, place, f"invalid YAML: {problem}", mark.line + 1) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(file, "", f"invalid YAML: {exc}") from None
    return Source(file, data, root)


def _compose_quietly(text: str) -> Node | None:
    try:
        return yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError:
        return None


def read_source(path: str) -> Source:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ScenarioError(path, "", "no such file") from None
    except IsADirectoryError:
        raise ScenarioError(path, "", "is a directory, not a scenario file") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(path, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ScenarioError(path, "", f"cannot read the file: {exc.strerror or exc}") from None
    return parse_text(text, path)
