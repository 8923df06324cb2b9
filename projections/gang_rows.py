"""The `gangs` and `tasks` rows the gangs projection will most likely touch again soon, kept in
memory as they were last written, so that a fold does not read them back from DuckDB.

A gang waiting for its members or pending admission is touched again by its admission (an
enqueue and its admission are usually applied in different batches): its row and its tasks' rows
are kept while it is `waiting` or `pending` (at most `LIMIT` gangs, the oldest forgotten first);
any other gang is read from the tables when an event names it. What is kept is exactly what the
tables hold: the rows are kept when written (or read), a task taken over by another gang's row
(`(tree, task)` is the key of `tasks`) forgets the gang that had it, and the projection forgets
everything when a transaction is rolled back (`Projection.rolled_back`).

It also keeps the keys of every row (`Keys`, hashed), up to `KEYS_LIMIT` rows: most gangs a fold
touches are new (enqueued), and these tell it so without asking DuckDB.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from projections.base import Connection

Row = dict[str, Any]
Key = tuple[str, str]

KEPT_STATES = frozenset({"waiting", "pending"})
LIMIT = 200_000
KEYS_LIMIT = 1_000_000  # rows of gangs and tasks up to which their keys are kept (about 80 bytes each)


@dataclass(slots=True)
class Keys:
    """hash((tree, gang)) of every `gangs` row and hash((tree, task)) of every `tasks` row: a key
    whose hash is not here has no row, so a fold need neither look for it nor delete it before
    inserting it (rows are replaced, and deleted only by retention, which leaves their hashes). A
    hash that is here may be another key's, or a deleted row's: then the tables are asked, as
    without these."""

    gangs: set[int]
    tasks: set[int]


class RowCache:
    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self.gangs: dict[Key, Row] = {}  # (tree, gang) -> its row, oldest first
        self.members: dict[Key, list[Row]] = {}  # (tree, gang) -> its tasks' rows, in member order
        self._owners: dict[Key, Key] = {}  # (tree, task) -> (tree, gang) kept with it
        self.keys: Keys | None = None  # None: not read yet (or off)
        self.keys_off = False  # the tables grew beyond KEYS_LIMIT rows: look keys up in them

    def __len__(self) -> int:
        return len(self.gangs)

    def clear(self) -> None:
        self.keys = None
        self.keys_off = False
        self.gangs.clear()
        self.members.clear()
        self._owners.clear()

    def read_keys(self, conn: Connection) -> Keys | None:
        """The keys of every `gangs` and `tasks` row (`keys`), read once and then kept in step with
        every write; None when the tables hold more rows than `KEYS_LIMIT`."""
        if self.keys is None and not self.keys_off:
            ((count,),) = conn.execute("SELECT (SELECT count(*) FROM gangs) + (SELECT count(*) FROM tasks)").fetchall()
            if count > KEYS_LIMIT:
                self.keys_off = True
                return None
            gangs = conn.execute("SELECT tree, gang FROM gangs").fetchall()
            tasks = conn.execute("SELECT tree, task FROM tasks").fetchall()
            self.keys = Keys({hash((str(t), str(g))) for t, g in gangs}, {hash((str(t), str(k))) for t, k in tasks})
        return self.keys

    def forget(self, key: Key) -> None:
        if self.gangs.pop(key, None) is None:
            return
        for task in self.members.pop(key, ()):
            task_key = (task["tree"], task["task"])
            if self._owners.get(task_key) == key:
                del self._owners[task_key]

    def _have_rows(self, gangs: Iterable[Key], tasks: Iterable[Key]) -> None:
        """These gangs and tasks have rows now (`Keys`)."""
        keys = self.keys
        if keys is not None:
            keys.gangs.update(map(hash, gangs))
            keys.tasks.update(map(hash, tasks))
            if len(keys.gangs) + len(keys.tasks) > KEYS_LIMIT:
                self.keys, self.keys_off = None, True

    def written(self, touched: Iterable[Key], gangs: Mapping[Key, Row], members: Mapping[Key, list[Row]],
                tasks: Mapping[Key, Row], task_keys: Iterable[Key], taken_over: bool) -> None:
        """After a fold wrote the `touched` gangs and the `task_keys` tasks (their rows in `gangs`
        and `tasks`, as the tables have them now): keep the gangs worth keeping, forget the others,
        and any kept gang one of whose tasks a written row took over (`taken_over`: a task row of
        the fold replaced another one of the same key)."""
        self._have_rows(touched, task_keys)
        owners = self._owners
        if owners:
            for task_key in task_keys:
                owner = owners.get(task_key)
                if owner is not None:
                    row = tasks[task_key]
                    if owner != (row["tree"], row["gang"]):
                        self.forget(owner)
        for key in touched:
            gang = gangs[key]
            rows = members.get(key, [])
            if gang["state"] not in KEPT_STATES or (
                    taken_over and any(tasks.get((t["tree"], t["task"])) is not t for t in rows)):
                self.forget(key)
                continue
            self.gangs.pop(key, None)  # kept again: the newest
            self.gangs[key] = gang
            self.members[key] = rows
            for task in rows:
                owners[(task["tree"], task["task"])] = key
        while len(self.gangs) > self.limit:
            self.forget(next(iter(self.gangs)))

    def written_new(self, tasks: Mapping[Key, Key]) -> None:
        """After a fold wrote rows of new gangs that are not kept (admitted at once) and of their
        `tasks` (task key -> its gang's key; every such gang has tasks): their keys, and forget any
        kept gang one of whose tasks such a row took over."""
        self._have_rows(set(tasks.values()), tasks)
        owners = self._owners
        if owners:
            for task_key, gang in tasks.items():
                owner = owners.get(task_key)
                if owner is not None and owner != gang:
                    self.forget(owner)
