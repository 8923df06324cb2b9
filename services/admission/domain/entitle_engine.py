"""The entitlement engine of a tree as admission keeps it: its input made from admission's state
(`tree_input`: the tree service's pool options and capacity, admission's ledgers for each leaf's
allocation and demand), built once per tree configuration (`prepared_engine`) and given fresh
leaf numbers every cycle, and what is derived once per engine (the rows in path order, the
sibling groups)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from events import EntitlementsComputed
from events.entitlement_map import group_of
from services.admission.domain.entitle_changes import Published
from services.admission.domain.model import ADMITTED, PENDING, TERMINAL, Ledger
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.state import AdmissionState
from services.admission.domain.vectors import Vector, add_into
from services.entitlement import EntitlementEngine
from services.entitlement.arrays import positive_amounts
from services.entitlement.model import JOB_POLICIES, JobDemand, LeafUsage, PoolInput, TreeInput
from services.tree.domain.effective import capacity, effective_pools


def _usage(rt: TreeRuntime, path: str, jobs: dict[str, dict[str, Vector]] | None) -> LeafUsage:
    """What one leaf holds and needs now (DRF: with its jobs)."""
    job_demands = None if jobs is None else tuple(JobDemand(j, d) for j, d in sorted(jobs.get(path, {}).items()))
    return _usage_with(rt.ledgers.get(path), job_demands)


def _usage_with(ledger: Ledger | None, job_demands: tuple[JobDemand, ...] | None) -> LeafUsage:
    """`_usage` of a leaf with this ledger and these jobs."""
    if ledger is None:
        return LeafUsage(jobs=job_demands)
    return LeafUsage(allocation=ledger.non_slack, demand=dict(ledger.demand), revocable_allocation=dict(ledger.slack),
                     revocable_demand=dict(ledger.slack_demand), jobs=job_demands)


def tree_input(state: AdmissionState, tree: str) -> TreeInput:
    """The engine's whole input for one tree, as the state stands."""
    config = state.config.tree(tree)
    total, revocable = capacity(state.config, tree)
    rt = state.runtime(tree)
    jobs = _job_demands(rt) if config.options.policy in JOB_POLICIES else None
    pools: list[PoolInput] = []
    for path, view in effective_pools(state.config, tree).items():
        if path == "/":
            continue
        usage = _usage(rt, path, jobs) if config.pools[path].is_leaf else LeafUsage()
        pools.append(PoolInput(path=path, reservation=view.reservation, limit=view.limit, share=view.share,
                               static=view.static, slack_limit=view.slack_limit, usage=usage))
    return TreeInput(kinds=tuple(config.kinds), capacity=total, pools=tuple(pools), revocable_capacity=revocable,
                     policy=config.options.policy, allocation_slack=config.options.allocation_slack)


@dataclass(slots=True)
class Prepared:
    """A tree's engine, with each leaf's ledger (and how many changes it had seen) when its numbers
    were last written to the engine."""

    engine: EntitlementEngine
    leaves: list[str]
    given: TreeInput
    written: dict[str, tuple[Ledger | None, int]] = field(default_factory=dict)  # leaf -> its ledger, `changes`
    # (`dominant`, `hdrf`) leaf -> its ledger, `changes` and jobs when last written to the engine
    jobs_written: dict[str, tuple[Ledger | None, int, tuple[JobDemand, ...]]] = field(default_factory=dict)
    order: list[int] | None = None  # the engine's rows in path order (the event lists pools so)
    last: EntitlementsComputed | None = None  # what the engine gave last, while no leaf changed since
    held: list[tuple[str, Ledger]] | None = None  # the leaves with a ledger (`rt.ledgers`, in leaf order)
    held_changes: list[int] = field(default_factory=list)  # each one's `changes` when last written
    held_count: int = -1  # len(rt.ledgers) when `held` was listed (ledgers are only ever added)
    published: Published | None = None  # the numbers of the last parts `compute_cycle` gave
    rank: list[int] | None = None  # each engine row's place in path order
    groups: tuple[list[str], list[int]] | None = None  # the sibling groups in path order, a child row of each


def prepared_engine(state: AdmissionState, tree: str) -> Prepared:
    """The tree's engine, built once per configuration (memoised in the tree state's cache, which
    config, host and pool-structure changes empty); its leaves get fresh numbers every cycle.
    (Under `per_resource`, only the leaves whose ledger changed since they were last written
    (`Ledger.changes`): the same numbers would be written again; they are written in one go.)"""
    key = ("entitlement_engine", tree)
    found = cast(Prepared | None, state.config.cache.get(key))
    if found is None:
        given = tree_input(state, tree)
        engine = EntitlementEngine(given)
        found = state.config.cache[key] = Prepared(engine, engine.leaves, given)
        ledgers = state.runtime(tree).ledgers
        for leaf in found.leaves:  # written with the input just given
            ledger = ledgers.get(leaf)
            found.written[leaf] = (ledger, 0 if ledger is None else ledger.changes)
        return found
    engine, leaves, given = found.engine, found.leaves, found.given
    rt = state.runtime(tree)
    if given.policy in JOB_POLICIES:
        # Only the leaves whose ledger or jobs moved get new numbers: the engine keeps what it
        # derived from a leaf's jobs while the leaf keeps its tuple (`entitlement/memo.py`), and a
        # new tuple of the same jobs would throw that away every cycle.
        jobs = _job_demands(rt)
        ledgers = rt.ledgers
        seen_jobs = found.jobs_written
        for leaf in leaves:
            ledger = ledgers.get(leaf)
            changes = 0 if ledger is None else ledger.changes
            demands = tuple(JobDemand(j, d) for j, d in sorted(jobs.get(leaf, {}).items()))
            seen = seen_jobs.get(leaf)
            if seen is not None and seen[0] is ledger and seen[1] == changes and seen[2] == demands:
                continue
            engine.set_usage(leaf, _usage_with(ledger, demands))
            seen_jobs[leaf] = (ledger, changes, demands)
        found.last = None
        return found
    ledgers = rt.ledgers
    changed = _changed_leaves(found, ledgers)
    if changed:
        # `set_usage(leaf, _usage(rt, leaf, None))` of each, the same numbers
        kinds = given.kinds
        rows: list[tuple[list[float], list[float], list[float], list[float]]] = []
        for leaf in changed:
            ledger = ledgers.get(leaf)
            rows.append(_EMPTY_ROWS[kinds] if ledger is None else _usage_rows(ledger, kinds))
        engine.set_usages(changed, rows)
        found.last = None
    return found


def _changed_leaves(found: Prepared, ledgers: dict[str, Ledger]) -> list[str]:
    """The leaves whose ledger changed (or appeared) since they were last written to the engine,
    in leaf order, marked written. A ledger, once made, stays the leaf's (`job_counts.ledger_of`): while
    `rt.ledgers` holds as many as when they were listed, only their `changes` are read (no dict
    lookup per leaf: 100k leaves cost about 3 ms this way)."""
    held = found.held
    if held is None or found.held_count != len(ledgers):
        written = found.written
        changed: list[str] = []
        for leaf in found.leaves:
            ledger = ledgers.get(leaf)
            seen = written.get(leaf)
            if seen is None or seen[0] is not ledger or (ledger is not None and seen[1] != ledger.changes):
                changed.append(leaf)
                written[leaf] = (ledger, 0 if ledger is None else ledger.changes)
        held = found.held = [(leaf, ledgers[leaf]) for leaf in found.leaves if leaf in ledgers]
        found.held_changes = [written[leaf][1] for leaf, _ in held]
        found.held_count = len(ledgers)
        return changed
    now = [ledger.changes for _, ledger in held]
    before = found.held_changes
    if now == before:
        return []
    found.held_changes = now
    written = found.written
    out: list[str] = []
    for i in [i for i, (a, b) in enumerate(zip(now, before, strict=True)) if a != b]:
        leaf, ledger = held[i]
        written[leaf] = (ledger, now[i])
        out.append(leaf)
    return out


def _usage_rows(ledger: Ledger, kinds: tuple[str, ...]) -> tuple[list[float], list[float], list[float], list[float]]:
    """What `write_usage` writes for `_usage(rt, leaf, None)` of a leaf with this ledger: per kind
    of `kinds`, the non-slack allocation, demand, slack allocation and slack demand (a missing or
    non-positive amount: 0.0)."""
    allocation, slack = ledger.allocation.get, ledger.slack.get
    non_slack: list[float] = []
    for kind in kinds:
        held = allocation(kind)
        value = None if held is None else held - slack(kind, 0.0)
        non_slack.append(float(value) if value is not None and value > 0.0 else 0.0)
    return non_slack, _positive(ledger.demand, kinds), _positive(ledger.slack, kinds), \
        _positive(ledger.slack_demand, kinds)


def _positive(values: Vector, kinds: tuple[str, ...]) -> list[float]:
    if not values:
        return _EMPTY_ROWS[kinds][0]  # read only
    return positive_amounts(values, kinds)


class _EmptyRows(dict[tuple[str, ...], tuple[list[float], list[float], list[float], list[float]]]):
    """Per kinds: the rows of a leaf with no ledger (zeros)."""

    def __missing__(self, kinds: tuple[str, ...]) -> tuple[list[float], list[float], list[float], list[float]]:
        zeros = [0.0] * len(kinds)
        found = self[kinds] = (zeros, zeros, zeros, zeros)
        return found


_EMPTY_ROWS = _EmptyRows()


def _job_demands(rt: TreeRuntime) -> dict[str, dict[str, Vector]]:
    """Per leaf, per job: what its non-revocable gangs hold (live tasks only) and need (DRF's leaves)."""
    result: dict[str, dict[str, Vector]] = {}
    for gang in rt.live.values():
        if gang.revocable or gang.state not in (ADMITTED, PENDING):
            continue
        acc = result.setdefault(gang.pool, {}).setdefault(gang.job, {})
        if gang.state == PENDING:
            add_into(acc, gang.resources)
            continue
        for task in gang.tasks:
            if task.state not in TERMINAL and task.state != "pending":
                add_into(acc, task.resources)
    return result


def sibling_groups(prepared: Prepared, paths: tuple[str, ...]) -> tuple[list[str], list[int]]:
    """The tree's sibling groups (their parents' paths) in path order, and a row of a child of
    each (made once per engine)."""
    found = prepared.groups
    if found is None:
        first: dict[str, int] = {}
        for row in range(1, len(paths)):
            first.setdefault(group_of(paths[row]), row)
        names = sorted(first)
        found = prepared.groups = (names, [first[name] for name in names])
    return found


def path_order(prepared: Prepared, paths: tuple[str, ...]) -> list[int]:
    """The engine's rows (the root `/` first) in path order, as the whole event lists them."""
    order = prepared.order
    if order is None or len(order) != len(paths):
        order = prepared.order = sorted(range(len(paths)), key=paths.__getitem__)
    return order


def path_rank(prepared: Prepared, paths: tuple[str, ...]) -> list[int]:
    """Each engine row's place in path order (made once per engine)."""
    rank = prepared.rank
    if rank is None or len(rank) != len(paths):
        order = path_order(prepared, paths)
        rank = prepared.rank = [0] * len(order)
        for place, row in enumerate(order):
            rank[row] = place
    return rank
