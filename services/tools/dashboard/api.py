"""The dashboard's HTTP side: its page (`/`, `/static/...`) and the JSON API under `/api/`
(docs/dashboard.md), every answer read from the `Source`'s cache (a gang's `explain` from
admission, cached too). Read-only: GET and HEAD only (services/common/health_http.py). An unknown
tree, pool or gang is a 404, a malformed or unknown query parameter a 400, each with a JSON body
naming what is wrong."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from services.common.health_http import Handler, Request, Response, error, json_response
from services.tools.dashboard.source import Source, Unanswered, View

MAX_LIMIT = 1000
SMALL = 100  # a tree of at most this many pools is shown whole on the page (`/api/overview`)
DEPTH = 2  # a larger one: its pools down to this depth, and the children of those opened (`expand`)
MAX_EXPAND = 200  # pools opened at once
CACHED = 32  # overviews kept per refresh (one per set of pools opened)
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
ENDPOINTS = {
    "/api/": "this list",
    "/api/overview": "everything the page shows: trees with their pools and queues, preemptions, starvation, "
                     "timeline, log position; a tree of more than 100 pools down to depth 2, and below the pools "
                     "opened (?expand=/P,/Q), the others collapsed",
    "/api/trees": "the trees: capacity, policy, pools",
    "/api/trees/{tree}": "one tree: its pools (numbers per kind, starvation) and its leaves' queues",
    "/api/trees/{tree}/pools/{path}": "one pool, e.g. /api/trees/default/pools/ATG/Sim",
    "/api/gangs/{gang}?tree=T": "why a gang is where it is (admission's explain)",
    "/api/preemptions?tree=T&pool=P&limit=N": "the last preemptions, and the pools below fair share or starving",
    "/api/timeline?limit=N": "the newest decisions of the log, newest first",
}


class BadQuery(Exception):
    def __init__(self, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


def dashboard(source: Source) -> Handler:
    """The handler of every path of the page and the API (None for any other path)."""
    async def _index(request: Request, rest: list[str]) -> Response:
        _params(request, ())
        return json_response(200, {"endpoints": ENDPOINTS})

    async def _overview(request: Request, rest: list[str]) -> Response:
        expand = _expanded(_params(request, ("expand",)))
        view = await source.current()
        key = ("overview", expand)
        found: Response | None = view.rendered.get(key)  # every browser's poll: made once per refresh
        if found is None:
            found = json_response(200, {
                **_head(view), "trees": [_tree(view, t, expand) for t in _tree_names(view)],
                "preemptions": view.preemptions[-20:][::-1], "timeline": view.timeline})
            if len(view.rendered) < CACHED:
                view.rendered[key] = found
        return found

    async def _trees(request: Request, rest: list[str]) -> Response:
        _params(request, ())
        view = await source.current()
        if not rest or rest == [""]:
            trees = [{**info, "pools": len(_numbers(view, info["tree"]))} for info in view.trees]
            return json_response(200, {**_head(view), "trees": trees})
        name = rest[0]
        if name not in _tree_names(view):
            return error(404, f"no tree {name!r}", tree=name, trees=_tree_names(view))
        tree = _tree(view, name)
        if len(rest) == 1:
            return json_response(200, {**_head(view), **tree})
        if rest[1] != "pools":
            return error(404, "not found", path=request.path, endpoints=sorted(ENDPOINTS))
        path = "/" + "/".join(word for word in rest[2:] if word)
        pool = next((p for p in tree["pools"] if p["path"] == path), None)
        if pool is None:
            return error(404, f"no pool {path!r} in tree {name!r}", tree=name, pool=path)
        return json_response(200, {**_head(view), "tree": name, **pool,
                                   "queues": tree["queues"].get(path)})

    async def _gang(request: Request, rest: list[str]) -> Response:
        tree = _params(request, ("tree",)).get("tree") or None
        gang = "/".join(rest)
        if not gang:
            raise BadQuery("name a gang: /api/gangs/{gang}", "gang")
        try:
            reply = await source.explain(gang, tree)
        except Unanswered as exc:
            return error(503, str(exc))
        data: dict[str, Any] = reply.data
        if data.get("state") == "unknown":
            return error(404, data.get("summary") or f"no gang {gang!r}", gang=gang, tree=tree)
        return json_response(200, data)

    async def _preemptions(request: Request, rest: list[str]) -> Response:
        query = _params(request, ("tree", "pool", "limit"))
        limit = _limit(query)
        view = await source.current()
        tree, pool = query.get("tree"), query.get("pool")
        if tree is not None and tree not in _tree_names(view):
            return error(404, f"no tree {tree!r}", tree=tree, trees=_tree_names(view))
        if pool is not None and not any(pool in _numbers(view, t) or pool == "/" for t in _tree_names(view)
                                        if tree is None or t == tree):
            return error(404, f"no pool {pool!r}", pool=pool)
        records = [r for r in view.preemptions if _within(r, tree, pool)]
        starvation = [s for s in view.starvation if _within(s, tree, pool) and s["status"] != "ok"]
        return json_response(200, {**_head(view), "preemptions": records[-limit:][::-1], "starvation": starvation})

    async def _timeline(request: Request, rest: list[str]) -> Response:
        limit = _limit(_params(request, ("limit",)))
        view = await source.current()
        return json_response(200, {**_head(view), "timeline": view.timeline[:limit]})

    api: dict[str, Callable[[Request, list[str]], Awaitable[Response]]] = {
        "": _index, "overview": _overview, "trees": _trees, "gangs": _gang, "preemptions": _preemptions,
        "timeline": _timeline,
    }

    async def handle(request: Request) -> Response | None:
        path = request.path
        if path in ("/", "/index.html"):
            return _static("index.html")
        if path.startswith("/static/"):
            return _static(path[len("/static/"):])
        if path != "/api" and not path.startswith("/api/"):
            return None
        words = path[len("/api/"):].split("/") if path != "/api" else [""]
        found = api.get(words[0])
        if found is None:
            return error(404, "not found", path=path, endpoints=sorted(ENDPOINTS))
        try:
            return await found(request, words[1:])
        except BadQuery as exc:
            return error(400, str(exc), **({"field": exc.name} if exc.name else {}))

    return handle


def _params(request: Request, known: tuple[str, ...]) -> Mapping[str, str]:
    unknown = sorted(set(request.query) - set(known))
    if unknown:
        allowed = ", ".join(known) if known else "none"
        raise BadQuery(f"unknown query parameter {unknown[0]!r} (allowed: {allowed})", unknown[0])
    return request.query


def _limit(query: Mapping[str, str]) -> int:
    text = query.get("limit")
    if text is None:
        return 100
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise BadQuery(f"limit: must be a whole number from 1 to {MAX_LIMIT}, not {text!r}", "limit")
    return int(text)


def _expanded(query: Mapping[str, str]) -> frozenset[str]:
    """The pools opened on the page: `expand=/a,/a/b` (paths, comma-separated)."""
    text = query.get("expand")
    if not text:
        return frozenset()
    paths = frozenset(text.split(","))
    if len(paths) > MAX_EXPAND or not all(p.startswith("/") and len(p) > 1 for p in paths):
        raise BadQuery(f"expand: at most {MAX_EXPAND} pool paths, comma-separated, each starting with '/'", "expand")
    return paths


def _within(record: Mapping[str, Any], tree: str | None, pool: str | None) -> bool:
    path = record["pool"]
    return (tree is None or record["tree"] == tree) and (
        pool is None or pool == "/" or path == pool or path.startswith(pool.rstrip("/") + "/"))


def _head(view: View) -> dict[str, Any]:
    """What every answer starts with: the log position shown and when it was read."""
    refreshed = datetime.fromtimestamp(view.refreshed, tz=UTC).isoformat() if view.refreshed else None
    return {"log_seq": view.log_seq, "as_of": view.pools.get("as_of"), "refreshed": refreshed,
            "errors": view.errors}


def _tree_names(view: View) -> list[str]:
    names = {t["tree"] for t in view.trees} | {t["tree"] for t in view.pools.get("trees", [])}
    return sorted(names)


def _numbers(view: View, tree: str) -> dict[str, dict[str, dict[str, float]]]:
    found = next((t for t in view.pools.get("trees", []) if t["tree"] == tree), None)
    return {} if found is None else found["pools"]


def _tree(view: View, name: str, expand: frozenset[str] | None = None) -> dict[str, Any]:
    """One tree as the API gives it: its pools in path order, each with its numbers per kind and
    its starvation status, and its leaves' queues, each waiting gang with why it waits. With
    `expand` (the page's overview), a tree of more than `SMALL` pools is cut (`_collapsed`)."""
    info = next((t for t in view.trees if t["tree"] == name), {"tree": name})
    found: dict[str, Any] = next((t for t in view.pools.get("trees", []) if t["tree"] == name),
                                 {"pools": {}, "queues": {}})
    status = {s["pool"]: s for s in view.starvation if s["tree"] == name}
    parents = {path.rsplit("/", 1)[0] or "/" for path in found["pools"]}
    pools = []
    for path, numbers in found["pools"].items():
        kinds = sorted({kind for values in numbers.values() for kind in values})
        starving = status.get(path, {})
        pools.append({
            "path": path, "parent": path.rsplit("/", 1)[0] or "/",
            "leaf": path not in parents,
            "kinds": {kind: {number: values.get(kind, 0.0) for number, values in numbers.items()} for kind in kinds},
            "starvation": {"status": starving.get("status", "ok"), "since": starving.get("since"),
                           "below_since": starving.get("below_since")},
        })
    queues = {leaf: {queue: {"length": q["length"], "gangs": [
        {**g, "why": view.explained.get(f"{name}/{g['gang']}")} for g in q["gangs"]]} for queue, q in shown.items()}
        for leaf, shown in found["queues"].items()}
    if expand is not None and len(pools) > SMALL:
        return {**info, **_collapsed(pools, queues, expand)}
    return {**info, "pools": pools, "queues": queues, "total": len(pools)}


def _collapsed(pools: list[dict[str, Any]], queues: dict[str, Any], expand: frozenset[str]) -> dict[str, Any]:
    """A large tree as the page draws it: the pools down to `DEPTH`, and the children of the pools
    shown that are in `expand`; a pool shown whose children are not is `collapsed`, with the
    number of pools `below` it. The queues: those of the leaves shown and of any leaf whose gangs
    are listed (at most `ROWS` of them in all: services/tools/dashboard/source.py); `hidden_queues`:
    how many other leaves have gangs waiting."""
    below: dict[str, int] = {}
    for pool in pools:
        parent = pool["parent"]
        while parent != "/":
            below[parent] = below.get(parent, 0) + 1
            parent = parent.rsplit("/", 1)[0] or "/"
    shown: list[dict[str, Any]] = []
    visible = {"/"}
    for pool in pools:  # (path order: a parent before its children)
        path, parent = pool["path"], pool["parent"]
        if parent in visible and (path.count("/") <= DEPTH or parent in expand):
            visible.add(path)
            shown.append(pool)
    for pool in shown:
        path = pool["path"]
        if not pool["leaf"] and path not in expand and path.count("/") >= DEPTH:
            pool.update(collapsed=True, below=below.get(path, 0))
    kept = {leaf: q for leaf, q in queues.items() if leaf in visible or any(x["gangs"] for x in q.values())}
    return {"pools": shown, "queues": kept, "total": len(pools), "hidden_queues": len(queues) - len(kept)}


def _static(name: str) -> Response | None:
    suffix = name[name.rfind("."):] if "." in name else ""
    if "/" in name or name.startswith(".") or suffix not in STATIC_TYPES:
        return None
    found = resources.files("services.tools.dashboard").joinpath("static", name)
    if not found.is_file():
        return None
    return Response(200, found.read_bytes(), STATIC_TYPES[suffix])
