"""The admission service's answers (`poolwise.cmd.admission.*`), without a server: the folder
that keeps the history, and `answer` for each query and each bad request."""

from __future__ import annotations

import json

from events import (
    ClockTicked,
    Envelope,
    Event,
    GangEnqueued,
    HostRegistered,
    TaskSpec,
    TreeConfigured,
    TreeOptions,
    at_seconds,
    derived_id,
)
from events.config import GangTimeoutOptions
from services.admission.queries import ExplainingFolder, answer
from tests.explain.world import START, gang, pool


def fed(*events: Event) -> ExplainingFolder:
    """A folder that folded `events` (and its own decisions, read back as the log would have them)."""
    folder = ExplainingFolder()
    pending = list(events)
    seq = 0
    while pending:
        event = pending.pop(0)
        seq += 1
        envelope = Envelope(id=derived_id("test", seq), time=at_seconds(START + seq), source="test", event=event)
        pending[:0] = [d.event for d in folder.step(envelope, seq)]
    return folder


def setup() -> list[Event]:
    """Tree `default` over cpu (no gang-timeout jitter), a host of cpu 10, leaf pool /ATG limited to cpu 10."""
    return [TreeConfigured(tree="default", options=TreeOptions(
                resources=["cpu"], gang_timeout=GangTimeoutOptions(default=30, limit=100, jitter=0))),
            HostRegistered(host="h", resources={"cpu": 10}), pool("/ATG", limit={"cpu": 10})]


def ask(folder: ExplainingFolder, op: str, body: dict[str, object]) -> dict[str, object]:
    reply = answer(folder, op, json.dumps(body).encode())
    return json.loads(reply.model_dump_json())  # type: ignore[no-any-return]


def test_explain_and_gangs_answer_from_the_state_with_its_history() -> None:
    folder = fed(*setup(), gang("g1", "/ATG", tasks=2, cpu=2), ClockTicked(), gang("g2", "/ATG", tasks=4, cpu=2),
                 ClockTicked(), gang("bad", "/nope"))
    reply = ask(folder, "explain", {"gang": "g2"})
    assert reply["ok"] is True and reply["seq"] == folder.state.last_seq
    assert reply["data"]["summary"] == "entitlement: needs cpu 8, pool /ATG has 6 of 10 left"  # type: ignore[index]
    assert ask(folder, "explain", {"gang": "g1"})["data"]["summary"].endswith(  # type: ignore[index]
        "from queue pending of pool /ATG (attempt 1)")
    assert ask(folder, "explain", {"gang": "bad"})["data"]["summary"] == (  # type: ignore[index]
        "refused at enqueue: gang bad: pool /nope does not exist [pool_missing]")
    rows = ask(folder, "gangs", {"states": ["pending", "admitted"]})["data"]
    assert [(r["gang"], r["state"]) for r in rows["gangs"]] == [("g1", "admitted"), ("g2", "pending")]  # type: ignore[index]
    limited = ask(folder, "gangs", {"limit": 1})["data"]
    assert (limited["total"], [r["gang"] for r in limited["gangs"]]) == (3, ["bad"])  # type: ignore[index]


def test_a_gang_id_in_two_trees_needs_the_tree_named() -> None:
    other = [TreeConfigured(tree="b", options=TreeOptions(resources=["cpu"])),
             pool("/ATG").model_copy(update={"tree": "b"}),
             GangEnqueued(tree="b", gang="g1", pool="/ATG", job="j", size=1,
                          tasks=[TaskSpec(id="b/0", resources={"cpu": 1})])]
    folder = fed(*setup(), gang("g1", "/ATG"), *other)
    reply = ask(folder, "explain", {"gang": "g1"})
    assert reply["ok"] is False
    assert reply["error"]["rule"] == "ambiguous"  # type: ignore[index]
    assert ask(folder, "explain", {"gang": "g1", "tree": "b"})["data"]["tree"] == "b"  # type: ignore[index]


def test_bad_requests_are_refused_with_the_rule() -> None:
    folder = fed(*setup())
    assert ask(folder, "nope", {})["error"]["rule"] == "unknown_op"  # type: ignore[index]
    assert ask(folder, "explain", {})["error"]["message"] == "gang: Field required"  # type: ignore[index]
    refused = ask(folder, "gangs", {"states": ["bogus"]})["error"]
    assert refused["rule"] == "invalid_command" and "unknown gang state 'bogus'" in refused["message"]  # type: ignore[index]
    assert ask(folder, "gangs", {"limit": 0})["error"]["field"] == "limit"  # type: ignore[index]
    assert ask(folder, "explain", {"gang": "nope"})["data"]["state"] == "unknown"  # type: ignore[index]
