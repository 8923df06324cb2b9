"""Laws of preemption over random trees and workloads (hypothesis).

Each example builds a tree (one or two kinds, 2-4 top-level pools, some with two children,
reservations the capacity can honour, limits, shares, `fifo` or `fair_share`, some pools with
`preempt_lower_priority`; policy `per_resource` or `dominant`; grace 0) and runs rounds through
the real folds: inputs (gangs of 1-3 tasks with priorities, some non-preemptible or revocable;
task reports `placing`, `running`, `succeeded`; cancellations), then a tick: entitlement,
admission cycle (`decide_tree`) and the preemption pass, every decision landing back in the log
(`harness.System`). Some rounds then *settle*: every outstanding request is acknowledged and one
more tick runs, with no other input.

At every pass, on the state the pass saw (`System.on_pass`):

1. never a non-preemptible task: every gang asked to give back is preemptible and admitted, the
   request names all its live tasks, and one of them is a candidate (ready, placing, running);
2. the overshoot never below the guarantee: between pools, a gang that is not needed in full for
   any kind still in excess (the one gang of overshoot) leaves the pool, on every kind still in
   excess, at least `min(requirement, reservation)` (never more than its entitlement). Read so
   because the law as written, on every kind, conflicts with law 5 (and DOMAIN's "gives back the
   excess") when a pool is over on two kinds: see `test_two_kinds_the_guarantee_gives_way_to_the_excess`
   in test_between_pools.py;
3. never for a pool that is not over: a pool giving back between pools is over its entitlement
   in that bucket (requests outstanding counted as given back) and the gang holds a kind in
   excess; inside a pool, the gang made room for is pending in that pool, of higher priority,
   in the same bucket, and short of room (it did not fit) once the gangs at the head of the
   queues the cycle visits before its own have theirs (make_room counts their room as spoken for);

and at the pass of a settling tick, against the pass before it:

4. no loops: no pool that did not give back before gives back now (the preempting and the
   preempted pool never swap roles), nor does a giver give again; a gang taken inside a pool is
   not admitted back while the gang it made room for still waits;
5. over by at most one gang: in each leaf and bucket, what preemptible tasks hold beyond the room
   the non-preemptible ones leave in the entitlement is at most one gang (per kind, the largest
   preemptible gang there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import PreemptionRequested, TaskStateChanged
from services.admission.domain.model import ADMITTED, CYCLE_ORDER, PENDING, Gang, Ledger
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.vectors import TOLERANCE, Vector, add_into, exceeds, free, short_of
from services.preemption.domain.holdings import copy_ledger, held_by, live_tasks
from services.preemption.domain.model import PassResult, Preemption
from services.preemption.domain.ranking import STATE_ORDER
from services.tree.domain.effective import effective_pools
from tests.preemption.harness import TREE, System, cancel, gang, host, host_of, pool, task, tree

# --- the random world ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GangSpec:
    leaf: int
    tasks: tuple[tuple[tuple[str, float], ...], ...]
    priority: int
    preemptible: bool
    revocable: bool
    job: str


@dataclass(frozen=True)
class Round:
    dt: float
    enqueue: tuple[GangSpec, ...]
    moves: tuple[tuple[int, str], ...]
    cancels: tuple[int, ...]
    settle: bool


@dataclass(frozen=True)
class World:
    kinds: tuple[str, ...]
    capacity: dict[str, float]
    revocable: dict[str, float]
    policy: str
    pools: tuple[tuple[str, dict[str, Any]], ...]
    leaves: tuple[str, ...]
    rounds: tuple[Round, ...]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    kinds = draw(st.sampled_from([("cpu",), ("cpu", "memory")]))
    capacity = {"cpu": float(draw(st.sampled_from([6, 8, 12])))}
    if "memory" in kinds:
        capacity["memory"] = float(draw(st.sampled_from([16, 32])))
    revocable = {"cpu": float(draw(st.sampled_from([0, 0, 4])))}
    top = draw(st.integers(2, 4))
    fractions = [{k: draw(st.sampled_from([0.0, 0.1, 0.2, 0.3])) for k in kinds} for _ in range(top)]
    for k in kinds:  # reservations the capacity can honour
        total = sum(f[k] for f in fractions)
        if total > 1:
            for f in fractions:
                f[k] /= total
    pools: list[tuple[str, dict[str, Any]]] = []
    leaves: list[str] = []

    def options() -> dict[str, Any]:
        found: dict[str, Any] = {"share": float(draw(st.sampled_from([1, 1, 2, 3])))}
        if draw(st.booleans()):
            found["preempt_lower_priority"] = True
        mode = draw(st.sampled_from(["fifo", "fifo", "fair_share", "arrival"]))
        if mode == "fair_share":
            found["mode"] = "fair_share"
        elif mode == "arrival":
            found["fifo_sort"] = ["arrival"]
        return found

    for i in range(top):
        path = f"/p{i}"
        reservation = {k: round(fractions[i][k] * capacity[k], 3) for k in kinds}
        config = {"reservation": reservation, **options()}
        if draw(st.booleans()):
            config["limit"] = {k: max(reservation[k], capacity[k] * draw(st.sampled_from([0.5, 0.8]))) for k in kinds}
        if draw(st.integers(0, 2)) == 0:  # a parent of two leaves
            pools.append((path, {k: v for k, v in config.items() if k in ("reservation", "limit", "share")}))
            for j in range(2):
                child = {k: round(reservation[k] * draw(st.sampled_from([0.0, 0.5])), 3) for k in kinds}
                pools.append((f"{path}/c{j}", {"reservation": child, **options()}))
                leaves.append(f"{path}/c{j}")
        else:
            pools.append((path, config))
            leaves.append(path)

    def gang_spec(focus: int | None) -> GangSpec:
        n = draw(st.integers(1, 3))
        need = [("cpu", float(draw(st.sampled_from([0.5, 1, 1, 2, 3]))))]
        if "memory" in kinds:
            need.append(("memory", float(draw(st.sampled_from([0, 1, 2, 4])))))
        revocable_gang = draw(st.integers(0, 9)) == 0
        leaf = focus if focus is not None else draw(st.integers(0, len(leaves) - 1))
        return GangSpec(leaf=leaf, tasks=tuple(tuple(need) for _ in range(n)),
                        priority=draw(st.integers(0, 3)), preemptible=revocable_gang or draw(st.integers(0, 6)) > 0,
                        revocable=revocable_gang, job=f"J{draw(st.integers(0, 3))}")

    def focus() -> int | None:  # a round's gangs often all go to one pool: pools fill, then others want theirs
        return draw(st.one_of(st.none(), st.integers(0, len(leaves) - 1)))

    rounds = tuple(Round(
        dt=float(draw(st.sampled_from([0, 1, 5]))),
        enqueue=(lambda f: tuple(gang_spec(f) for _ in range(draw(st.integers(0, 8)))))(focus()),
        moves=tuple((draw(st.integers(0, 60)), draw(st.sampled_from(["placing", "running", "running", "succeeded"])))
                    for _ in range(draw(st.integers(0, 6)))),
        cancels=tuple(draw(st.integers(0, 60)) for _ in range(draw(st.sampled_from([0, 0, 0, 1])))),
        settle=draw(st.booleans()),
    ) for _ in range(draw(st.integers(2, 8))))
    return World(kinds, capacity, revocable, draw(st.sampled_from(["per_resource", "dominant"])), tuple(pools),
                 tuple(leaves), rounds)


# --- running it ----------------------------------------------------------------------------------


def run(world: World, laws: Laws) -> System:
    s = System(on_pass=laws.check)
    s.feed(tree(resources=world.kinds, grace=0.0, policy=world.policy),
           host_of(world.capacity, world.revocable), at=0)
    for path, config in world.pools:
        s.feed(pool(path, **config), at=0)
    serial = 0
    for r in world.rounds:
        s.time += r.dt
        for spec in r.enqueue:
            serial += 1
            resources = [dict(t) for t in spec.tasks]
            s.feed(gang(f"g{serial}", world.leaves[spec.leaf], tasks=len(resources), resources=resources[0],
                        priority=spec.priority, preemptible=spec.preemptible, revocable=spec.revocable, job=spec.job))
        s.feed(_moves(s.rt, r.moves))
        unfinished = sorted(g.id for g in s.rt.gangs.values() if g.state in (ADMITTED, PENDING))
        for index in r.cancels:
            if unfinished:
                s.feed(cancel(unfinished[index % len(unfinished)]))
        laws.quiet = False
        s.tick()
        if r.settle:
            s.ack()
            laws.quiet = True
            s.tick()
    return s


def _moves(rt: TreeRuntime, moves: tuple[tuple[int, str], ...]) -> list[TaskStateChanged]:
    """Task reports: forward only, never `placed` or `launching` (so every live preemptible task is
    a candidate, and law 5 can speak of all of them)."""
    admitted = sorted(g.id for g in rt.gangs.values() if g.state == ADMITTED)
    out: list[TaskStateChanged] = []
    for index, state in moves:
        if not admitted:
            break
        found = rt.gangs[admitted[index % len(admitted)]]
        allowed = {"placing": {"ready"}, "running": {"ready", "placing"}, "succeeded": set(STATE_ORDER)}[state]
        out += [task(t.id, state) for t in found.tasks if t.state in allowed]
    return out


# --- the laws --------------------------------------------------------------------------------------


def _given_back(rt: TreeRuntime) -> dict[str, Ledger]:
    """Each leaf's ledger with outstanding requests counted as given back (before this pass)."""
    out = {pool: copy_ledger(ledger) for pool, ledger in rt.ledgers.items()}
    for g in rt.gangs.values():
        if g.state == ADMITTED:
            for t in live_tasks(g):
                if t.preemption_requested:
                    out[g.pool].hold(g, t.resources, -1.0)
    return out


def _bucket(ledger: Ledger, slack: bool) -> Vector:
    return dict(ledger.slack) if slack else ledger.non_slack


@dataclass
class Laws:
    quiet: bool = False  # this pass follows the previous one with nothing but acknowledgements
    givers: set[str] = field(default_factory=set)  # pools that gave back between pools at the previous pass
    made_room: list[tuple[str, int, str]] = field(default_factory=list)  # (victim, its attempt, for gang)
    passes: int = 0
    preemptions: int = 0
    inside: int = 0
    settled: int = 0

    def check(self, s: System, tree_name: str, result: PassResult) -> None:
        assert tree_name == TREE
        rt = s.rt
        state = s.preemption.admission
        pools = effective_pools(state.config, TREE)
        before = _given_back(rt)
        given: dict[str, list[Gang]] = {}  # between pools, non-slack: the gangs each pool gives back, in order
        self.passes += 1
        self.preemptions += len(result.preemptions)
        for p in result.preemptions:
            g = rt.gangs[p.event.gang]
            # 1. never a non-preemptible task
            assert g.preemptible and g.state == ADMITTED and g.pool == p.event.pool, p
            assert sorted(p.event.tasks) == sorted(t.id for t in live_tasks(g)), p
            assert any(t.state in STATE_ORDER and not t.preemption_requested for t in g.tasks), p
            slack = p.bucket == "slack"
            assert g.revocable == slack, p
            entitlement = rt.entitlements[g.pool]
            target = entitlement.slack_entitlement if slack else entitlement.non_slack_entitlement
            if p.cause == "over_entitlement":
                # 3. only a pool over its entitlement, for a kind in excess
                excess = exceeds(_bucket(before[g.pool], slack), target)
                assert excess, (p, _bucket(before[g.pool], slack), target)
                assert any(held_by(g).get(k, 0.0) > 0 for k in excess), (p, excess)
                if not slack:
                    given.setdefault(g.pool, []).append(g)
            else:
                # 3. inside a pool: only for a gang that waits there, of higher priority, short of room
                self.inside += 1
                assert p.for_gang is not None
                b = rt.gangs[p.for_gang]
                assert b.state == PENDING and b.pool == g.pool and pools[g.pool].preempt_lower_priority, (p, b)
                assert b.priority > g.priority and b.revocable == g.revocable, (p, b)
                # the gangs at the head of the queues the next cycle visits before b's claim their
                # room first (in b's bucket): a non-preemptible head that fits comes before b
                held = dict(_bucket(before[g.pool], slack))
                assert b.queue is not None
                for name in CYCLE_ORDER[:CYCLE_ORDER.index(b.queue)]:
                    head = next(iter(rt.queues[g.pool][name].ordered()), None)
                    if head is not None and head.revocable == b.revocable:
                        add_into(held, head.resources)
                room = free(target, held, b.resources)
                assert short_of(b.resources, room), (p, b.resources, room)
        # 2. the overshoot never below the guarantee (between pools): replaying each pool's gangs in
        #    the order given, a gang not needed in full for any kind still in excess leaves, on
        #    every kind still in excess, at least min(requirement, reservation, entitlement)
        for path, victims in given.items():
            raw, view, entitlement = rt.ledgers[path], pools[path], rt.entitlements[path]
            after = before[path].non_slack
            left = exceeds(after, entitlement.non_slack_entitlement)
            for g in victims:
                freed = held_by(g)
                short = [k for k, v in left.items() if v >= TOLERANCE]
                needed = any(freed.get(k, 0.0) > 0 and freed.get(k, 0.0) - left[k] < TOLERANCE for k in short)
                add_into(after, freed, -1.0)
                add_into(left, freed, -1.0)
                if needed:
                    continue
                for k in short:
                    requirement = min(raw.non_slack.get(k, 0.0) + raw.demand.get(k, 0.0), view.limit[k])
                    floor = min(requirement, view.reservation[k], entitlement.non_slack_entitlement.get(k, 0.0))
                    assert after.get(k, 0.0) >= floor - TOLERANCE, (path, g.id, k, after, floor)
        givers = {p.event.pool for p in result.preemptions if p.cause == "over_entitlement"}
        if self.quiet:
            self.settled += 1
            # 4. no loops
            assert not givers - self.givers, ("a pool that did not give back now does", givers, self.givers)
            assert not givers, ("a giver gives again after its requests were acknowledged", givers)
            for victim, attempt, for_gang in self.made_room:
                v = rt.gangs[victim]
                if v.state == ADMITTED and v.attempt > attempt:
                    assert rt.gangs[for_gang].state != PENDING, (victim, "admitted back before", for_gang)
            # 5. over by at most one gang
            for path, ledger in rt.ledgers.items():
                self._one_gang_at_most(rt, path, ledger)
        self.givers = givers
        self.made_room = [(p.event.gang, rt.gangs[p.event.gang].attempt, p.for_gang) for p in result.preemptions
                          if p.for_gang is not None]

    @staticmethod
    def _one_gang_at_most(rt: TreeRuntime, path: str, ledger: Ledger) -> None:
        entitlement = rt.entitlements.get(path)
        if entitlement is None:
            return
        for slack in (False, True):
            target = entitlement.slack_entitlement if slack else entitlement.non_slack_entitlement
            mine = [g for g in rt.gangs.values() if g.pool == path and g.state == ADMITTED and g.revocable == slack]
            fixed = {} if slack else dict(ledger.non_preemptible)
            movable: Vector = {}
            biggest: Vector = {}
            for g in mine:
                if g.preemptible:
                    held = held_by(g)
                    add_into(movable, held)
                    for k, v in held.items():
                        biggest[k] = max(biggest.get(k, 0.0), v)
            room = {k: max(0.0, target.get(k, 0.0) - fixed.get(k, 0.0)) for k in set(target) | set(fixed)}
            over = exceeds(movable, room)
            for k, amount in over.items():
                assert amount <= biggest.get(k, 0.0) + TOLERANCE, (path, "slack" if slack else "non-slack", k, amount,
                                                                  biggest, [g.id for g in mine])


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(worlds())
def test_preemption_laws_hold_over_random_trees_and_workloads(world: World) -> None:
    run(world, Laws())


def test_the_laws_see_preemptions_of_both_kinds_and_settled_passes() -> None:
    """The generator is not vacuous: across a fixed sample of worlds, passes decide preemptions
    between pools and inside pools, and settle."""
    totals = Laws()
    seen = 0

    @settings(max_examples=100, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(worlds())
    def sample(world: World) -> None:
        nonlocal seen
        laws = Laws()
        run(world, laws)
        seen += 1
        totals.preemptions += laws.preemptions
        totals.inside += laws.inside
        totals.settled += laws.settled

    sample()
    assert seen >= 50
    assert totals.preemptions > totals.inside > 0
    assert totals.settled > 0


def test_a_broken_law_is_caught() -> None:
    """The checker can fail: a request for a non-preemptible gang, slipped into a pass, is caught."""
    s = System()
    laws = Laws()
    s.feed(tree(), host(cpu=4), pool("/a"), pool("/b"), at=0)
    s.feed(gang("np", "/a", cpu=4, preemptible=False), at=0)
    s.tick(0)
    result = PassResult()
    result.preemptions.append(Preemption(PreemptionRequested(tree=TREE, pool="/a", gang="np", tasks=["np/0"],
                                                             reason="test"), "over_entitlement", "non_slack", 1))
    try:
        laws.check(s, TREE, result)
    except AssertionError:
        return
    raise AssertionError("law 1 did not catch a non-preemptible victim")
