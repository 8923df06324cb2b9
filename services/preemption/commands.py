"""Requests the preemption service answers (`poolwise.cmd.preemption.<op>`, core NATS
request/reply, never stored): queries of its state."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.base import Frozen

SERVICE = "preemption"


class PreemptionList(Frozen):
    """The preemptions read from the log (requested and completed, oldest first) and every pool's
    starvation status. `pool` matches that pool and every pool under it; `limit` keeps the last
    ones."""

    op: Literal["list"] = "list"
    tree: str | None = None
    pool: str | None = None
    state: Literal["requested", "completed"] | None = None
    limit: int | None = Field(default=None, ge=1)


COMMANDS: dict[str, type[Frozen]] = {"list": PreemptionList}
