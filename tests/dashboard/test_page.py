"""The dashboard's page in headless Chromium (tests/dashboard/browser.py) on a running `poolwise
up` (tests/dashboard/conftest.py): it loads without a console error, shows /W/L's numbers (gw1's
4 x cpu=2 admitted: allocation 8; gw2's 2 x cpu=2 waiting on the limit of 10: demand 4) and gw2 in
its pending queue with the reason, then, once /W/L's limit is raised and gw2 admitted, shows that
without being reloaded (allocation 12, the queue empty, the admission on the timeline, a later log
position). A screenshot is written to test-artifacts/dashboard.png (POOLWISE_TEST_ARTIFACTS: another
directory). Skipped, saying so, where there is no chromium."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.dashboard.browser import Browser, chromium_or_skip
from tests.dashboard.conftest import Board

pytestmark = pytest.mark.nats

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("POOLWISE_TEST_ARTIFACTS") or REPO / "test-artifacts")


def number(pool: str, kind: str, name: str) -> str:
    """JavaScript: the text of one number of one pool on the page ('' while not drawn)."""
    where = f'.pool[data-pool="{pool}"] [data-kind="{kind}"][data-number="{name}"]'
    return f"((document.querySelector({json.dumps(where)}) || {{}}).textContent || '')"


def waiting(leaf: str) -> str:
    """JavaScript: the gangs drawn in `leaf`'s pending queue, each with its reason."""
    where = f'.leaf-queues[data-leaf="{leaf}"] .queue[data-queue="pending"] .gang'
    return (f"(Array.from(document.querySelectorAll({json.dumps(where)})).map(g => "
            f"[g.dataset.gang, (g.querySelector('.why') || {{}}).textContent || '']))")


def test_the_page_shows_the_pools_and_follows_an_admission(board: Board) -> None:
    with Browser(chromium_or_skip()) as page:
        page.open(board.url + "/")
        page.wait_for("document.getElementById('live').textContent === 'live'", "the first answer drawn")
        drawn = {name: page.wait_for(number("/W/L", "cpu", name), f"/W/L's cpu {name}")
                 for name in ("reservation", "limit", "entitlement", "allocation", "demand")}
        assert drawn == {"reservation": "10", "limit": "10", "entitlement": "10", "allocation": "8", "demand": "4"}
        assert page.evaluate(number("/ATG/Sim", "cpu", "allocation")) == "20"
        assert page.evaluate(waiting("/W/L")) == [["gw2", "entitlement: needs cpu 4, pool /W/L has 2 of 10 left"]]
        status = board.json("/api/trees/default/pools/W/L")["starvation"]["status"]  # (marked unless ok)
        assert page.evaluate("document.querySelector('.pool[data-pool=\"/W/L\"]').className") == f"pool {status}"
        shown = int(page.evaluate("document.getElementById('position').dataset.seq"))
        assert shown == board.json("/api/trees")["log_seq"]

        board.cli("pool", "update", "/W/L", "--limit", "cpu=20")
        page.wait_for(f"{number('/W/L', 'cpu', 'allocation')} === '12' && {waiting('/W/L')}.length === 0",
                      "gw2's admission (allocation 12, the queue empty)")
        assert page.evaluate(number("/W/L", "cpu", "demand")) == "0"
        admitted = "gang gw2 admitted to /W/L from queue pending (2 tasks)"  # (on the log a moment after the numbers)
        page.wait_for("Array.from(document.querySelectorAll('#timeline .text')).some(t => t.textContent === "
                      f"{json.dumps(admitted)})", "gw2's admission on the timeline")
        assert int(page.evaluate("document.getElementById('position').dataset.seq")) > shown

        picture = ARTIFACTS / "dashboard.png"
        page.screenshot(picture)
        assert picture.stat().st_size > 10_000 and picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert page.errors == []
