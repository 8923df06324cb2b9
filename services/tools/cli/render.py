"""Tables and trees for people (rich), from the plain dicts the services reply with."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from services.tools.cli.args import format_resources


def _share(value: Any) -> str:
    if isinstance(value, dict):
        distinct = set(value.values())
        if len(distinct) == 1:
            return f"{float(distinct.pop()):g}"
        return format_resources(value)
    return f"{float(value):g}" if value is not None else "1"


def shown_reservation(pool: dict[str, Any]) -> dict[str, float]:
    """The kinds a pool reserves (zeros left out)."""
    return {k: v for k, v in (pool.get("reservation") or {}).items() if v}


def shown_limit(pool: dict[str, Any]) -> dict[str, float]:
    """The kinds a pool (or an ancestor) limits; unbounded kinds left out."""
    unbounded = set((pool.get("effective") or {}).get("unbounded", []))
    return {k: v for k, v in (pool.get("limit") or {}).items() if k not in unbounded}


def pool_label(pool: dict[str, Any]) -> str:
    name = pool["path"].rsplit("/", 1)[-1] or "/"
    parts = [f"[bold]{name}[/bold]"]
    parts.append(f"reservation {format_resources(shown_reservation(pool))}")
    parts.append(f"limit {format_resources(shown_limit(pool)) if shown_limit(pool) else 'unbounded'}")
    parts.append(f"share {_share(pool.get('share'))}")
    if pool.get("ephemeral"):
        parts.append("[dim](ephemeral)[/dim]")
    return "  ".join(parts)


def pool_tree(tree_name: str, pools: list[dict[str, Any]], capacity: dict[str, float] | None) -> Tree:
    """Draw the pools of one tree as a tree, parents before children, children by path."""
    root = Tree(f"[bold]{tree_name}[/bold]  capacity {format_resources(capacity)}")
    nodes: dict[str, Tree] = {"/": root}
    for pool in sorted(pools, key=lambda p: (p["path"].count("/"), p["path"])):
        if pool["path"] == "/":
            continue
        parent = nodes.get(pool.get("parent") or "/", root)
        nodes[pool["path"]] = parent.add(pool_label(pool))
    return root


def pool_table(pools: list[dict[str, Any]]) -> Table:
    table = Table("tree", "path", "reservation", "limit", "share", "mode", "children")
    for pool in sorted(pools, key=lambda p: (p.get("tree", ""), p["path"])):
        table.add_row(
            pool.get("tree", "default"),
            pool["path"],
            format_resources(shown_reservation(pool)),
            format_resources(shown_limit(pool)) if shown_limit(pool) else "unbounded",
            _share(pool.get("share")),
            str(pool.get("mode", "fifo")),
            str(len(pool.get("children", []))),
        )
    return table


def host_table(hosts: list[dict[str, Any]]) -> Table:
    table = Table("host", "resources", "revocable", "tags")
    for host in sorted(hosts, key=lambda h: h["host"]):
        table.add_row(
            host["host"],
            format_resources(host.get("resources")),
            format_resources(host.get("revocable")),
            ",".join(host.get("tags", [])) or "-",
        )
    return table


def gang_table(rows: list[dict[str, Any]], total: int, as_of: int) -> Table:
    trees = {r["tree"] for r in rows}
    columns = ["gang", "pool", "state", "queue", "tasks", "resources", "priority", "job", "attempt"]
    table = Table(*(["tree"] if len(trees) > 1 else []), *columns)
    for r in rows:
        queue = "-" if r["queue"] is None else f"{r['queue']} #{r['position']}" if r["position"] else r["queue"]
        members = str(r["members"]) if r["members"] == r["size"] else f"{r['members']}/{r['size']}"
        cells = [r["gang"], r["pool"], r["state"], queue, members, format_resources(r["resources"]),
                 str(r["priority"]), r["job"], str(r["attempt"])]
        table.add_row(*([r["tree"]] if len(trees) > 1 else []), *cells)
    if not rows:
        table.caption = f"no gangs (as of log position {as_of})"
    elif total > len(rows):
        table.caption = f"the last {len(rows)} of {total} gangs (as of log position {as_of}); narrow with --state, " \
                        f"--pool or raise --limit"
    else:
        table.caption = f"{total} gang{'s' if total != 1 else ''} (as of log position {as_of})"
    return table


def console() -> Console:
    """Rich output; when not on a terminal, wide enough that tables are not cut."""
    probe = Console()
    return Console(soft_wrap=True) if probe.is_terminal else Console(soft_wrap=True, width=200)
