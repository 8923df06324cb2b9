"""The same trees give the same entitlements, every bit, whatever SIMD kernels numpy picks for the
CPU: the entitlements of tests/entitlement/cpu_probe.py's trees (`per_resource`, `dominant`,
`hdrf`) computed in processes that differ only in `NPY_DISABLE_CPU_FEATURES` (none; `X86_V3`,
numpy's baseline kernels, as on a machine without AVX2; and whatever else this CPU has that numpy
can turn off) must print the same bytes. Before the sorts got a defined order for equal keys
(`kind="stable"`), numpy's default sort ordered ties as its kernel for the CPU did, and the sums
that follow the order differed in the last bits (65 of the 132 results here, all of `dominant`'s
on cut trees)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from numpy._core._multiarray_umath import __cpu_features__  # numpy's table of what the CPU has

ROOT = Path(__file__).resolve().parents[2]
X86_V3_AND_UP = ("X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR")


def _settings() -> list[str]:
    """`NPY_DISABLE_CPU_FEATURES` values that change the kernels here: none, then each group of
    features this CPU has above numpy's baseline, from the top down (disabling one disables those
    above it too)."""
    have = [name for name in X86_V3_AND_UP if __cpu_features__.get(name)]
    return ["", *have]


def _probe(disable: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    if disable:
        env["NPY_DISABLE_CPU_FEATURES"] = disable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, "-m", "tests.entitlement.cpu_probe", "100"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_entitlements_are_the_same_bits_whatever_the_cpu_kernels() -> None:
    settings = _settings()
    if len(settings) < 2:
        pytest.skip("numpy has no SIMD kernels above its baseline to turn off on this CPU")
    base = _probe("")
    lines = base.splitlines()
    assert len(lines) == 132 and {line.split()[5] for line in lines[:48]} == {"per_resource", "dominant", "hdrf"}
    for disable in settings[1:]:
        other = _probe(disable).splitlines()
        differ = [a.split(" 0x", 1)[0] for a, b in zip(lines, other, strict=True) if a != b]
        assert not differ, f"NPY_DISABLE_CPU_FEATURES={disable}: {len(differ)} results differ, first {differ[:3]}"
