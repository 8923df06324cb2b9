"""A literal, dict-and-loop reading of DOMAIN §3 `per_resource` and slack: the oracle the
vectorized engine is checked against. Slow and obvious on purpose."""

from __future__ import annotations

import math

from services.entitlement.model import CPU, PoolInput, TreeInput
from services.entitlement.waterfill import waterfill


def _parent(p: PoolInput) -> str:
    if p.parent is not None:
        return p.parent
    head = p.path.rsplit("/", 1)[0]
    return head or "/"


def reference(tree: TreeInput) -> dict[str, dict[str, dict[str, float]]]:
    """`{path: {"entitlement"|"slack"|"non_slack"|"requirement": {kind: x}}}`."""
    kinds = tree.kinds
    pools = {p.path: p for p in tree.pools}
    children: dict[str, list[str]] = {"/": []}
    for path in pools:
        children.setdefault(path, [])
    for path, p in pools.items():
        children[_parent(p)].append(path)
    for ch in children.values():
        ch.sort()
    cap = {k: float(tree.capacity.get(k, 0.0)) for k in kinds}

    def res(path: str, k: str) -> float:
        return cap[k] if path == "/" else float(pools[path].reservation.get(k, 0.0))

    def lim(path: str, k: str) -> float:
        if path == "/":
            return cap[k]
        limit = pools[path].limit
        return math.inf if limit is None else float(limit.get(k, math.inf))

    def share(path: str, k: str) -> float:
        s = pools[path].share
        return float(s) if isinstance(s, (int, float)) else float(s.get(k, 1.0))

    req: dict[str, dict[str, float]] = {}
    nonrev: dict[str, dict[str, float]] = {}

    def requirement(path: str) -> dict[str, float]:
        out: dict[str, float] = {}
        if children[path]:
            for c in children[path]:
                requirement(c)
            for k in kinds:
                total = 0.0
                for c in children[path]:
                    claim = req[c][k]
                    if pools[c].static:
                        claim = max(claim, min(res(c, k), lim(c, k)))
                    total += claim
                out[k] = min(lim(path, k), total)
        else:
            u = pools[path].usage
            nonrev[path] = {}
            for k in kinds:
                nr = u.allocation.get(k, 0.0) + u.demand.get(k, 0.0)
                term = 0.0
                if k != CPU:
                    term = min(
                        pools[path].slack_limit / 100 * res(path, k),
                        u.revocable_allocation.get(k, 0.0) + u.revocable_demand.get(k, 0.0),
                    )
                out[k] = min(lim(path, k), nr + term)
                nonrev[path][k] = min(lim(path, k), nr)
        req[path] = out
        return out

    requirement("/")
    ent: dict[str, dict[str, float]] = {"/": dict(cap)}

    def divide(path: str) -> None:
        kids = children[path]
        if not kids:
            return
        ent.update({c: {} for c in kids})
        for k in kinds:
            e = ent[path][k]
            base = [
                min(res(c, k), lim(c, k)) if pools[c].static else min(req[c][k], res(c, k), lim(c, k)) for c in kids
            ]
            if sum(base) > e:
                base = [b * e / sum(base) for b in base]
            rest = max(0.0, e - sum(base))
            extra = waterfill(
                rest, [max(0.0, req[c][k] - b) for c, b in zip(kids, base, strict=True)], [share(c, k) for c in kids]
            )
            left = max(0.0, rest - sum(extra))
            total_share = sum(share(c, k) for c in kids)
            for c, b, x in zip(kids, base, extra, strict=True):
                given = b + x
                add = left * share(c, k) / total_share if total_share > 0 else 0.0
                ent[c][k] = max(given, min(lim(c, k), given + add))
        for c in kids:
            divide(c)

    divide("/")

    # slack cpu
    slack_cpu = {p: 0.0 for p in ent}
    if CPU in kinds:
        total = float(tree.revocable_capacity.get(CPU, 0.0))
        if tree.allocation_slack:
            for path, p in pools.items():
                if not children[path]:
                    u = p.usage
                    total += max(0.0, res(path, CPU) - u.allocation.get(CPU, 0.0) - u.demand.get(CPU, 0.0))

        def wants(path: str) -> float:
            if children[path]:
                return sum(wants(c) for c in children[path])
            u = pools[path].usage
            return u.revocable_allocation.get(CPU, 0.0) + u.revocable_demand.get(CPU, 0.0)

        slack_cpu["/"] = total

        def divide_slack(path: str) -> None:
            kids = children[path]
            if not kids:
                return
            have = slack_cpu[path]
            gifts = waterfill(have, [wants(c) for c in kids], [share(c, CPU) for c in kids])
            left = max(0.0, have - sum(gifts))
            total_share = sum(share(c, CPU) for c in kids)
            for c, g in zip(kids, gifts, strict=True):
                slack_cpu[c] = g + (left * share(c, CPU) / total_share if total_share > 0 else 0.0)
                divide_slack(c)

        divide_slack("/")

    slack: dict[str, dict[str, float]] = {}

    def slack_of(path: str) -> dict[str, float]:
        if children[path]:
            parts = [slack_of(c) for c in children[path]]
            out = {k: sum(p[k] for p in parts) for k in kinds}
        else:
            u = pools[path].usage
            out = {}
            for k in kinds:
                out[k] = max(
                    0.0,
                    min(
                        ent[path][k] - nonrev[path][k],
                        pools[path].slack_limit / 100 * res(path, k),
                        u.revocable_allocation.get(k, 0.0) + u.revocable_demand.get(k, 0.0),
                    ),
                )
        if CPU in kinds:
            out[CPU] = slack_cpu[path]
        slack[path] = out
        return out

    slack_of("/")
    result: dict[str, dict[str, dict[str, float]]] = {}
    for path in ent:
        non_slack = {k: (ent[path][k] if k == CPU else max(0.0, ent[path][k] - slack[path][k])) for k in kinds}
        result[path] = {
            "entitlement": ent[path],
            "slack": slack[path],
            "non_slack": non_slack,
            "requirement": req[path],
        }
    return result
