"""The tree's recorded refusals of operator commands (`command_refusals`), judged again on the tree
as of their basis (`judge_again`): commands are not on the log, so a refusal is re-derived from
the command its record holds (`InputRejected.input`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from events import DecodeError, Envelope, InputRejected, decode_all, read_envelope, read_pack
from events.commands import COMMANDS
from events.subjects import PREFIX
from services.common.log import Stored
from services.common.memlog import subject_filter
from services.tree.domain.decide import Refused

if TYPE_CHECKING:
    from services.tree.service import TreeView

REFUSAL_SUBJECTS: tuple[str, ...] = (f"{PREFIX}.rejected.*",)  # where the tree records refused commands
# The tree service's name (`services.tree.service.SERVICE`). That module is imported where the
# tree is folded or judged, not here: it brings the projections (DuckDB, pyarrow), which the
# replay's child process, importing this package, never uses.
TREE = "tree"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A recorded refusal of a command, to judge again at its basis."""

    seq: int
    envelope: Envelope


def is_command_refusal(envelope: Envelope) -> bool:
    event = envelope.event
    return envelope.source == TREE and isinstance(event, InputRejected) and event.input_seq is None


_on_refusal_subject = subject_filter(REFUSAL_SUBJECTS)


def command_refusals(messages: Iterable[Stored]) -> list[Refusal]:
    """The recorded refusals of commands among `messages` (those on `REFUSAL_SUBJECTS`)."""
    out: list[Refusal] = []
    for stored in messages:
        if not _on_refusal_subject(stored.subject):
            continue
        try:
            envelopes = decode_all(stored.data, read_envelope, read_pack)
        except DecodeError:
            continue
        out.extend(Refusal(stored.seq, e) for e in envelopes if is_command_refusal(e))
    return out


def judge_again(view: TreeView, recorded: Envelope) -> Envelope | None:
    """The record the tree would write for this refused input on `view` (None: it would not refuse)."""
    from services.tree.service import INPUT_LIMIT, MODELS, judge, parse_command, rejection

    event = recorded.event
    assert isinstance(event, InputRejected)
    basis = recorded.basis or 0
    if event.input_type in COMMANDS:  # a request that was not a valid command
        parsed = parse_command(event.input_type, event.input)
        if not isinstance(parsed, Refused):
            return None
        if len(event.input) >= INPUT_LIMIT:  # recorded truncated: the reason is taken as recorded
            parsed = Refused(event.ref, event.rule, event.reason, event.field, event.tree)
        return rejection(parsed, event.input_type, event.input, basis, view.now)
    model = MODELS.get(event.input_type)
    if model is None:
        parsed = parse_command(event.input_type, event.input)  # an unknown op: refused by parsing
        return rejection(parsed, event.input_type, event.input, basis, view.now) \
            if isinstance(parsed, Refused) else None
    try:
        command = model.model_validate_json(event.input)
    except ValueError:
        return None
    decision = judge(view.state, command)  # type: ignore[arg-type]
    if not isinstance(decision, Refused):
        return None
    return rejection(decision, event.input_type, command.model_dump_json(), basis, view.now)
