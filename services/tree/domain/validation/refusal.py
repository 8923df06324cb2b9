"""What a refused config change says: its rule (a key of `RULES`), its message and the field at
fault; `first` runs checks lazily up to the first refusal."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

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


def field_path(prefix: str, *parts: str) -> str:
    return prefix + ".".join(parts)


__all__ = ["RULES", "Refusal", "field_path", "first"]
