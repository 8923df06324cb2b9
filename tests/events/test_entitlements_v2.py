"""`EntitlementsComputed` v2: v1 events (always a tree's whole map) read as v2 that replace the
map, so an old log folds to the same entitlements; `fold_entitlements` is the one meaning of an
event for every reader."""

from __future__ import annotations

import json
from typing import Any

from events import EntitlementsComputed, Envelope, PoolEntitlement, at_seconds, decode, encode
from events.entitlement_map import EntitlementMap, fold_entitlements
from events.views import read_envelope
from services.admission.domain.state import AdmissionState


def _pool(path: str, cpu: float) -> dict[str, object]:
    return {"path": path, "entitlement": {"cpu": cpu}, "non_slack_entitlement": {"cpu": cpu},
            "slack_entitlement": {"cpu": 0.0}, "fair_share": cpu / 100, "usage_share": 0.0, "demand_share": 0.0,
            "dominant_kind": "cpu"}


def _v1(seq: int, *pools: dict[str, object]) -> bytes:
    """An envelope as v1 wrote it (no `removed`, `replace`, `part`, `parts`)."""
    return json.dumps({"id": f"v1-{seq}", "time": "2026-01-01T00:00:00Z", "source": "admission", "basis": seq,
                       "event": {"type": "EntitlementsComputed", "version": 1, "tree": "t", "capacity": {"cpu": 100.0},
                                 "slack_capacity": {}, "pools": list(pools), "alerts": []}}).encode()


def test_a_v1_event_reads_as_a_v3_event_that_replaces_the_map() -> None:
    data = _v1(3, _pool("/a", 60.0), _pool("/b", 40.0))
    for read in (decode(data), read_envelope(data)):
        event = read.event
        assert isinstance(event, EntitlementsComputed)  # the view does not take v1: pydantic upcasts
        assert (event.version, event.replace, event.part, event.parts, event.removed) == (3, True, 1, 1, [])
        assert [p.path for p in event.pools] == ["/a", "/b"]


def test_an_old_log_folds_to_the_same_entitlements() -> None:
    """Each v1 event is the whole map, whatever came before it (a pool gone from it is gone)."""
    log = [_v1(1, _pool("/a", 60.0), _pool("/b", 40.0)), _v1(2, _pool("/a", 50.0), _pool("/b", 50.0)),
           _v1(3, _pool("/a", 100.0))]
    state = AdmissionState()
    for seq, data in enumerate(log, start=1):
        event = decode(data).event
        state.apply(event, seq, 1.0)
        assert isinstance(event, EntitlementsComputed)
        assert dict(state.runtime("t").entitlements) == {p.path: p for p in event.pools}
    assert state.runtime("t").entitlement_seq == 3


def test_a_delta_changes_only_what_it_names_and_a_replace_starts_again() -> None:
    def pool(path: str, cpu: float) -> PoolEntitlement:
        return PoolEntitlement.model_validate(_pool(path, cpu))

    base = EntitlementsComputed(tree="t", capacity={"cpu": 100.0}, pools=[pool("/a", 1.0), pool("/b", 2.0)])
    delta = EntitlementsComputed(tree="t", capacity={"cpu": 100.0}, pools=[pool("/c", 3.0)], removed=["/a"],
                                 replace=False, part=1, parts=2)
    more = EntitlementsComputed(tree="t", capacity={"cpu": 100.0}, pools=[pool("/b", 5.0)], replace=False, part=2,
                                parts=2)
    held: dict[str, PoolEntitlement] = {}
    found = fold_entitlements(held, base)
    assert isinstance(found, EntitlementMap) and found.last is base
    found = fold_entitlements(found, delta)
    found = fold_entitlements(found, more)
    assert {p: e.entitlement["cpu"] for p, e in found.items()} == {"/b": 5.0, "/c": 3.0}
    assert found.last is more
    assert dict(fold_entitlements(found, base)) == {"/a": pool("/a", 1.0), "/b": pool("/b", 2.0)}
    assert held == {}  # a plain dict given is not changed


def test_v2_events_are_written_and_read_alike_by_both_codecs() -> None:
    event = EntitlementsComputed(tree="t", capacity={"cpu": 100.0},
                                 pools=[PoolEntitlement.model_validate(_pool("/a", 1.0))], removed=["/x"],
                                 replace=False, part=2, parts=3)
    envelope = Envelope(id="x", time=at_seconds(0.0), source="admission", basis=1, event=event)
    data = encode(envelope)
    assert decode(data) == envelope
    view: Any = read_envelope(data)  # a view (read_envelope is typed as the model it stands for)
    assert view.event.to_model() == event
    assert data == envelope.model_dump_json(exclude_none=True).encode()
