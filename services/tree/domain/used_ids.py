"""`UsedIds`: a set of ids that only grows, kept in about 16 bytes an id.

Gang ids are single use in a tree, and so are task ids: they must be remembered long after their
gangs are forgotten (`gang_retention`). As Python strings in a set that is 100-150 bytes an id,
the one thing that would still grow with the history (a million gangs of two tasks: ~400 MB in
each service). Here the ids added lately stay strings in a small set (`_recent`), and every
`MERGE_AT` of them are merged into compact arrays:

- `_sorted`: a sorted NumPy array of 64-bit digests of the ids (`digest`: a fixed mix of the
  id's bytes, the same in every process, so every reader of the log agrees; computed for a
  whole merge at once with NumPy): the exact answer, by binary search;
- `_bits`: a bitmap of 32 bits an id, indexed by the id's CRC-32, in front of it: an id whose bit
  is clear was never merged. Most ids asked about are new ones (every gang and task id is
  checked when it comes), and the bitmap turns ~97% of them away for the price of a CRC
  (~0.3 µs) instead of a digest and a search (~2 µs); `_crcs` keeps each merged id's CRC so
  that the bitmap can be made again, larger, as the ids grow.

Two different ids share a digest with a chance of about n^2 / 2^65 (a million ids: one in 3.7e7;
the mix is not cryptographic: ids made on purpose to collide could be); such an id would read
as used. Every reader computes the same digests, so every reader folds the
same answer (replay included): a collision could refuse a fresh id, never make two services differ.

A worked example: after `add("g1")` and `add("g2")`, `"g1" in ids` is True and `"g3" in ids`
False, `len(ids)` is 2; merged, they take 2 x (8 + 4) bytes and 8 bytes of bitmap (its first
64 KiB are allocated at the first merge).
"""

from __future__ import annotations

from collections.abc import Iterable
from zlib import crc32

import numpy as np

MERGE_AT = 16_384  # ids kept as strings before they are merged into the arrays (at least)
BITS_PER_ID = 32  # bitmap bits per merged id (a new id passes it with a chance of ~1/32)
MIN_BITS = 1 << 19  # 64 KiB


_M = (1 << 64) - 1
_K0, _K1, _K2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def digest(data: bytes) -> int:
    """The 64-bit digest of an id's UTF-8 bytes, as a signed integer (NumPy searches int64 arrays
    fastest): its length and its 8-byte little-endian words (the last padded with zeros) mixed
    multiply-xorshift style, then SplitMix64's finaliser. `digests_of` computes the same for many
    ids at once, with NumPy."""
    h = (len(data) * _K0) & _M
    for at in range(0, len(data), 8):
        h = ((h ^ int.from_bytes(data[at:at + 8], "little")) * _K1) & _M
        h ^= h >> 31
    h ^= h >> 30
    h = (h * _K1) & _M
    h ^= h >> 27
    h = (h * _K2) & _M
    h ^= h >> 31
    return h - (1 << 64) if h >> 63 else h


def digests_of(ids: list[bytes]) -> np.ndarray:
    """`digest` of each id, vectorised: the ids as rows of 8-byte words."""
    lengths = np.fromiter(map(len, ids), dtype=np.uint64, count=len(ids))
    width = max(8, (int(lengths.max()) + 7) // 8 * 8)
    rows = np.array(ids, dtype=f"S{width}").view(np.uint64).reshape(len(ids), width // 8)
    k0, k1, k2 = np.uint64(_K0), np.uint64(_K1), np.uint64(_K2)
    s27, s30, s31 = np.uint64(27), np.uint64(30), np.uint64(31)
    with np.errstate(over="ignore"):
        h = lengths * k0
        words = (lengths + np.uint64(7)) // np.uint64(8)  # words of each id (zero words past its end are left out)
        for column in range(rows.shape[1]):
            mixed = (h ^ rows[:, column]) * k1
            mixed ^= mixed >> s31
            h = np.where(words > np.uint64(column), mixed, h)
        h ^= h >> s30
        h *= k1
        h ^= h >> s27
        h *= k2
        h ^= h >> s31
    return h.view(np.int64)


class UsedIds:
    """Ids added once, never removed; `in` says whether one was added (see the module doc)."""

    __slots__ = ("_bits", "_crcs", "_mask", "_next", "_recent", "_sorted")

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._recent: set[str] = set()
        self._sorted = np.empty(0, dtype=np.int64)
        self._crcs = np.empty(0, dtype=np.uint32)
        self._bits = bytearray()
        self._mask = 0  # bit positions: crc & mask
        # merged in bulk: each merge copies the arrays, so the larger they are the more ids wait
        # (amortised, every id is copied about 16 times over its life)
        self._next = MERGE_AT
        for id_ in ids:
            self.add(id_)

    def add(self, id_: str) -> None:
        recent = self._recent
        recent.add(id_)
        if len(recent) >= self._next:
            self._merge()

    def __contains__(self, id_: object) -> bool:
        if id_ in self._recent:
            return True
        if not self._mask or not isinstance(id_, str):
            return False
        data = id_.encode()
        bit = crc32(data) & self._mask
        if not self._bits[bit >> 3] >> (bit & 7) & 1:
            return False
        key = digest(data)
        found = self._sorted
        at = int(found.searchsorted(key))
        return at < len(found) and int(found[at]) == key

    def isdisjoint(self, ids: Iterable[str]) -> bool:
        return not any(id_ in self for id_ in ids)

    def __len__(self) -> int:
        """How many ids were added (merged ids that share a digest count once)."""
        return len(self._sorted) + len(self._recent)

    def __bool__(self) -> bool:
        return bool(self._recent) or bool(self._mask)

    @property
    def nbytes(self) -> int:
        """About what the ids take (the strings not merged yet counted at 80 bytes each)."""
        return int(self._sorted.nbytes + self._crcs.nbytes) + len(self._bits) + 80 * len(self._recent)

    def _merge(self) -> None:
        """Move the recent ids into the arrays (a few milliseconds per `MERGE_AT` ids)."""
        recent = list(map(str.encode, self._recent))
        self._recent = set()
        digests = digests_of(recent)
        crcs = np.fromiter(map(crc32, recent), dtype=np.uint32, count=len(recent))
        digests = np.unique(digests)  # sorted, without repeats
        old = self._sorted
        at = old.searchsorted(digests)
        fresh = (at >= len(old)) | (old[np.minimum(at, len(old) - 1)] != digests) if len(old) else slice(None)
        self._sorted = np.insert(old, at[fresh], digests[fresh])  # one copy of the array: O(n)
        self._crcs = np.concatenate([self._crcs, crcs])
        self._next = max(MERGE_AT, len(self._sorted) // 16)
        size = max(MIN_BITS, 1 << int(len(self._crcs) * BITS_PER_ID - 1).bit_length())
        if size > len(self._bits) * 8:  # (re)made larger: every merged id's bit again
            self._bits = bytearray(size // 8)
            self._mask = size - 1
            self._set_bits(self._crcs)
        else:
            self._set_bits(crcs)

    def _set_bits(self, crcs: np.ndarray) -> None:
        positions = crcs.astype(np.uint64) & np.uint64(self._mask)
        view = np.frombuffer(self._bits, dtype=np.uint8)
        np.bitwise_or.at(view, (positions >> np.uint64(3)).astype(np.intp),
                         (np.uint8(1) << (positions & np.uint64(7)).astype(np.uint8)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (set, frozenset)):
            return len(self) == len(other) and all(id_ in self for id_ in other)
        if isinstance(other, UsedIds):
            self._merge()
            other._merge()
            return bool(np.array_equal(self._sorted, other._sorted))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"UsedIds({len(self)} ids)"
