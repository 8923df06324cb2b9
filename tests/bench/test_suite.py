"""Each benchmark section comes out with its rows, ratios and goals at tiny sizes (no timing asserted)."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest

from bench.baseline import Baseline, harmonic
from bench.pipeline import bench_pipeline
from bench.scale import fair_share, history, job_limits
from bench.suite import Sizes, admission_section, entitlement_section, projection_section, raw_section, scale_section
from bench.workload import Workload

BASE = Baseline(n=10, payload_size=400, nats={"raw_publish_pipelined": 40_000.0, "raw_consume_pull_callback": 80_000.0,
                                              "adapter_append": 30_000.0, "adapter_consume": 60_000.0},
                duckdb_arrow_rows_per_s=1e6, decode_per_s=1e5)
TINY = replace(Sizes.quick(), entitlement=(200,), entitlement_repeat=1,
               admission=Workload(gangs=100, leaves=4, hosts=2), projection_n=200)


def test_harmonic_is_the_rate_of_doing_both() -> None:
    assert harmonic(40_000.0, 80_000.0) == pytest.approx(80_000.0 / 3)
    assert harmonic(1.0, 0.0) == 0.0


def test_raw_section_ratios_are_against_the_raw_numbers() -> None:
    section = raw_section(BASE)
    append = next(r for r in section.rows if r.name.startswith("JetStreamLog.append"))
    assert append.ratio == pytest.approx(0.75)
    both = next(r for r in section.rows if r.name.startswith("publish then consume"))
    assert both.value == pytest.approx(80_000.0 / 3)


def test_entitlement_section_judges_goals_only_where_there_is_one() -> None:
    section = entitlement_section(TINY)
    assert len(section.rows) == 5 and not section.goals()


def test_admission_section() -> None:
    section = admission_section(BASE, TINY)
    names = [r.name for r in section.rows]
    assert "fold GangEnqueued (AdmissionState.apply)" in names
    fold = section.rows[names.index("fold GangEnqueued (AdmissionState.apply)")]
    assert fold.value > 0 and fold.ratio == pytest.approx(fold.value / 80_000.0)


def test_scale_shapes_build_what_they_say() -> None:
    after = history(300)
    assert (after["gangs"], after["live"]) == (400, 100)  # 300 finished, the 100 pending admitted by the cycle
    ordered = fair_share(400)  # room for half of them
    assert ordered["decisions"] == 200 + 2  # admissions, the entitlements computed and the cycle's close
    limited = job_limits(4000)  # 1,000 leaves, 4 gangs each of 4 jobs: 2 jobs a leaf may run
    # (1,001 pools and the root: the entitlements are written in two parts, events/decisions.py)
    assert limited["decisions"] == 2000 + 3


def test_scale_section_compares_each_size_with_the_smaller() -> None:
    section = scale_section(replace(TINY, scale=(("history", (50, 100)), ("fair_share", (50, 100)))))
    assert [r.ratio is None for r in section.rows] == [True, False] * 3
    assert all(r.value > 0 for r in section.rows)


def test_projection_section() -> None:
    section = projection_section(BASE, TINY)
    assert section.params["events"] == 200 and all(r.value > 0 for r in section.rows)


@pytest.mark.nats
def test_the_pipeline_decides_every_gang_end_to_end() -> None:
    async def run() -> None:
        speed = await bench_pipeline(60, leaves=3, rates=(400.0,), paced_seconds=0.1, raw_n=0, timeout=30.0,
                                     workload=Workload(leaves=3, hosts=2))
        assert speed.burst["decided"] == 60 and speed.burst["missing"] == 0 and speed.burst["drained"]
        assert speed.e2e_per_s > 0 and speed.burst["cycles"] >= 1
        (paced,) = speed.paced
        assert paced["count"] == 40 and paced["missing"] == 0 and paced["p99_ms"] > 0

    anyio.run(run, backend="asyncio")
