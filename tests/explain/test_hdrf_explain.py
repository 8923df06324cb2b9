"""Why a gang waits under policy `hdrf`: the kind that is used up, where, and who holds it
(DOMAIN §3's GPU example: capacity cpu 100, memory 1000, gpu 8)."""

from __future__ import annotations

from tests.explain.world import World, gang, pool, world

GPU_JOB = {"cpu": 1.0, "memory": 10.0, "gpu": 1.0}
CPU_JOB = {"cpu": 5.0, "memory": 10.0}


def gpu_cluster(*pools_config: dict[str, dict[str, float]]) -> World:
    limits = pools_config[0] if pools_config else {}
    w = world(pool("/G1", **limits), pool("/G2", **limits), pool("/C", **limits), resources=("cpu", "memory", "gpu"),
              capacity={"cpu": 100.0, "memory": 1000.0, "gpu": 8.0}, policy="hdrf", preemption=False)
    for i in range(8):
        w.feed(gang(f"g1-{i}", "/G1", resources=GPU_JOB), gang(f"g2-{i}", "/G2", resources=GPU_JOB), at=1)
    for i in range(20):
        w.feed(gang(f"c-{i}", "/C", resources=CPU_JOB), at=1)
    return w.tick(at=2)


def test_a_gpu_gang_is_told_the_gpu_is_used_up_and_by_whom() -> None:
    w = gpu_cluster()
    assert w.state_of("g1-3") == "admitted" and w.state_of("g1-4") == "pending"
    result = w.explain("g1-4")
    # short of every kind (entitlement follows the jobs' demand), stopped by one: the gpu
    assert result.summary == ("entitlement: needs cpu 1, pool /G1 has 0 of 4 left; needs gpu 1, pool /G1 has 0 of 4 "
                              "left; needs memory 10, pool /G1 has 0 of 40 left; gpu is used up: /G1 4, /G2 4")
    assert result.findings[0].numbers["used_up_gpu"] == {"at": "/", "holders": {"/G1": 4.0, "/G2": 4.0}}


def test_a_cpu_gang_is_told_the_cpu_is_used_up_and_by_whom() -> None:
    """/C got 92 cpu (not `dominant`'s 50): its 19th gang waits because the cpu is all given."""
    w = gpu_cluster()
    assert w.states("c-17", "c-18") == {"c-17": "admitted", "c-18": "pending"}
    assert w.explain("c-18").summary == ("entitlement: needs cpu 5, pool /C has 2 of 92 left; needs memory 10, "
                                        "pool /C has 4 of 184 left; cpu is used up: /C 92, /G1 4, /G2 4")


def test_the_limit_of_a_pool_on_the_path_is_named() -> None:
    w = world(pool("/team", limit={"cpu": 100.0, "gpu": 2.0}), pool("/team/a"), pool("/team/b"),
              resources=("cpu", "gpu"), capacity={"cpu": 100.0, "gpu": 8.0}, policy="hdrf", preemption=False)
    for i in range(3):
        w.feed(gang(f"a-{i}", "/team/a", resources={"cpu": 1.0, "gpu": 1.0}),
               gang(f"b-{i}", "/team/b", resources={"cpu": 1.0, "gpu": 1.0}), at=1)
    w.tick(at=2)
    assert w.explain("a-1").summary == ("entitlement: needs cpu 1, pool /team/a has 0 of 1 left; needs gpu 1, "
                                       "pool /team/a has 0 of 1 left; "
                                       "gpu is used up at the limit of /team (2): /team/a 1, /team/b 1")


def test_under_dominant_nothing_is_said_of_used_up_kinds() -> None:
    w = world(pool("/G1"), resources=("cpu", "gpu"), capacity={"cpu": 10.0, "gpu": 1.0}, policy="dominant")
    w.feed(gang("a", "/G1", resources={"cpu": 1.0, "gpu": 1.0}), gang("b", "/G1", resources={"cpu": 1.0, "gpu": 1.0}),
           at=1).tick(at=2)
    assert w.explain("b").summary == ("entitlement: needs cpu 1, pool /G1 has 0 of 1 left; "
                                      "needs gpu 1, pool /G1 has 0 of 1 left")
