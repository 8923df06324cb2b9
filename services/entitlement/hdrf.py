"""Policy `hdrf`: hierarchical DRF that leaves nothing idle a waiting job could use (DOMAIN §3).

Everything of `dominant` holds (shares of capacity, jobs as leaves, additive guarantees with their
inference and scaling, demand along its own direction, limits bounding the share, static
reservations held before anything else: `dominant.drf_inputs`), except when a
child stops growing: a job stops only when its demand is met or a kind it needs is used up (all
of the tree's capacity of it given, or a pool on its path at its limit of it); a pool stops when
all its children have. A kind a job does not need never stops it.

WORKED NUMERIC EXAMPLE (scenario `hdrf-work-conserving`)
========================================================

Capacity cpu 100, memory 1000, gpu 8. Pools /C, /G1, /G2 (no guarantee, weight 1). /G1 and /G2
each hold 8 jobs of {cpu 1, memory 10, gpu 1}; /C holds 20 jobs of {cpu 5, memory 10}. As shares
of the capacity a GPU job is {0.01, 0.01, 0.125} (dominant: gpu), a CPU job {0.05, 0.01, 0}
(dominant: cpu). Keys are `max over kinds (share - guarantee) / weight`, i.e. dominant shares.

1. Every job has key `t` (its dominant share; weight 1) and grows along its demand: a GPU job
   holds t * {0.08, 0.08, 1}, a CPU job t * {1, 0.2, 0}. The pools' keys rise together as `y`:
   /G1's is 8 t (its gpu), /C's 20 t (its cpu), so /G1 = /G2 = y * {0.08, 0.08, 1} and
   /C = y * {1, 0.2, 0}.
2. Candidate events: a demand met (every job at y = 1), the gpu used up (2 y = 1), the cpu used up
   (0.16 y + y = 1, y = 0.862). The first is the gpu at y = 0.5: /G1 and /G2 hold
   {0.04, 0.04, 0.5} = {cpu 4, memory 40, gpu 4}, /C {0.5, 0.1, 0} = cpu 50. Every job needing
   gpu stops (cause: gpu, used up at `/`). `dominant` would stop /C here too, at cpu 50, since
   its siblings' common argument cannot grow; /C needs no gpu and goes on.
3. /C alone, still y * {1, 0.2, 0}: the cpu is used up at 0.04 + 0.04 + y = 1, y = 0.92, before
   its demand is met (y = 1): /C = {cpu 92, memory 184, gpu 0}; its jobs stop (cpu, at `/`).
4. Every job is stopped; the entitlement is where each pool ended: /G1 {4, 40, 4}, /G2 {4, 40, 4},
   /C {92, 184, 0}. `stops`: /G1 and /G2 by (gpu, /), /C by (cpu, /).

How it is computed
------------------
Exactly, event by event (no small steps), as the continuous limit of the discrete progressive
filling DOMAIN describes (walk from the root to the unblocked child with the least key, down to
a job, and give it a small step of its demand; the test oracle, `tests/entitlement/
hdrf_reference.py`, does just that).

Between two events everything that grows grows linearly in one clock. At each pool, the
unblocked children with the least key (within `TIE`) grow, each with its key rising at the pool's
inner rate; a pool's key then rises at `kappa = max over its arg-max kinds of (share velocity) /
weight` per unit of that inner rate. When `kappa` is 0 (the kinds holding the pool's key up are
not growing: their jobs stopped, or they are guarantee headroom) the pool *jumps*: its children
grow while its key stays put, so in the discrete process it stays the least of its siblings and
takes every step until the jump ends. A jumping child therefore grows alone (the first by row
among tied jumpers, as the discrete process breaks ties), and the clock of the phase is the
inner argument of the outermost jumping pool (or of the root).

Events, the first of which ends a phase: a job's demand met; a pool's share of a kind reaching
its limit (the root's limit is the capacity), which stops every job under it that needs the kind;
a child with a larger key caught up by its growing siblings; a pool's arg-max kinds changing
(which ends a jump). Each event changes the discrete state (who grows, and how), so the number of
phases is about the number of jobs plus pools times kinds.

A pool of weight 0 gets at most its guarantee (as under `dominant`, whose box is then
`min(limit, guarantee)`): its limit is taken as that, its key as if its weight were 1.

Cost. Two exact ways come first: nothing contended (every job gets its demand; a few vectorised
sums), and epochs of `dominant`-like functions with `hdrf`'s runs in them, one per kind used up
at the tree and per point where pools' limits are reached (`hdrf_runs.py`, `hdrf_curves.py`: a
fixed number of numpy operations per depth, as `dominant`). The filling below decides only where
those decline (the first limit reached inside a pool's run at key 0, or past their budget): each
phase is O(pools + jobs) Python work and there are about as many phases as jobs: quadratic, ~1 s
at 100 contended pools, ~45 s at 1k. See `docs/performance.md`, "Policy hdrf".
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from services.entitlement.arrays import TreeArrays
from services.entitlement.dominant import DrfInputs, dominant_entitlements, drf_inputs
from services.entitlement.hdrf_runs import FULL, MET, Runs, by_runs, row_max
from services.entitlement.hdrf_runs import sum_up as _sum_up
from services.entitlement.model import ROOT, Alert, BoolArray, FloatArray, IntArray
from services.entitlement.polylines import EPS

MAX_WORK = 100_000
"""The event-by-event filling's budget, in phases times rows (pools + jobs): each phase walks the
tree (~3-6 µs a row here), and the number of phases grows with the tree, so the whole is
quadratic: about 0.5 s at this budget, reached by ~100 contended pools of a few jobs each.
Beyond it the tree gets `dominant`'s numbers and an alert (`_dominant_instead`): a cycle must not
stall admission for seconds or minutes. A count, not a clock: every replay decides the same."""
TIE = 1e-9
"""Keys closer than this are equal: such siblings grow together."""


@dataclass(frozen=True, slots=True)
class Stop:
    """A kind that stopped some job of a pool, and where it was used up: `at` is the path of the
    pool whose limit of it was reached (`/`: the tree's capacity)."""

    kind: str
    at: str


@dataclass(slots=True, eq=False)
class HdrfResult:
    entitlement: FloatArray
    requirement: FloatArray
    alerts: list[Alert]
    stops: Mapping[str, tuple[Stop, ...]]
    """Per pool path (only pools with some job stopped by a kind): the kinds that stopped its
    jobs and where, sorted by kind (tree order) then place."""
    phases: int
    job_entitlement: FloatArray
    """`(jobs, kinds)`: what each job (a leaf of the computation, `drf_inputs` order) ends with."""
    job_row: IntArray
    """The leaf row of each job."""


_Growth = tuple[bool, list[tuple[int, float]], FloatArray]
"""(jumping, [(job, key rate per unit of clock)], share velocity per unit of clock)."""


class _Filling:
    """The state of one progressive filling: each job's fraction of its demand given so far."""

    def __init__(self, arr: TreeArrays, dshare: FloatArray, job_weight: FloatArray, job_row: IntArray,
                 guarantee: FloatArray, limit: FloatArray) -> None:
        n = len(arr.paths)
        self.arr = arr
        self.dshare = dshare  # (jobs, dims): demand as shares
        self.m = dshare.shape[0]
        self.dom = dshare.max(axis=1) if dshare.shape[1] else np.zeros(self.m)
        self.jw = job_weight
        self.job_row = job_row
        self.g = guarantee
        self.lim, self.w = _limits(arr, guarantee, limit)
        self.a = np.zeros(self.m)
        self.blocked = np.zeros(self.m, dtype=bool)
        self.cause_kind = np.full(self.m, MET, dtype=np.intp)
        self.cause_row = np.zeros(self.m, dtype=np.intp)
        self.frozen = np.zeros_like(self.lim, dtype=bool)
        self.jobs_of: list[list[int]] = [[] for _ in range(n)]
        for j, row in enumerate(job_row.tolist()):
            self.jobs_of[row].append(j)
        # each job's path, leaf to root: a kind used up at any of these stops it
        self.path_of: list[list[int]] = []
        parent = arr.parent.tolist()
        for row in job_row.tolist():
            up = [row]
            while up[-1] != 0:
                up.append(parent[up[-1]])
            self.path_of.append(up)

    # -- the state as numbers -------------------------------------------------------------------

    def shares(self, per_job: FloatArray) -> FloatArray:
        """`(pools, dims)`: the sum of `per_job` rows over each pool's jobs."""
        return _sum_up(self.arr, self.job_row, per_job)

    def freeze(self, share: FloatArray) -> bool:
        """Every (pool, kind) at its limit stops the jobs under the pool that need the kind. Says
        whether a (pool, kind) reached its limit now."""
        newly = (share >= self.lim - FULL) & ~self.frozen
        if not newly.any():
            return False
        self.frozen |= newly
        hits = {(int(r), int(k)) for r, k in zip(*np.nonzero(newly), strict=True)}
        rows_hit = {r for r, _ in hits}
        for j in np.flatnonzero(~self.blocked).tolist():
            for row in reversed(self.path_of[j]):  # root first: the tree's capacity is named first
                if row not in rows_hit:
                    continue
                kinds = [k for r, k in sorted(hits) if r == row and self.dshare[j, k] > 0.0]
                if kinds:
                    self.blocked[j] = True
                    self.cause_kind[j], self.cause_row[j] = kinds[0], row
                    break
        return True

    # -- one phase ------------------------------------------------------------------------------

    def run(self, max_phases: int) -> int:
        """Phases until every job is stopped; returns how many."""
        arr = self.arr
        children = arr.children
        phases = 0
        while phases < max_phases:
            share = self.shares(self.a[:, None] * self.dshare)
            self.freeze(share)
            job_key = np.divide(self.a * self.dom, self.jw, out=np.zeros(self.m), where=self.jw > 0)
            pool_key = (share - self.g).max(axis=1) / self.w
            pool_blocked = self._blocked_pools()
            if pool_blocked[0]:
                break
            self._share, self._job_key, self._pool_key, self._pool_blocked = share, job_key, pool_key, pool_blocked
            self._argmax = (share - self.g) / self.w[:, None] >= pool_key[:, None] - TIE
            self._visited: list[tuple[int, list[tuple[float, bool, int]], float]] = []
            _, jobs, _ = self._grow(0, root=True)
            rate = np.zeros(self.m)
            for j, r in jobs:
                rate[j] += r
            da = rate * self.jw / np.where(self.dom > 0, self.dom, 1.0)
            velocity = self.shares(da[:, None] * self.dshare)
            tau = self._next_event(da, velocity, children)
            if not math.isfinite(tau):
                break
            self.a = np.minimum(self.a + da * tau, 1.0)
            met = (self.a >= 1.0 - FULL) & ~self.blocked
            self.a[met] = 1.0
            self.blocked |= met
            phases += 1
        return phases

    def _blocked_pools(self) -> BoolArray:
        arr = self.arr
        n = len(arr.paths)
        out = np.ones(n, dtype=bool)
        for row in range(n - 1, -1, -1):
            kids = arr.children[row]
            if kids:
                out[row] = all(out[c] for c in kids)
            else:
                out[row] = all(self.blocked[j] for j in self.jobs_of[row])
        return out

    def _grow(self, row: int, root: bool = False) -> _Growth:
        """Who grows under `row`, and how fast per unit of `row`'s clock (see the module doc)."""
        arr = self.arr
        cands: list[tuple[float, bool, int]] = []  # (key, is_job, index)
        if arr.children[row]:
            cands = [(float(self._pool_key[c]), False, c) for c in arr.children[row] if not self._pool_blocked[c]]
        else:
            cands = [(float(self._job_key[j]), True, j) for j in self.jobs_of[row] if not self.blocked[j]]
        least = min(c[0] for c in cands)
        growing = [c for c in cands if c[0] <= least + TIE]
        results: list[_Growth] = []
        for _, is_job, idx in growing:
            if is_job:
                results.append((False, [(idx, 1.0)], self.jw[idx] * self.dshare[idx] / self.dom[idx]))
            else:
                results.append(self._grow(idx))
        jumper = next((r for r in results if r[0]), None)
        if jumper is not None:  # grows alone, its key still: the least of its siblings throughout
            jobs, vel = jumper[1], jumper[2]
        else:
            jobs = [jr for r in results for jr in r[1]]
            vel = np.sum([r[2] for r in results], axis=0)
        self._visited.append((row, cands, least))
        if root:
            return False, jobs, vel
        kappa = float(vel[self._argmax[row]].max()) / self.w[row]
        if kappa > TIE * TIE:
            return False, [(j, r / kappa) for j, r in jobs], vel / kappa
        return True, jobs, vel

    def _next_event(self, da: FloatArray, velocity: FloatArray, children: list[list[int]]) -> float:
        tau = math.inf
        grow = da > 0
        if grow.any():  # a demand met
            tau = min(tau, float(((1.0 - self.a[grow]) / da[grow]).min()))
        up = (velocity > 0) & ~self.frozen
        if up.any():  # a limit reached (the root's: the capacity); a speck of velocity: never (inf)
            with np.errstate(over="ignore"):
                tau = min(tau, float(((self.lim[up] - self._share[up]) / velocity[up]).min()))
        key_rate = np.where(self._argmax, velocity, 0.0).max(axis=1) / self.w
        job_rate = da * self.dom / np.where(self.jw > 0, self.jw, 1.0)
        for _, cands, least in self._visited:  # a larger key caught up by the growing siblings
            rates = [float(job_rate[i] if is_job else key_rate[i]) for key, is_job, i in cands if key <= least + TIE]
            fastest = max(rates)
            if fastest > 0:
                for key, _, _ in cands:
                    if key > least + TIE:
                        tau = min(tau, (key - least) / fastest)
        # a pool's arg-max kinds change (a kind not among them rising faster than the key)
        excess = (self._share - self.g) / self.w[:, None]
        rel = velocity / self.w[:, None] - key_rate[:, None]
        rising = (~self._argmax) & (rel > 0)
        rising[0] = False
        if rising.any():
            gap = self._pool_key[:, None] - excess
            tau = min(tau, float((gap[rising] / rel[rising]).min()))
        return max(tau, 0.0)


def hdrf_entitlements(arr: TreeArrays, *, shortcuts: bool = True) -> HdrfResult:
    """Entitlement, requirement, alerts and stops of every row under `hdrf`. Two exact shortcuts
    come first (`shortcuts=False` skips them, for tests): nothing contended; and the epochs of
    `hdrf_runs.by_runs`, one per kind used up at the tree or limits reached. Where they decline,
    the filling, event by event."""
    n, k = len(arr.paths), len(arr.kinds)
    drf = drf_inputs(arr)
    entitlement = np.zeros((n, k))
    if not drf.active or n == 1:
        return HdrfResult(entitlement, drf.requirement, [], {}, 0, np.zeros((drf.job_row.size, k)), drf.job_row)
    active = drf.active
    # `(jobs, kinds)` as a view of the `(kinds, jobs)` quotient: its columns (`row_max`, the sums
    # by kind) are contiguous, and the epochs take the quotient itself without a copy back
    dshare = (drf.job_demand[active] / drf.cap[:, None]).T
    # a job needing a kind the tree has none of: that kind is used up at the tree from the start
    inactive = [i for i in range(k) if i not in active]
    lacking = np.zeros(dshare.shape[0], dtype=bool)
    for kd in inactive:
        lacking |= drf.job_demand[kd] > 0
    dom = row_max(dshare)
    idle = (dom <= FULL) | (drf.job_weight <= EPS)  # nothing to give, no weight
    # Nothing contended (every demand fits every limit on its path and the capacity): no kind is
    # used up before the last demand is met, so every job gets its demand, without a phase.
    whole = np.where(lacking | idle, 0.0, 1.0)
    lim, _ = _limits(arr, drf.guarantee, drf.limit)
    given = _sum_up(arr, drf.job_row, whole[:, None] * dshare)
    if not lacking.any() and (given <= lim + FULL).all():
        entitlement[:, active] = (given + drf.held) * drf.cap
        jobs = np.zeros((dshare.shape[0], k))
        jobs[:, active] = whole[:, None] * dshare * drf.cap
        return HdrfResult(entitlement, drf.requirement, drf.alerts, {}, 0, jobs, drf.job_row)
    max_phases = min(20 * (dshare.shape[0] + n * len(active)) + 100, MAX_WORK // (n + dshare.shape[0]) + 1)
    if shortcuts:
        # a job needing a kind the tree has none of holds nothing from the start, as in the
        # filling below: the epochs run without it (held at 0), and it is stopped by that kind
        runs = by_runs(arr, drf, dshare, lim, idle | lacking, dom)
        if runs is not None:
            if lacking.any():
                runs.cause[lacking] = _first_lacking(drf.job_demand, inactive, lacking)
                runs.cause_row[lacking] = 0
            return _epochs_result(arr, drf, runs, idle | lacking)
    filling = _Filling(arr, dshare, drf.job_weight, drf.job_row, drf.guarantee, drf.limit)
    for kd in inactive:
        missing = (drf.job_demand[kd] > 0) & ~filling.blocked
        filling.blocked |= missing
        filling.cause_kind[missing], filling.cause_row[missing] = -2 - kd, 0
    filling.blocked |= idle
    phases = filling.run(max_phases)
    if phases >= max_phases:  # too costly to finish exactly: dominant's numbers, and an alert that says so
        return _dominant_instead(arr, drf, phases)
    return _filling_result(arr, drf, filling, phases)


def _dominant_instead(arr: TreeArrays, drf: DrfInputs, phases: int) -> HdrfResult:
    """`dominant`'s answer for a tree whose exact filling would cost more than `MAX_WORK`:
    feasible (within every limit and the capacity), the same on every replay (the budget counts
    phases, not time), with an alert naming the tree's size; no stops are known."""
    entitlement, requirement, alerts = dominant_entitlements(arr)
    jobs = drf.job_row.size
    alert = Alert(code="hdrf_too_costly", path="/", kind="",
                  message=(f"hdrf: the exact filling of this tree ({len(arr.paths)} pools, {jobs} jobs) stopped "
                           f"after {phases} phases (at most {MAX_WORK} phase-rows); the dominant policy's "
                           "numbers are used, so capacity a waiting job could use may sit idle "
                           "(docs/policies.md: the size hdrf is exact for)"))
    return HdrfResult(entitlement, requirement, [*alerts, alert], {}, phases,
                      np.zeros((jobs, len(arr.kinds))), drf.job_row)


def _epochs_result(arr: TreeArrays, drf: DrfInputs, runs: Runs, idle: BoolArray) -> HdrfResult:
    n, k = len(arr.paths), len(arr.kinds)
    active = drf.active
    entitlement = np.zeros((n, k))
    entitlement[:, active] = (runs.share + drf.held) * drf.cap
    held = np.where(idle, 0.0, runs.given)
    if len(active) == k:  # every kind has capacity (the common case): no scatter into columns
        jobs = held[:, None] * drf.job_demand.T
    else:
        jobs = np.zeros((runs.given.size, k))
        jobs[:, active] = held[:, None] * drf.job_demand[active].T
    cut = runs.cause != MET
    if (runs.cause_row[cut] != 0).any() or (runs.cause[cut] < 0).any():
        # a pool's limit stopped some, or a kind the tree has none of: the places, job by job
        return HdrfResult(entitlement, drf.requirement, drf.alerts,
                          _stops(arr, runs.cause, runs.cause_row, _paths(arr, drf.job_row, cut), active), 0, jobs,
                          drf.job_row)
    stops = np.zeros((n, k), dtype=bool)
    stops[drf.job_row[cut], np.asarray(active)[runs.cause[cut]]] = True
    for lv in reversed(arr.levels):
        stops[lv.group_parent] |= np.logical_or.reduceat(stops[lv.start : lv.stop], lv.group_starts, axis=0)
    stops[0] = False
    return HdrfResult(entitlement, drf.requirement, drf.alerts, _AtTheTree(arr, stops), 0, jobs, drf.job_row)


def _first_lacking(demand: FloatArray, inactive: list[int], lacking: BoolArray) -> IntArray:
    """The cause of each job of `lacking`: the first kind it needs that the tree has none of,
    coded as the filling codes it (`-2 - kind`)."""
    kind = np.full(int(lacking.sum()), -1, dtype=np.intp)
    for kd in reversed(inactive):  # the first such kind in the tree's order wins
        kind[demand[kd][lacking] > 0] = kd
    out: IntArray = -2 - kind
    return out


def _paths(arr: TreeArrays, job_row: IntArray, which: BoolArray) -> dict[int, list[int]]:
    """The path (leaf to root) of each job of `which`."""
    parent = arr.parent.tolist()
    out: dict[int, list[int]] = {}
    for j in np.flatnonzero(which).tolist():
        up = [int(job_row[j])]
        while up[-1] != 0:
            up.append(parent[up[-1]])
        out[j] = up
    return out


def _filling_result(arr: TreeArrays, drf: DrfInputs, filling: _Filling, phases: int) -> HdrfResult:
    n, k = len(arr.paths), len(arr.kinds)
    active = drf.active
    entitlement = np.zeros((n, k))
    entitlement[:, active] = (filling.shares(filling.a[:, None] * filling.dshare) + drf.held) * drf.cap
    jobs = np.zeros((filling.m, k))
    jobs[:, active] = filling.a[:, None] * filling.dshare * drf.cap
    return HdrfResult(entitlement, drf.requirement, drf.alerts,
                      _stops(arr, filling.cause_kind, filling.cause_row, dict(enumerate(filling.path_of)), active),
                      phases, jobs,
                      drf.job_row)


class _AtTheTree(Mapping[str, tuple[Stop, ...]]):
    """Stops all at the tree's capacity, as a `(pools, kinds)` matrix, read as `path -> stops` on
    access (a 10k-pool tree's dict would cost more than the computation)."""

    def __init__(self, arr: TreeArrays, stopped: BoolArray) -> None:
        self._arr, self._stopped = arr, stopped
        self._listed: list[int] | None = None

    @property
    def _rows(self) -> list[int]:
        """The rows with a stop, found on the first iteration (a computation need not read them)."""
        if self._listed is None:
            self._listed = np.flatnonzero(self._stopped.any(axis=1)).tolist()
        return self._listed

    def __getitem__(self, path: str) -> tuple[Stop, ...]:
        row = self._arr.index.get(path)
        if row is None or not self._stopped[row].any():
            raise KeyError(path)
        return tuple(Stop(self._arr.kinds[kd], ROOT) for kd in np.flatnonzero(self._stopped[row]).tolist())

    def __iter__(self) -> Iterator[str]:
        return (self._arr.paths[row] for row in self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __bool__(self) -> bool:  # (`stops or {}` asks this of every result: without a list of rows)
        return bool(self._stopped.any())


def _limits(arr: TreeArrays, guarantee: FloatArray, limit: FloatArray) -> tuple[FloatArray, FloatArray]:
    """`(limit, weight)` as the filling uses them: a pool of weight 0 gets at most its guarantee
    (`dominant`'s box `min(limit, guarantee)`), its key taken as if its weight were 1."""
    zero_weight = arr.weight <= EPS
    return (np.where(zero_weight[:, None], np.minimum(limit, guarantee), limit),
            np.where(zero_weight, 1.0, arr.weight))


def _stops(arr: TreeArrays, cause_kind: IntArray, cause_row: IntArray, path_of: Mapping[int, list[int]],
           active: list[int]) -> dict[str, tuple[Stop, ...]]:
    """Each pool's stopping kinds and places, from its jobs' causes, up the tree."""
    found: dict[int, set[tuple[int, int]]] = {}
    for j in np.flatnonzero(cause_kind != MET).tolist():
        ck = int(cause_kind[j])
        kind = active[ck] if ck >= 0 else -2 - ck
        cause = (kind, int(cause_row[j]))
        for row in path_of[j][:-1]:
            found.setdefault(row, set()).add(cause)
    return {
        arr.paths[row]: tuple(Stop(arr.kinds[kd], arr.paths[at]) for kd, at in sorted(causes))
        for row, causes in sorted(found.items())
    }
