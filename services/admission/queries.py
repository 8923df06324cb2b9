"""Queries the admission service answers from its in-memory state (core NATS request/reply on
`poolwise.cmd.admission.<op>`, queue group `admission`, never stored):

- `gangs`: the gangs, filtered by tree, pool (and the pools under it) and state;
- `explain`: why one gang is where it is (`services.admission.domain.explain`);
- `pools`: every pool's numbers per kind and each leaf's queues with their first gangs (the
  dashboard's view, `services.admission.domain.views`).

The answer is built between two folds (no await in between), so it is the state as of one log
position, which the reply carries in `seq`. `ExplainingFolder` is the admission folder with the
history `explain` needs (refusal and cancel reasons, the queue a gang was admitted from): it
observes every event folded and every decision made, on rebuild as live.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskStatus

from events import Envelope, event_class
from events.commands import Reply
from services.admission.commands import QUERIES, SERVICE, ExplainQuery, GangsQuery, PoolsQuery
from services.admission.domain.cycle_order import is_cycle_decision
from services.admission.domain.explain import explain
from services.admission.domain.explain_history import OBSERVED, TIMED, History
from services.admission.domain.gang_rows import gang_rows
from services.admission.domain.model import GANG_STATES
from services.admission.domain.state import AdmissionState
from services.admission.domain.views import pool_numbers, queue_heads
from services.admission.folder import AdmissionFolder
from services.common.requests import answer_until_cancelled, error_reply, parse_request


class ExplainingFolder:
    """The admission folder (same `Folder` shape), keeping the `History` that `explain` reads."""

    def __init__(self, inner: AdmissionFolder | None = None) -> None:
        self.inner = inner or AdmissionFolder()
        self.service = self.inner.service
        self.history = History()
        self.inner.state.on_forget = self.history.forget  # a forgotten gang's notes go with it

    @property
    def state(self) -> AdmissionState:
        return self.inner.state

    @property
    def now(self) -> float:
        return self.inner.now

    def owns(self, subject: str) -> bool:
        return self.inner.owns(subject)

    def export(self) -> tuple[AdmissionState, History]:
        """The folded state and explain's notes, for a snapshot (`services/common/snapshots.py`)."""
        return (self.inner.state, self.history)  # (its `on_forget` is this history's: pickled as one)

    def load(self, state: tuple[AdmissionState, History]) -> None:
        self.inner.state, self.history = state
        self.inner.state.on_forget = self.history.forget

    def step(self, envelope: Envelope, seq: int, part: int = 0, last: bool = True) -> list[Envelope]:
        """The inner step; the history observes the event folded and the decisions made (as they
        take effect: a cycle's when it is decided; read back, they change nothing)."""
        decided = self.inner.step(envelope, seq, part, last)
        if event_class(envelope.event) in OBSERVED and not is_cycle_decision(envelope):
            self._observe(envelope)
        for made in decided:
            if type(made.event) in OBSERVED:
                self._observe(made)
        return decided

    def _observe(self, envelope: Envelope) -> None:
        kind = event_class(envelope.event)
        if kind in OBSERVED:
            self.history.observe(envelope.event, envelope.seconds if kind in TIMED else 0.0)


def answer(folder: ExplainingFolder, op: str, data: bytes) -> Reply:
    """One request, as it comes over NATS: the op from the subject, the query as JSON."""
    query = parse_request(QUERIES, op, data, SERVICE)
    if isinstance(query, Reply):
        return query
    if isinstance(query, GangsQuery):
        return _gangs(folder.state, query)
    if isinstance(query, PoolsQuery):
        return _pools(folder.state, query)
    assert isinstance(query, ExplainQuery)
    return _explain(folder, query)


def _gangs(state: AdmissionState, query: GangsQuery) -> Reply:
    unknown = sorted(set(query.states or ()) - set(GANG_STATES))
    if unknown:
        return error_reply("invalid_command", f"states: unknown gang state {unknown[0]!r}; one of: "
                                         f"{', '.join(GANG_STATES)}", "states")
    rows = gang_rows(state, query.tree, query.pool, query.states)
    shown = rows[-query.limit:]
    return Reply(ok=True, seq=state.last_seq, data={"gangs": shown, "total": len(rows), "as_of": state.last_seq})


def _pools(state: AdmissionState, query: PoolsQuery) -> Reply:
    names = sorted(state.trees) if query.tree is None else [query.tree] if query.tree in state.trees else []
    trees: list[dict[str, Any]] = []
    rows = query.rows
    paged = query.limit is not None or query.after is not None
    for name in names:
        numbers, queues = _tree_numbers(state, name, query.heads, rows)
        rows -= sum(len(q["gangs"]) for leaf in queues.values() for q in leaf.values())
        if not paged:
            trees.append({"tree": name, "pools": numbers, "queues": queues})
            continue
        paths = list(numbers)  # (path order: sorted)
        start = 0 if query.after is None else bisect_right(paths, query.after)
        page = paths[start:] if query.limit is None else paths[start:start + query.limit]
        following = page[-1] if page and start + len(page) < len(paths) else None
        trees.append({"tree": name, "pools": {path: numbers[path] for path in page},
                      "queues": {leaf: queues[leaf] for leaf in page if leaf in queues},
                      "next": following, "total": len(paths)})
    return Reply(ok=True, seq=state.last_seq, data={"trees": trees, "as_of": state.last_seq})


class _TreeNumbers:
    """The last tree's `pool_numbers` and `queue_heads`, kept while admission's state has not
    moved: the pages of one tree, asked one after the other, compute them once (a 10,000-pool
    tree read in ten pages would otherwise cost ten times the whole)."""

    key: tuple[int, str, int | None, int, int] | None = None
    found: tuple[dict[str, Any], dict[str, Any]] = ({}, {})


def _tree_numbers(state: AdmissionState, tree: str, heads: int, rows: int) -> tuple[dict[str, Any], dict[str, Any]]:
    key = (id(state), tree, state.last_seq, heads, rows)
    if _TreeNumbers.key != key:
        _TreeNumbers.key, _TreeNumbers.found = key, (pool_numbers(state, tree), queue_heads(state, tree, heads, rows))
    return _TreeNumbers.found


def _explain(folder: ExplainingFolder, query: ExplainQuery) -> Reply:
    state = folder.state
    tree = query.tree
    if tree is None:
        found = sorted(name for name, rt in state.trees.items() if query.gang in rt.gangs)
        if len(found) > 1:
            return error_reply("ambiguous", f"gang {query.gang} exists in trees {', '.join(found)}: name one (--tree)",
                          "tree")
        tree = found[0] if found else "default"
    result = explain(state, tree, query.gang, folder.history)
    return Reply(ok=True, seq=state.last_seq, data=result.to_dict())


async def serve_queries(nc: Any, folder: ExplainingFolder, *,
                        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Answer `poolwise.cmd.admission.<op>` until cancelled (queue group: one instance answers
    each request); ready once the server knows the subscription."""
    await answer_until_cancelled(nc, SERVICE, partial(answer, folder), task_status=task_status)
