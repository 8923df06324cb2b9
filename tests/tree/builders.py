"""Given events, when a command, then a decision: small builders for the tree domain tests."""

from __future__ import annotations

from typing import Any

from events import (
    Event,
    GangEnqueued,
    GangFinished,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    PoolDeleted,
    TaskSpec,
    TreeConfigured,
    TreeOptions,
)
from events.commands import HostAdd, HostRemove, PoolDelete, PoolUpsert, TreeConfigure
from services.tree.domain import Accepted, ConfigCommand, Decision, Refused, TreeState, decide

# --- events ----------------------------------------------------------------------------------


def tree_configured(tree: str = "default", **options: Any) -> TreeConfigured:
    return TreeConfigured(tree=tree, options=TreeOptions(**options))


def pool(path: str, tree: str = "default", **config: Any) -> PoolConfigChanged:
    return PoolConfigChanged(tree=tree, path=path, config=PoolConfig(**config))


def pool_deleted(path: str, tree: str = "default") -> PoolDeleted:
    return PoolDeleted(tree=tree, path=path)


def host(name: str, tags: tuple[str, ...] = (), revocable: dict[str, float] | None = None,
         **resources: float) -> HostRegistered:
    return HostRegistered(host=name, resources=resources, revocable=revocable or {}, tags=list(tags))


def gang(gang_id: str, to: str, user: str = "anonymous", tree: str = "default",
         size: int = 1) -> GangEnqueued:
    return GangEnqueued(tree=tree, gang=gang_id, pool=to, job=gang_id, user=user, size=size,
                        tasks=[TaskSpec(id=f"{gang_id}/0", resources={"cpu": 1})])


def finished(gang_id: str, at: str = "", tree: str = "default") -> GangFinished:
    return GangFinished(tree=tree, gang=gang_id, pool=at, outcome="done")


ORG: tuple[Event, ...] = (
    tree_configured(resources=["cpu", "memory"]),
    host("cluster", cpu=100, memory=1000),
    pool("/org", reservation={"cpu": 60, "memory": 600}, limit={"cpu": 100, "memory": 1000}),
    pool("/org/a", reservation={"cpu": 30, "memory": 300}, limit={"cpu": 50, "memory": 500}),
    pool("/org/b", reservation={"cpu": 20, "memory": 200}, limit={"cpu": 100, "memory": 1000}),
)
"""pool-validation.yaml's starting tree: capacity cpu 100, memory 1000; version 5 after it."""


def given(*events: Event) -> TreeState:
    """The state after these events, at sequences 1, 2, 3..."""
    return TreeState.of(events)


# --- commands --------------------------------------------------------------------------------


def upsert(path: str, *, replace: bool = False, expected_version: int | None = None, tree: str = "default",
           **config: Any) -> PoolUpsert:
    return PoolUpsert(tree=tree, path=path, config=PoolConfig(**config), replace=replace,
                      expected_version=expected_version)


def delete(path: str, *, expected_version: int | None = None, tree: str = "default") -> PoolDelete:
    return PoolDelete(tree=tree, path=path, expected_version=expected_version)


def configure(tree: str = "default", expected_version: int | None = None, **options: Any) -> TreeConfigure:
    return TreeConfigure(tree=tree, options=TreeOptions(**options), expected_version=expected_version)


def add_host(name: str, tags: tuple[str, ...] = (), revocable: dict[str, float] | None = None,
             **resources: float) -> HostAdd:
    return HostAdd(host=name, resources=resources, revocable=revocable or {}, tags=list(tags))


def remove_host(name: str) -> HostRemove:
    return HostRemove(host=name)


# --- when / then -----------------------------------------------------------------------------


def when(state: TreeState, command: ConfigCommand) -> Decision:
    return decide(state, command)


def then_refused(decision: Decision, rule: str, *fragments: str) -> Refused:
    """The decision is a refusal under `rule` whose message contains every fragment."""
    assert isinstance(decision, Refused), f"expected a refusal ({rule}), got {decision}"
    assert decision.rule == rule, f"expected rule {rule}, got {decision.rule}: {decision.message}"
    for fragment in fragments:
        assert fragment in decision.message, f"{fragment!r} not in {decision.message!r}"
    return decision


def then_accepted(decision: Decision, events: int | None = None) -> Accepted:
    assert isinstance(decision, Accepted), f"expected acceptance, got {decision}"
    if events is not None:
        assert len(decision.events) == events, decision.events
    return decision


def applied(state: TreeState, decision: Decision) -> TreeState:
    """Fold an accepted decision's events into `state` (a refusal changes nothing)."""
    if isinstance(decision, Accepted):
        for event in decision.events:
            state.apply(event, state.last_seq + 1)
    return state


def run(state: TreeState, *commands: ConfigCommand) -> list[Decision]:
    """Decide each command in turn, applying those accepted (as the tree service does)."""
    decisions = []
    for command in commands:
        decision = decide(state, command)
        applied(state, decision)
        decisions.append(decision)
    return decisions
