"""`decide(state, command)`: what a config command would append to the log, or why not.

The tree service shell calls it on each request, appends the events of an `Accepted` (wrapped in
envelopes, with the tree's version as the expected last sequence) and replies; on a `Refused` it
replies with the error and appends only an `InputRejected` record.

- `PoolUpsert` creates a pool, or merges: the options the command names replace the current
  ones (a resource map is replaced whole), the others keep their values; `replace=True` makes
  the command's config the whole config (the only way to unset an option). The event carries
  the FULL explicit config after the merge, and `created` for a new pool (also for an ephemeral
  pool an operator now configures: it becomes a configured pool).
- An upsert that changes nothing (same config), a `TreeConfigure` with the options the tree
  already has, and a `HostAdd` identical to the registered host are accepted with NO event:
  nothing changed, so nothing is recorded (idempotent).
- `expected_version`, when given, must equal the tree's version, else `stale` (checked first).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from events import Event, HostRegistered, HostRemoved, PoolConfigChanged, PoolDeleted, TreeConfigured
from events.commands import CommandError, HostAdd, HostRemove, PoolDelete, PoolUpsert, TreeConfigure
from services.tree.domain import paths
from services.tree.domain.state import TreeState
from services.tree.domain.tree import Host, Tree
from services.tree.domain.validation.commands import validate_delete, validate_host, validate_upsert
from services.tree.domain.validation.names import check_path, check_tree_name
from services.tree.domain.validation.refusal import Refusal, first
from services.tree.domain.validation.tree_options import validate_tree_options

ConfigCommand = PoolUpsert | PoolDelete | TreeConfigure | HostAdd | HostRemove


@dataclass(frozen=True, slots=True)
class Accepted:
    """The command is valid: append `events` (none when it changes nothing). `ref` names what it
    is about: a pool path (normalized), a tree or a host."""

    ref: str
    events: tuple[Event, ...] = ()


@dataclass(frozen=True, slots=True)
class Refused:
    """The command breaks `rule`; nothing is appended but the rejection record. `tree` is None
    for host commands."""

    ref: str
    rule: str
    message: str
    field: str | None = None
    tree: str | None = None

    def error(self) -> CommandError:
        return CommandError(rule=self.rule, message=self.message, field=self.field)


Decision = Accepted | Refused


def _refused(ref: str, refusal: Refusal, tree: str | None) -> Refused:
    return Refused(ref, refusal.rule, refusal.message, refusal.field, tree)


def _same(a: BaseModel, b: BaseModel) -> bool:
    """Equal values (not `==`, which in some pydantic 2.x versions also compares which fields
    were set explicitly)."""
    return a.model_dump(exclude_none=True) == b.model_dump(exclude_none=True)


def check_version(tree: Tree, expected: int | None) -> Refusal | None:
    if expected is not None and expected != tree.version:
        return Refusal("stale", f"tree {tree.name} is at version {tree.version}, not {expected}: "
                                "read it again and retry", "expected_version")
    return None


def decide(state: TreeState, command: ConfigCommand) -> Decision:
    """Validate one command against the state; pure (the state is not changed)."""
    if isinstance(command, PoolUpsert):
        return decide_upsert(state, command)
    if isinstance(command, PoolDelete):
        return decide_delete(state, command)
    if isinstance(command, TreeConfigure):
        return decide_tree(state, command)
    if isinstance(command, HostAdd):
        return decide_host_add(state, command)
    return decide_host_remove(state, command)


def decide_upsert(state: TreeState, command: PoolUpsert) -> Decision:
    tree = state.tree(command.tree)
    early = first([check_tree_name(command.tree), check_version(tree, command.expected_version),
                   check_path(command.path)])
    if early is not None:
        return _refused(command.path, early, command.tree)
    path = paths.normalize(command.path)
    current = tree.pool(path)
    creating = current is None or current.ephemeral
    fresh = current is None or creating or command.replace
    config = command.config if fresh or current is None else current.config.merged(command.config)
    refusal = validate_upsert(tree, path, config)
    if refusal is not None:
        return _refused(path, refusal, command.tree)
    if current is not None and not creating and _same(config, current.config):
        return Accepted(path)
    return Accepted(path, (PoolConfigChanged(tree=command.tree, path=path, config=config, created=creating),))


def decide_delete(state: TreeState, command: PoolDelete) -> Decision:
    tree = state.tree(command.tree)
    early = first([check_tree_name(command.tree), check_version(tree, command.expected_version),
                   check_path(command.path, action="deleted")])
    if early is not None:
        return _refused(command.path, early, command.tree)
    path = paths.normalize(command.path)
    refusal = validate_delete(tree, path)
    if refusal is not None:
        return _refused(path, refusal, command.tree)
    return Accepted(path, (PoolDeleted(tree=command.tree, path=path),))


def decide_tree(state: TreeState, command: TreeConfigure) -> Decision:
    tree = state.tree(command.tree)
    refusal = first([check_tree_name(command.tree), check_version(tree, command.expected_version),
                     validate_tree_options(tree, command.options)])
    if refusal is not None:
        return _refused(command.tree, refusal, command.tree)
    if tree.configured and _same(tree.options, command.options):
        return Accepted(command.tree)
    return Accepted(command.tree, (TreeConfigured(tree=command.tree, options=command.options),))


def decide_host_add(state: TreeState, command: HostAdd) -> Decision:
    refusal = validate_host(command.host, command.resources, command.revocable)
    if refusal is not None:
        return _refused(command.host, refusal, None)
    host = Host(command.host, dict(command.resources), dict(command.revocable), frozenset(command.tags))
    if state.hosts.get(command.host) == host:
        return Accepted(command.host)
    event = HostRegistered(host=command.host, resources=dict(command.resources),
                           revocable=dict(command.revocable), tags=sorted(set(command.tags)))
    return Accepted(command.host, (event,))


def decide_host_remove(state: TreeState, command: HostRemove) -> Decision:
    if command.host not in state.hosts:
        known = ", ".join(sorted(state.hosts)[:10]) or "none"
        message = f"host {command.host} is not registered (hosts: {known})"
        return Refused(command.host, "host_missing", message, "host")
    return Accepted(command.host, (HostRemoved(host=command.host),))
