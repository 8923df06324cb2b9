"""`events` and `services` are generic names on PyPI: make sure ours are the ones imported."""

from __future__ import annotations

from pathlib import Path

import events
import projections
import services

REPO = Path(__file__).resolve().parents[1]


def test_events_resolves_to_ours() -> None:
    assert Path(events.__file__).resolve().parent == REPO / "events"
    assert events.POOLWISE_EVENTS is True


def test_services_and_projections_resolve_to_ours() -> None:
    assert Path(services.__file__).resolve().parent == REPO / "services"
    assert Path(projections.__file__).resolve().parent == REPO / "projections"
