"""What the dashboard shows, gathered from what the services already answer and from the log's
tail, at most once per `every` seconds, and only while someone looks (`Source.view`).

One refresh asks, over one NATS connection of its own:

- the tree service's `tree_list` (trees, their capacity and policy);
- admission's `pools` tree by tree (the names from `tree_list`), each in pages of at most `PAGE`
  pools (every pool's numbers per kind, each leaf's queues with their first gangs;
  `services.admission.queries`): a large tree does not have to fit one NATS message (a page
  still too large is asked again at half the size), and at most `MAX_POOLS` pools of a tree are
  read per refresh; and admission's `explain` of the first `EXPLAINED` waiting gangs shown
  (at most `EXPLAIN_PER_REFRESH` of them per refresh; an answer is kept while admission's state
  has not moved);
- preemption's `list` (the last `PREEMPTIONS` preemptions, every pool's starvation status);
- the log: its last position, and its newest decisions since what it read before, in one read
  (at most `WINDOW` positions, `TIMELINE` entries kept: `timeline.Timeline`).

Every browser is served the same cached `View`; a request that finds it older than `every`
wakes the refresher and waits at most `WAIT` seconds for a fresh one (else it gets the one it
has). A service that does not answer leaves its part empty with the reason in `errors`; nothing a
browser does reaches a service more often than the refresh (and `explain` of one gang, `explain`,
at most `EXPLAIN_AT_ONCE` at a time, each answer kept for `every`)."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from math import inf
from typing import Any

import anyio

from events import subjects
from events.commands import Reply
from services.tools.dashboard.timeline import Timeline

ASK_WITHIN = 3.0  # seconds for a service to answer one request
WAIT = 4.0  # seconds a browser's request waits for a refresh it asked for
EXPLAINED = 40  # waiting gangs explained (the first of the queues shown)
EXPLAIN_PER_REFRESH = 4  # of them, asked again at most this many per refresh (see `_explain_heads`)
EXPLAIN_AT_ONCE = 4  # explain requests of single gangs in flight (`explain`, from browsers)
EXPLAIN_CACHE = 256  # explain answers of single gangs kept (each for `every` seconds)
PREEMPTIONS = 100  # the last preemptions asked for
HEADS = 10  # gangs shown at the head of each queue
ROWS = 400  # gangs shown in all
PAGE = 500  # pools per `pools` reply (~850 bytes a pool of 4 kinds: NATS's 1 MiB holds ~1,200)
MAX_POOLS = 100_000  # pools of one tree read per refresh, at most (the rest is said in `errors`)


@dataclass
class View:
    """One refresh's answers, as the API serves them."""

    refreshed: float = 0.0  # time.time() of the refresh (0: none yet), as shown
    taken: float = -inf  # time.monotonic() of the refresh: what its age is measured by (a clock set back stops nothing)
    log_seq: int | None = None  # the log's last position when refreshed
    trees: list[dict[str, Any]] = field(default_factory=list)  # tree_list
    pools: dict[str, Any] = field(default_factory=dict)  # admission's `pools` answer
    explained: dict[str, dict[str, Any]] = field(default_factory=dict)  # "tree/gang" -> explain summary
    preemptions: list[dict[str, Any]] = field(default_factory=list)
    starvation: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # part -> why it is missing
    rendered: dict[Any, Any] = field(default_factory=dict)  # answers made of this view (api.py), made once


class Unanswered(Exception):
    """A service did not answer, or answered with an error (the message says which; `rule`: the
    error's rule, when it answered one)."""

    def __init__(self, message: str, rule: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule


class Source:
    """The cache the dashboard serves from, refreshed by `run` (a task of the HTTP server's group)."""

    def __init__(self, url: Callable[[], str | None], every: float = 1.0) -> None:
        self.url = url
        self.every = every
        self.view = View()
        self._wanted = anyio.Event()
        self._fresh = anyio.Event()
        self._log: Any = None
        self._timeline = Timeline()
        self._explains: OrderedDict[tuple[str | None, str], tuple[float, Reply]] = OrderedDict()
        self._asking = anyio.Semaphore(EXPLAIN_AT_ONCE)
        self._why: dict[str, tuple[int | None, dict[str, Any]]] = {}  # "tree/gang" -> (admission's as_of, why)
        self._read: dict[str, tuple[float, int, int | None, dict[str, Any]]] = {}  # tree -> (when, pages, as_of, it)

    async def current(self) -> View:
        """The cached view, refreshed first (waiting at most `WAIT`) when older than `every`."""
        if time.monotonic() - self.view.taken >= self.every:
            fresh = self._fresh
            self._wanted.set()
            with anyio.move_on_after(WAIT):
                await fresh.wait()
        return self.view

    async def run(self) -> None:
        """Refresh when asked, at most once per `every` seconds, until cancelled."""
        try:
            while True:
                await self._wanted.wait()
                self._wanted = anyio.Event()
                with anyio.move_on_after(WAIT + ASK_WITHIN):
                    self.view = await self._refresh()
                fresh, self._fresh = self._fresh, anyio.Event()
                fresh.set()
                await anyio.sleep(self.every)
        finally:
            if self._log is not None:
                with anyio.CancelScope(shield=True), suppress(Exception):
                    await self._log.close()

    async def explain(self, gang: str, tree: str | None) -> Reply:
        """Admission's `explain` of one gang (an error reply raises `Unanswered`), cached for
        `every` seconds."""
        key = (tree, gang)
        cached = self._explains.get(key)
        if cached is not None and time.monotonic() - cached[0] < self.every:
            return cached[1]
        async with self._asking:
            reply = await self._ask("admission", "explain", {"gang": gang, "tree": tree})
        self._explains[key] = (time.monotonic(), reply)
        self._explains.move_to_end(key)
        while len(self._explains) > EXPLAIN_CACHE:
            self._explains.popitem(last=False)
        return reply

    async def _refresh(self) -> View:
        view = View(refreshed=time.time(), taken=time.monotonic(), timeline=self.view.timeline)
        try:
            await self._connected()
        except (OSError, ConnectionError, TimeoutError, Unanswered) as exc:
            view.errors["nats"] = str(exc) or type(exc).__name__
            return view

        async def part(name: str, fill: Callable[[View], Any]) -> None:
            try:
                await fill(view)
            except (Unanswered, OSError, TimeoutError) as exc:
                view.errors[name] = str(exc) or type(exc).__name__
            except Exception as exc:  # (nats-py's own errors): the part is missing, the rest served
                view.errors[name] = f"{type(exc).__name__}: {exc}"

        async with anyio.create_task_group() as tg:
            tg.start_soon(part, "preemptions", self._preemptions)
            await part("trees", self._trees)  # (the pools are asked tree by tree: their names first)
            await part("pools", self._pools)
            await part("log", self._tail)  # (after the pools: the timeline is not older than the numbers)
        await part("explain", self._explain_heads)
        return view

    async def _connected(self) -> None:
        if self._log is not None and self._log.nc.is_connected:
            return
        url = self.url()
        if not url:
            raise Unanswered("NATS is not up yet")
        from services.common.jetstream import JetStreamLog

        if self._log is not None:
            with suppress(Exception):
                await self._log.close()
            self._log = None
        with anyio.fail_after(ASK_WITHIN):
            self._log = await JetStreamLog.connect(url)

    async def _ask(self, service: str, op: str, query: dict[str, Any]) -> Reply:
        if self._log is None:
            raise Unanswered("not connected to NATS")
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout

        try:
            msg = await self._log.nc.request(subjects.command(service, op), json.dumps(query).encode(),
                                             timeout=ASK_WITHIN)
        except NoRespondersError:
            raise Unanswered(f"the {service} service is not running (no responder)") from None
        except NatsTimeout:
            raise Unanswered(f"the {service} service did not answer within {ASK_WITHIN:g} s") from None
        reply = Reply.model_validate_json(msg.data)
        if not reply.ok:
            error = reply.error
            raise Unanswered(f"{service} {op}: {error.rule}: {error.message}" if error else f"{service} {op} failed",
                             error.rule if error else None)
        return reply

    async def _trees(self, view: View) -> None:
        reply = await self._ask("tree", "tree_list", {})
        view.trees = [{"tree": t["name"], "capacity": t["capacity"], "revocable": t["revocable"],
                       "policy": t["options"].get("policy"), "version": t["version"], "hosts": len(t["hosts"])}
                      for t in reply.data["trees"]]

    async def _pools(self, view: View) -> None:
        """Admission's numbers and queues of every tree, one tree and one page at a time (the
        trees `tree_list` named; without them, admission's own: the first page of each in one
        reply, then the rest tree by tree). A tree read in n pages is read again at most every n
        refreshes (its last reading shown meanwhile): admission's work for the dashboard stays
        about a page per refresh and tree, however large the tree."""
        rows = ROWS
        trees: list[dict[str, Any]] = []
        as_of = None
        first: dict[str, dict[str, Any]] = {}
        names = [t["tree"] for t in view.trees]
        if not names and "trees" in view.errors:  # (the tree service is away: admission still answers)
            data = await self._page(None, None, rows, PAGE)
            first = {found["tree"]: found for found in data["trees"]}
            names, as_of = list(first), data.get("as_of")
        self._read = {name: kept for name, kept in self._read.items() if name in names}
        for name in names:
            found = first.get(name)
            kept = self._read.get(name)
            if kept is not None and found is None and time.monotonic() - kept[0] < self.every * (kept[1] - 1):
                trees.append(kept[3])
                as_of = kept[2] if as_of is None else as_of
                rows -= sum(len(q["gangs"]) for leaf in kept[3]["queues"].values() for q in leaf.values())
                continue
            tree: dict[str, Any] = {"tree": name, "pools": {}, "queues": {}}
            pages = 1
            if found is not None:
                tree["pools"].update(found["pools"])
                tree["queues"].update(found["queues"])
            after, size = (found["next"], PAGE) if found is not None else (None, PAGE)
            while found is None or after is not None:
                if len(tree["pools"]) >= MAX_POOLS:
                    view.errors[f"pools of {name}"] = f"only the first {len(tree['pools'])} pools are shown"
                    break
                try:
                    data = await self._page(name, after, rows, size)
                except Unanswered as exc:
                    if exc.rule != "answer_too_large" or size == 1:
                        raise
                    size = max(1, size // 2)  # (pools of many kinds, long paths: smaller pages)
                    continue
                as_of = data.get("as_of")
                if not data["trees"]:  # (deleted meanwhile)
                    break
                [found] = data["trees"]
                tree["pools"].update(found["pools"])
                tree["queues"].update(found["queues"])
                after = found["next"]
                pages += 1
            rows -= sum(len(q["gangs"]) for leaf in tree["queues"].values() for q in leaf.values())
            trees.append(tree)
            self._read[name] = (time.monotonic(), pages - 1, as_of, tree)
        view.pools = {"trees": trees, "as_of": as_of}

    async def _page(self, tree: str | None, after: str | None, rows: int, size: int) -> dict[str, Any]:
        query = {"heads": HEADS, "rows": max(0, rows), "limit": size, "after": after, "tree": tree}
        reply = await self._ask("admission", "pools", query)
        data: dict[str, Any] = reply.data
        return data

    async def _preemptions(self, view: View) -> None:
        reply = await self._ask("preemption", "list", {"limit": PREEMPTIONS})
        view.preemptions = reply.data["preemptions"]
        view.starvation = reply.data["starvation"]

    async def _tail(self, view: View) -> None:
        last = await self._log.last_seq()
        view.log_seq = last
        view.timeline = await self._timeline.follow(self._log, last)

    async def _explain_heads(self, view: View) -> None:
        """Why the first `EXPLAINED` gangs waiting in the queues shown wait (admission's `explain`).
        An answer is kept while admission's state has not moved (`as_of`); of those to ask again,
        or never asked, at most `EXPLAIN_PER_REFRESH` are asked per refresh (never asked first,
        then the oldest), the others shown with their last answer meanwhile: an explain costs
        admission 3-17 ms of CPU on a tree of 100-1,000 leaves (docs/dashboard.md)."""
        as_of = view.pools.get("as_of")
        wanted = [(tree["tree"], gang["gang"]) for tree in view.pools.get("trees", [])
                  for queues in tree["queues"].values() for queue in queues.values() for gang in queue["gangs"]]
        wanted = wanted[:EXPLAINED]
        keys = {f"{tree}/{gang}" for tree, gang in wanted}
        self._why = {key: found for key, found in self._why.items() if key in keys}  # (bounded by EXPLAINED)
        stale = [(tree, gang) for tree, gang in wanted if self._why.get(f"{tree}/{gang}", (None,))[0] != as_of]
        stale.sort(key=lambda pair: (f"{pair[0]}/{pair[1]}" in self._why, self._why.get(f"{pair[0]}/{pair[1]}",
                                                                                         (0,))[0] or 0))

        async def one(tree: str, gang: str) -> None:
            try:
                reply = await self._ask("admission", "explain", {"gang": gang, "tree": tree})
            except Unanswered as exc:
                self._why[f"{tree}/{gang}"] = (None, {"summary": str(exc), "findings": [], "as_of": None})
                return
            data = reply.data
            self._why[f"{tree}/{gang}"] = (as_of, {"summary": data.get("summary", ""), "as_of": data.get("as_of"),
                                                   "findings": [f.get("check") for f in data.get("findings", [])]})

        async with anyio.create_task_group() as tg:
            for tree, gang in stale[:EXPLAIN_PER_REFRESH]:
                tg.start_soon(one, tree, gang)
        view.explained = {key: found[1] for key, found in self._why.items()}
