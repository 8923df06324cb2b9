"""`UsedIds`: a grow-only set of ids in ~16 bytes an id; the same answers as a set of strings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.tree.domain import used_ids
from services.tree.domain.used_ids import UsedIds, digest, digests_of


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30))
def test_the_vectorised_digest_is_the_scalar_one(ids: list[bytes]) -> None:
    assert [int(d) for d in digests_of(ids)] == [digest(i) for i in ids]


def test_digests_are_fixed_numbers() -> None:
    """The same in every process and every version: a log's readers must agree (a change here
    changes which ids read as used after a restart from a snapshot)."""
    assert digest(b"") == 0
    assert digest(b"gang-00000001") == 990701455465918358
    assert digest(b"12345678") == 7784157390450890505


@given(st.lists(st.text(max_size=12), max_size=200), st.lists(st.text(max_size=12), max_size=50))
def test_membership_is_a_sets_across_merges(added: list[str], asked: list[str]) -> None:
    ids = UsedIds()
    for id_ in added:
        ids.add(id_)
        ids._merge() if len(added) % 3 == 0 else None  # merged often, or left as strings
    for id_ in [*added, *asked]:
        assert (id_ in ids) == (id_ in set(added))
    assert len(ids) == len(set(added))


def test_a_million_ids_take_about_16_bytes_each(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = UsedIds(f"gang-{i:08d}" for i in range(200_000))
    ids._merge()
    assert all(f"gang-{i:08d}" in ids for i in range(0, 200_000, 101))
    assert sum(f"new-{i}" in ids for i in range(20_000)) == 0
    assert ids.nbytes < 20 * 200_000
    assert used_ids.BITS_PER_ID == 32  # a fresh id passes the bitmap ~1 time in 32


def test_equality_with_a_set() -> None:
    ids = UsedIds(["a", "b"])
    assert ids == {"a", "b"} and ids != {"a"} and "c" not in ids
