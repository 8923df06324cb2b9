"""A state exported as a tuple (admission's service: its fold and explain's notes) is stored part
by part, and a reader that needs one part (the what-if: the fold alone) loads only that one: the
state it gets folds on as the whole one does. A snapshot of the format before the parts, or one
asked for a part it does not have, is passed over, never read as something else."""

from __future__ import annotations

import json
import pickle
import zlib

import anyio
import pytest

from events import ClockTicked, Envelope, Event, at_seconds, encode
from services.admission.domain.gang_rows import gang_rows
from services.admission.folder import AdmissionFolder
from services.admission.queries import ExplainingFolder
from services.common import snapshots
from services.common.snapshots import Corrupt, MemorySnapshots, Parts, Snapshot, load_newest, pickled
from tests.admission.builders import TREE, gang, host, pool, task, tree


def envelopes(start: int, events: list[Event], time: float) -> list[Envelope]:
    return [Envelope(id=f"in-{start + i}", time=at_seconds(time), source="test", event=e) for i, e in enumerate(events)]


HEAD = envelopes(0, [tree(), host(cpu=100), pool("/a", reservation={"cpu": 50}), pool("/b", reservation={"cpu": 50}),
                     *(gang(f"g{i}", "/a" if i % 2 else "/b", tasks=2, cpu=10) for i in range(8)), ClockTicked()], 1.0)
TAIL = envelopes(100, [*(task(f"g{i}/{k}", "succeeded", f"g{i}") for i in range(4) for k in range(2)),
                       gang("late", "/a", tasks=1, cpu=5), ClockTicked()], 5.0)


def fold(folder: AdmissionFolder | ExplainingFolder, log: list[Envelope], first: int) -> list[str]:
    return [encode(d).decode() for seq, envelope in enumerate(log, start=first) for d in folder.step(envelope, seq)]


def test_the_state_alone_from_its_part_folds_as_the_whole() -> None:
    whole = ExplainingFolder()
    fold(whole, HEAD, 1)
    data = Snapshot("admission", len(HEAD), "test", whole.export()).encode()
    assert isinstance(pickle.loads(pickle.loads(zlib.decompress(data[data.index(b"\n") + 1:]))[0]), Parts)

    alone = Snapshot.decode(data, part=0).state
    both = Snapshot.decode(data).state
    assert type(alone).__name__ == "AdmissionState" and alone.on_forget is None  # no notes came with it
    assert isinstance(both, tuple) and len(both) == 2
    folder = AdmissionFolder()
    folder.load(alone)
    made, expected = fold(folder, TAIL, len(HEAD) + 1), fold(whole, TAIL, len(HEAD) + 1)
    assert made == expected and made
    rows = json.dumps(gang_rows(folder.state, TREE), sort_keys=True)
    assert rows == json.dumps(gang_rows(whole.state, TREE), sort_keys=True) and rows.count('"gang"') == 9


def test_a_state_stored_whole_is_its_own_part_0_and_has_no_other() -> None:
    data = Snapshot("tree", 3, "test", {"a": 1}).encode()
    assert Snapshot.decode(data, part=0).state == {"a": 1}
    with pytest.raises(Corrupt):
        Snapshot.decode(data, part=1)


@pytest.mark.parametrize("old", [1, 2])
def test_a_snapshot_of_an_older_format_is_passed_over(old: int) -> None:
    """Format 1 held a tuple state pickled whole: read as parts, its first part would be the
    tuple itself; format 2 held the id record's runs in the state (format 3 names them, stored
    apart). Either is passed over (its header's format), whatever its fingerprint."""
    payload = zlib.compress(pickle.dumps((pickled({"a": 1}), [])), 1)
    header = {"format": old, "service": "admission", "seq": 3, "fingerprint": "same", "length": len(payload),
              "crc": zlib.crc32(payload), "anchor": None}
    store = MemorySnapshots()
    store.objects[("admission", 3)] = json.dumps(header).encode() + b"\n" + payload
    assert snapshots.FORMAT == 3
    found, skipped = anyio.run(lambda: load_newest(store, "admission", "same", part=0))
    assert found is None and f"format {old}" in skipped[0]


def test_a_tuple_state_pickled_whole_gives_its_parts_too() -> None:
    """A snapshot made by `encode_pickled` of a tuple pickled whole (not by `pickled`): its part is
    the tuple's item, never the tuple."""
    data = Snapshot.encode_pickled("admission", 3, "test", pickle.dumps(({"a": 1}, {"b": 2})))
    assert Snapshot.decode(data, part=0).state == {"a": 1}
    assert Snapshot.decode(data, part=1).state == {"b": 2}
    assert Snapshot.decode(data).state == ({"a": 1}, {"b": 2})
