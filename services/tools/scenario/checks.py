"""The rules of a scenario file that span several places: capacity or hosts, kinds in play,
declared trees, pools parents first, steps in time order. Each raises `Problem` at its place.

The rules read a file through `ScenarioFile`, what they need of it: the format's `Scenario`
(services/tools/scenario/format.py, which calls them as it loads a file) is one, and so is a cluster
file (services/tools/scenario/cluster_file.py). The dependency points one way: format -> checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from events import TreeOptions
from events.subjects import TREE_NAME
from services.tools.scenario.errors import Loc, Problem


class HostFields(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def resources(self) -> Mapping[str, float]: ...
    @property
    def revocable(self) -> Mapping[str, float]: ...


class TreeFields(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def resources(self) -> Sequence[str]: ...
    @property
    def model_fields_set(self) -> set[str]: ...  # the fields the file sets


class PoolFields(Protocol):
    @property
    def tree(self) -> str | None: ...
    @property
    def path(self) -> str: ...
    @property
    def reservation(self) -> Mapping[str, float] | None: ...
    @property
    def limit(self) -> Mapping[str, float] | None: ...
    @property
    def share(self) -> float | Mapping[str, float] | None: ...


class StepFields(Protocol):
    @property
    def at(self) -> float: ...


class ScenarioFile(Protocol):
    """What the rules read of a scenario (or cluster) file."""

    @property
    def resources(self) -> Sequence[str]: ...
    @property
    def capacity(self) -> Mapping[str, float] | None: ...
    @property
    def hosts(self) -> Sequence[HostFields] | None: ...
    @property
    def trees(self) -> Sequence[TreeFields] | None: ...
    @property
    def pools(self) -> Sequence[PoolFields]: ...
    @property
    def steps(self) -> Sequence[StepFields]: ...
    @property
    def default_tree(self) -> str: ...
    def known_kinds(self) -> list[str]: ...
    def tree_options(self) -> dict[str, TreeOptions]: ...


def check_setup(s: ScenarioFile) -> None:
    """The rules that span several places of the file. Raises `Problem`."""
    check_header(s)
    _check_pools(s)
    previous: float | None = None
    for i, step in enumerate(s.steps):
        if previous is not None and step.at < previous:
            raise Problem(("steps", i, "at"), f"at {step.at:g} comes before the previous step's "
                          f"{previous:g}: steps are in time order (non-decreasing `at`)")
        previous = step.at


def check_header(s: ScenarioFile) -> None:
    """The rules of capacity, hosts, kinds and trees (a cluster file's too: `poolwise apply`,
    which leaves the pools' rules to the tree service's, every broken one listed)."""
    if s.capacity is not None and s.hosts is not None:
        raise Problem(("hosts",), "use either `capacity` or `hosts`, not both")
    _unique(s.resources, ("resources",), "resource kind")
    _check_trees(s)
    kinds = s.known_kinds()
    if s.capacity is not None:
        _amounts(s.capacity, ("capacity",), kinds)
    names: set[str] = set()
    for i, host in enumerate(s.hosts or []):
        if host.name in names:
            raise Problem(("hosts", i, "name"), f"host {host.name!r} is given twice")
        names.add(host.name)
        _amounts(host.resources, ("hosts", i, "resources"), kinds)
        _amounts(host.revocable, ("hosts", i, "revocable"), kinds)


def _check_trees(s: ScenarioFile) -> None:
    seen: set[str] = set()
    for i, tree in enumerate(s.trees or []):
        if not TREE_NAME.match(tree.name):
            raise Problem(("trees", i, "name"), f"tree name {tree.name!r} must be 1 to 64 of -_a-zA-Z0-9")
        if tree.name in seen:
            raise Problem(("trees", i, "name"), f"tree {tree.name!r} is declared twice")
        seen.add(tree.name)
        if "resources" in tree.model_fields_set:
            _unique(tree.resources, ("trees", i, "resources"), "resource kind")


def _check_pools(s: ScenarioFile) -> None:
    options = s.tree_options()
    declared: set[tuple[str, str]] = set()
    for i, pool in enumerate(s.pools):
        tree = pool.tree or s.default_tree
        if tree not in options:
            known = ", ".join(options)
            raise Problem(("pools", i, "tree"), f"tree {tree!r} is not declared (trees: {known})")
        path = pool.path
        if not path.startswith("/") or path == "/" or path.endswith("/") or "//" in path:
            problem = ("the root `/` is the tree's capacity, not a configurable pool" if path == "/"
                       else f"pool path {path!r} must look like /a/b")
            raise Problem(("pools", i, "path"), problem)
        if (tree, path) in declared:
            raise Problem(("pools", i, "path"), f"pool {path} is declared twice")
        parent = path.rsplit("/", 1)[0] or "/"
        if parent != "/" and (tree, parent) not in declared:
            raise Problem(("pools", i, "path"), f"the parent {parent} of pool {path} is not declared "
                          "before it (pools are created in order, parents first)")
        declared.add((tree, path))
        kinds = options[tree].resources
        for field in ("reservation", "limit"):
            value = getattr(pool, field)
            if value is not None:
                _amounts(value, ("pools", i, field), kinds)
        if isinstance(pool.share, dict):
            _amounts(pool.share, ("pools", i, "share"), kinds)


def _amounts(values: Mapping[str, float], loc: Loc, kinds: Sequence[str]) -> None:
    for kind, amount in values.items():
        if kind not in kinds:
            raise Problem((*loc, kind), f"unknown resource kind {kind!r} (kinds in play: {', '.join(kinds)})")
        if amount < 0:
            raise Problem((*loc, kind), f"{kind} must not be negative, got {amount:g}")


def _unique(values: Sequence[str], loc: Loc, what: str) -> None:
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise Problem((*loc, i), f"{what} {value!r} is given twice")
        seen.add(value)
