"""What the admission fold returns to be published: `Outcome`s, and the outcomes it makes
(a gang finished, an input refused, a cycle or a pass that failed)."""

from __future__ import annotations

from typing import Literal, NamedTuple

from events import INPUT_QUOTE_LIMIT, CycleCompleted, Event, InputRejected, fault_text
from services.admission.domain.model import Gang
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.trusted import gang_finished

SERVICE = "admission"


class Outcome(NamedTuple):
    """Something to publish: the event body and a key unique among the outcomes of one basis.
    (A named tuple: made once per decision, and cheaper to make than a frozen dataclass.)"""

    event: Event
    key: str


# `Outcome(event, key)` for the outcomes made once per gang (a gang finished, admitted): the
# same instance, without the class call's Python `__new__` (~1.4k of its ~2.9k instructions).
# `new_outcome(Outcome, (event, key))`.
new_outcome = tuple.__new__


def failed_cycle(tree: str, service: str, trigger_seq: int, trigger_type: str, what: str,
                 error: Exception) -> list[Outcome]:
    """A cycle (admission's) or a pass (preemption's) whose decision raised: nothing is decided,
    the failure is published as a refusal of its trigger (rule `internal_error`, the exception's
    type and message), and it is closed all the same (`CycleCompleted` with no decisions), so
    that its readers (preemption, the next pass, the scenario runner) do not wait for it for ever.
    `what` names it in the reason ("the admission cycle of tree t at seq 8")."""
    refusal = InputRejected(tree=tree, ref=f"cycle:{trigger_seq}", input_type=trigger_type,
                            reason=f"{what} failed: {fault_text(error)}", rule="internal_error",
                            input_seq=trigger_seq)
    return [Outcome(refusal, "cycle_failed" if service == SERVICE else "pass_failed"),
            Outcome(CycleCompleted(tree=tree, service=service, trigger_seq=trigger_seq, decisions=0), "cycle")]


def finished_outcome(rt: TreeRuntime, gang: Gang,
                     outcome: Literal["done", "cancelled", "timed_out", "rejected"]) -> Outcome:
    return new_outcome(Outcome, (gang_finished(rt.name, gang.id, gang.pool, outcome), f"finished:{gang.id}"))


def rejected_outcome(rt: TreeRuntime, event: Event, seq: int, rule: str, message: str, ref: str) -> Outcome:
    return Outcome(InputRejected(tree=rt.name, ref=ref, input_type=event.type, reason=message, rule=rule,
                                 input=event.model_dump_json()[:INPUT_QUOTE_LIMIT], input_seq=seq), f"rejected:{seq}")
