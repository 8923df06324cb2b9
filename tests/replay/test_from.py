"""`Verifier` started from snapshots (`--from`): each service's fold from its own snapshot (taken
anywhere: also where decisions made before it are recorded after it), the log fed from the earliest
start. On clean logs nothing is reported, whatever the cuts; on tampered logs exactly the whole
log's findings about decisions based after their service's start; a snapshot's `pending`
decisions count as re-derived."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from events import Envelope, decode_all, encode
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.common.snapshots import Snapshot, code_fingerprint
from services.tools.replay import DECISION_TYPES, Finding, Report, verify
from services.tools.replay.verify import Verifier, command_refusals
from tests.replay.biglog import build
from tests.replay.test_streaming import VARIANTS, admission_pair, logs, removed  # noqa: F401 (a fixture)
from tests.service.test_replay import holding

SERVICES = ("admission", "preemption", "tree")


def snapshot_of(messages: list[Stored], service: str, cut: int, *, explaining: bool = False,
                pending: list[Envelope] | None = None) -> Snapshot:
    """What `service`'s fold holds through position `cut`, as a snapshot read back from its bytes."""
    verifier = Verifier(command_refusals(messages))
    verifier.feed([m for m in messages if m.seq <= cut])
    return _taken(verifier, service, cut, explaining=explaining, pending=pending)


def snapshots_at(messages: list[Stored], cut_sets: list[dict[str, int]]) -> list[list[Snapshot]]:
    """`snapshot_of` every service of each set at its cut, all from one fold of the log, fed up to
    each cut in turn (a fold's state at a position does not depend on how the log was fed to it),
    instead of one fold from the start per snapshot. Each set gets snapshots of its own, read
    from the bytes: a verifier folds on from a snapshot's state in place."""
    wanted = sorted({(at, service) for cuts in cut_sets for service, at in cuts.items()})
    verifier = Verifier(command_refusals(messages))
    taken: dict[tuple[str, int], bytes] = {}
    fed = 0
    for at, service in wanted:
        if at > fed:
            verifier.feed([m for m in messages if fed < m.seq <= at])
            fed = at
        taken[service, at] = _taken(verifier, service, at).encode()
    return [[Snapshot.decode(taken[service, at]) for service, at in cuts.items()] for cuts in cut_sets]


def _taken(verifier: Verifier, service: str, cut: int, *, explaining: bool = False,
           pending: list[Envelope] | None = None) -> Snapshot:
    folds = verifier.derivation
    assert folds is not None
    state: Any = {"admission": folds.admission, "preemption": folds.preemption}.get(service)
    state = verifier.view if state is None else state.export()
    if explaining:  # the live service's `ExplainingFolder` exports (state, explain's notes)
        from services.admission.domain.explain_history import History

        state = (state, History())
    data = Snapshot(service, cut, code_fingerprint(), state, pending or []).encode()
    return Snapshot.decode(data)


def from_snapshots(messages: list[Stored], snapshots: list[Snapshot], chunk: int = 3, **scope: Any) -> Report:
    verifier = Verifier(command_refusals(messages), snapshots=snapshots, from_seq=max(s.seq for s in snapshots),
                        **scope)
    rest = [m for m in messages if m.seq > verifier.position]
    for start in range(0, len(rest), chunk):
        verifier.feed(rest[start:start + chunk])
    return verifier.finish()


def after_start(finding: Finding, starts: dict[str, int]) -> bool:
    """Whether `--from` with these starts checks the decision of `finding`."""
    start = starts.get(finding.source, 0)
    if finding.basis is None or not start:
        return True
    refusal = finding.source == "tree" and (finding.recorded or finding.derived or {}).get("event", {}).get(
        "input_seq", 0) is None
    return finding.basis >= start if refusal else finding.basis > start


def key(finding: Finding) -> tuple[Any, ...]:
    return (finding.kind, finding.id, finding.seq, finding.basis, finding.detail)


def cuts_of(messages: list[Stored]) -> list[dict[str, int]]:
    last = messages[-1].seq
    out = []
    for at in (1, last // 5, last // 3, last // 2, (2 * last) // 3, last - 2):
        out.append(dict.fromkeys(SERVICES, max(at, 1)))
    out.append({"admission": last // 2, "preemption": last // 3, "tree": (2 * last) // 3})
    out.append({"admission": last // 3, "preemption": (2 * last) // 3, "tree": last // 4})
    return out


@pytest.mark.parametrize("name", ["timeouts", "lifecycle", "two-trees", "refusals"])
def test_a_clean_log_verifies_from_any_snapshots(logs: dict[str, list[Stored]], name: str) -> None:  # noqa: F811
    messages = logs[name]
    whole = verify(messages)
    assert whole.ok
    cut_sets = cuts_of(messages)
    for chunk in (1, 4):
        for cuts, snapshots in zip(cut_sets, snapshots_at(messages, cut_sets), strict=True):
            report = from_snapshots(messages, snapshots, chunk)
            assert report.ok, (name, cuts, [f.line() for f in report.findings])
            assert report.starts == cuts and report.from_seq == max(cuts.values())
            assert report.messages == messages[-1].seq - min(cuts.values())
            checked = sum(c.recorded for c in report.counts.values())
            assert checked == sum(c.matched for c in report.counts.values())
            # every decision recorded after the earliest start is checked or counted as based before
            after = sum(1 for m in messages if m.seq > min(cuts.values()) for e in decode_all(m.data)
                        if e.type in DECISION_TYPES)
            assert checked + report.unchecked == after, (name, cuts)
            based_after = sum(1 for m in messages for e in decode_all(m.data) if e.type in DECISION_TYPES
                              and (e.basis or 0) > cuts[e.source] and (e.basis or 0) > 0)
            assert checked >= based_after, (name, cuts)


def small_lifecycle_log() -> list[Stored]:
    """`lifecycle_log` at a quarter of the gangs: 12 in rounds of 4, not 48 in rounds of 16. The
    same rounds, ticks and cycles (admissions that run and finish a round later, beside new
    enqueues) and the same types of event and decision, in a third of the messages."""
    async def run() -> list[Stored]:
        log = MemoryLog()
        await build(log, 12, per_round=4, leaves=3)
        return await log.read(1)

    return anyio.run(run, backend="asyncio")


def test_tampering_after_the_snapshots_is_found_as_from_the_start(logs: dict[str, list[Stored]]) -> None:  # noqa: F811
    # every tampering, at every set of cuts: the small lifecycle log shows what the large one does
    tampered = {"timeouts": logs["timeouts"], "lifecycle": small_lifecycle_log(), "two-trees": logs["two-trees"]}
    seen = set()
    for name, log in tampered.items():
        for variant, tamper in VARIANTS.items():
            if variant == "clean":
                continue
            messages = tamper(log)
            whole = verify(messages)
            cut_sets = cuts_of(messages)
            for cuts, snapshots in zip(cut_sets, snapshots_at(messages, cut_sets), strict=True):
                report = from_snapshots(messages, snapshots, 2)
                expected = sorted(key(f) for f in whole.findings if after_start(f, cuts))
                assert sorted(key(f) for f in report.findings) == expected, (name, variant, cuts)
                seen |= {(variant, f.kind) for f in report.findings}
    assert {"unexpected", "differs", "missing", "duplicate"} <= {kind for _, kind in seen}
    assert ("forged", "unexpected") in seen and ("changed", "differs") in seen


def test_a_forgery_based_before_the_start_is_not_checked(logs: dict[str, list[Stored]]) -> None:  # noqa: F811
    messages = logs["timeouts"]
    real, fake = admission_pair(messages)
    assert real.basis is not None
    index = holding(messages, real.id)
    last = messages[-1].seq
    tampered = [*messages, Stored(last + 1, "poolwise.decision.default.admission", encode(fake), fake.id)]
    cuts = dict.fromkeys(SERVICES, real.basis)  # the forgery claims a basis the snapshots are past
    report = from_snapshots(tampered, [snapshot_of(tampered, s, at) for s, at in cuts.items()])
    assert report.ok and report.unchecked >= 2  # the real admission (recorded after the cut) and the forgery
    assert messages[index].seq > real.basis
    earlier = dict.fromkeys(SERVICES, real.basis - 1)
    report = from_snapshots(tampered, [snapshot_of(tampered, s, at) for s, at in earlier.items()])
    assert [(f.kind, f.id) for f in report.findings] == [("unexpected", fake.id)]


def test_pending_decisions_count_as_rederived(logs: dict[str, list[Stored]]) -> None:  # noqa: F811
    messages = logs["timeouts"]
    real, _ = admission_pair(messages)
    assert real.basis is not None
    cut = real.basis  # the admission is decided at the cut, recorded after it
    snapshots = [snapshot_of(messages, "admission", cut, pending=[real], explaining=True),
                 *(snapshot_of(messages, s, cut) for s in ("preemption", "tree"))]
    report = from_snapshots(messages, snapshots)
    assert report.ok and report.counts["GangAdmitted"].matched >= 1
    without = from_snapshots(messages, [snapshot_of(messages, s, cut) for s in SERVICES])
    assert without.counts["GangAdmitted"].matched == report.counts["GangAdmitted"].matched - 1
    gone = removed(messages)  # a pending decision never recorded: missing
    report = from_snapshots(gone, [snapshot_of(gone, "admission", cut, pending=[real]),
                                   *(snapshot_of(gone, s, cut) for s in ("preemption", "tree"))])
    assert real.id in report.ids("missing")
    assert real.id not in from_snapshots(gone, [snapshot_of(gone, s, cut) for s in SERVICES]).ids()


def test_a_service_without_a_snapshot_folds_from_the_start(logs: dict[str, list[Stored]]) -> None:  # noqa: F811
    messages = logs["lifecycle"]
    cut = messages[-1].seq // 2
    snapshots = [snapshot_of(messages, "admission", cut), snapshot_of(messages, "tree", cut)]
    report = from_snapshots(messages, snapshots)
    assert report.ok and report.starts == {"admission": cut, "preemption": 0, "tree": cut}
    assert report.messages == messages[-1].seq  # read from the start for preemption
    assert report.counts["PreemptionRequested"].matched == verify(messages).counts["PreemptionRequested"].matched \
        if "PreemptionRequested" in report.counts else True
