"""The dashboard's source reads admission's `pools` tree by tree and page by page, without NATS:
its requests are answered by admission's own query code on a folded state, and a reply over a
small `max_payload` is refused as the service refuses it (`answer_too_large`): the source asks
again with smaller pages and gets every pool and queue of the tree; with the tree service away,
admission's own trees are read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from events.commands import Reply
from services.admission.queries import answer
from services.common.requests import error_reply
from services.tools.dashboard import source as source_module
from services.tools.dashboard.source import Source, Unanswered, View
from tests.admission.builders import TREE, gang
from tests.dashboard.test_pools_query import ask, folder_of

pytestmark = pytest.mark.anyio


class Asked:
    """Admission's answers to the source's requests, refused over `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self.folder = folder_of(gang("a1", "/a", cpu=10.0), gang("a2", "/a", cpu=1.0), gang("b1", "/b", cpu=10.0),
                                gang("b2", "/b", cpu=1.0))
        self.limit = limit
        self.sizes: list[int] = []  # the page sizes asked

    async def __call__(self, service: str, op: str, query: dict[str, Any]) -> Reply:
        assert (service, op) == ("admission", "pools")
        self.sizes.append(query["limit"])
        reply = answer(self.folder, op, json.dumps(query).encode())
        if len(reply.model_dump_json()) > self.limit:
            reply = error_reply("answer_too_large", "over the limit")
        if not reply.ok:
            assert reply.error is not None
            raise Unanswered(reply.error.message, reply.error.rule)
        return reply


async def test_pages_are_halved_until_they_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = Asked(limit=1000)  # one pool with its queue fits, two do not
    source = Source(lambda: None)
    monkeypatch.setattr(source, "_ask", asked)
    monkeypatch.setattr(source_module, "PAGE", 4)
    view = View(trees=[{"tree": TREE}])
    await source._pools(view)
    whole = ask(asked.folder)["trees"][0]
    [tree] = view.pools["trees"]
    assert (tree["pools"], tree["queues"]) == (whole["pools"], whole["queues"])
    assert asked.sizes[0] == 4 and asked.sizes[-1] < 4  # asked again, smaller
    assert view.pools["as_of"] == asked.folder.state.last_seq


async def test_without_the_tree_list_admissions_trees_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = Asked(limit=1_000_000)
    source = Source(lambda: None)
    monkeypatch.setattr(source, "_ask", asked)
    monkeypatch.setattr(source_module, "PAGE", 1)
    view = View(errors={"trees": "the tree service is not running (no responder)"})
    await source._pools(view)
    [tree] = view.pools["trees"]
    assert tree["tree"] == TREE and list(tree["pools"]) == ["/a", "/b"]
    assert asked.sizes == [1, 1]  # every tree's first page at once, then the rest tree by tree


async def test_a_tree_of_several_pages_is_read_again_only_every_so_many_refreshes(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    monkeypatch.setattr(source_module, "PAGE", 1)
    for every, again in ((100.0, 0), (0.0, 2)):
        asked = Asked(limit=1_000_000)
        source = Source(lambda: None, every=every)
        monkeypatch.setattr(source, "_ask", asked)
        first, second = View(trees=[{"tree": TREE}]), View(trees=[{"tree": TREE}])
        await source._pools(first)
        assert len(asked.sizes) == 2  # two pools, a page each
        await source._pools(second)
        assert len(asked.sizes) == 2 + again  # (a tree of 2 pages: read again after one refresh interval)
        assert second.pools == first.pools
