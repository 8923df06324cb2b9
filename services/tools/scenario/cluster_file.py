"""The cluster file: a scenario's header (`resources`, `capacity` or `hosts`, `trees`, `pools`)
as the configuration `poolwise apply -f` makes live, and the text `poolwise export-config`
writes (docs/cluster-files.md).

Read with the scenario format's own models and file rules (`Scenario`, `check_header`), so a
cluster file is a valid scenario header and the other way round; what differs:

- `steps` is refused (a cluster file is a configuration, not a timeline); `name` is optional;
- the pools' own rules (paths, parents, kinds, amounts, reservations and limits) are left to
  the tree service's validation, run on the whole target at once (`change_plan`), so that every
  broken rule is listed; only the tree each pool names and duplicates are checked here;
- a section left out is not managed: without `hosts` (or `capacity`) the hosts are left as they
  are, without `pools` the pools (even with `--prune`), without `trees` and `resources` the
  trees' options (`resources` alone: the tree `default` with those kinds, as in a scenario).
  `hosts: []` and `pools: []` mean none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from events import PoolConfig, TreeOptions
from services.tools.scenario.checks import check_header
from services.tools.scenario.errors import Loc, Problem, ScenarioError, format_place
from services.tools.scenario.format import HostEntry, Scenario
from services.tools.scenario.problems import describe
from services.tools.scenario.source import Source, parse_text, read_source
from services.tree.domain import paths
from services.tree.domain.cluster import ClusterConfig, PoolKey
from services.tree.domain.target import Violation
from services.tree.domain.tree import Host

HEADER_KEYS = ("name", "description", "resources", "capacity", "hosts", "trees", "pools")


@dataclass(frozen=True)
class ClusterFile:
    """A cluster file read: the configuration it asks for, and where each part of it is written."""

    file: str
    config: ClusterConfig
    source: Source
    pool_places: dict[PoolKey, int]  # (tree, path as written and normalized) -> index in `pools`
    host_places: dict[str, Loc]
    tree_places: dict[str, Loc]

    def place_of(self, violation: Violation) -> tuple[str, int | None]:
        """Where in the file a violation is: a place (`pools[2].reservation.cpu`) and its line."""
        loc: Loc = ()
        if violation.what == "pool":
            index = self.pool_places.get((violation.tree or "", violation.ref))
            loc = () if index is None else ("pools", index)
        elif violation.what == "host":
            loc = self.host_places.get(violation.ref, ())
        elif violation.what == "tree":
            loc = self.tree_places.get(violation.ref, ())
        if loc and violation.field:
            loc = (*loc, *violation.field.split("."))
        return format_place(loc), self.source.line_of(loc) if loc else None


def load_cluster(path: str | Path, steps: bool = False) -> ClusterFile:
    """Read a cluster file (YAML; `.json` as JSON). Raises `ScenarioError` (file, place, problem).
    `steps`: a scenario's `steps` are let through, not read (`poolwise whatif` reads them as
    `scenario run` does)."""
    return read_cluster(read_source(str(path)), steps)


def cluster_text(text: str, name: str) -> ClusterFile:
    """A cluster file's text (YAML) read as `load_cluster` reads a file; `name` stands for the
    file in errors (e.g. the demo's workloads, whose cluster is a package resource)."""
    return read_cluster(parse_text(text, name))


def read_cluster(source: Source, steps: bool = False) -> ClusterFile:
    """`load_cluster` of a file's text parsed (`source`)."""
    data = source.data
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        raise ScenarioError(source.file, "", f"a cluster file is a mapping of {', '.join(HEADER_KEYS[2:])} "
                                             f"(the file is {what})", source.line_of(()))
    if steps:
        data = {k: v for k, v in data.items() if k != "steps"}
    if "steps" in data:
        raise ScenarioError(source.file, "steps", "a cluster file has no `steps`: it is the configuration "
                                                  "(resources, capacity or hosts, trees, pools); run a file "
                                                  "with steps with `poolwise scenario run`",
                            source.line_of(("steps",)))
    named = {"name": Path(source.file).stem or "cluster", **data}  # a scenario's name, optional here
    try:
        scenario = Scenario.model_validate(named, strict=True)
        check_header(scenario)
        pool_places = _pool_places(scenario)
    except ValidationError as exc:
        loc, problem = describe(exc, named, Scenario)
        raise ScenarioError(source.file, format_place(loc), problem, source.line_of(loc)) from None
    except Problem as exc:
        raise ScenarioError(source.file, format_place(exc.loc), exc.problem, source.line_of(exc.loc)) from None
    return ClusterFile(source.file, _config(scenario, data), source, pool_places, _host_places(scenario),
                       {t.name: ("trees", i) for i, t in enumerate(scenario.trees or [])})


def _pool_places(s: Scenario) -> dict[PoolKey, int]:
    """Each pool's index in `pools`, under its path as written and normalized; the tree it names
    must be declared, and a pool is given once."""
    trees = s.tree_options()
    places: dict[PoolKey, int] = {}
    seen: set[PoolKey] = set()
    for i, entry in enumerate(s.pools):
        tree = entry.tree or s.default_tree
        if tree not in trees:
            raise Problem(("pools", i, "tree"), f"tree {tree!r} is not declared (trees: {', '.join(trees)})")
        key = (tree, paths.normalize(entry.path) if entry.path.strip() else entry.path)
        if key in seen:
            raise Problem(("pools", i, "path"), f"pool {key[1]} is given twice (tree {tree})")
        seen.add(key)
        places[key] = places[(tree, entry.path)] = i
    return places


def _host_places(s: Scenario) -> dict[str, Loc]:
    if s.capacity is not None:
        return {h.name: ("capacity",) for h in s.host_entries()}
    return {h.name: ("hosts", i) for i, h in enumerate(s.hosts or [])}


def _config(s: Scenario, data: dict[str, Any]) -> ClusterConfig:
    # without `trees` and `resources` the trees are not managed: a file of pools alone must not
    # set the default tree's kinds and options back to the defaults
    trees = s.tree_options() if "trees" in data or "resources" in data else {}
    hosts = None
    if "hosts" in data or "capacity" in data:
        hosts = {h.name: _host(h) for h in s.host_entries()}
    pools = None
    if "pools" in data:
        pools = {(p.tree or s.default_tree, p.path): p.config() for p in s.pools}
    return ClusterConfig(trees, hosts, pools)


def _host(entry: HostEntry) -> Host:
    return Host(entry.name, {k: float(v) for k, v in entry.resources.items()},
                {k: float(v) for k, v in entry.revocable.items()}, frozenset(entry.tags))


# --- writing ----------------------------------------------------------------------------------


def render_cluster(config: ClusterConfig, comment: str = "") -> str:
    """The configuration as a cluster file (YAML) that `load_cluster` reads back to the same
    values: every tree with its kinds and the options that are not defaults, every host, every
    pool with its explicit options, parents first. `comment`: lines put on top as `# ...`."""
    kinds: list[str] = []
    for options in config.trees.values():
        kinds.extend(k for k in options.resources if k not in kinds)
    document: dict[str, Any] = {"resources": kinds}
    if config.hosts is not None:
        document["hosts"] = [_host_entry(h) for _, h in sorted(config.hosts.items())]
    document["trees"] = [{"name": name, **_tree_entry(options)} for name, options in config.trees.items()]
    if config.pools is not None:
        several = len(config.trees) > 1
        document["pools"] = [{"path": path, **({"tree": tree} if several or tree not in config.trees else {}),
                              **_pool_entry(pool)}
                             for (tree, path), pool in sorted(config.pools.items(), key=_pool_order(config))]
    text = yaml.safe_dump(_plain(document), sort_keys=False, default_flow_style=None, width=100)
    top = "".join(f"# {line}\n" if line else "#\n" for line in comment.splitlines())
    return top + text


def _pool_order(config: ClusterConfig) -> Any:
    order = {name: i for i, name in enumerate(config.trees)}
    return lambda item: (order.get(item[0][0], len(order)), item[0][0], item[0][1])


def _host_entry(host: Host) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": host.name, "resources": dict(host.resources)}
    if host.revocable:
        entry["revocable"] = dict(host.revocable)
    if host.tags:
        entry["tags"] = sorted(host.tags)
    return entry


def _tree_entry(options: TreeOptions) -> dict[str, Any]:
    # every tree writes its kinds (a tree without them takes the file's `resources`)
    return {"resources": list(options.resources),
            **{k: v for k, v in options.model_dump(mode="json", exclude_defaults=True).items() if k != "resources"}}


def _pool_entry(config: PoolConfig) -> dict[str, Any]:
    return config.model_dump(mode="json", exclude_none=True)


def _plain(value: Any) -> Any:
    """Whole numbers written as such (`cpu: 10`, not `10.0`); they read back as the same floats."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value
