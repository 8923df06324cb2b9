"""The rules a config change must keep (DOMAIN §2 "Validation"), one small function each.

Each `check_*` returns a `Refusal` naming the rule, with a message that says which pool, which
kind and which numbers (modelled on Peloton's respool validators), or None. `validate_*`
compose them in order and return the first refusal. Checks that compare pools look at the
*resolved* options (presets, then explicit) and at *declared* limits (a pool's, else the nearest
ancestor's, else unbounded: see `effective.declared_limits`), so that no answer depends on which
hosts happen to be up.

Two rules cannot fire on a path-addressed tree and are kept as guards of the invariant:
`reparent` (a path names its parent, so moving a pool means a new path, that is a new pool) and
`cycle` (a parent's path is a strict prefix of its child's). `sibling_clash` fires for names
that differ from a sibling's only in case (`/Org` next to `/org`); trailing slashes are
normalised (`/a/` is `/a`) and an empty name (`/a//b`, `//`) is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from events import PoolConfig, TreeOptions
from events.subjects import TREE_NAME
from services.tree.domain import effective, paths
from services.tree.domain.amounts import UNBOUNDED, exceeds, spell
from services.tree.domain.presets import missing_presets
from services.tree.domain.tree import Tree

KIND_NAME = re.compile(r"[a-z_][a-z0-9_]*")
HOST_NAME = re.compile(r"[^\s/]{1,200}")

RULES: dict[str, str] = {
    "stale": "the command's expected_version is not the tree's version",
    "tree_name": "a tree name must match [-_a-zA-Z0-9]{1,64}",
    "path_empty": "the path is empty",
    "path_relative": "the path does not begin with /",
    "path_root": "the root / cannot be configured or deleted",
    "path_empty_name": "the path has an empty name (// in it)",
    "name_reserved": "$ is reserved for ephemeral pools",
    "name_charset": "a name must match [-_a-zA-Z0-9:]+",
    "name_too_long": "a name is longer than 100 characters",
    "parent_missing": "the parent pool does not exist",
    "parent_ephemeral": "the parent is an ephemeral pool (it goes away with its last gang)",
    "reparent": "an existing pool would move to another parent",
    "cycle": "the pool would be its own ancestor",
    "sibling_clash": "a sibling has the same name (names differing only in case clash)",
    "pool_missing": "the pool to delete does not exist",
    "unknown_kind": "a resource kind is not one of the tree's kinds",
    "duplicate_kind": "a resource kind is given twice",
    "kind_name": "a kind name must match [a-z_][a-z0-9_]*",
    "kinds_empty": "a tree must declare at least one kind",
    "negative_value": "a resource amount is negative",
    "share_not_positive": "share must be greater than 0",
    "percent_range": "controller_limit and slack_limit are percents: 0..100",
    "job_limit_negative": "max_running_jobs and max_jobs cannot be negative",
    "job_limits_order": "max_running_jobs exceeds max_jobs",
    "unknown_preset": "config_presets names a preset the tree does not define",
    "preset_nested": "a preset names presets itself (presets do not nest)",
    "ephemeral_reservation": "ephemeral_subpool_config sets a reservation (guarantees cannot come and go)",
    "reservation_exceeds_limit": "reservation > limit for a kind",
    "limit_exceeds_parent": "a child's limit exceeds its parent's limit (top-level pools exempt)",
    "kind_missing_in_parent": "a child uses a kind its parent (declaring some) has no reservation/limit for",
    "children_reservation_exceeds_parent": "the children's reservations add up to more than the parent's",
    "limit_below_children": "a limit lowered below a child's limit",
    "delete_has_children": "a pool with children cannot be deleted",
    "delete_has_gangs": "a pool with unfinished gangs cannot be deleted",
    "host_name": "a host name must be 1..200 characters, without spaces or /",
    "host_missing": "the host to remove is not registered",
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a command is refused: `rule` (a key of RULES), a message with the numbers, and the
    field of the command at fault (a dotted path, or None)."""

    rule: str
    message: str
    field: str | None = None

    def about(self, subject: str, field: str | None = None) -> Refusal:
        """The same refusal, its message prefixed with `subject` (`pool /org/a: ...`)."""
        return replace(self, message=f"{subject}: {self.message}", field=field or self.field)


def first(checks: Iterable[Refusal | None]) -> Refusal | None:
    """The first refusal of a lazy sequence of checks (later checks are not run)."""
    return next((r for r in checks if r is not None), None)


def _field(prefix: str, *parts: str) -> str:
    return prefix + ".".join(parts)


# --- paths and names -------------------------------------------------------------------------


def check_path_not_empty(path: str) -> Refusal | None:
    if not path.strip():
        return Refusal("path_empty", "path cannot be empty", "path")
    return None


def check_path_absolute(path: str) -> Refusal | None:
    if not path.startswith(paths.SEPARATOR):
        return Refusal("path_relative", f"path {path} should begin with /", "path")
    return None


def check_path_no_empty_name(path: str) -> Refusal | None:
    if paths.SEPARATOR * 2 in path:
        return Refusal("path_empty_name", f"path {path} has an empty name (//)", "path")
    return None


def check_path_not_root(path: str, action: str) -> Refusal | None:
    if paths.normalize(path) == paths.ROOT:
        return Refusal("path_root", f"the root / cannot be {action}: its reservation and limit are "
                                    "the tree's capacity", "path")
    return None


def check_name_reserved(name: str, path: str) -> Refusal | None:
    if paths.is_ephemeral_name(name):
        return Refusal("name_reserved", f"name `{name}` in path {path}: `$` is reserved for ephemeral pools",
                       "path")
    return None


def check_name_charset(name: str, path: str) -> Refusal | None:
    if not paths.NAME_PATTERN.fullmatch(name):
        bad = ", ".join(repr(c) for c in sorted({c for c in name if not paths.NAME_PATTERN.fullmatch(c)}))
        return Refusal("name_charset", f"name `{name}` in path {path} breaks {paths.NAME_PATTERN.pattern} "
                                       f"(not allowed: {bad})", "path")
    return None


def check_name_length(name: str, path: str) -> Refusal | None:
    if len(name) > paths.MAX_NAME_LENGTH:
        return Refusal("name_too_long", f"name `{name[:20]}...` in path {path[:40]}... is {len(name)} "
                                        f"characters long, more than {paths.MAX_NAME_LENGTH}", "path")
    return None


def _path_checks(path: str, action: str, allow_root: bool) -> Iterator[Refusal | None]:
    yield check_path_not_empty(path)
    yield check_path_absolute(path)
    yield check_path_no_empty_name(path)
    if not allow_root:
        yield check_path_not_root(path, action)
    normal = paths.normalize(path)
    for name in paths.names(normal):
        yield check_name_reserved(name, normal)
        yield check_name_length(name, normal)
        yield check_name_charset(name, normal)


def check_path(path: str, action: str = "configured", allow_root: bool = False) -> Refusal | None:
    """Every rule about the path itself: not empty, absolute, no `//`, not the root, valid names."""
    return first(_path_checks(path, action, allow_root))


# --- where a pool sits -----------------------------------------------------------------------


def check_parent_exists(tree: Tree, path: str) -> Refusal | None:
    parent = paths.parent_of(path)
    if parent is not None and tree.pool(parent) is None:
        return Refusal("parent_missing", f"parent {parent} does not exist", "path")
    return None


def check_parent_not_ephemeral(tree: Tree, path: str) -> Refusal | None:
    parent = tree.pool(paths.parent_of(path) or paths.ROOT)
    if parent is not None and parent.ephemeral:
        return Refusal("parent_ephemeral", f"parent {parent.path} is an ephemeral pool: it is removed "
                                           "with its last gang and cannot hold configured pools", "path")
    return None


def check_no_reparent(tree: Tree, path: str, parent: str | None) -> Refusal | None:
    """Guard: an existing pool keeps its parent (by construction, since a path names it)."""
    current = tree.pool(path)
    if current is not None and current.parent != parent:
        return Refusal("reparent", f"pool {path} is under {current.parent} and cannot move to {parent}",
                       "path")
    return None


def check_no_cycle(path: str, parent: str | None) -> Refusal | None:
    """Guard: the parent is a strict ancestor (by construction, since its path is a prefix)."""
    if parent is not None and parent not in paths.ancestors(path):
        return Refusal("cycle", f"pool {path} cannot be under {parent}: it would be its own ancestor", "path")
    return None


def check_sibling_names(tree: Tree, path: str) -> Refusal | None:
    """A new pool's name must differ from every sibling's, ignoring case."""
    if tree.pool(path) is not None:
        return None
    parent = paths.parent_of(path) or paths.ROOT
    name = paths.name_of(path)
    for sibling in tree.children(parent):
        if sibling.name.lower() == name.lower():
            return Refusal("sibling_clash", f"pool {path}: sibling {sibling.path} already has that name "
                                            "(names differing only in case are the same name)", "path")
    return None


# --- one config by itself --------------------------------------------------------------------


def check_kinds_unique(option: str, values: Mapping[str, float], prefix: str = "config.") -> Refusal | None:
    """Two keys that name the same kind up to case or spaces (`cpu`, `CPU`)."""
    seen: dict[str, str] = {}
    for kind in values:
        key = kind.strip().lower()
        if key in seen:
            return Refusal("duplicate_kind", f"resource {key} is given twice in {option} (`{seen[key]}` and "
                                             f"`{kind}`)", _field(prefix, option, kind))
        seen[key] = kind
    return None


def check_kinds_known(option: str, values: Mapping[str, float], kinds: Sequence[str],
                      prefix: str = "config.") -> Refusal | None:
    for kind in values:
        if kind not in kinds:
            return Refusal("unknown_kind", f"resource {kind} in {option} is not a kind of this tree "
                                           f"(kinds: {', '.join(kinds)})", _field(prefix, option, kind))
    return None


def check_not_negative(option: str, values: Mapping[str, float], prefix: str = "config.") -> Refusal | None:
    for kind, amount in values.items():
        if amount < 0:
            return Refusal("negative_value", f"resource {kind}, {option} {spell(amount)} is negative",
                           _field(prefix, option, kind))
    return None


def check_share_positive(share: float | Mapping[str, float] | None,
                         prefix: str = "config.") -> Refusal | None:
    if share is None:
        return None
    if isinstance(share, Mapping):
        for kind, weight in share.items():
            if weight <= 0:
                return Refusal("share_not_positive", f"resource {kind}, share {spell(weight)} must be "
                                                     "greater than 0", _field(prefix, "share", kind))
        return None
    if share <= 0:
        return Refusal("share_not_positive", f"share {spell(share)} must be greater than 0",
                       _field(prefix, "share"))
    return None


def check_percent(option: str, value: float | None, prefix: str = "config.") -> Refusal | None:
    if value is not None and not 0 <= value <= 100:
        return Refusal("percent_range", f"{option} {spell(value)} is outside 0..100 (a percent of the "
                                        "reservation)", _field(prefix, option))
    return None


def check_job_limit_not_negative(option: str, value: int | None, prefix: str = "config.") -> Refusal | None:
    if value is not None and value < 0:
        return Refusal("job_limit_negative", f"{option} {value} is negative", _field(prefix, option))
    return None


def check_job_limits_order(running: int | None, total: int | None, field: str | None,
                           where: str = "") -> Refusal | None:
    """`max_running_jobs <= max_jobs` (`where` says where an inherited value comes from)."""
    if running is not None and total is not None and running > total:
        return Refusal("job_limits_order", f"max_running_jobs {running} exceeds max_jobs {total}{where}",
                       field)
    return None


def check_presets_known(config: PoolConfig, options: TreeOptions, prefix: str = "config.") -> Refusal | None:
    missing = missing_presets(options, config)
    if missing:
        defined = ", ".join(sorted(options.pool_config_presets)) or "none"
        return Refusal("unknown_preset", f"preset `{missing[0]}` is not defined in this tree (presets: "
                                         f"{defined})", _field(prefix, "config_presets"))
    return None


def check_preset_not_nested(name: str, preset: PoolConfig) -> Refusal | None:
    if preset.config_presets:
        return Refusal("preset_nested", f"preset `{name}` names presets itself "
                                        f"({', '.join(preset.config_presets)}); presets do not nest",
                       f"options.pool_config_presets.{name}.config_presets")
    return None


def check_subpool_no_reservation(config: PoolConfig, prefix: str = "config.") -> Refusal | None:
    sub = config.ephemeral_subpool_config
    if sub is not None and sub.reservation and any(v > 0 for v in sub.reservation.values()):
        return Refusal("ephemeral_reservation",
                       f"ephemeral_subpool_config cannot set a reservation ({_spell_map(sub.reservation)}): "
                       "ephemeral pools come and go, and their guarantees would not add up",
                       _field(prefix, "ephemeral_subpool_config", "reservation"))
    return None


def _spell_map(values: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {spell(v)}" for k, v in values.items())


def _config_checks(config: PoolConfig, options: TreeOptions, prefix: str) -> Iterator[Refusal | None]:
    maps = {"reservation": config.reservation, "limit": config.limit}
    if isinstance(config.share, dict):
        maps["share"] = config.share
    for option, values in maps.items():
        if values:
            yield check_kinds_unique(option, values, prefix)
            yield check_kinds_known(option, values, options.resources, prefix)
    for option in ("reservation", "limit"):
        values = maps[option]
        if values:
            yield check_not_negative(option, values, prefix)
    yield check_share_positive(config.share, prefix)
    yield check_percent("controller_limit", config.controller_limit, prefix)
    yield check_percent("slack_limit", config.slack_limit, prefix)
    yield check_job_limit_not_negative("max_running_jobs", config.max_running_jobs, prefix)
    yield check_job_limit_not_negative("max_jobs", config.max_jobs, prefix)
    yield check_job_limits_order(config.max_running_jobs, config.max_jobs, _field(prefix, "max_running_jobs"))
    yield check_presets_known(config, options, prefix)


def check_config(config: PoolConfig, options: TreeOptions, prefix: str = "config.") -> Refusal | None:
    """The rules one config keeps by itself (kinds, signs, ranges, presets), its
    `ephemeral_subpool_config` included."""
    sub = config.ephemeral_subpool_config
    return first([
        first(_config_checks(config, options, prefix)),
        check_subpool_no_reservation(config, prefix),
        None if sub is None else check_config(sub, options, _field(prefix, "ephemeral_subpool_config") + "."),
    ])


# --- a pool among the others (on the tree as it would be) ------------------------------------


def _of(path: str, named: bool) -> str:
    return f" of {path}" if named else ""


def check_job_limits(tree: Tree, path: str) -> Refusal | None:
    """`max_running_jobs <= max_jobs` once presets and the tree's per-pool defaults are in."""
    config = effective.resolved(tree, path)
    running, total = effective.job_limits(tree, path)
    sources = []
    if config.max_running_jobs is None and running is not None:
        sources.append("max_running_jobs from the tree's max_running_jobs_per_pool")
    if config.max_jobs is None and total is not None:
        sources.append("max_jobs from the tree's max_jobs_per_pool")
    where = f" ({'; '.join(sources)})" if sources else ""
    return check_job_limits_order(running, total, "config.max_running_jobs", where)


def check_reservation_within_limit(tree: Tree, path: str, named: bool = False) -> Refusal | None:
    """Per kind, `reservation <= limit` (the limit possibly inherited from an ancestor)."""
    reserved = effective.reservation(tree, path)
    limits = effective.declared_limits(tree, path)
    for kind in tree.kinds:
        if exceeds(reserved[kind], limits[kind]):
            origin = effective.limit_origin(tree, path, kind)
            inherited = f" (inherited from {origin})" if origin not in (None, path) else ""
            return Refusal("reservation_exceeds_limit",
                           f"resource {kind}, reservation {spell(reserved[kind])}{_of(path, named)} exceeds "
                           f"limit {spell(limits[kind])}{inherited}", f"config.reservation.{kind}")
    return None


def check_subpool_limit(tree: Tree, path: str, named: bool = False) -> Refusal | None:
    """An ephemeral subpool's limit stays within the limit of the pool that makes it."""
    sub = effective.resolved(tree, path).ephemeral_subpool_config
    if sub is None or not sub.limit:
        return None
    limits = effective.declared_limits(tree, path)
    for kind, amount in sub.limit.items():
        if kind in limits and exceeds(amount, limits[kind]):
            return Refusal("limit_exceeds_parent", f"resource {kind}, ephemeral_subpool_config limit "
                                                   f"{spell(amount)} exceeds limit {spell(limits[kind])}"
                                                   f"{_of(path, named)}",
                           f"config.ephemeral_subpool_config.limit.{kind}")
    return None


def _kinds_named(tree: Tree, path: str) -> set[str]:
    config = effective.resolved(tree, path)
    return set(config.reservation or {}) | set(config.limit or {})


def check_kinds_in_parent(tree: Tree, path: str, named: bool = False) -> Refusal | None:
    """A pool below a top-level pool names (in reservation or limit) only kinds its parent has.

    A parent has the kinds it reserves and those it has a limit on (its own or inherited). A
    parent that has none at all (a pure grouping pool: no reservation, no limit up to the top)
    passes every kind through (Peloton's `parent doesn't have resource kind`, for a model where
    unset options have defaults)."""
    parent = paths.parent_of(path)
    if parent is None or parent == paths.ROOT:
        return None
    parent_limits = effective.declared_limits(tree, parent)
    has = set(effective.resolved(tree, parent).reservation or {}) | {
        k for k, v in parent_limits.items() if v != UNBOUNDED}
    if not has:
        return None
    for kind in sorted(_kinds_named(tree, path)):
        if kind in tree.kinds and kind not in has:
            return Refusal("kind_missing_in_parent",
                           f"resource {kind} is used by {path} but its parent {parent} has no reservation or "
                           f"limit for it (it has: {', '.join(k for k in tree.kinds if k in has)})", "config")
    return None


def check_limit_within_parent(tree: Tree, path: str) -> Refusal | None:
    """A pool below a top-level pool has, per kind, a limit no higher than its parent's."""
    parent = paths.parent_of(path)
    if parent is None or parent == paths.ROOT:
        return None
    own = effective.resolved(tree, path).limit or {}
    parent_limits = effective.declared_limits(tree, parent)
    for kind, amount in own.items():
        if kind in parent_limits and exceeds(amount, parent_limits[kind]):
            origin = effective.limit_origin(tree, parent, kind)
            inherited = f" (inherited from {origin})" if origin not in (None, parent) else ""
            return Refusal("limit_exceeds_parent", f"resource {kind}, limit {spell(amount)} exceeds parent "
                                                   f"{parent} limit {spell(parent_limits[kind])}{inherited}",
                           f"config.limit.{kind}")
    return None


def check_children_reservations(tree: Tree, parent: str) -> Refusal | None:
    """Per kind, the children's reservations add up to at most the parent's (the root exempt:
    top-level guarantees are scaled to the capacity when entitlement is computed)."""
    if parent == paths.ROOT or tree.pool(parent) is None:
        return None
    own = effective.reservation(tree, parent)
    totals = dict.fromkeys(tree.kinds, 0.0)
    for child in tree.children(parent):
        for kind, amount in effective.reservation(tree, child.path).items():
            totals[kind] += amount
    for kind in tree.kinds:
        if exceeds(totals[kind], own[kind]):
            return Refusal("children_reservation_exceeds_parent",
                           f"Aggregated child reservation {spell(totals[kind])} of kind `{kind}` exceed "
                           f"parent `{parent}` reservation {spell(own[kind])}", f"config.reservation.{kind}")
    return None


def check_limit_above_child(tree: Tree, changed: str, child: str) -> Refusal | None:
    """After `changed` changed, `child` (a descendant) still has limits within its parent's."""
    parent = paths.parent_of(child)
    if parent is None or parent == paths.ROOT:
        return None
    own = effective.resolved(tree, child).limit or {}
    parent_limits = effective.declared_limits(tree, parent)
    for kind, amount in own.items():
        if kind in parent_limits and exceeds(amount, parent_limits[kind]):
            relation = "child" if parent == changed else "descendant"
            origin = effective.limit_origin(tree, parent, kind) or parent
            return Refusal("limit_below_children",
                           f"resource {kind}, limit {spell(parent_limits[kind])} of {origin} is below limit "
                           f"{spell(amount)} of {relation} {child}", f"config.limit.{kind}")
    return None


# --- whole commands --------------------------------------------------------------------------


def _upsert_checks(tree: Tree, path: str, config: PoolConfig) -> Iterator[Refusal | None]:
    parent = paths.parent_of(path)
    yield check_parent_exists(tree, path)
    yield check_parent_not_ephemeral(tree, path)
    yield check_no_reparent(tree, path, parent)
    yield check_no_cycle(path, parent)
    yield check_sibling_names(tree, path)
    yield check_config(config, tree.options)
    after = tree.with_pool(path, config)
    yield check_job_limits(after, path)
    yield check_reservation_within_limit(after, path)
    yield check_subpool_limit(after, path)
    yield check_kinds_in_parent(after, path)
    yield check_limit_within_parent(after, path)
    if parent is not None:
        yield check_children_reservations(after, parent)
    yield check_children_reservations(after, path)
    for below in after.descendants(path):
        if below.ephemeral:
            continue
        yield check_limit_above_child(after, path, below.path)
        yield check_kinds_in_parent(after, below.path, named=True)
        yield check_reservation_within_limit(after, below.path, named=True)
        yield check_subpool_limit(after, below.path, named=True)


def validate_upsert(tree: Tree, path: str, config: PoolConfig) -> Refusal | None:
    """Would `path` (valid and normalized) with the whole explicit `config` keep every rule?"""
    return first(_upsert_checks(tree, path, config))


def check_pool_exists(tree: Tree, path: str) -> Refusal | None:
    if tree.pool(path) is None:
        return Refusal("pool_missing", f"pool {path} does not exist", "path")
    return None


def check_no_children(tree: Tree, path: str) -> Refusal | None:
    children = tree.children(path)
    if children:
        shown = ", ".join(c.path for c in children[:5]) + (", ..." if len(children) > 5 else "")
        return Refusal("delete_has_children", f"pool {path} has {len(children)} child pool(s) ({shown}): "
                                              "delete them first", "path")
    return None


def check_no_unfinished_gangs(tree: Tree, path: str) -> Refusal | None:
    gangs = sorted(tree.gangs_in(path))
    if gangs:
        shown = ", ".join(gangs[:5]) + (", ..." if len(gangs) > 5 else "")
        return Refusal("delete_has_gangs", f"pool {path} has {len(gangs)} unfinished gang(s) ({shown})",
                       "path")
    return None


def validate_delete(tree: Tree, path: str) -> Refusal | None:
    """Can `path` (valid and normalized) be deleted?"""
    return first([check_pool_exists(tree, path), check_no_children(tree, path),
                  check_no_unfinished_gangs(tree, path)])


def check_tree_name(name: str) -> Refusal | None:
    if not TREE_NAME.fullmatch(name):
        return Refusal("tree_name", f"tree name {name!r} must match {TREE_NAME.pattern}", "tree")
    return None


def check_kinds_declared(kinds: Sequence[str]) -> Refusal | None:
    if not kinds:
        return Refusal("kinds_empty", "a tree must declare at least one resource kind", "options.resources")
    return None


def check_kind_names(kinds: Sequence[str]) -> Refusal | None:
    for kind in kinds:
        if not KIND_NAME.fullmatch(kind):
            return Refusal("kind_name", f"resource kind {kind!r} must match {KIND_NAME.pattern}",
                           "options.resources")
    return None


def check_kind_list_unique(kinds: Sequence[str]) -> Refusal | None:
    seen: set[str] = set()
    for kind in kinds:
        if kind in seen:
            return Refusal("duplicate_kind", f"resource {kind} is given twice in resources",
                           "options.resources")
        seen.add(kind)
    return None


def _tree_checks(tree: Tree, options: TreeOptions) -> Iterator[Refusal | None]:
    yield from option_checks(options)
    after = tree.with_options(options)
    for pool in after.in_path_order():
        if pool.is_root or pool.ephemeral:
            continue
        found = first(pool_checks(after, pool.path))
        yield None if found is None else found.about(f"pool {pool.path}", "options")


def option_checks(options: TreeOptions) -> Iterator[Refusal | None]:
    """The rules tree options keep by themselves (kinds, per-pool job limits, presets); what the
    pools must keep under them is `pool_checks`'. `poolwise apply` runs both on a whole target."""
    yield check_kinds_declared(options.resources)
    yield check_kind_list_unique(options.resources)
    yield check_kind_names(options.resources)
    yield check_job_limits_order(options.max_running_jobs_per_pool, options.max_jobs_per_pool,
                                 "options.max_running_jobs_per_pool", " (tree defaults per pool)")
    if options.default_parent_pool is not None:
        found = check_path(options.default_parent_pool, allow_root=True)
        yield None if found is None else found.about("default_parent_pool", "options.default_parent_pool")
    for name, preset in sorted(options.pool_config_presets.items()):
        yield check_preset_not_nested(name, preset)
        yield check_config(preset, options, f"options.pool_config_presets.{name}.")


def pool_checks(tree: Tree, path: str) -> Iterator[Refusal | None]:
    """Every rule of one pool among the others on a whole tree (its children's sum once, here):
    after a change of the tree's options, and on a whole target configuration (`apply`)."""
    yield check_config(tree.pools[path].config, tree.options)
    yield check_job_limits(tree, path)
    yield check_reservation_within_limit(tree, path)
    yield check_subpool_limit(tree, path)
    yield check_kinds_in_parent(tree, path)
    yield check_limit_within_parent(tree, path)
    yield check_children_reservations(tree, path)


def validate_tree_options(tree: Tree, options: TreeOptions) -> Refusal | None:
    """Are these options valid, and does every pool of the tree stay valid under them?"""
    return first(_tree_checks(tree, options))


def check_host_name(name: str) -> Refusal | None:
    if not HOST_NAME.fullmatch(name):
        return Refusal("host_name", f"host name {name!r} must be 1..200 characters, without spaces or /",
                       "host")
    return None


def validate_host(name: str, resources: Mapping[str, float],
                  revocable: Mapping[str, float]) -> Refusal | None:
    return first([
        check_host_name(name),
        check_not_negative("resources", resources, ""),
        check_not_negative("revocable", revocable, ""),
    ])
