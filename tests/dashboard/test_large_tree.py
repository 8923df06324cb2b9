"""A large tree on the page (tests/dashboard/conftest.py's `poolwise up`, a tree `big` applied
beside `default`): 115 pools, more than the 100 the page shows whole, so /api/overview gives its
pools down to depth 2, each parent there collapsed with the count below it; a click on a
pool's toggle opens it (its children drawn, the API asked with expand=), another folds it again,
without a console error. A screenshot goes to test-artifacts/dashboard-large.png. Skipped, saying
so, where there is no chromium."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.helpers import wait_for
from tests.dashboard.browser import Browser, chromium_or_skip
from tests.dashboard.conftest import Board

pytestmark = pytest.mark.nats

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("POOLWISE_TEST_ARTIFACTS") or REPO / "test-artifacts")
PARENTS, CHILDREN = 6, 18


def big_cluster() -> str:
    pools = ["  - {path: /Z, tree: big}"]
    for i in range(PARENTS):
        pools.append(f"  - {{path: /Z/a{i}, tree: big}}")
        pools += [f"  - {{path: /Z/a{i}/b{j}, tree: big}}" for j in range(CHILDREN)]
    return "resources: [cpu, memory]\ntrees:\n  - name: big\npools:\n" + "\n".join(pools) + "\n"


def selector(pool: str, inside: str = "") -> str:
    """JavaScript: the element of pool `pool` of tree big (or `inside` it), or null."""
    return f"document.querySelector({json.dumps(f'.pool[data-tree=big][data-pool={json.dumps(pool)}] {inside}')})"


def drawn(pool: str) -> str:
    return f"!!{selector(pool)}"


def toggle(pool: str) -> str:
    return f"(({selector(pool, '[data-toggle]')} || {{}}).textContent || '')"


def click(pool: str) -> str:
    return f"{selector(pool, '[data-toggle]')}.click()"


def test_a_large_tree_is_collapsed_and_opens_on_click(board: Board, tmp_path: Path) -> None:
    (tmp_path / "big.yaml").write_text(big_cluster())
    board.cli("apply", "-f", str(tmp_path / "big.yaml"))
    total = 1 + PARENTS * (1 + CHILDREN)

    def big() -> dict[str, object] | None:
        return next((t for t in board.json("/api/overview")["trees"] if t["tree"] == "big"), None)

    wait_for(lambda: (found := big()) is not None and found["total"] == total, "tree big on the dashboard")
    found = big()
    assert found is not None
    shown = [p["path"] for p in found["pools"]]  # type: ignore[attr-defined]
    assert shown == ["/Z", *(f"/Z/a{i}" for i in range(PARENTS))]
    assert {p["path"]: p.get("below") for p in found["pools"]}["/Z/a3"] == CHILDREN  # type: ignore[attr-defined]
    opened = board.json("/api/overview?expand=/Z/a3")
    [tree] = [t for t in opened["trees"] if t["tree"] == "big"]
    assert len(tree["pools"]) == 1 + PARENTS + CHILDREN
    assert len(board.json("/api/trees/big")["pools"]) == total  # one tree by the API: whole
    assert board.json("/api/overview?expand=Z", 400)["field"] == "expand"

    with Browser(chromium_or_skip()) as page:
        page.open(board.url + "/")
        assert page.wait_for(toggle("/Z/a3"), "/Z/a3 collapsed") == f"+ {CHILDREN} pools below"
        assert not page.evaluate(drawn("/Z/a3/b5"))
        page.evaluate(click("/Z/a3"))
        page.wait_for(drawn("/Z/a3/b5"), "/Z/a3's children, once opened")
        assert page.evaluate(toggle("/Z/a3")) == "\u2212 fold" and page.evaluate(toggle("/Z/a4")).startswith("+ ")
        page.wait_for(f"{drawn(f'/Z/a3/b{CHILDREN - 1}')} && document.getElementById('live').textContent === 'live'",
                      "the page still polling with /Z/a3 open")
        picture = ARTIFACTS / "dashboard-large.png"
        page.screenshot(picture)
        page.evaluate(click("/Z/a3"))
        page.wait_for(f"!{drawn('/Z/a3/b5')}", "/Z/a3 folded again")
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert page.errors == []
