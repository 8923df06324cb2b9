"""Audit replay: re-derive every recorded decision from the log and report any that differ."""

from services.tools.replay.reader import read_log, verify_log, verify_url
from services.tools.replay.verify import DECISION_TYPES, Finding, Report, TypeCount, verify

__all__ = [
    "DECISION_TYPES",
    "Finding",
    "Report",
    "TypeCount",
    "read_log",
    "verify",
    "verify_log",
    "verify_url",
]
