"""Admission's `pools` query (what the dashboard asks), on a folded state without NATS: every
pool's numbers, each leaf's four queues in queue order with their lengths, at most `heads` gangs
per queue and `rows` in all, leaves with nothing waiting left out; a bad query is an error reply
naming the field."""

from __future__ import annotations

import json
from typing import Any

from services.admission.queries import ExplainingFolder, answer
from tests.admission.builders import TREE, gang, pool, world


def folder_of(*events: object) -> ExplainingFolder:
    """An `ExplainingFolder` whose state is the one `world` and the events make (ticked once)."""
    log = world(pool("/a", reservation={"cpu": 10}, limit={"cpu": 10}),
                pool("/b", reservation={"cpu": 10}, limit={"cpu": 10}))
    log.feed(*events)  # type: ignore[arg-type]
    log.tick(1.0)
    found = ExplainingFolder()
    found.inner.state = log.state
    return found


def ask(found: ExplainingFolder, **query: object) -> Any:
    reply = answer(found, "pools", json.dumps(query).encode())
    assert reply.ok, reply.error
    return reply.data


def test_numbers_and_queues_in_order() -> None:
    # /a: a1 (6 cpu) fits its limit of 10; a2 (6, more than the 4 left) heads the queue and the
    # others wait behind it, in fifo order
    found = folder_of(gang("a1", "/a", tasks=2, cpu=3.0), gang("a2", "/a", tasks=2, cpu=3.0),
                      gang("a3", "/a", cpu=4.0), gang("a4", "/a", cpu=4.5),
                      gang("a5", "/a", cpu=4.5), gang("b1", "/b", cpu=2.0))
    data = ask(found, heads=2)
    [tree] = data["trees"]
    assert tree["tree"] == TREE and data["as_of"] == found.state.last_seq
    a = tree["pools"]["/a"]
    assert (a["reservation"], a["limit"], a["allocation"]) == ({"cpu": 10.0}, {"cpu": 10.0}, {"cpu": 6.0})
    assert a["demand"] == {"cpu": 19.0}  # a2 (6) + a3 (4) + a4 (4.5) + a5 (4.5)
    assert tree["pools"]["/b"]["allocation"] == {"cpu": 2.0}
    queues = tree["queues"]
    assert list(queues) == ["/a"]  # /b has nothing waiting
    assert {name: q["length"] for name, q in queues["/a"].items()} == \
        {"non_preemptible": 0, "controller": 0, "revocable": 0, "pending": 4}
    assert [g["gang"] for g in queues["/a"]["pending"]["gangs"]] == ["a2", "a3"]  # the first 2 of 4
    assert [g["position"] for g in queues["/a"]["pending"]["gangs"]] == [1, 2]


def test_rows_bound_the_gangs_in_all() -> None:
    found = folder_of(gang("a1", "/a", cpu=10.0), *(gang(f"a{i}", "/a", cpu=1.0) for i in range(2, 8)))
    data = ask(found, heads=10, rows=4)
    pending = data["trees"][0]["queues"]["/a"]["pending"]
    assert pending["length"] == 6 and [g["gang"] for g in pending["gangs"]] == ["a2", "a3", "a4", "a5"]
    assert ask(found, tree="nope") == {"trees": [], "as_of": found.state.last_seq}


def test_a_bad_query_names_the_field() -> None:
    found = folder_of()
    reply = answer(found, "pools", b'{"heads": -1}')
    assert not reply.ok and reply.error is not None
    assert (reply.error.rule, reply.error.field) == ("invalid_command", "heads")
    reply = answer(found, "pools", b'{"rows": "many"}')
    assert reply.error is not None and reply.error.field == "rows"


def test_a_tree_is_read_page_by_page() -> None:
    found = folder_of(gang("a1", "/a", cpu=10.0), gang("a2", "/a", cpu=1.0), gang("b1", "/b", cpu=10.0),
                      gang("b2", "/b", cpu=1.0))
    whole = ask(found)["trees"][0]
    first = ask(found, tree=TREE, limit=1)["trees"][0]
    assert (list(first["pools"]), list(first["queues"]), first["next"], first["total"]) == (["/a"], ["/a"], "/a", 2)
    second = ask(found, tree=TREE, limit=1, after=first["next"])["trees"][0]
    assert (list(second["pools"]), list(second["queues"]), second["next"]) == (["/b"], ["/b"], None)
    assert {**first["pools"], **second["pools"]} == whole["pools"]
    assert {**first["queues"], **second["queues"]} == whole["queues"]
    # a page after a pool deleted meanwhile starts at the next path; past the end, an empty page
    assert list(ask(found, tree=TREE, after="/a0")["trees"][0]["pools"]) == ["/b"]
    assert ask(found, tree=TREE, after="/z")["trees"][0] == {"tree": TREE, "pools": {}, "queues": {}, "next": None,
                                                            "total": 2}
    reply = answer(found, "pools", b'{"limit": 0}')
    assert reply.error is not None and reply.error.field == "limit"
