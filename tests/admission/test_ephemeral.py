"""Ephemeral pools (DOMAIN §2, YTsaurus): `pool$user` children, pools under `default_parent_pool`,
at most `max_ephemeral_pools_per_user`, removed once they hold no unfinished gang; the tree domain
and admission must agree on where every gang is, all along."""

from __future__ import annotations

from services.admission.domain.model import FINISHED
from services.admission.domain.views import pool_numbers
from tests.admission.builders import (
    Log,
    admitted,
    cancel,
    finished,
    gang,
    pool,
    rejected,
    task,
    world,
)


def _agree(log: Log) -> None:
    """The tree domain's bookkeeping (pools, unfinished gangs) and admission's gangs agree."""
    tree = log.state.config.tree()
    unfinished = {g.id: g.pool for g in log.rt.gangs.values() if g.state not in FINISHED}
    assert {g: r.pool for g, r in tree.unfinished.items()} == unfinished
    for path, p in tree.pools.items():
        if p.ephemeral:
            assert path in unfinished.values(), f"ephemeral {path} holds no unfinished gang"
    for pool_path in unfinished.values():
        assert pool_path in tree.pools


def _users() -> Log:
    return world(pool("/users", create_ephemeral_subpools=True,
                      ephemeral_subpool_config={"limit": {"cpu": 5}, "max_running_jobs": 1}))


def test_a_gang_for_a_pool_with_ephemeral_subpools_goes_to_pool_dollar_user() -> None:
    log = _users()
    log.feed(gang("a1", "/users", user="alice"), gang("a2", "/users", user="alice"), gang("b1", "/users", user="bob"))
    assert {g: log.gang(g).pool for g in ("a1", "a2", "b1")} == {
        "a1": "/users/users$alice", "a2": "/users/users$alice", "b1": "/users/users$bob"}
    assert log.state.config.tree().pools["/users/users$alice"].ephemeral
    _agree(log)
    # the ephemeral_subpool_config applies: one running job per user pool
    assert admitted(log.tick(0)) == ["a1", "b1"]
    assert pool_numbers(log.state, "default")["/users/users$alice"]["limit"] == {"cpu": 5.0}


def test_the_ephemeral_subpool_config_limit_refuses_a_gang_and_the_pool_goes_away() -> None:
    log = _users()
    out = log.feed(gang("big", "/users", user="carol", cpu=6))
    assert rejected(out) == [("big", "above_limit")]
    assert "above the limit 5 of pool /users/users$carol" in out[0].reason  # type: ignore[attr-defined]
    assert "/users/users$carol" not in log.state.config.tree().pools
    _agree(log)


def test_an_ephemeral_pool_is_removed_when_its_last_gang_finishes_and_made_again_later() -> None:
    log = _users()
    log.feed(gang("a1", "/users", user="alice"), gang("a2", "/users", user="alice", tasks=1, size=2))
    log.tick(0)
    log.feed(task("a1/0", "succeeded"), at=1)
    assert "/users/users$alice" in log.state.config.tree().pools  # a2 (waiting) is still unfinished
    _agree(log)
    assert finished(log.feed(cancel("a2"), at=2)) == {"a2": "cancelled"}
    assert "/users/users$alice" not in log.state.config.tree().pools
    _agree(log)
    out = log.tick(3)
    assert all(p.path != "/users/users$alice" for e in out if e.type == "EntitlementsComputed"
               for p in e.pools)  # type: ignore[attr-defined]
    assert "/users/users$alice" not in pool_numbers(log.state, "default")
    # alice comes back: the pool is made again and works as before
    log.feed(gang("a3", "/users", user="alice"), at=4)
    assert log.gang("a3").pool == "/users/users$alice"
    assert admitted(log.tick(4)) == ["a3"]
    _agree(log)


def test_a_gang_naming_a_missing_pool_gets_one_under_the_default_parent_pool() -> None:
    log = world(pool("/adhoc"), pool("/prod"), default_parent_pool="/adhoc", max_ephemeral_pools_per_user=1)
    log.feed(gang("s1", "/scratch", user="alice"), gang("s2", "/scratch", user="alice"))
    assert log.gang("s1").pool == log.gang("s2").pool == "/adhoc/scratch"
    out = log.feed(gang("o1", "/other", user="alice"))
    assert rejected(out) == [("o1", "pool_missing")]
    assert "at most 1 ephemeral pool(s) under /adhoc (has: /adhoc/scratch)" in out[0].reason  # type: ignore[attr-defined]
    log.feed(gang("o2", "/other", user="bob"))
    assert log.gang("o2").pool == "/adhoc/other"
    # joining alice's pool would make a second ephemeral pool of bob's under /adhoc
    assert rejected(log.feed(gang("s3", "/scratch", user="bob"))) == [("s3", "pool_missing")]
    assert rejected(log.feed(gang("deep", "/org/zzz", user="dave"))) == [("deep", "pool_missing")]
    assert admitted(log.tick(0)) == ["o2", "s1", "s2"]
    _agree(log)
    # once alice's scratch work is done, the pool is gone and she may have /other
    log.feed(task("s1/0", "succeeded"), at=1)
    assert "/adhoc/scratch" in log.state.config.tree().pools  # s2 is still there
    log.feed(task("s2/0", "succeeded"), at=1)
    assert "/adhoc/scratch" not in log.state.config.tree().pools
    assert rejected(log.feed(gang("o3", "/other", user="alice"))) == []
    assert log.gang("o3").pool == "/adhoc/other"
    _agree(log)


def test_a_gang_naming_an_existing_pool_does_not_make_one() -> None:
    log = world(pool("/adhoc"), pool("/prod"), default_parent_pool="/adhoc")
    log.feed(gang("p", "/prod", user="alice"))
    assert log.gang("p").pool == "/prod"
    assert [p for p in log.state.config.tree().pools.values() if p.ephemeral] == []


def test_max_ephemeral_pools_per_user_of_two() -> None:
    log = world(pool("/adhoc"), default_parent_pool="/adhoc", max_ephemeral_pools_per_user=2)
    out = log.feed(*[gang(f"g{i}", f"/p{i}", user="alice") for i in range(3)])
    assert rejected(out) == [("g2", "pool_missing")]
    assert sorted(p for p in log.state.config.tree().pools if p.startswith("/adhoc/")) == ["/adhoc/p0", "/adhoc/p1"]
    _agree(log)


def test_ephemeral_queue_order_follows_a_change_of_the_subpool_config() -> None:
    log = world(pool("/users", create_ephemeral_subpools=True,
                     ephemeral_subpool_config={"limit": {"cpu": 1}, "fifo_sort": ["arrival"]}))
    log.feed(gang("fill", "/users", user="alice"))
    log.tick(0)
    log.feed(gang("p0", "/users", user="alice"), gang("p9", "/users", user="alice", priority=9), at=1)
    assert log.queue("/users/users$alice") == ["p0", "p9"]
    log.feed(pool("/users", create_ephemeral_subpools=True,
                  ephemeral_subpool_config={"limit": {"cpu": 1}, "fifo_sort": ["priority"]}), at=2)
    assert log.queue("/users/users$alice") == ["p9", "p0"]


def test_an_ephemeral_pool_made_again_takes_the_current_subpool_config_order() -> None:
    log = world(pool("/users", create_ephemeral_subpools=True,
                     ephemeral_subpool_config={"limit": {"cpu": 1}, "fifo_sort": ["arrival"]}))
    log.feed(gang("a", "/users", user="alice"))
    log.feed(cancel("a"))  # the pool is gone
    log.feed(pool("/users", create_ephemeral_subpools=True,
                  ephemeral_subpool_config={"limit": {"cpu": 1}, "fifo_sort": ["priority"]}), at=1)
    log.feed(gang("fill", "/users", user="alice"), at=1)
    log.tick(1)
    log.feed(gang("p0", "/users", user="alice"), gang("p9", "/users", user="alice", priority=9), at=2)
    assert log.queue("/users/users$alice") == ["p9", "p0"]

