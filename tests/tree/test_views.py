"""Plain-dict answers for the shell and the CLI."""

from __future__ import annotations

import json

from services.tree.domain import list_hosts, list_pools, list_trees, pool_view
from tests.tree.builders import ORG, gang, given, host, pool, tree_configured


def test_pool_view() -> None:
    state = given(*ORG, pool("/org/b", reservation={"cpu": 20}, limit={"cpu": 100}, share=2),
                  gang("g1", "/org/b"))
    view = pool_view(state, "default", "/org/b/")
    assert view is not None
    assert view["path"] == "/org/b" and view["parent"] == "/org" and view["children"] == []
    assert view["config"] == {"reservation": {"cpu": 20.0}, "limit": {"cpu": 100.0}, "share": 2.0}
    assert view["reservation"] == {"cpu": 20, "memory": 0}
    assert view["limit"] == {"cpu": 100, "memory": 1000}  # memory inherited from /org
    assert view["share"] == {"cpu": 2, "memory": 2}
    assert view["ephemeral"] is False and view["leaf"] is True
    assert view["unfinished_gangs"] == 1 and view["version"] == 6
    json.dumps(view)
    assert pool_view(state, "default", "/nope") is None


def test_list_pools_and_trees_and_hosts() -> None:
    state = given(*ORG, tree_configured("gpu", resources=["gpu"], node_tag_filter=["gpu"]),
                  pool("/g", tree="gpu"), host("g1", tags=("gpu",), gpu=8))
    assert [v["path"] for v in list_pools(state, "default")] == ["/", "/org", "/org/a", "/org/b"]
    assert [(v["tree"], v["path"]) for v in list_pools(state)] == [
        ("default", "/"), ("default", "/org"), ("default", "/org/a"), ("default", "/org/b"),
        ("gpu", "/"), ("gpu", "/g")]
    trees = {t["name"]: t for t in list_trees(state)}
    assert trees["default"]["capacity"] == {"cpu": 100, "memory": 1000}
    assert trees["gpu"]["capacity"] == {"gpu": 8} and trees["gpu"]["hosts"] == ["g1"]
    assert trees["default"]["version"] == 5
    hosts = {h["name"]: h for h in list_hosts(state)}
    assert hosts["cluster"]["trees"] == ["default"]
    assert hosts["g1"]["trees"] == ["default", "gpu"]
    json.dumps([list_pools(state), list_trees(state), list_hosts(state)])
