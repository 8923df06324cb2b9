"""Expansion of a scenario into inputs: setup commands, gangs, members, task changes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from events import GangCancelled, TaskStateChanged, at_seconds, decode
from events.commands import HostAdd, HostRemove, PoolDelete, PoolUpsert, TreeConfigure
from services.tools.scenario import (
    AckPreemptions,
    EnqueueInput,
    Expander,
    StepPlan,
    TaskSelector,
    expand_scenario,
    parse_scenario,
)


def _plans(steps: str, head: str = "name: x\nresources: [cpu]\ncapacity: {cpu: 10}\n") -> list[StepPlan]:
    _setup, plans = expand_scenario(parse_scenario(head + "steps:\n" + steps))
    return plans


def _enqueues(plan: StepPlan) -> list[EnqueueInput]:
    out = [i.body for i in plan.inputs if isinstance(i.body, EnqueueInput)]
    assert len(out) == len(plan.inputs)
    return out


def _task_ids(e: EnqueueInput) -> list[str]:
    return [t["id"] for t in e.payload["tasks"]]


def test_count_makes_alike_gangs_each_its_own_job() -> None:
    [plan] = _plans(
        "  - at: 3\n    do:\n      - enqueue: {gang: w, count: 3, pool: /p, tasks: 2, resources: {cpu: 1}}\n"
    )
    gangs = _enqueues(plan)
    assert [g.gang for g in gangs] == ["w-0", "w-1", "w-2"]
    assert [g.payload["job"] for g in gangs] == ["w-0", "w-1", "w-2"]
    assert [_task_ids(g) for g in gangs] == [["w-0/0", "w-0/1"], ["w-1/0", "w-1/1"], ["w-2/0", "w-2/1"]]
    assert all(g.payload["size"] == 2 for g in gangs)
    assert plan.at == 3 and plan.time == at_seconds(3)
    assert [i.place for i in plan.inputs] == ["steps[0].do[0]"] * 3
    assert len({i.id for i in plan.inputs}) == 3


def test_count_with_a_job_shares_the_job() -> None:
    [plan] = _plans("  - at: 0\n    do:\n      - enqueue: {gang: w, count: 2, pool: /p, job: j2}\n")
    assert [g.payload["job"] for g in _enqueues(plan)] == ["j2", "j2"]


def test_defaults_job_size_one_task_and_only_the_options_set() -> None:
    [plan] = _plans("  - at: 0\n    do:\n      - enqueue: {gang: g, pool: /p}\n")
    [e] = _enqueues(plan)
    assert e.payload == {
        "type": "GangEnqueued",
        "version": 1,
        "tree": "default",
        "gang": "g",
        "pool": "/p",
        "job": "g",
        "size": 1,
        "tasks": [{"id": "g/0", "resources": {}}],
    }
    event = e.event()
    assert (
        event.user,
        event.priority,
        event.preemptible,
        event.revocable,
        event.controller,
        event.timeout,
    ) == ("anonymous", 0, True, False, False, None)


def test_every_option_goes_into_the_event() -> None:
    [plan] = _plans(
        "  - at: 0\n    do:\n      - enqueue: {gang: g, pool: /p, tasks: 2, resources: {cpu: 1}, priority: 5,"
        " preemptible: false, revocable: true, controller: true, job: j, size: 4, timeout: 30, user: alice}\n"
    )
    event = _enqueues(plan)[0].event()
    assert (
        event.job,
        event.size,
        event.priority,
        event.preemptible,
        event.revocable,
        event.controller,
        event.timeout,
        event.user,
    ) == ("j", 4, 5, False, True, True, 30.0, "alice")
    assert [(t.id, t.resources) for t in event.tasks] == [("g/0", {"cpu": 1.0}), ("g/1", {"cpu": 1.0})]


def test_members_go_on_numbering_across_steps_and_size_is_the_first_enqueues() -> None:
    plans = _plans(
        "  - at: 0\n    do:\n      - enqueue: {gang: g1, pool: /p, tasks: 2, size: 3}\n"
        "      - enqueue: {gang: g2, pool: /p, tasks: 2}\n"
        "  - at: 5\n    do:\n      - enqueue: {gang: g1, pool: /p, tasks: 1}\n"
        "      - enqueue: {gang: g2, pool: /p, tasks: [{resources: {cpu: 2}}, {}]}\n"
        "  - at: 9\n    do:\n      - enqueue: {gang: g1, pool: /p, tasks: 1, size: 7}\n"
    )
    g1a, g2a = _enqueues(plans[0])
    g1b, g2b = _enqueues(plans[1])
    [g1c] = _enqueues(plans[2])
    assert _task_ids(g1a) == ["g1/0", "g1/1"] and g1a.payload["size"] == 3
    assert _task_ids(g2a) == ["g2/0", "g2/1"] and g2a.payload["size"] == 2
    assert _task_ids(g1b) == ["g1/2"] and g1b.payload["size"] == 3
    assert _task_ids(g2b) == ["g2/2", "g2/3"] and g2b.payload["size"] == 2
    # an explicit size that disagrees is carried as written: the system refuses it
    assert _task_ids(g1c) == ["g1/3"] and g1c.payload["size"] == 7


def test_tasks_as_a_list_take_their_own_resources_or_the_enqueues() -> None:
    [plan] = _plans(
        "  - at: 0\n    do:\n      - enqueue: {gang: g, pool: /p, resources: {cpu: 1},"
        " tasks: [{resources: {cpu: 4, memory: 8}}, {}]}\n"
    )
    [e] = _enqueues(plan)
    assert e.payload["tasks"] == [
        {"id": "g/0", "resources": {"cpu": 4.0, "memory": 8.0}},
        {"id": "g/1", "resources": {"cpu": 1.0}},
    ]
    assert e.payload["size"] == 2


def test_invalid_amounts_are_carried_to_the_runner() -> None:
    [plan] = _plans(
        "  - at: 2\n    do:\n      - enqueue: {gang: bad, pool: /p, resources: {cpu: -1}}\n"
        "      - enqueue: {gang: odd, pool: /p, resources: {tpu: 1}}\n"
    )
    bad, odd = _enqueues(plan)
    with pytest.raises(ValidationError):
        bad.event()
    assert odd.event().tasks[0].resources == {"tpu": 1.0}  # the kind is the consumer's to refuse
    raw = bad.envelope_json(plan.inputs[0].id, plan.time)
    assert b'"cpu": -1.0' in raw
    envelope = decode(odd.envelope_json(plan.inputs[1].id, plan.time))
    assert envelope.time == at_seconds(2) and envelope.source == "scenario"
    assert envelope.event.type == "GangEnqueued"


def test_task_changes_cancel_and_acks() -> None:
    [plan] = _plans(
        "  - at: 0\n    do:\n      - enqueue: {gang: g1, pool: /p, tasks: 2}\n"
        "      - task: {id: g1/1, state: running}\n"
        "      - task: {id: other/x/0, state: placed}\n"
        "      - task: {gang: g1, state: succeeded}\n"
        "      - task: {pool: /p, state: running}\n"
        "      - ack_preemptions: {}\n"
        "      - ack_preemptions:\n"
        "      - cancel: g1\n"
    )
    bodies = [i.body for i in plan.inputs]
    assert bodies[1] == TaskStateChanged(tree="default", gang="g1", task="g1/1", state="running")
    assert bodies[2] == TaskStateChanged(tree="default", gang="other/x", task="other/x/0", state="placed")
    assert bodies[3] == TaskSelector(state="succeeded", gang="g1")
    assert bodies[4] == TaskSelector(state="running", pool="/p", tree="default")
    assert bodies[5] == AckPreemptions() and bodies[6] == AckPreemptions()
    assert bodies[7] == GangCancelled(tree="default", gang="g1")


def test_pool_and_host_actions_are_commands() -> None:
    [plan] = _plans(
        "  - at: 0\n    do:\n      - pool: {path: /org/c, reservation: {cpu: 20}, controller_limit: 150}\n"
        "      - delete_pool: /org\n      - delete_pool: {path: /x}\n"
        "      - host: {name: h2, resources: {cpu: 10}, revocable: {cpu: 2}, tags: [gpu]}\n"
        "      - remove_host: h2\n"
    )
    upsert, delete, delete2, add, remove = (i.body for i in plan.inputs)
    assert isinstance(upsert, PoolUpsert) and upsert.path == "/org/c" and upsert.tree == "default"
    assert upsert.config.reservation == {"cpu": 20.0} and upsert.config.controller_limit == 150
    assert upsert.config.limit is None  # an upsert changes only what it names
    assert delete == PoolDelete(tree="default", path="/org")
    assert delete2 == PoolDelete(tree="default", path="/x")
    assert add == HostAdd(host="h2", resources={"cpu": 10.0}, revocable={"cpu": 2.0}, tags=["gpu"])
    assert remove == HostRemove(host="h2")


def test_setup_is_trees_then_hosts_then_pools() -> None:
    s = parse_scenario(
        "name: x\nresources: [cpu]\n"
        "hosts: [{name: h1, resources: {cpu: 8}}, {name: h2, resources: {cpu: 4}}]\n"
        "trees: [{name: default, policy: dominant}]\n"
        "pools: [{path: /a, reservation: {cpu: 2}}, {path: /a/b}]\n"
    )
    setup, plans = expand_scenario(s)
    assert plans == []
    assert [type(i.body) for i in setup] == [TreeConfigure, HostAdd, HostAdd, PoolUpsert, PoolUpsert]
    assert [i.place for i in setup] == ["trees[0]", "hosts[0]", "hosts[1]", "pools[0]", "pools[1]"]
    tree = setup[0].body
    assert (
        isinstance(tree, TreeConfigure)
        and tree.options.policy == "dominant"
        and tree.options.resources == ["cpu"]
    )
    pools = [i.body for i in setup[3:]]
    assert [(p.path, p.config.reservation) for p in pools if isinstance(p, PoolUpsert)] == [
        ("/a", {"cpu": 2.0}),
        ("/a/b", None),
    ]


def test_setup_of_capacity_and_the_default_tree() -> None:
    setup, _ = expand_scenario(parse_scenario("name: x\ncapacity: {cpu: 100}\n"))
    assert [i.place for i in setup] == ["trees", "capacity"]
    assert setup[1].body == HostAdd(host="cluster", resources={"cpu": 100.0})


def test_ids_are_deterministic_and_differ_per_run() -> None:
    s = parse_scenario("name: x\nsteps: [{at: 0, do: [{cancel: a}, {cancel: b}]}]\n")
    first = [i.id for i in expand_scenario(s)[1][0].inputs]
    again = [i.id for i in expand_scenario(s)[1][0].inputs]
    other = [i.id for i in expand_scenario(s, run="r2")[1][0].inputs]
    assert first == again and len(set(first)) == 2
    assert not set(first) & set(other)


def test_several_trees_route_gangs_cancels_and_tasks() -> None:
    s = parse_scenario(
        "name: x\nresources: [cpu]\ntrees: [{name: default}, {name: gpu}]\nsteps:\n  - at: 0\n    do:\n"
        "      - enqueue: {gang: g, pool: /p, tree: gpu}\n"
        "      - cancel: g\n      - task: {id: g/0, state: running}\n"
        "      - task: {pool: /p, tree: gpu, state: running}\n"
        "      - pool: {path: /q, tree: gpu}\n      - delete_pool: {path: /q, tree: gpu}\n"
    )
    bodies = [i.body for i in Expander(s).expand(0, s.steps[0]).inputs]
    assert (
        isinstance(bodies[0], EnqueueInput) and bodies[0].tree == "gpu" and bodies[0].payload["tree"] == "gpu"
    )
    assert bodies[1] == GangCancelled(tree="gpu", gang="g")
    assert bodies[2] == TaskStateChanged(tree="gpu", gang="g", task="g/0", state="running")
    assert bodies[3] == TaskSelector(state="running", pool="/p", tree="gpu")
    assert isinstance(bodies[4], PoolUpsert) and bodies[4].tree == "gpu"
    assert bodies[5] == PoolDelete(tree="gpu", path="/q")


@dataclass(frozen=True)
class _Task:
    tree: str
    gang: str
    task: str
    pool: str
    state: str


TASKS = [
    _Task("default", "a", "a/0", "/p", "ready"),
    _Task("default", "a", "a/1", "/p", "succeeded"),
    _Task("default", "b", "b/0", "/q", "ready"),
    _Task("default", "c", "c/0", "/p", "pending"),
]


def _forward(current: str, new: str) -> bool:
    order = ["pending", "ready", "placing", "placed", "launching", "running", "succeeded"]
    if current == "pending" or current not in order or new not in order:
        return False  # a task leaves pending only by admission
    return order.index(new) > order.index(current)


def test_a_gang_selector_reports_every_task_of_the_gang() -> None:
    events = TaskSelector(state="running", gang="a").resolve(TASKS, _forward)
    assert [(e.gang, e.task, e.state) for e in events] == [("a", "a/0", "running"), ("a", "a/1", "running")]


def test_a_pool_selector_reports_only_the_tasks_that_can_make_it() -> None:
    events = TaskSelector(state="running", pool="/p", tree="default").resolve(TASKS, _forward)
    assert [e.task for e in events] == ["a/0"]
    assert TaskSelector(state="running", pool="/p", tree="other").resolve(TASKS, _forward) == []


def test_ack_preemptions_resolves_the_requested_tasks() -> None:
    events = AckPreemptions().resolve(TASKS[:1])
    assert events == [TaskStateChanged(tree="default", gang="a", task="a/0", state="preempted")]


SHARED_STEPS = "  - at: 0\n    do:\n      - enqueue: {gang: g, pool: /p, tasks: 1}\n"


def test_expanding_twice_with_one_expander_goes_on_numbering() -> None:
    s = parse_scenario("name: x\nsteps:\n" + SHARED_STEPS + SHARED_STEPS.replace("at: 0", "at: 1"))
    expander = Expander(s)
    plans = list(expander.plans())
    assert [_task_ids(e) for p in plans for e in _enqueues(p)] == [["g/0"], ["g/1"]]
