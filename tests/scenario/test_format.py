"""The scenario file format: the shared scenarios load; malformed files name file, place, problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.tools.scenario import ScenarioError, load_scenario, parse_scenario

SHARED = Path(__file__).parents[2].parent / "shared" / "scenarios"
SHARED_FILES = sorted(SHARED.glob("*.yaml")) + sorted(SHARED.glob("*.yml")) + sorted(SHARED.glob("*.json"))


@pytest.mark.skipif(not SHARED_FILES, reason=f"no shared scenarios at {SHARED}")
@pytest.mark.parametrize("path", SHARED_FILES, ids=lambda p: p.name)
def test_every_shared_scenario_loads(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name
    assert scenario.steps
    assert scenario.file == str(path)
    ats = [s.at for s in scenario.steps]
    assert ats == sorted(ats)


def test_defaults_of_a_minimal_file() -> None:
    s = parse_scenario("name: tiny\n")
    assert s.resources == ["cpu", "memory", "disk", "gpu"]
    assert s.default_tree == "default"
    assert list(s.tree_options()) == ["default"]
    assert s.tree_options()["default"].resources == ["cpu", "memory", "disk", "gpu"]
    assert s.host_entries() == []
    assert s.steps == []
    assert not s.multi_tree


def test_capacity_is_one_host_named_cluster_and_trees_take_the_scenario_kinds() -> None:
    s = parse_scenario(
        "name: x\nresources: [cpu]\ncapacity: {cpu: 100}\n"
        "trees: [{name: default, policy: dominant, preemption: {grace: 0}}]\n"
        "pools: [{path: /a, reservation: {cpu: 20}, share: 2, mode: fair_share}]\n"
    )
    [host] = s.host_entries()
    assert (host.name, host.resources) == ("cluster", {"cpu": 100.0})
    options = s.tree_options()["default"]
    assert options.policy == "dominant"
    assert options.resources == ["cpu"]
    assert options.preemption.grace == 0 and options.preemption.enabled
    assert options.gang_timeout.limit == 100  # documented default
    config = s.pools[0].config()
    assert config.reservation == {"cpu": 20.0} and config.share == 2 and config.mode == "fair_share"
    assert config.limit is None  # left out: the documented default applies


def test_every_action_kind_and_expectation_key_loads() -> None:
    text = """
name: all
resources: [cpu, memory]
hosts:
  - {name: h1, resources: {cpu: 64, memory: 256}, revocable: {cpu: 16}, tags: [gpu]}
trees:
  - {name: default, node_tag_filter: null, max_running_jobs_per_pool: 8, max_jobs_per_pool: 50,
     default_parent_pool: null, preemption: {enabled: true, grace: 30},
     gang_timeout: {default: 30, limit: 100, jitter: 30}, allocation_slack: false}
pools:
  - {path: /RP1, tree: default, reservation: {cpu: 20}, limit: {cpu: 100}, share: 1, controller_limit: 10,
     slack_limit: 30, mode: fifo, max_running_jobs: 10, max_jobs: 50}
steps:
  - at: 0
    do:
      - enqueue: {gang: g1, pool: /RP1, tasks: 10, resources: {cpu: 1}, priority: 0, preemptible: true,
                  revocable: false, controller: false, job: j1, size: 10, timeout: 30, user: alice}
      - task: {id: g1/0, state: running}
      - task: {gang: g1, state: running}
      - task: {pool: /RP1, state: running}
      - enqueue: {gang: w, count: 80, pool: /RP2, tasks: 1, resources: {cpu: 1}, job: j2}
      - ack_preemptions: {}
      - cancel: g1
      - pool: {path: /RP1, reservation: {cpu: 30}}
      - delete_pool: /RP1
      - host: {name: h2, resources: {cpu: 10}}
      - remove_host: h2
    expect:
      entitlement: {/RP1: {cpu: 10}}
      non_slack_entitlement: {/RP1: {cpu: 10}}
      slack_entitlement: {/RP1: {cpu: 0}}
      allocation: {/RP1: {cpu: 10}}
      slack_allocation: {/RP1: {cpu: 0}}
      demand: {/RP1: {cpu: 0}}
      slack_demand: {/RP1: {cpu: 0}}
      gangs: {g1: admitted}
      admitted: [g1]
      pending: [w-1]
      admitted_order: [g1]
      preempted: [g2/3]
      preempted_count: {/RP1: 0}
      rejected: [/RP9]
      timed_out: []
      requeued: []
      queues: {w-1: pending}
      tasks: {g1/0: ready}
      absent: [/RP9]
"""
    s = parse_scenario(text)
    kinds = [a.kind for a in s.steps[0].do]
    assert kinds == [
        "enqueue",
        "task",
        "task",
        "task",
        "enqueue",
        "ack_preemptions",
        "cancel",
        "pool",
        "delete_pool",
        "host",
        "remove_host",
    ]
    assert s.steps[0].expect.preempted_count == {"/RP1": 0}
    assert s.hosts is not None and s.hosts[0].revocable == {"cpu": 16.0}


def test_json_files_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"name": "j", "capacity": {"cpu": 4}, "steps": [{"at": 0, "do": [{"cancel": "g"}]}]}')
    s = load_scenario(path)
    assert s.name == "j" and s.steps[0].do[0].cancel == "g"


def test_inputs_may_carry_what_the_system_refuses() -> None:
    """Unknown kinds and negative amounts in step inputs are not file errors."""
    s = parse_scenario(
        "name: x\nresources: [cpu]\nsteps:\n  - at: 0\n    do:\n"
        "      - enqueue: {gang: g, pool: /p, resources: {tpu: 1, cpu: -1}, size: 0, timeout: -5}\n"
        "      - pool: {path: /org/h, reservation: {tpu: 1}, controller_limit: 150}\n"
        "      - pool: {path: '/org/bad name!'}\n"
        "      - host: {name: h, resources: {cpu: -3}}\n"
    )
    assert s.steps[0].do[0].enqueue is not None
    assert s.steps[0].do[0].enqueue.resources == {"tpu": 1.0, "cpu": -1.0}


def _error(text: str, file: str = "bad.yaml") -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, file)
    err = info.value
    assert err.file == file
    assert "Traceback" not in str(err)
    assert str(err).startswith(f"{file}: ")
    return err


STEP = "name: x\nsteps:\n  - at: 0\n    do:\n      - "


@pytest.mark.parametrize(
    ("text", "place", "words"),
    [
        # unknown keys, anywhere
        ("name: x\ncolour: red\n", "colour", ["unknown key `colour`", "steps"]),
        (
            STEP + "enqueue: {gang: g, pool: /p, colour: red}\n",
            "steps[0].do[0].enqueue.colour",
            ["unknown key `colour`", "gang", "tasks"],
        ),
        (
            STEP + "launch: {gang: g}\n",
            "steps[0].do[0].launch",
            ["unknown key `launch`", "enqueue", "remove_host"],
        ),
        (
            "name: x\ntrees: [{name: t, preemption: {enabld: true}}]\n",
            "trees[0].preemption.enabld",
            ["unknown key `enabld`", "grace"],
        ),
        ("name: x\npools: [{path: /a, weight: 2}]\n", "pools[0].weight", ["unknown key `weight`", "share"]),
        (
            "name: x\nsteps: [{at: 0, expect: {admited: [g]}}]\n",
            "steps[0].expect.admited",
            ["unknown key `admited`", "admitted_order"],
        ),
        ("name: x\nhosts: [{name: h, cpus: 3}]\n", "hosts[0].cpus", ["unknown key `cpus`"]),
        (
            STEP + "ack_preemptions: {pool: /a}\n",
            "steps[0].do[0].ack_preemptions.pool",
            ["unknown key `pool`"],
        ),
        # wrong types
        (
            STEP + "enqueue: {gang: g, pool: /p, tasks: ten}\n",
            "steps[0].do[0].enqueue.tasks",
            ["expected a whole number or a list", "'ten'"],
        ),
        (
            STEP + "enqueue: {gang: g, pool: /p, tasks: [{resources: {cpu: lots}}]}\n",
            "steps[0].do[0].enqueue.tasks[0].resources.cpu",
            ["expected a number", "'lots'"],
        ),
        (STEP + "enqueue: {gang: g, pool: /p, tasks: 0}\n", "steps[0].do[0].enqueue.tasks", ["at least 1"]),
        (STEP + "enqueue: {gang: g, pool: /p, count: 0}\n", "steps[0].do[0].enqueue.count", ["at least 1"]),
        (
            STEP + "enqueue: {gang: g, pool: /p, preemptible: 'no'}\n",
            "steps[0].do[0].enqueue.preemptible",
            ["true or false"],
        ),
        (STEP + "enqueue: {gang: g, pool: /p, tasks: '10'}\n", "steps[0].do[0].enqueue.tasks", ["'10'"]),
        (STEP + "task: {id: g/0, state: runing}\n", "steps[0].do[0].task.state", ["'running'", "'runing'"]),
        (STEP + "task: {id: g/0, gang: g, state: running}\n", "steps[0].do[0].task", ["exactly one of"]),
        (STEP + "task: {state: running}\n", "steps[0].do[0].task", ["exactly one of"]),
        (
            STEP + "cancel: a\n        remove_host: b\n",
            "steps[0].do[0]",
            ["exactly one key", "cancel, remove_host"],
        ),
        (STEP + "cancel\n", "steps[0].do[0]", ["a mapping with one key"]),
        (STEP + "cancel:\n", "steps[0].do[0]", ["`cancel` needs a value"]),
        (STEP + "enqueue: {pool: /p}\n", "steps[0].do[0].enqueue", ["missing required key `gang`"]),
        (
            "name: x\nsteps: [{at: 0, expect: {gangs: {g: admited}}}]\n",
            "steps[0].expect.gangs.g",
            ["'admitted'", "'admited'"],
        ),
        (
            "name: x\nsteps: [{at: 0, expect: {queues: {g: fast}}}]\n",
            "steps[0].expect.queues.g",
            ["'non_preemptible'"],
        ),
        (
            "name: x\nsteps: [{at: 0, expect: {entitlement: {/a: {cpu: many}}}}]\n",
            'steps[0].expect.entitlement["/a"].cpu',
            ["expected a number"],
        ),
        (
            "name: x\nsteps: [{at: 0, expect: {preempted_count: {/a: -1}}}]\n",
            'steps[0].expect.preempted_count["/a"]',
            ["at least 0"],
        ),
        ("name: x\nsteps: [{at: soon}]\n", "steps[0].at", ["expected a number", "'soon'"]),
        ("name: x\nsteps: [{at: -1}]\n", "steps[0].at", ["at least 0"]),
        ("name: x\nsteps: [{do: []}]\n", "steps[0]", ["missing required key `at`"]),
        ("name: x\ncapacity: {cpu: .inf}\n", "capacity.cpu", ["finite"]),
        ("name: x\npools: [{path: /a, share: lots}]\n", "pools[0].share", ["a number or a mapping"]),
        ("name: x\ntrees: [{name: t, policy: drf}]\n", "trees[0].policy", ["'per_resource'", "'dominant'"]),
        (
            "name: x\ntrees: [{name: t, preemption: {grace: -1}}]\n",
            "trees[0].preemption.grace",
            ["at least 0"],
        ),
        # the file's setup
        ("description: no name\n", "", ["missing required key `name`"]),
        (
            "name: x\ncapacity: {cpu: 1}\nhosts: [{name: h, resources: {cpu: 1}}]\n",
            "hosts",
            ["either `capacity` or `hosts`, not both"],
        ),
        ("name: x\nresources: [cpu]\ncapacity: {gpu: 1}\n", "capacity.gpu", ["unknown resource kind 'gpu'"]),
        ("name: x\nhosts: [{name: h, resources: {cpu: -1}}]\n", "hosts[0].resources.cpu", ["negative"]),
        ("name: x\nhosts: [{name: h}, {name: h}]\n", "hosts[1].name", ["twice"]),
        ("name: x\nresources: [cpu, cpu]\n", "resources[1]", ["twice"]),
        ("name: x\nresources: []\n", "resources", ["at least 1"]),
        ("name: x\ntrees: [{name: a}, {name: a}]\n", "trees[1].name", ["declared twice"]),
        ("name: x\ntrees: [{name: 'a.b'}]\n", "trees[0].name", ["-_a-zA-Z0-9"]),
        ("name: x\npools: [{path: /a, tree: other}]\n", "pools[0].tree", ["'other' is not declared"]),
        ("name: x\npools: [{path: /a/b}]\n", "pools[0].path", ["parent /a", "parents first"]),
        ("name: x\npools: [{path: /a}, {path: /a}]\n", "pools[1].path", ["declared twice"]),
        ("name: x\npools: [{path: /}]\n", "pools[0].path", ["root"]),
        ("name: x\npools: [{path: a}]\n", "pools[0].path", ["must look like /a/b"]),
        (
            "name: x\nresources: [cpu]\npools: [{path: /a, reservation: {gpu: 1}}]\n",
            "pools[0].reservation.gpu",
            ["unknown resource kind 'gpu'"],
        ),
        ("name: x\npools: [{path: /a, limit: {cpu: -1}}]\n", "pools[0].limit.cpu", ["negative"]),
        # time order
        (
            "name: x\nsteps: [{at: 5}, {at: 5}, {at: 3}]\n",
            "steps[2].at",
            ["before the previous", "non-decreasing"],
        ),
    ],
)
def test_malformed_files_name_the_place_and_the_problem(text: str, place: str, words: list[str]) -> None:
    err = _error(text)
    assert err.place == place, str(err)
    for word in words:
        assert word in err.problem, str(err)


def test_errors_carry_the_line() -> None:
    err = _error(
        "name: x\nsteps:\n  - at: 0\n    do:\n      - cancel: a\n      - enqueue: {gang: g, colour: red}\n"
    )
    assert err.line == 6
    assert str(err).startswith("bad.yaml: steps[0].do[1].enqueue.colour (line 6): unknown key `colour`")


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("name: x\nsteps: [\n  - at: 0\n", 3, ["invalid YAML"]),
        ("name: x\n  foo: bar\n", 2, ["invalid YAML", "mapping values are not allowed"]),
        ("name: x\nname: y\n", 2, ["duplicate key 'name'", "line 1"]),
        ("name: x\nsteps: [{at: 0, at: 1}]\n", 2, ["duplicate key 'at'"]),
    ],
)
def test_bad_yaml_gives_line_and_column(text: str, line: int, words: list[str]) -> None:
    err = _error(text)
    assert err.line == line
    assert err.place.startswith(f"line {line}, column ")
    for word in words:
        assert word in err.problem


def test_bad_json_gives_line_and_column() -> None:
    err = _error('{"name": "x",\n "steps": [}', "bad.json")
    assert err.place == "line 2, column 12"
    assert "invalid JSON" in err.problem


@pytest.mark.parametrize(("text", "what"), [("", "empty"), ("- a\n", "a list"), ("just text\n", "a str")])
def test_a_document_that_is_not_a_mapping(text: str, what: str) -> None:
    err = _error(text)
    assert err.place == ""
    assert what in err.problem


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(tmp_path / "nope.yaml")
    assert info.value.problem == "no such file"
    with pytest.raises(ScenarioError) as info:
        load_scenario(tmp_path)
    assert "directory" in info.value.problem
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(binary)
    assert "UTF-8" in info.value.problem


def test_names_written_as_numbers_are_names() -> None:
    s = parse_scenario("name: 42\nsteps: [{at: 0, do: [{cancel: 7}], expect: {gangs: {7: cancelled}}}]\n")
    assert s.name == "42"
    assert s.steps[0].do[0].cancel == "7"
    assert s.steps[0].expect.gangs == {"7": "cancelled"}


def test_null_do_and_expect_mean_none() -> None:
    s = parse_scenario("name: x\nsteps:\n  - at: 0\n    do:\n    expect:\n")
    assert s.steps[0].do == []
    assert s.steps[0].expect.model_fields_set == set()


def test_several_trees() -> None:
    s = parse_scenario(
        "name: x\nresources: [cpu]\ntrees: [{name: batch}, {name: gpu, resources: [cpu, gpu], "
        "node_tag_filter: [gpu]}]\n"
        "pools: [{path: /a, tree: batch}, {path: /g, tree: gpu, reservation: {gpu: 1}}]\n"
    )
    assert s.multi_tree and s.default_tree == "batch"
    assert s.tree_options()["gpu"].resources == ["cpu", "gpu"]
    assert s.pool_key("gpu", "/g") == "gpu:/g"
    assert s.pool_key(None, "/a") == "batch:/a"


def test_the_runner_can_raise_errors_at_a_place_of_the_file() -> None:
    s = parse_scenario("name: x\npools:\n  - {path: /a}\n  - {path: /a/b, reservation: {cpu: 5}}\n", "f.yaml")
    err = s.error(("pools", 1), "pool /a/b: children's reservations 5 exceed the parent's 0")
    assert (err.file, err.place, err.line) == ("f.yaml", "pools[1]", 4)
    assert str(err) == "f.yaml: pools[1] (line 4): pool /a/b: children's reservations 5 exceed the parent's 0"
