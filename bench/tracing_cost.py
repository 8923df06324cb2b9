"""What metrics and traces cost admission's shell per gang, in this process's CPU time (issue 20).

    python -m bench.tracing_cost [GANGS] [ROUNDS]       # default 5000 gangs, 5 rounds

Admission's folder (`AdmissionFolder`, the shell `run_folder` drives) folds `GANGS` gangs of
`bench.workload` (100 leaves, every gang fits), a clock tick after every 100 (a cycle each),
each 100 gangs and their tick a batch inside `tracing.live(service, events)` as `run_folder` folds
one (with its `fold batch` span), its decisions counted as `run_folder` counts them
(`metrics.published`, `metrics.decisions_stored`) when recording. Four ways, alternating
round after round (a fresh fold each time; the best round of each is reported, and every round),
and, in rounds of their own, the CPU time spent inside the metrics' and tracing's calls (their
cost apart from the fold's, less sensitive to what else loads the machine):

- `off`: no metrics recorded, no provider (the default);
- `metrics`: recording on, no provider;
- `traced 1%`: recording on, a tracer provider (parent-based 1% sampler, a batch processor and an
  exporter that drops what it is given: the export's own cost is the exporter's), 1% of the gangs
  carrying a sampled context as the SDK makes them (it carries none for the others);
- `traced 100%`: the same, every gang sampled.

NATS and DuckDB are left out (the pipeline measures them: docs/performance.md, "Metrics on and
off (issue 20)"): this is the part that changes with metrics and traces on, measured without the
pipeline's noise. Nothing runs at import."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.submitter import carried, sampled
from bench.workload import Workload, config_events, envelope, gang_events
from events import ClockTicked, Envelope
from services.admission.folder import AdmissionFolder
from services.common import metrics, tracing

CYCLE_EVERY = 100
MODES = ("off", "metrics", "traced 1%", "traced 100%")


def _provider(ratio: float) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return provider


class Attributed:
    """CPU time (this thread's) spent inside the metrics' and tracing's own calls during a round:
    what they cost, apart from the fold's, whatever else loads the machine."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, function: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.thread_time() - began

        return timed


def one_round(gangs: int, mode: str, attributed: Attributed | None = None) -> float:
    """CPU µs per gang of folding `gangs` gangs and their cycles, `mode` on. `attributed`: the
    metrics' and tracing's calls timed into it (a round of its own: the timing costs too)."""
    w = Workload(gangs=gangs, leaves=100, fill=1.5)
    ratio = {"traced 1%": 0.01, "traced 100%": 1.0}.get(mode)
    folder = AdmissionFolder()
    seq = 0
    for event in config_events(w):
        seq += 1
        folder.step(envelope(event, f"c{seq}", 1.7e9), seq)
    batches: list[list[Envelope]] = [[]]  # a batch a cycle: CYCLE_EVERY gangs, then the tick
    for index, event in enumerate(gang_events(w)):
        sent = envelope(event, f"g{index}", 1.7e9 + index * 1e-3)
        traced = ratio is not None and sampled(index, ratio)  # (the SDK carries sampled contexts only)
        batches[-1].append(sent.model_copy(update={"trace": carried(index, ratio)}) if traced and ratio else sent)
        if (index + 1) % CYCLE_EVERY == 0:
            batches[-1].append(envelope(ClockTicked(), f"t{index}", 1.7e9 + index * 1e-3))
            batches.append([])
    provider = _provider(ratio) if ratio is not None else None
    metrics.reset()
    metrics.RECORDING = mode != "off"
    if provider is not None:
        tracing.install(provider)
    stored, published = metrics.decisions_stored, metrics.published
    patched = (tracing.decided, tracing.GangTraces.see, tracing.GangTraces.see_all, metrics.cycle_took)
    if attributed is not None:
        stored, published = attributed.wrap(stored), attributed.wrap(published)
        tracing.decided = attributed.wrap(patched[0])
        tracing.GangTraces.see = attributed.wrap(patched[1])  # type: ignore[method-assign]
        tracing.GangTraces.see_all = attributed.wrap(patched[2])  # type: ignore[method-assign]
        metrics.cycle_took = attributed.wrap(patched[3])
    try:
        began = time.process_time()
        for batch in batches:
            arrived = time.perf_counter()
            decided: list[Envelope] = []
            with tracing.live(folder.service, len(batch)) as current:  # (as `run_folder` folds a batch)
                for sent in batch:
                    seq += 1
                    decided += folder.step(sent, seq)
                if current is not None:
                    current.decisions = len(decided)
            if decided and metrics.RECORDING:
                stored(folder.service, [(arrived, len(decided))], time.perf_counter())
                published(folder.service, decided, folder)
        if provider is not None:
            provider.force_flush()
        took = time.process_time() - began
    finally:
        (tracing.decided, tracing.GangTraces.see, tracing.GangTraces.see_all,  # type: ignore[method-assign]
         metrics.cycle_took) = patched
        tracing.uninstall()
        metrics.reset()
        metrics.RECORDING = False
        if provider is not None:
            provider.shutdown()
    admitted = sum(1 for stored in folder.state.trees[w.tree].gangs.values() if stored.admitted_at is not None)
    assert admitted == gangs, (admitted, gangs)  # every gang decided: the same work each way
    return took * 1e6 / gangs


def run(gangs: int = 5000, rounds: int = 5) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per mode, each round's CPU µs per gang; and, from rounds of their own, the µs per gang spent
    inside the metrics' and tracing's calls."""
    out: dict[str, list[float]] = {mode: [] for mode in MODES}
    inside: dict[str, list[float]] = {mode: [] for mode in MODES[1:]}
    for _ in range(rounds):
        for mode in MODES:
            out[mode].append(round(one_round(gangs, mode), 1))
        for mode in MODES[1:]:
            attributed = Attributed()
            one_round(gangs, mode, attributed)
            inside[mode].append(round(attributed.seconds * 1e6 / gangs, 2))
    return out, inside


def main(argv: list[str]) -> None:
    gangs = int(argv[0]) if argv else 5000
    rounds = int(argv[1]) if len(argv) > 1 else 5
    found, inside = run(gangs, rounds)
    best = {mode: min(values) for mode, values in found.items()}
    print(json.dumps({"gangs": gangs, "rounds": found, "best": best,
                      "vs_off": {mode: round(value / best["off"] - 1, 3) for mode, value in best.items()},
                      "inside_us_per_gang": inside,
                      "inside_share_of_off": {mode: round(min(values) / best["off"], 3)
                                              for mode, values in inside.items()}}))


if __name__ == "__main__":
    main(sys.argv[1:])
