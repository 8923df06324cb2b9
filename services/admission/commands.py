"""Requests the admission service answers (`poolwise.cmd.admission.<op>`, core NATS
request/reply, never stored): queries of its state. Apart from the service (`queries`), so that
the CLI builds them without importing admission's domain (and NumPy with it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.base import Frozen

SERVICE = "admission"
DEFAULT_LIMIT = 1000  # gangs per answer: a reply must stay under NATS's max payload (1 MiB by default)


class GangsQuery(Frozen):
    """Gangs of `tree` (every tree: None), in `pool` and the pools under it, in one of `states`;
    the last `limit` of them in enqueue order (per tree)."""

    op: Literal["gangs"] = "gangs"
    tree: str | None = None
    pool: str | None = None
    states: list[str] | None = None
    limit: int = Field(default=DEFAULT_LIMIT, ge=1)


class ExplainQuery(Frozen):
    """Why gang `gang` is where it is; `tree` None: whichever tree has a gang of that id."""

    op: Literal["explain"] = "explain"
    gang: str = Field(min_length=1)
    tree: str | None = None


class PoolsQuery(Frozen):
    """Every pool of `tree` (every tree: None) with its numbers per kind (entitlements,
    allocation, demand, reservation, limit: `pool_numbers`), and each leaf's four queues: their
    lengths and their first `heads` gangs in queue order, at most `rows` gangs in all (the
    dashboard's view: services/tools/dashboard).

    A page (`limit` set, or `after`): of each tree, the first `limit` pools in path order after
    the path `after` (None: from the first), with the queues of the leaves among them (the gangs
    the `rows` of the whole tree give them), and the tree's `next` (the `after` of the next page;
    None: the last) and `total` (its pools): a tree too large for one reply (about 1,200 pools of
    4 kinds fill NATS's 1 MiB) is read page by page."""

    op: Literal["pools"] = "pools"
    tree: str | None = None
    heads: int = Field(default=10, ge=0, le=DEFAULT_LIMIT)
    rows: int = Field(default=400, ge=0, le=DEFAULT_LIMIT)
    after: str | None = None
    limit: int | None = Field(default=None, ge=1)


QUERIES: dict[str, type[Frozen]] = {"gangs": GangsQuery, "explain": ExplainQuery, "pools": PoolsQuery}
