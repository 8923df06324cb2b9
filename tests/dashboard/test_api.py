"""The dashboard's JSON API on a running `poolwise up` (tests/dashboard/conftest.py): the pools
of /ATG with their numbers (g1's 4 x cpu=5,memory=10 admitted into /ATG/Sim, g2's 4 x cpu=5
waiting on its cpu limit of 30), the queue with g2 and why it waits, the timeline, a gang's
explain, and bad input: an unknown tree, pool, gang or endpoint is a 404, a malformed or unknown
query a 400, a POST a 405, each with a JSON error and no traceback; nothing the API is asked
changes the log."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest

from tests.dashboard.conftest import Board

pytestmark = pytest.mark.nats


def pool(tree: dict[str, Any], path: str) -> dict[str, Any]:
    found = [p for p in tree["pools"] if p["path"] == path]
    assert len(found) == 1, [p["path"] for p in tree["pools"]]
    return found[0]


def test_the_pools_and_queues_of_a_running_system(board: Board) -> None:
    overview = board.json("/api/overview")
    assert overview["errors"] == {}
    trees: list[dict[str, Any]] = overview["trees"]
    [tree] = [t for t in trees if t["tree"] == "default"]  # (test_large_tree adds a tree `big`)
    assert tree["capacity"]["cpu"] == 1000.0 and tree["policy"] == "per_resource"
    sim = pool(tree, "/ATG/Sim")
    assert sim["leaf"] is True and sim["parent"] == "/ATG"
    cpu = sim["kinds"]["cpu"]
    assert (cpu["reservation"], cpu["limit"], cpu["entitlement"], cpu["allocation"], cpu["demand"]) == \
        (20.0, 30.0, 30.0, 20.0, 20.0)
    assert (cpu["slack_entitlement"], cpu["slack_allocation"]) == (0.0, 0.0)
    assert sim["kinds"]["memory"]["allocation"] == 40.0 and sim["kinds"]["memory"]["demand"] == 0.0
    assert sorted(sim["kinds"]) == ["cpu", "memory"]  # the tree's kinds
    atg = pool(tree, "/ATG")
    assert atg["leaf"] is False
    assert (atg["kinds"]["cpu"]["reservation"], atg["kinds"]["cpu"]["limit"], atg["kinds"]["cpu"]["allocation"]) == \
        (60.0, 100.0, 20.0)  # a parent's allocation: its leaves'
    assert atg["starvation"]["status"] == "ok"

    queues = tree["queues"]["/ATG/Sim"]
    assert sorted(queues) == ["controller", "non_preemptible", "pending", "revocable"]
    assert queues["pending"]["length"] == 1
    [g2] = queues["pending"]["gangs"]
    assert (g2["gang"], g2["position"], g2["members"], g2["resources"]) == ("g2", 1, 4, {"cpu": 20.0})
    assert g2["why"]["findings"][0] == "entitlement"
    assert g2["why"]["summary"] == "entitlement: needs cpu 20, pool /ATG/Sim has 10 of 30 left"

    admitted = [e for e in overview["timeline"] if e["type"] == "GangAdmitted" and e["gang"] == "g1"]
    assert len(admitted) == 1 and admitted[0]["pool"] == "/ATG/Sim"
    assert admitted[0]["text"] == "gang g1 admitted to /ATG/Sim from queue pending (4 tasks)"
    assert isinstance(overview["log_seq"], int) and overview["log_seq"] >= admitted[0]["seq"]
    assert isinstance(overview["as_of"], int) and 0 < overview["as_of"] <= overview["log_seq"]


def test_one_tree_one_pool_and_the_list(board: Board) -> None:
    listed = board.json("/api/trees")["trees"]
    assert [(t["tree"], t["pools"], t["hosts"]) for t in listed if t["tree"] == "default"] == [("default", 4, 1)]
    whole = board.json("/api/trees/default")
    assert [p["path"] for p in whole["pools"]] == ["/ATG", "/ATG/Sim", "/W", "/W/L"]
    one = board.json("/api/trees/default/pools/ATG/Sim")
    assert one["path"] == "/ATG/Sim" and one["kinds"]["cpu"]["demand"] == 20.0
    assert one["queues"]["pending"]["gangs"][0]["gang"] == "g2"
    assert board.json("/api/trees/default/pools/ATG")["queues"] is None  # a parent has no queues
    index = board.json("/api/")
    assert "/api/overview" in index["endpoints"]


def test_a_gangs_explain(board: Board) -> None:
    g2 = board.json("/api/gangs/g2")
    assert (g2["gang"], g2["state"], g2["pool"], g2["queue"], g2["position"]) == ("g2", "pending", "/ATG/Sim",
                                                                                  "pending", 1)
    assert g2["findings"][0]["check"] == "entitlement"
    g1 = board.json("/api/gangs/g1?tree=default")
    assert g1["state"] == "admitted"


def test_the_preemptions_and_the_timeline_filtered(board: Board) -> None:
    found = board.json("/api/preemptions?tree=default&pool=/ATG&limit=5")
    assert found["preemptions"] == [] and found["starvation"] == []
    timeline = board.json("/api/timeline?limit=2")["timeline"]
    assert len(timeline) == 2
    seqs = [e["seq"] for e in board.json("/api/timeline")["timeline"]]
    assert seqs == sorted(seqs, reverse=True)  # newest first


BAD = [
    ("/api/trees/nope", 404, "no tree 'nope'"),
    ("/api/trees/default/pools/ATG/Nope", 404, "no pool '/ATG/Nope' in tree 'default'"),
    ("/api/trees/default/nothing", 404, "not found"),
    ("/api/gangs/nobody", 404, "no gang nobody in tree default"),
    ("/api/nothing", 404, "not found"),
    ("/api/preemptions?tree=nope", 404, "no tree 'nope'"),
    ("/api/preemptions?pool=/Nope", 404, "no pool '/Nope'"),
    ("/api/timeline?limit=0", 400, "limit: must be a whole number from 1 to 1000, not '0'"),
    ("/api/timeline?limit=ten", 400, "limit: must be a whole number from 1 to 1000, not 'ten'"),
    ("/api/timeline?limit=1&limit=2", 400, "malformed query: 'limit' given more than once"),
    ("/api/overview?pool=/ATG", 400, "unknown query parameter 'pool' (allowed: expand)"),
    ("/api/overview?expand=ATG", 400, "expand: at most 200 pool paths"),
    ("/api/trees?x=%ff", 400, "malformed query"),
    ("/api/trees?&&", 400, "malformed query"),
    ("/api/trees/%ff", 400, "malformed path: not UTF-8 once percent-decoded"),
    ("/static/../services/tools/cli/main.py", 404, "not found"),
]


@pytest.mark.parametrize(("path", "status", "message"), BAD)
def test_bad_input_is_a_json_error(board: Board, path: str, status: int, message: str) -> None:
    body = board.json(path, status)
    assert str(body["error"]).startswith(message), body


def test_read_only_and_no_traceback(board: Board) -> None:
    before = board.json("/api/trees")["log_seq"]
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, kind, body = board.fetch("/api/trees", method=method)
        assert (status, kind) == (405, "application/json") and "read-only" in json.loads(body)["error"]
    status, _, body = board.fetch("/api/overview", method="HEAD")
    assert status == 200 and body == b""
    with socket.create_connection(("127.0.0.1", board.port), timeout=5) as raw:  # not HTTP at all
        raw.sendall(b"\x16\x03\x01 not http\r\n\r\n")
        assert raw.recv(4096).startswith(b"HTTP/1.1 400 ")
    time.sleep(0.5)  # two refreshes
    assert board.json("/api/trees")["log_seq"] == before  # the log moved on by nothing the API was asked
    assert "Traceback" not in board.up.stderr


def test_the_page_and_its_files(board: Board) -> None:
    status, kind, page = board.fetch("/")
    assert (status, kind) == (200, "text/html; charset=utf-8") and b"/static/dashboard.js" in page
    for name, kind_of in (("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")):
        status, kind, body = board.fetch(f"/static/{name}")
        assert status == 200 and kind.startswith(kind_of) and len(body) > 1000
    status, kind, _ = board.fetch("/metrics")  # up's own routes are still there
    assert status == 200 and kind.startswith("text/plain")
