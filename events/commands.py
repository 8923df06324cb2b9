"""Commands: requests to a service, answered by a reply. Imperative, never stored on the log.

The tree service answers `poolwise.cmd.tree.<op>` (see `events.subjects.command`). A command is
validated against the current tree; a valid one becomes an event, an invalid one gets an error
reply naming the rule (and an `InputRejected` event), and changes nothing.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from events.base import Frozen
from events.config import PoolConfig, TreeOptions


class PoolUpsert(Frozen):
    """Create a pool, or change the options it names (maps replaced whole, the rest kept)."""

    op: Literal["pool_upsert"] = "pool_upsert"
    tree: str = "default"
    path: str
    config: PoolConfig = Field(default_factory=PoolConfig)
    replace: bool = False
    expected_version: int | None = None
    # "new": refuse if the pool exists (`pool create`); "existing": refuse if it does not (`pool update`).
    require: Literal["any", "new", "existing"] = "any"


class PoolDelete(Frozen):
    op: Literal["pool_delete"] = "pool_delete"
    tree: str = "default"
    path: str
    expected_version: int | None = None


class PoolGet(Frozen):
    op: Literal["pool_get"] = "pool_get"
    tree: str = "default"
    path: str


class PoolList(Frozen):
    op: Literal["pool_list"] = "pool_list"
    tree: str | None = None


class TreeConfigure(Frozen):
    op: Literal["tree_configure"] = "tree_configure"
    tree: str = "default"
    options: TreeOptions = Field(default_factory=TreeOptions)
    expected_version: int | None = None


class TreeList(Frozen):
    op: Literal["tree_list"] = "tree_list"


class HostAdd(Frozen):
    op: Literal["host_add"] = "host_add"
    host: str
    resources: dict[str, float]
    revocable: dict[str, float] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)


class HostRemove(Frozen):
    op: Literal["host_remove"] = "host_remove"
    host: str


class HostList(Frozen):
    op: Literal["host_list"] = "host_list"


TreeCommand = PoolUpsert | PoolDelete | PoolGet | PoolList | TreeConfigure | TreeList | HostAdd | HostRemove | HostList
COMMANDS: dict[str, type[Frozen]] = {
    cls.model_fields["op"].default: cls
    for cls in (PoolUpsert, PoolDelete, PoolGet, PoolList, TreeConfigure, TreeList, HostAdd, HostRemove, HostList)
}


class CommandError(Frozen):
    rule: str
    message: str
    field: str | None = None


class Reply(Frozen):
    """The answer to a command: `ok` with `data` (and the log position written, if any), or `error`."""

    ok: bool
    data: Any = None
    seq: int | None = None
    error: CommandError | None = None
