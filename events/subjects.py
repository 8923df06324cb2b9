"""Every NATS subject and stream name of poolwise, in one place.

One stream holds the whole log so that everything a decision depends on is in one total order
(ARCHITECTURE invariant 2). Scale-out path: one stream per tree over `poolwise.*.<tree>.>`.

    poolwise.hosts                          host registered / removed (all trees)
    poolwise.config.<tree>                  tree configured, pool config changed / deleted
    poolwise.gang.<tree>                    gang enqueued / cancelled (submitters)
    poolwise.task.<tree>                    task state changed (placement, executors)
    poolwise.clock.<tree>                   clock ticks
    poolwise.decision.<tree>.<service>      decisions (entitlements, admission, preemption)
    poolwise.rejected.<tree>                inputs refused, with the reason
    poolwise.rejected._                     inputs refused whose tree could not be read

Requests (core NATS request/reply, never stored): `poolwise.cmd.tree.<op>`.
"""

from __future__ import annotations

import re

STREAM = "POOLWISE"
PREFIX = "poolwise"
STREAM_SUBJECTS: tuple[str, ...] = (
    f"{PREFIX}.hosts",
    f"{PREFIX}.config.*",
    f"{PREFIX}.gang.*",
    f"{PREFIX}.task.*",
    f"{PREFIX}.clock.*",
    f"{PREFIX}.decision.*.*",
    f"{PREFIX}.rejected.*",
)
NO_TREE = "_"
TREE_NAME = re.compile(r"^[-_a-zA-Z0-9]{1,64}$")

HOSTS = f"{PREFIX}.hosts"


def config(tree: str) -> str:
    return f"{PREFIX}.config.{tree}"


def gang(tree: str) -> str:
    return f"{PREFIX}.gang.{tree}"


def task(tree: str) -> str:
    return f"{PREFIX}.task.{tree}"


def clock(tree: str) -> str:
    return f"{PREFIX}.clock.{tree}"


def decision(tree: str, service: str) -> str:
    return f"{PREFIX}.decision.{tree}.{service}"


def rejected(tree: str | None) -> str:
    return f"{PREFIX}.rejected.{tree or NO_TREE}"


def command(service: str, op: str) -> str:
    """Request subject of a command (`poolwise.cmd.tree.pool_upsert`)."""
    return f"{PREFIX}.cmd.{service}.{op}"


ALL_CONFIG = f"{PREFIX}.config.*"
ALL_INPUTS: tuple[str, ...] = (HOSTS, ALL_CONFIG, f"{PREFIX}.gang.*", f"{PREFIX}.task.*", f"{PREFIX}.clock.*")


_INPUT_SUBJECT = {
    "TreeConfigured": "config",
    "PoolConfigChanged": "config",
    "PoolDeleted": "config",
    "GangEnqueued": "gang",
    "GangCancelled": "gang",
    "TaskStateChanged": "task",
    "ClockTicked": "clock",
}


def for_event(event_type: str, tree: str | None, source: str) -> str:
    """The subject an event of `event_type` is published on."""
    if event_type in ("HostRegistered", "HostRemoved"):
        return HOSTS
    if event_type == "InputRejected":
        return rejected(tree)
    category = _INPUT_SUBJECT.get(event_type)
    name = tree or NO_TREE
    if category is not None:
        return f"{PREFIX}.{category}.{name}"
    return decision(name, source.split(":", 1)[0] or "unknown")
