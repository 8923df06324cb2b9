"""poolwise's wire contract: event models, the envelope, the codec, upcasters, subject names.

This package imports nothing else of poolwise's (`tests/test_events_smoke.py` checks that the
name `events` resolves here and not to the unrelated PyPI package of that name).
"""

from events.base import Event, Frozen, Resources
from events.codec import PACKABLE, DecodeError, decode, decode_all, encode, encode_pack, is_pack, peek_type
from events.config import DEFAULT_KINDS, PoolConfig, TreeOptions
from events.decisions import (
    CYCLE_DECISION_TYPES,
    INPUT_QUOTE_LIMIT,
    CycleCompleted,
    EntitlementsComputed,
    GangAdmitted,
    GangFinished,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    InputRejected,
    PoolEntitlement,
    PoolStarvationChanged,
    PreemptionRequested,
    StarvationStatus,
    fault_text,
)
from events.envelope import CURRENT_VERSIONS, EVENT_TYPES, AnyEvent, DerivedIds, Envelope, at_seconds, derived_id
from events.inputs import (
    TERMINAL_TASK_STATES,
    ClockTicked,
    GangCancelled,
    GangEnqueued,
    HostRegistered,
    HostRemoved,
    PoolConfigChanged,
    PoolDeleted,
    TaskSpec,
    TaskState,
    TaskStateChanged,
    TreeConfigured,
)
from events.views import as_model, event_class, read_envelope, read_pack, with_views

POOLWISE_EVENTS = True  # marker the smoke test looks for

__all__ = [
    "CURRENT_VERSIONS",
    "CYCLE_DECISION_TYPES",
    "DEFAULT_KINDS",
    "EVENT_TYPES",
    "INPUT_QUOTE_LIMIT",
    "PACKABLE",
    "POOLWISE_EVENTS",
    "TERMINAL_TASK_STATES",
    "AnyEvent",
    "ClockTicked",
    "CycleCompleted",
    "DecodeError",
    "DerivedIds",
    "EntitlementsComputed",
    "Envelope",
    "Event",
    "Frozen",
    "GangAdmitted",
    "GangCancelled",
    "GangEnqueued",
    "GangFinished",
    "GangMovedToQueue",
    "GangRequeued",
    "GangTimedOut",
    "HostRegistered",
    "HostRemoved",
    "InputRejected",
    "PoolConfig",
    "PoolConfigChanged",
    "PoolDeleted",
    "PoolEntitlement",
    "PoolStarvationChanged",
    "PreemptionRequested",
    "Resources",
    "StarvationStatus",
    "TaskSpec",
    "TaskState",
    "TaskStateChanged",
    "TreeConfigured",
    "TreeOptions",
    "as_model",
    "at_seconds",
    "decode",
    "decode_all",
    "derived_id",
    "encode",
    "encode_pack",
    "event_class",
    "fault_text",
    "is_pack",
    "peek_type",
    "read_envelope",
    "read_pack",
    "with_views",
]
