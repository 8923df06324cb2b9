"""What a snapshot is in bytes: `Snapshot` (`encode`, `decode`), and the pickling of a state with
its id runs as their keys (`pickled`, `Parts`, `pickled_naming_files`).

`Snapshot.encode`: a header line of JSON (format, service, seq, fingerprint, the payload's length
and CRC, the stored objects it names), then the payload: the pickled state, zlib-compressed. A
state exported as a tuple (admission's: its fold and explain's notes) is pickled part by part
(`pickled`, `Parts`), so that a reader that needs one part loads only that one (`decode(part=)`:
the what-if folds admission's state without the notes). A header or CRC that does not match, or a
payload that does not load, is "corrupt". It loads with the garbage collector off: a state is tens
of objects per gang kept, and the collector's passes while they were made took two thirds of the
time.

The fingerprint (`code_fingerprint`) is a digest of all of poolwise's own source (`events/` and
`services/`, every `.py` file), the Python version and the versions of the libraries whose objects
a pickled state holds or whose behaviour a fold depends on: any change to the code makes older
snapshots unusable (they are folded past, not trusted). All the source, not a list of what a fold
runs: a list kept by hand misses the module a fold starts to import one day, and a snapshot that
loads but folds differently is the one failure a cache must not have; the price is one fold from
the start after an upgrade that touched only, say, the CLI."""

from __future__ import annotations

import contextvars
import copyreg
import gc
import hashlib
import importlib.metadata
import io
import json
import pickle
import sys
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO, Any

from events import Envelope
from services.common.id_runs import FileFilter, FileRun
from services.tree.domain import used_ids
from services.tree.domain.used_ids import IdFilter, Run

# 2: a tuple state's parts pickled apart (`Parts`); 3: the id record's runs stored apart, named by
# key in the header (`runs`). An older snapshot is passed over.
FORMAT = 3
_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = ("events", "services")  # all of poolwise's source a service runs
_LIBRARIES = ("numpy", "pydantic", "pydantic-core", "msgspec")  # in a pickled state, or in how a fold decodes


@cache
def code_fingerprint() -> str:
    """A digest of poolwise's source, the Python version and the libraries' versions (computed
    once, on first use: it reads every source file)."""
    digest = hashlib.sha256(f"format {FORMAT}; python {sys.version_info[:2]}".encode())
    for library in _LIBRARIES:
        digest.update(f"{library} {_version(library)}".encode())
    for package in _PACKAGES:
        for file in sorted((_ROOT / package).rglob("*.py")):
            digest.update(str(file.relative_to(_ROOT)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:32]


def _version(library: str) -> str:
    try:
        return importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


class Corrupt(Exception):
    """A snapshot that cannot be read back."""


@dataclass(slots=True)
class Snapshot:
    service: str
    seq: int  # the last log position folded into `state`
    fingerprint: str
    state: Any  # what the folder exported (`Snapshotting.export`)
    pending: list[Envelope] = field(default_factory=list)  # decided, not known to be in the log
    anchor: int | None = None  # CRC-32 of the log's message at `seq`: the log it was made from

    def encode(self) -> bytes:
        return self.encode_pickled(self.service, self.seq, self.fingerprint, pickled(self.state), self.pending,
                                   self.anchor)

    @staticmethod
    def encode_pickled(service: str, seq: int, fingerprint: str, state: bytes,
                       pending: Sequence[Envelope] = (), anchor: int | None = None) -> bytes:
        """A snapshot of a state pickled already by `pickled` (pickling must happen while the
        state stands still; compressing need not)."""
        runs, optional, body = named_in(state)
        payload = zlib.compress(pickle.dumps((body, list(pending)), protocol=pickle.HIGHEST_PROTOCOL), 1)
        # "runs": every stored object it names (what a save stores and a collection keeps);
        # "optional": those of them a start may do without (the id records' filters)
        header = {"format": FORMAT, "service": service, "seq": seq, "fingerprint": fingerprint,
                  "length": len(payload), "crc": zlib.crc32(payload), "anchor": anchor,
                  "runs": runs + optional, "optional": optional}
        data = json.dumps(header, sort_keys=True).encode() + b"\n" + payload
        if Snapshot.header(data) != header:  # (not saved: a snapshot that does not read back is none)
            raise Corrupt("its header does not read back")
        return data

    @staticmethod
    def header(data: bytes) -> dict[str, Any]:
        """The header line's fields. It has no size limit: it names every run of the state (~36
        bytes each), and a limit (there was one of 64 KiB) made a state with many runs (1,900:
        a few hundred trees' records) a snapshot no start could read."""
        end = data.find(b"\n")
        if end < 0:
            raise Corrupt("no header")
        try:
            found = json.loads(data[:end])
        except ValueError as exc:
            raise Corrupt(f"header: {exc}") from None
        if not isinstance(found, dict) or found.get("format") != FORMAT:
            raise Corrupt(f"format {found.get('format') if isinstance(found, dict) else found!r}, not {FORMAT}")
        return found

    @classmethod
    def decode(cls, data: bytes, part: int | None = None,
               runs: Mapping[str, Run | IdFilter] | None = None, *, freeze: bool = False) -> Snapshot:
        """The snapshot in `data`; with `part`, its state is only that part of a state exported as
        a tuple (the others are not loaded; a state stored whole is its own part 0). The runs its
        header names come from `runs`, else from the runs this process has (`RunStore.local`:
        `load_newest` fetches the others first); a run not found makes it corrupt (a filter not
        found is made again from the runs).

        `freeze`: what is alive once it loaded is frozen (`gc.freeze`), for a service that keeps
        the state as long as it runs and unfreezes it when it stops (`folding._restore`); without
        it (a replay, the what-if, a test) nothing is frozen, so nothing stays out of the
        collector's reach after the state is let go."""
        head = cls.header(data)
        found = dict(runs or {})
        optional = set(optional_named(head))
        for key in runs_named(head):
            if key not in found:
                run = used_ids.current_store().local(key)
                if run is None and key not in optional:
                    raise Corrupt(f"id run {key} not found")
                if run is not None:
                    found[key] = run
        payload = data[data.index(b"\n") + 1:]
        if len(payload) != head.get("length") or zlib.crc32(payload) != head.get("crc"):
            raise Corrupt("payload length or CRC does not match its header")
        collecting = gc.isenabled()
        gc.disable()  # a state is ~20 objects per gang kept: collections while it loaded took 2/3 of the load
        try:
            stored, pending = pickle.loads(zlib.decompress(payload))
            state = _unpickled(_loads(stored, found), part, found)
        except Exception as exc:  # a payload that does not load is as good as none
            raise Corrupt(f"payload: {type(exc).__name__}: {exc}") from None
        finally:
            if freeze:
                # The state lives as long as its folder: frozen, the collector's next passes do not
                # walk it (each pass would cost in proportion to the gangs kept), as the folds
                # freeze what they keep (`folding.gc_paused`). Before the collector is on again:
                # its first pass would walk all of it.
                gc.freeze()
            if collecting:
                gc.enable()
        anchor = head.get("anchor")
        return cls(str(head["service"]), int(head["seq"]), str(head["fingerprint"]), state, list(pending),
                   anchor if isinstance(anchor, int) else None)


class Parts:
    """A state exported as a tuple, each part pickled apart (`pickled`)."""

    __slots__ = ("pickled",)

    def __init__(self, pickled: list[bytes]) -> None:
        self.pickled = pickled

    def __reduce__(self) -> tuple[type[Parts], tuple[list[bytes]]]:
        return (Parts, (self.pickled,))


_RUNS_LINE = b"runs:"


def pickled_naming_files(value: object) -> bytes:
    """`value` pickled whole (a plain pickle's way) but for its runs and filters in files
    (`FileRun`, `FileFilter`): their keys, named on a first line, as a snapshot names them. For
    another process that can read the same files (`unpickled_from_files`): a plain pickle would
    carry every run's arrays, and that process would hold them in its heap."""
    runs: set[str] = set()
    filters: set[str] = set()
    out = io.BytesIO()
    _Pickler(out, runs, filters, (FileRun,), (FileFilter,)).dump(value)
    named = [*sorted(runs), *(_OPTIONAL + key for key in sorted(filters))]
    return _RUNS_LINE + " ".join(named).encode() + b"\n" + out.getvalue()


def unpickled_from_files(data: bytes, store: used_ids.RunStore) -> Any:
    """What `pickled_naming_files` made, its runs and filters taken from `store` (`local`: the
    files of the directory they were in). Corrupt if a run is not there; a filter that is not is
    left out (its record makes it again from the runs)."""
    runs, optional, body = named_in(data)
    found: dict[str, Run | IdFilter] = {}
    for key in runs + optional:
        run = store.local(key)
        if run is None and key not in optional:
            raise Corrupt(f"id run {key} not found")
        if run is not None:
            found[key] = run
    return _loads(body, found)


class _Pickler(pickle.Pickler):
    """A pickler that writes each id run (`used_ids.Run`) and stored filter (`used_ids.IdFilter`)
    as its key: a snapshot refers to them, stored apart once each (`SnapshotStore.save`), so that
    it does not grow with them. (Through the dispatch table, looked up by type in C: a
    `persistent_id` method would be a Python call for every object of the state, and pickling
    took up to twice as long.)"""

    def __init__(self, file: IO[bytes], runs: set[str], filters: set[str],
                 run_types: tuple[type, ...] | None = None, filter_types: tuple[type, ...] | None = None) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.runs, self.filters = runs, filters
        table = dict(copyreg.dispatch_table)
        for kind in _RUN_TYPES if run_types is None else run_types:
            table[kind] = self._reduce_run
        for other in _FILTER_TYPES if filter_types is None else filter_types:
            table[other] = self._reduce_filter
        self.dispatch_table = table

    def _reduce_run(self, run: Run) -> tuple[Any, tuple[str]]:
        self.runs.add(run.key)
        return (_run_named, (run.key,))

    def _reduce_filter(self, found: IdFilter) -> tuple[Any, tuple[str]]:
        self.filters.add(found.key)
        return (_filter_named, (found.key,))


_RESOLVING: contextvars.ContextVar[Mapping[str, Run | IdFilter] | None] = contextvars.ContextVar("runs",
                                                                                                default=None)


def _run_named(key: str) -> Run | IdFilter:
    """The run a snapshot names (while `_loads` loads it)."""
    runs = _RESOLVING.get()
    if runs is None or key not in runs:
        raise pickle.UnpicklingError(f"id run {key} is not among the snapshot's")
    return runs[key]


def _filter_named(key: str) -> IdFilter | None:
    """The filter a snapshot names, or None if it was not found (the record makes it again)."""
    found = (_RESOLVING.get() or {}).get(key)
    return found if isinstance(found, _FILTER_TYPES) else None


_RUN_TYPES = (used_ids.MemoryRun, FileRun)
_FILTER_TYPES = (used_ids.MemoryFilter, FileFilter)


def _dumps(state: object, runs: set[str], filters: set[str]) -> bytes:
    out = io.BytesIO()
    _Pickler(out, runs, filters).dump(state)
    return out.getvalue()


def _loads(data: bytes, runs: Mapping[str, Run | IdFilter]) -> Any:
    token = _RESOLVING.set(runs)
    try:
        return pickle.loads(data)
    finally:
        _RESOLVING.reset(token)


def pickled(state: object) -> bytes:
    """`state` pickled as a snapshot holds it: a tuple part by part (`Parts`), anything else whole;
    its id runs and filters as their keys, named on a first line (`named_in`: a filter's key after
    `_OPTIONAL`)."""
    runs: set[str] = set()
    filters: set[str] = set()
    if isinstance(state, tuple):
        state = Parts([_dumps(one, runs, filters) for one in state])
    body = _dumps(state, runs, filters)
    named = [*sorted(runs), *(_OPTIONAL + key for key in sorted(filters))]
    return _RUNS_LINE + " ".join(named).encode() + b"\n" + body


_OPTIONAL = "?"


def named_in(data: bytes) -> tuple[list[str], list[str], bytes]:
    """The keys of the runs a `pickled` state names, of the filters (optional), and the pickle."""
    if not data.startswith(_RUNS_LINE):
        return [], [], data  # (pickled by other means: names no runs)
    end = data.index(b"\n")
    keys = data[len(_RUNS_LINE):end].decode().split()
    return ([key for key in keys if not key.startswith(_OPTIONAL)],
            [key[len(_OPTIONAL):] for key in keys if key.startswith(_OPTIONAL)], data[end + 1:])


def split_pickled(data: bytes) -> tuple[list[str], bytes]:
    """The keys of every stored object (runs and filters) a `pickled` state names, and the pickle."""
    runs, optional, body = named_in(data)
    return runs + optional, body


def runs_named(head: Mapping[str, Any]) -> list[str]:
    """The keys of the runs (and filters) a snapshot's header names."""
    return _keys(head, "runs")


def optional_named(head: Mapping[str, Any]) -> list[str]:
    """The keys of those a start may do without (filters: made again from the runs)."""
    return _keys(head, "optional") if "optional" in head else []


def _keys(head: Mapping[str, Any], name: str) -> list[str]:
    keys = head.get(name)
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        raise Corrupt(f"its header's {name} are not a list of keys")
    return keys


def _unpickled(stored: object, part: int | None, runs: Mapping[str, Run | IdFilter]) -> Any:
    """The state `pickled` made (`stored`: loaded once), whole or only its `part`."""
    if not isinstance(stored, Parts):
        if part is not None and isinstance(stored, tuple):  # a tuple pickled whole (not by `pickled`)
            return stored[part]
        if part not in (None, 0):
            raise Corrupt(f"no part {part}: the state is stored whole")
        return stored
    if part is None:
        return tuple(_loads(one, runs) for one in stored.pickled)
    return _loads(stored.pickled[part], runs)
