"""`Verifier` fed a log a piece at a time gives the report `verify` gives on the whole list, and
the report the whole-list verifier before it gave (`reference.py`, kept as the oracle), on real logs
made by the services and on tampered copies; `--to` and `--tree`; what findings say; the reader's
thread and process paths."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from events import CycleCompleted, Envelope, GangAdmitted, decode_all, encode
from events.commands import PoolUpsert
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.tools.replay import DECISION_TYPES, Report, verify
from services.tools.replay.reader import verify_log
from services.tools.replay.verify import Verifier, about, command_refusals
from services.tree.service import TreeService
from tests.replay import reference
from tests.replay.biglog import build
from tests.service.test_poison_input import poisoned_enqueue  # noqa: F401  (a fixture)
from tests.service.test_poison_input import run as poison_run
from tests.service.test_replay import (
    SHARED_FILES,
    TIMEOUTS,
    forged_admission,
    holding,
    rewritten,
    scenario_log,
)

TWO_TREES = """
name: two-trees
resources: [cpu]
hosts:
  - {name: h1, resources: {cpu: 100}, tags: [a]}
  - {name: h2, resources: {cpu: 100}, tags: [b]}
trees:
  - {name: ta, node_tag_filter: [a], gang_timeout: {default: 10, limit: 100, jitter: 0}}
  - {name: tb, node_tag_filter: [b]}
pools:
  - {path: /p, tree: ta, reservation: {cpu: 50}}
  - {path: /q, tree: tb, reservation: {cpu: 50}}
steps:
  - at: 0
    do:
      - enqueue: {gang: g1, tree: ta, pool: /p, tasks: 2, resources: {cpu: 1}}
      - enqueue: {gang: g2, tree: ta, pool: /p, tasks: 1, size: 2, resources: {cpu: 1}}
      - enqueue: {gang: g1, tree: tb, pool: /q, tasks: 2, resources: {cpu: 1}}
  - at: 5
    do:
      - task: {gang: g1, tree: ta, state: running}
      - task: {gang: g1, tree: tb, state: running}
  - at: 20
    do:
      - task: {gang: g1, tree: tb, state: succeeded}
"""


def upsert(path: str, require: str = "any", **config: object) -> PoolUpsert:
    return PoolUpsert(path=path, require=require, config=config)  # type: ignore[arg-type]


def refusals_log() -> list[Stored]:
    """The tree service's refusals, one of them judged on a tree that changed before it landed:
    /p/d (95 of /p's 100 cpu) is refused while /p/c reserves 10; a second instance lowers /p/c to 0
    between the refusal's basis and the refusal (judged on the tree after the change, it would be
    accepted). Then more refusals and changes, and an invalid request."""
    setup = [upsert("/p", "new", reservation={"cpu": 100}), upsert("/p/c", "new", reservation={"cpu": 10})]

    async def run() -> list[Stored]:
        first, second = MemoryLog(), MemoryLog()
        for log in (first, second):
            tree = TreeService(log)
            for command in setup:
                assert (await tree.handle(command)).ok
        basis = await first.last_seq()
        refused = await TreeService(first).handle(upsert("/p/d", "new", reservation={"cpu": 95}))
        assert not refused.ok
        assert (await TreeService(second).handle(upsert("/p/c", reservation={"cpu": 0}))).ok
        messages = await first.read(1)
        change = (await second.read(basis + 1))[0]
        log = [*messages[:basis], Stored(basis + 1, change.subject, change.data, change.msg_id),
               Stored(basis + 2, messages[basis].subject, messages[basis].data, messages[basis].msg_id)]
        rest = MemoryLog()
        for stored in log:
            await rest.append_raw(stored.subject, stored.data, stored.msg_id)
        tree = TreeService(rest)
        assert not (await tree.handle(upsert("/p/e", "new", reservation={"cpu": 101}))).ok
        assert (await tree.handle(upsert("/p/e", "new", reservation={"cpu": 50}))).ok
        assert not (await tree.handle(upsert("/p/f", "new", reservation={"cpu": 51}))).ok
        assert not (await tree.handle_raw("pool_upsert", b"{not json")).ok
        return await rest.read(1)

    return anyio.run(run, backend="asyncio")


def lifecycle_log() -> list[Stored]:
    async def run() -> list[Stored]:
        log = MemoryLog()
        await build(log, 48, per_round=16, leaves=3)
        return await log.read(1)

    return anyio.run(run, backend="asyncio")


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Stored]]:
    tmp = tmp_path_factory.mktemp("streaming")
    found = {"timeouts": scenario_log(TIMEOUTS, tmp), "two-trees": scenario_log(TWO_TREES, tmp),
             "lifecycle": lifecycle_log(), "refusals": refusals_log()}
    for path in SHARED_FILES:
        found[path.stem] = scenario_log(path.read_text(), tmp)
    return found


# --- tampering ------------------------------------------------------------------------------------------


def _append(messages: list[Stored], envelope: Envelope, subject: str, msg_id: str | None) -> list[Stored]:
    return [*messages, Stored(messages[-1].seq + 1, subject, encode(envelope), msg_id)]


def admission_pair(messages: list[Stored]) -> tuple[Envelope, Envelope]:
    return forged_admission(messages, "g2")


def forged(messages: list[Stored]) -> list[Stored]:
    _, fake = admission_pair(messages)
    return _append(messages, fake, "poolwise.decision.x.admission", fake.id)


def copied(messages: list[Stored]) -> list[Stored]:
    real, fake = admission_pair(messages)
    return _append(messages, fake.model_copy(update={"id": real.id}), "poolwise.decision.x.admission", None)


def changed(messages: list[Stored]) -> list[Stored]:
    real, fake = admission_pair(messages)
    index = holding(messages, real.id)
    out = list(messages)
    out[index] = rewritten(messages[index], real.id, fake.model_copy(update={"id": real.id}))
    return out


def removed(messages: list[Stored]) -> list[Stored]:
    real, _ = admission_pair(messages)
    index = holding(messages, real.id)
    out = list(messages)
    if len(decode_all(messages[index].data)) == 1:
        del out[index]  # a gap in the sequences
    else:
        out[index] = rewritten(messages[index], real.id, None)
    return out


def malformed(messages: list[Stored]) -> list[Stored]:
    last = messages[-1].seq
    return [*messages, Stored(last + 1, "poolwise.gang.default", b'{"nonsense": 1}'),
            Stored(last + 2, "poolwise.config.default", b"not json")]


def recorded_twice(messages: list[Stored]) -> list[Stored]:
    """A decision's message stored again at the end (as after the de-duplication window)."""
    real, _ = admission_pair(messages)
    stored = messages[holding(messages, real.id)]
    return [*messages, Stored(messages[-1].seq + 1, stored.subject, stored.data, None)]


def moved(messages: list[Stored]) -> list[Stored]:
    """A decision's message moved, unchanged and where it was, onto another tree's admission subject."""
    real, _ = admission_pair(messages)
    index = holding(messages, real.id)
    out = list(messages)
    out[index] = Stored(messages[index].seq, "poolwise.decision.x.admission", messages[index].data, None)
    return out


VARIANTS: dict[str, Callable[[list[Stored]], list[Stored]]] = {
    "clean": lambda m: m, "forged": forged, "copied": copied, "changed": changed, "removed": removed,
    "malformed": malformed, "recorded_twice": recorded_twice, "moved": moved,
}


def summary(report: Report) -> tuple[Any, ...]:
    return ([(f.kind, f.id, f.type, f.source, f.seq, f.basis, f.detail, f.about) for f in report.findings],
            {t: (c.recorded, c.derived, c.matched) for t, c in report.counts.items() if c.recorded or c.derived},
            report.messages, report.malformed)


def streamed(messages: list[Stored], chunk: int, **scope: Any) -> Report:
    verifier = Verifier(command_refusals(messages), **scope)
    for start in range(0, len(messages), chunk):
        verifier.feed(messages[start:start + chunk])
    return verifier.finish()


def has_admission(messages: list[Stored]) -> bool:
    return any(isinstance(e.event, GangAdmitted) for m in messages for e in decode_all(m.data)
               if e.type in DECISION_TYPES)


def cases(logs: dict[str, list[Stored]]) -> list[tuple[str, str, list[Stored]]]:
    out = []
    for name, messages in logs.items():
        for variant, tamper in VARIANTS.items():
            if variant == "clean" or has_admission(messages):
                out.append((name, variant, tamper(messages)))
    return out


# --- the same report, whatever the pieces ------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_pieces_give_the_whole_list_report(logs: dict[str, list[Stored]], chunk: int) -> None:
    seen_kinds = set()
    for name, variant, messages in cases(logs):
        whole = verify(messages)
        assert summary(streamed(messages, chunk)) == summary(whole), (name, variant)
        seen_kinds |= {f.kind for f in whole.findings}
        assert whole.ok == (variant == "clean"), (name, variant, [f.line() for f in whole.findings])
    assert seen_kinds == {"differs", "unexpected", "missing", "duplicate"}


def test_the_report_is_the_whole_list_verifiers(logs: dict[str, list[Stored]]) -> None:
    """The streaming verifier finds what the verifier that held the whole log found, kind by kind,
    in the words a finding says (describe.py: both say them so)."""
    words = set()
    for name, variant, messages in cases(logs):
        old, new = reference.verify(messages), streamed(messages, 2)
        assert sorted((f.kind, f.id, f.seq, f.basis, f.detail) for f in new.findings) == \
            sorted((f.kind, f.id, f.seq, f.basis, f.detail) for f in old.findings), (name, variant)
        words |= {(f.kind, f.detail) for f in old.findings if f.kind != "differs"}
        words |= {(f.kind, f.detail.rsplit(' "poolwise.decision.', 1)[0]) for f in old.findings
                  if f.detail.startswith("subject")}
        assert {t: (c.recorded, c.derived, c.matched) for t, c in new.counts.items()} == \
            {t: (c.recorded, c.derived, c.matched) for t, c in old.counts.items()}, (name, variant)
        assert (new.messages, new.malformed) == (old.messages, old.malformed)
    assert words == {("unexpected", "recorded, but no service decides it from this log"),
                     ("missing", "re-derived, but not in the log"), ("duplicate", "the id is recorded more than once"),
                     ("differs", 'subject: "poolwise.decision.x.admission" recorded !=')}, words


def test_a_refusal_is_judged_on_the_tree_at_its_basis(logs: dict[str, list[Stored]]) -> None:
    messages = logs["refusals"]
    report = streamed(messages, 1)
    assert report.ok, [f.line() for f in report.findings]
    assert report.counts["InputRejected"].matched == 4
    # the same refusal claiming the later basis (after /p/c went to 0) is not the tree's decision
    (refusal,) = [r for r in command_refusals(messages) if "/p/d" in r.envelope.event.input]  # type: ignore[union-attr]
    later = refusal.envelope.model_copy(update={"basis": refusal.seq - 1, "id": "refused-later"})
    tampered = [*messages[:refusal.seq - 1], Stored(refusal.seq, "poolwise.rejected.default", encode(later)),
                *messages[refusal.seq:]]
    for chunk in (1, 2, len(tampered)):
        assert [(f.kind, f.id) for f in streamed(tampered, chunk).findings] == [("unexpected", "refused-later")]


def test_what_is_held_is_what_is_in_flight(logs: dict[str, list[Stored]]) -> None:
    """Fed one position at a time, the verifier holds only decisions made and not read yet (or read
    and not made yet): never more than a cycle's, however long the log."""
    messages = logs["lifecycle"]
    verifier = Verifier(command_refusals(messages))
    most = 0
    for stored in messages:
        verifier.feed([stored])
        most = max(most, verifier.in_flight)
    assert verifier.finish().ok
    assert 0 < most <= 2 * 16 + 4, most  # one round's gangs admitted (pack) and finished, a few more
    assert len(verifier.settled) == sum(c.matched for c in verifier.report.counts.values())


# --- scope ------------------------------------------------------------------------------------------------


def test_to_every_cut_of_a_clean_log_verifies(logs: dict[str, list[Stored]]) -> None:
    for name in ("timeouts", "lifecycle", "refusals", "two-trees"):
        messages = logs[name]
        for cut in range(1, messages[-1].seq + 1, max(1, len(messages) // 40)):
            for chunk in (1, 3, len(messages)):
                report = streamed(messages, chunk, to_seq=cut)
                assert report.ok, (name, cut, chunk, [f.line() for f in report.findings])
                assert report.last_seq == cut and report.messages == cut
                through = sum(1 for m in messages[:cut] for e in decode_all(m.data) if e.type in DECISION_TYPES)
                assert sum(c.recorded for c in report.counts.values()) >= through


def test_to_checks_what_is_recorded_by_then_and_what_was_decided_by_then(logs: dict[str, list[Stored]]) -> None:
    messages = logs["timeouts"]
    tampered = forged(messages)
    last = tampered[-1].seq
    assert streamed(tampered, 2, to_seq=last - 1).ok  # the forgery lands after the cut
    assert [f.kind for f in streamed(tampered, 2, to_seq=last).findings] == ["unexpected"]
    # a decision made at or before the cut and recorded after it, then lost: missing
    real, _ = admission_pair(messages)
    index = holding(messages, real.id)
    assert real.basis is not None and real.basis < messages[index].seq
    gone = removed(messages)
    report = streamed(gone, 1, to_seq=real.basis)
    assert real.id in report.ids("missing") and report.read_to == gone[-1].seq  # read to the end for it
    assert streamed(messages, 1, to_seq=real.basis).ok


def test_to_stops_reading_once_every_decision_made_by_then_is_found(logs: dict[str, list[Stored]]) -> None:
    messages = logs["lifecycle"]
    cut = len(messages) // 3
    verifier = Verifier(command_refusals(messages[:cut]), to_seq=cut)
    fed = 0
    for stored in messages:
        if verifier.done:
            break
        verifier.feed([stored])
        fed = stored.seq
    assert cut <= fed < len(messages) - 10
    report = verifier.finish()
    assert report.ok and report.read_to == fed


def test_tree_reports_one_trees_decisions(logs: dict[str, list[Stored]]) -> None:
    messages = logs["two-trees"]
    everything = verify(messages)
    assert everything.ok
    ta, tb = verify(messages, tree="ta"), verify(messages, tree="tb")
    assert ta.ok and tb.ok and ta.tree == "ta"
    for t, count in everything.counts.items():
        assert ta.count(t).recorded + tb.count(t).recorded == count.recorded, t
    assert ta.counts["GangTimedOut"].recorded == 1 and tb.count("GangTimedOut").recorded == 0
    assert ta.counts["GangAdmitted"].recorded == tb.counts["GangAdmitted"].recorded == 1

    real = next(e for m in messages for e in decode_all(m.data) if isinstance(e.event, GangAdmitted)
                and e.event.tree == "tb")
    fake = real.model_copy(update={"id": "forged-in-tb", "event": real.event.model_copy(update={"gang": "g9"})})
    tampered = _append(messages, fake, "poolwise.decision.tb.admission", fake.id)
    for chunk in (1, 4):
        assert streamed(tampered, chunk, tree="ta").ok
        assert [(f.kind, f.id) for f in streamed(tampered, chunk, tree="tb").findings] == \
            [("unexpected", "forged-in-tb")]
    assert streamed(tampered, 1, tree="nowhere").counts == {}


# --- what a finding says -------------------------------------------------------------------------------


def test_a_finding_names_what_the_decision_was_about(logs: dict[str, list[Stored]]) -> None:
    (finding,) = verify(forged(logs["timeouts"])).findings
    line = finding.line()
    assert line.startswith(f"unexpected {finding.id}  GangAdmitted by admission, seq ")
    assert "tree=default gang=g2 pool=/p queue=" in line and "tasks=[" in line, line
    first = verify(changed(logs["timeouts"])).findings[0]
    assert first.kind == "differs" and "gang=g2 pool=/p" in first.about  # as recorded
    assert 'event.gang: "g2" recorded != ' in first.detail and first.line().endswith(first.detail)


def test_about_is_generic_and_short() -> None:
    wired = {"event": {"type": "GangAdmitted", "version": 1, "tree": "t", "gang": "g", "pool": "/a b",
                       "tasks": [{"id": f"g/{i}", "resources": {"cpu": 1}} for i in range(5)],
                       "capacity": {"cpu": 1.5, "memory": 2, "disk": 3, "gpu": 0}, "reason": "x" * 300,
                       "trigger_seq": 7, "alerts": [], "field": None}}
    text = about(wired)
    assert text.startswith('tree=t gang=g pool="/a b" tasks=[5: g/0, g/1, g/2, …] '
                           "capacity={cpu: 1.5, memory: 2, disk: 3, …} reason=xxx"), text
    assert "trigger_seq=7" in text and "alerts" not in text and "field" not in text and "type" not in text
    assert about({"event": {"input": "y" * 10_000, "more": "z" * 10_000}}).__len__() <= 240
    assert about(None) == ""


# --- the reader: a thread, or a process -----------------------------------------------------------------


@pytest.mark.parametrize("process_from", [None, 1])
def test_the_reader_gives_the_same_report(logs: dict[str, list[Stored]], process_from: int | None) -> None:
    variants = [(variant, VARIANTS[variant](logs["timeouts"])) for variant in ("clean", "forged", "changed", "copied")]
    for name, messages in [*variants, ("refusals", logs["refusals"])]:

        async def run(messages: list[Stored] = messages) -> tuple[Report, list[int]]:
            log = MemoryLog()
            for stored in messages:
                await log.append_raw(stored.subject, stored.data, stored.msg_id)
            steps: list[int] = []
            report = await verify_log(log, chunk=3, process_from=process_from,
                                      on_progress=lambda step: steps.append(step.position))
            return report, steps

        got, steps = anyio.run(run, backend="asyncio")
        assert summary(got) == summary(verify(messages)), name
        assert steps[0] == 0 and steps[-1] == len(messages) and steps == sorted(steps), steps


def test_the_process_path_passes_scope_and_stops_early(logs: dict[str, list[Stored]]) -> None:
    messages = logs["lifecycle"]

    async def run() -> Report:
        log = MemoryLog()
        for stored in messages:
            await log.append_raw(stored.subject, stored.data, stored.msg_id)
        return await verify_log(log, chunk=5, process_from=1, to_seq=40, tree="big")

    report = anyio.run(run, backend="asyncio")
    assert report.ok and report.to_seq == 40 and report.tree == "big" and report.last_seq == 40
    assert report.read_to < len(messages)


def test_the_shared_oracle_is_the_old_module() -> None:
    """`reference.py` is the verifier as it was before streaming (kept as the oracle, not used)."""
    text = (Path(reference.__file__)).read_text()
    assert "def verify(messages: Sequence[Stored]) -> Report:" in text


# --- admission's state folded once for both services (`services/tools/replay/shared.py`) ------------------------


def _preemption_decisions(messages: list[Stored]) -> list[Envelope]:
    return [e for m in messages for e in decode_all(m.data) if e.source == "preemption" and e.type in DECISION_TYPES]


def preemption_tampered(messages: list[Stored]) -> dict[str, tuple[str, list[Stored]]]:
    """A log's preemption decisions tampered with: one changed, one removed, one forged (the id each names)."""
    decisions = _preemption_decisions(messages)
    if not decisions:
        return {}
    first, last = decisions[0], decisions[-1]
    out: dict[str, tuple[str, list[Stored]]] = {}
    event = first.event
    if isinstance(event, CycleCompleted):
        fake = first.model_copy(update={"event": event.model_copy(update={"decisions": event.decisions + 1})})
        index = holding(messages, first.id)
        tampered = list(messages)
        tampered[index] = rewritten(messages[index], first.id, fake)
        out["changed"] = (first.id, tampered)
    index = holding(messages, last.id)
    if len(decode_all(messages[index].data)) > 1:
        tampered = list(messages)
        tampered[index] = rewritten(messages[index], last.id, None)
        out["removed"] = (last.id, tampered)
    forged = first.model_copy(update={"id": "forged-preemption"})
    out["forged"] = ("forged-preemption", _append(messages, forged, "poolwise.decision.x.preemption", None))
    return out


def test_shared_folds_give_each_services_own_folds_report_on_a_clean_log(logs: dict[str, list[Stored]]) -> None:
    for name, messages in logs.items():
        shared, own = streamed(messages, 3, shared=True), streamed(messages, 3)
        assert shared.shared and not own.shared
        assert shared.ok, (name, [f.line() for f in shared.findings])
        assert summary(shared) == summary(own), name


def test_shared_folds_find_a_tampered_decision_of_either_service(logs: dict[str, list[Stored]]) -> None:
    """Admission's tampered decisions are found as each service's own folds find them; preemption's
    (changed, removed, forged) are found too. Whatever the shared folds find, `verify` and the
    reader report the own folds' report (`test_pieces_give_the_whole_list_report`)."""
    preempting = 0
    for name, variant, messages in cases(logs):
        shared, own = streamed(messages, 2, shared=True), streamed(messages, 2)
        assert shared.ok == own.ok, (name, variant)
        assert {(f.kind, f.id) for f in shared.findings if f.source != "preemption"} == \
            {(f.kind, f.id) for f in own.findings if f.source != "preemption"}, (name, variant)
    for name, messages in logs.items():
        for variant, (key, tampered) in preemption_tampered(messages).items():
            preempting += 1
            for report in (streamed(tampered, 2, shared=True), streamed(tampered, 2)):
                assert key in report.ids(), (name, variant, report.shared, [f.line() for f in report.findings])
    assert preempting >= 3


def test_verify_reports_the_own_folds_findings(logs: dict[str, list[Stored]]) -> None:
    messages = changed(logs["timeouts"])
    report = verify(messages)
    assert not report.ok and not report.shared
    assert summary(report) == summary(streamed(messages, 5))
    assert verify(logs["timeouts"]).shared


def test_shared_folds_refuse_a_poison_input_as_both_services_did(poisoned_enqueue: None,  # noqa: F811
                                                                 tmp_path: Path) -> None:
    """Admission's fold raises on an input (live: both services refuse it, each its own fold):
    folded once for both, both refusals are re-derived (and the fold goes on as both did)."""
    _, messages = poison_run(MemoryLog(), tmp_path)
    report = streamed(messages, 2, shared=True)
    assert report.shared and report.ok, [f.line() for f in report.findings]
    assert report.counts["InputRejected"].matched == 2
