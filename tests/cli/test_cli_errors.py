"""Every bad input to the CLI is one line on stderr and exit code 2, never a traceback; and
`poolwise events schema` is the contract as valid JSON Schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import EVENT_TYPES
from tests.cli.helpers import Result, Up, clean_env, no_traceback, one_error_line, run, run_here, wait_for

NO_SYSTEM = "no running poolwise found"

# (arguments, a part of the one error line). The data dir given to each is an empty directory.
BAD_INPUT: list[tuple[list[str], str]] = [
    (["pool", "create", "/a", "--reservation", "cpu"], "--reservation: expected kind=amount pairs"),
    (["pool", "create", "/a", "--reservation", "cpu=lots"], "amount of 'cpu' must be a number"),
    (["pool", "create", "/a", "--reservation", "cpu=1,cpu=2"], "kind 'cpu' given twice"),
    (["pool", "create", "/a", "--limit", "=5"], "--limit: expected kind=amount pairs"),
    (["pool", "create", "/a", "--reservation", "cpu=inf"], "must be finite"),
    (["pool", "create", "/a", "--share", "gpu"], "--share: expected kind=amount pairs"),
    (["pool", "create", "/a", "--mode", "lottery"], "mode"),
    (["pool", "create", "/a", "--reservation-type", "bendy"], "reservation_type"),
    (["pool", "create", "/a", "--config-json", "{nope"], "--config-json: not valid JSON"),
    (["pool", "create", "/a", "--config-json", "[1]"], "--config-json: must be a JSON object"),
    (["pool", "create", "/a", "--if-version", "latest"], "Invalid value for '--if-version'"),
    (["pool", "create", "/a", "--frobnicate"], "No such option: --frobnicate"),
    (["pool", "create"], "Missing argument"),
    (["pool", "explode"], "No such command"),
    (["host", "add", "h1", "--resources", "cpu:4"], "--resources: expected kind=amount pairs"),
    (["host", "add", "h1"], "Missing option '--resources'"),
    (["tree", "configure", "t", "--policy", "greedy"], "policy"),
    (["tree", "configure", "t", "--file", "/nonexistent/tree.yaml"], "--file /nonexistent/tree.yaml"),
    (["events", "schema", "GangExploded"], "unknown event type 'GangExploded'"),
    (["scenario", "run", "--bus", "carrier-pigeon", "x.yaml"], "--bus must be memory or nats"),
    (["scenario", "run", "/nonexistent/scenario.yaml"], "/nonexistent/scenario.yaml"),
    (["serve", "scheduler"], "unknown service 'scheduler'"),
    (["serve", "tree"], "no NATS server"),
    (["pool", "list"], NO_SYSTEM),
    (["pool", "create", "/a", "--reservation", "cpu=1"], NO_SYSTEM),
    (["pool", "delete", "/a"], NO_SYSTEM),
    (["pool", "get", "/a"], NO_SYSTEM),
    (["host", "list"], NO_SYSTEM),
    (["tree", "list"], NO_SYSTEM),
    (["sql", "SELECT 1"], "no projections at"),
    (["replay"], "replay --verify"),
    (["replay", "--verify"], "no log found"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path,
                                          capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error_line(run_here(capfd, monkeypatch, *args, *data_dir_of(args, tmp_path)))
    assert message in line, line


def data_dir_of(args: list[str], tmp_path: Path) -> list[str]:
    """`--data-dir <empty dir>` for the commands that take it."""
    takes = args[0] in ("pool", "host", "tree", "sql", "replay", "serve") and args[-1] not in ("create", "explode")
    return ["--data-dir", str(tmp_path / "empty")] if takes and "--frobnicate" not in args else []


@pytest.mark.parametrize("args", [["pool", "list"], ["pool", "create", "/a", "--reservation", "cpu"],
                                  ["serve", "scheduler"], ["replay", "--verify"]])
def test_bad_input_as_a_person_sees_it(args: list[str], tmp_path: Path) -> None:
    """The installed script, in a subprocess: the same one line, exit 2."""
    one_error_line(run(*args, "--data-dir", str(tmp_path / "empty"), cwd=tmp_path))


def test_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    result = run("pool", "list", cwd=tmp_path, env=clean_env(NATS_URL="nats://127.0.0.1:9"))
    assert "cannot reach NATS at nats://127.0.0.1:9" in one_error_line(result)


@pytest.mark.parametrize("args", [["up"], ["serve", "admission"]], ids=["up", "serve"])
def test_services_given_an_unreachable_server_stop_with_one_line(args: list[str], tmp_path: Path) -> None:
    """They wait `CONNECT_WITHIN` (10 s) for NATS, quietly (nats-py would log a traceback per
    attempt, forever), then stop: one line naming the URL, exit 2."""
    result = run(*args, "--nats-url", "nats://127.0.0.1:9", "--data-dir", str(tmp_path / "data"), cwd=tmp_path,
                 timeout=60)
    assert "cannot reach NATS at nats://127.0.0.1:9 within 10 s" in one_error_line(result)


@pytest.mark.anyio
async def test_a_log_gives_up_on_an_unreachable_server_with_the_url() -> None:
    from services.common.jetstream import JetStreamLog

    with pytest.raises(ConnectionError, match=r"cannot reach NATS at nats://127.0.0.1:9 within 0.5 s"):
        await JetStreamLog.connect("nats://127.0.0.1:9", within=0.5)


def test_a_service_that_is_not_running_is_one_line(tmp_path: Path) -> None:
    from services.common.natsserver import EmbeddedNats

    with EmbeddedNats(tmp_path / "bare") as server:  # NATS, but no poolwise service on it
        result = run("pool", "list", cwd=tmp_path, env=clean_env(NATS_URL=server.url))
    assert "the tree service is not running" in one_error_line(result)


def test_help_is_not_an_error(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_here(capfd, monkeypatch, "pool", "create", "--help")
    assert result.code == 0 and "--reservation" in result.out
    no_traceback(result)


def test_commands_run_in_one_process_add_no_log_filter_each(capfd: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`main()` quiets asyncio's TLS-close line with a filter on its logger: one filter, however many
    commands a process runs (the tests run hundreds in theirs; each used to add one more)."""
    import logging

    asyncio_log = logging.getLogger("asyncio")
    assert run_here(capfd, monkeypatch, "pool", "create", "--help").code == 0
    filters = list(asyncio_log.filters)
    assert run_here(capfd, monkeypatch, "pool", "create", "--help").code == 0
    assert asyncio_log.filters == filters


def test_serve_names_the_launchers_services() -> None:
    from services.launcher import SERVICES
    from services.tools.cli.serve_cmd import SERVICES as NAMES

    assert tuple(SERVICES) == NAMES


# --- refusals of a running system -------------------------------------------------------------------


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    root = tmp_path_factory.mktemp("cli")
    with Up(root / "data", root) as up:
        up.start()
        assert up.cli("pool", "create", "/p", "--reservation", "cpu=100", "--limit", "cpu=200").code == 0
        assert up.cli("pool", "create", "/p/c", "--reservation", "cpu=60").code == 0
        yield up


REFUSED: list[tuple[list[str], str]] = [
    (["pool", "create", "/p"], "pool /p already exists in tree default [exists]"),
    (["pool", "update", "/nope", "--share", "2"], "pool /nope does not exist in tree default [not_found]"),
    (["pool", "create", "/x/y"], "parent /x does not exist [parent_missing]"),
    (["pool", "create", "relative"], "path relative should begin with / [path_relative]"),
    (["pool", "create", "/p/d", "--reservation", "cpu=50"], "[children_reservation_exceeds_parent]"),
    (["pool", "create", "/p/e", "--limit", "cpu=500"], "[limit_exceeds_parent]"),
    (["pool", "create", "/p/f", "--reservation", "cpu=-1"], "is negative [negative_value]"),
    (["pool", "create", "/p/g", "--reservation", "tpu=1"], "[unknown_kind]"),
    (["pool", "delete", "/p"], "[delete_has_children]"),
    (["pool", "delete", "/"], "[path_root]"),
    (["pool", "update", "/p", "--share", "3", "--if-version", "1"], "[stale]"),
    (["pool", "get", "/nope"], "[not_found]"),
    (["host", "remove", "ghost"], "host ghost is not registered"),
    (["tree", "configure", "bad.name"], "[tree_name]"),
    (["sql", "DROP TABLE pools"], "[sql]"),
    (["sql", "SELECT * FROM nowhere"], "nowhere"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_refusals_are_one_line_with_the_rule(system: Up, args: list[str], message: str,
                                             capfd: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    line = one_error_line(run_here(capfd, monkeypatch, *args, "--data-dir", str(system.data_dir)))
    assert message in line, line


def test_a_refusal_is_recorded_in_the_log(system: Up, capfd: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = ["--data-dir", str(system.data_dir)]
    one_error_line(run_here(capfd, monkeypatch, "pool", "create", "/p/h", "--reservation", "cpu=99", *data_dir))

    def recorded() -> Result:
        return run_here(capfd, monkeypatch, "sql", "SELECT data->>'rule' AS rule FROM event_log WHERE "
                        "type = 'InputRejected' AND data->>'ref' = '/p/h'", "--json", *data_dir)

    rows = wait_for(lambda: recorded().json(), "the rejection to reach the projection")
    assert rows == [{"rule": "children_reservation_exceeds_parent"}]


# --- the event contract -----------------------------------------------------------------------------


def test_events_schema_is_json_schema_of_every_event(capfd: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_here(capfd, monkeypatch, "events", "schema")
    assert result.code == 0 and result.err == ""
    schema = json.loads(result.out)
    assert schema["type"] == "object" and "event" in schema["properties"] and "$defs" in schema
    check_schema(schema, schema)
    event = schema["properties"]["event"]
    union = event.get("oneOf") or event.get("anyOf")
    refs = {ref["$ref"].rsplit("/", 1)[-1] for ref in union}
    assert refs == set(EVENT_TYPES)  # every event type, nothing else
    assert set(event["discriminator"]["mapping"]) == set(EVENT_TYPES)
    for name in EVENT_TYPES:
        assert schema["$defs"][name]["properties"]["type"]["const"] == name


TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
KEYWORDS = {"$defs", "$ref", "additionalProperties", "anyOf", "allOf", "oneOf", "const", "default", "description",
            "discriminator", "enum", "exclusiveMaximum", "exclusiveMinimum", "format", "items", "maxItems",
            "maxLength", "maximum", "minItems", "minLength", "minimum", "pattern", "prefixItems", "properties",
            "required", "title", "type", "uniqueItems", "propertyNames", "examples", "not"}


def check_schema(node: object, root: dict[str, object], where: str = "#") -> None:
    """A JSON Schema (2020-12, as pydantic writes it): known keywords with values of the right
    shape, and every `$ref` resolves inside the document."""
    assert isinstance(node, dict), where
    assert set(node) <= KEYWORDS, (where, set(node) - KEYWORDS)
    if "$ref" in node:
        target: object = root
        assert node["$ref"].startswith("#/"), where
        for part in node["$ref"][2:].split("/"):
            assert isinstance(target, dict) and part in target, (where, node["$ref"])
            target = target[part]
    if "type" in node:
        kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
        assert set(kinds) <= TYPES, where
    if "required" in node:
        assert isinstance(node["required"], list) and set(node["required"]) <= set(node.get("properties", {})), where
    for key in ("properties", "$defs"):
        for name, sub in node.get(key, {}).items():
            check_schema(sub, root, f"{where}/{key}/{name}")
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        for i, sub in enumerate(node.get(key, [])):
            check_schema(sub, root, f"{where}/{key}/{i}")
    for key in ("items", "additionalProperties", "not", "propertyNames"):
        if isinstance(node.get(key), dict):
            check_schema(node[key], root, f"{where}/{key}")


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
def test_events_schema_of_one_type(name: str, capfd: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_here(capfd, monkeypatch, "events", "schema", name)
    assert result.code == 0
    schema = json.loads(result.out)
    assert schema["title"] == name and schema["properties"]["type"]["const"] == name
    check_schema(schema, schema)
