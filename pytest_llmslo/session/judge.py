"""A test judged: the configured gate after its body, the sweep extension, the capacity
search, an inconclusive level; and the per-test protocol that holds them (``run_test``),
which the plugin's ``pytest_runtest_call`` and ``llmslo run`` both follow."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pytest_llmslo import settings as S
from pytest_llmslo.capacity import CapacityResult, CapacitySearch, CapacitySpec
from pytest_llmslo.engines.base import EngineHandle
from pytest_llmslo.errors import ConfigError, EngineDiedError, Inconclusive, LoadError, SloViolation
from pytest_llmslo.records import LoadLevel, Run
from pytest_llmslo.stats import DEFAULT_CONFIDENCE

from .asked import asked_workload_gate
from .baseline import compare_with_baseline
from .faultgate import fault_gate
from .level import harness_cut, inconclusive, measure_level, point_notes
from .qualitygate import quality_gate, record_quality
from .state import Session, TestContext, primary

if TYPE_CHECKING:
    from pytest_llmslo.slo import Objective
    from pytest_llmslo.slo.judging import Judgement

__all__ = [
    "after_test",
    "bound",
    "call_test",
    "configured_gate",
    "extend",
    "extend_safely",
    "gate_kwargs",
    "inconclusive",
    "inconclusive_message",
    "load_test",
    "record_judgement",
    "run_test",
    "run_test_load",
    "search_capacity",
]

T = TypeVar("T")


def gate_kwargs(ts: S.TestSettings) -> dict[str, Any]:
    """The gates a test's settings set (``TestSettings.gate_kwargs``), as ``evaluate``
    takes them."""
    return ts.gate_kwargs()


def configured_gate(state: Session, ctx: TestContext) -> None:
    """After the body: the configured SLO (``--slo``, ini, marker ``objectives=``) when the
    body asserted none itself (on a level with a fault, over its steady part:
    ``faultgate``), and without objectives the error gate (a level where every
    request failed, or more than ``--slo-max-error-rate`` did, never passes); and the
    session's ``--slo-strict``/``--slo-confidence`` on what the body asserted with the
    defaults, so a CI gate made strict on the command line cannot pass on a point
    estimate."""
    from pytest_llmslo import slo
    from pytest_llmslo.slo.assertions import enforce

    __tracebackhide__ = True
    ts = ctx.settings
    idx = primary(ctx)
    if idx is None:
        return
    run = state.book.runs[idx]
    if fault_gate(state, ctx, idx, run) is not None:
        return
    if not ctx.verdicts and not ctx.recoveries:
        if ts.objectives:
            # As ``assert_goodput`` judges, the verdict recorded before it is raised.
            verdict = slo.evaluate(run, ts.objectives, **gate_kwargs(ts))
            ctx.verdicts.append(verdict)
            state.book.set_verdict(idx, verdict, ts.confidence)
            enforce(verdict)
            return
        verdict = slo.evaluate(run, (), max_error_rate=ts.max_error_rate, allow_no_objectives=True)
        # Only the error gates judge here: a test without objectives asked nothing else.
        if verdict.problems:
            state.book.set_verdict(idx, verdict, ts.confidence)
            raise SloViolation(
                verdict.summary_line()
                + " (no objectives configured: the failure gates alone judged the level)\n"
                + verdict.format(),
                verdict,
            )
        return
    if not (ts.strict or ts.confidence != DEFAULT_CONFIDENCE):
        return
    for verdict in list(ctx.verdicts):
        if verdict.strict == ts.strict and verdict.confidence == ts.confidence:
            continue
        objectives = tuple(r.objective for r in verdict.results)
        again = slo.evaluate(
            run,
            objectives,
            strict=ts.strict,
            confidence=ts.confidence,
            min_attainment=verdict.min_attainment,
            min_goodput_tok_s=verdict.min_goodput_tok_s,
        )
        state.book.set_verdict(idx, again, ts.confidence)
        if not again.passed:
            mode = "strict (upper confidence bounds)" if ts.strict else "the point estimates"
            raise SloViolation(
                f"SLO failed under {mode} at {ts.confidence:.0%} confidence "
                f"({ts.sources.get('slo_strict', '')}):\n"
                + again.summary_line()
                + "\n"
                + again.format(),
                again,
            )


def extend_safely(state: Session, node: str, ctx: TestContext) -> None:
    """The extension never changes the test's outcome; a problem there becomes a note."""
    try:
        extend(state, node, ctx)
    except Exception as exc:
        note = f"extension stopped: {exc}"
        ctx.notes.append(note)
        state.notes.append(f"{ctx.engine} {ctx.test}: {note}")


def extend(state: Session, node: str, ctx: TestContext) -> None:
    """``--slo-extend``: in the last level's test, run further levels (x1.5 each) until
    goodput falls below half its best; the extra points join the sweep, not the verdict."""
    if not (ctx.settings.extend and ctx.last_level and ctx.point_keys):
        return
    from pytest_llmslo import slo, sweepextend

    factory = state.roster.factory
    if factory is None:
        return
    handle = factory.running().get(ctx.engine)
    if handle is None:
        return
    ts = ctx.settings
    objectives = ts.objectives
    last_verdict = state.points[ctx.point_keys[0]].verdict
    gate = gate_kwargs(ts)
    if last_verdict is not None:
        objectives = tuple(r.objective for r in last_verdict.results)
        # The extra levels are judged as the test's own level was.
        gate = {
            "strict": last_verdict.strict,
            "confidence": last_verdict.confidence,
            "min_attainment": last_verdict.min_attainment,
            "min_goodput_tok_s": last_verdict.min_goodput_tok_s,
            "max_error_rate": last_verdict.max_error_rate,
        }
    if ts.strict or ts.confidence != DEFAULT_CONFIDENCE:
        # As in configured_gate: a session made strict holds for every level it judges.
        gate.update(strict=ts.strict, confidence=ts.confidence)
    if not objectives:
        ctx.notes.append("not extended: the extension needs objectives (goodput)")
        return
    added: list[str] = []
    for _ in range(S.MAX_EXTEND_LEVELS):
        pts = [p for p in state.points if p.engine == ctx.engine and p.test == ctx.test]
        nxt = sweepextend.extend_sweep(pts)
        if nxt is None:
            break
        # A level is only that load when it holds at least two rounds of requests.
        level_ts = ts
        if nxt.mode == "concurrency" and ts.requests is not None and ts.requests < 2 * nxt.value:
            level_ts = dataclasses.replace(ts, requests=int(2 * nxt.value))
        idx, run = measure_level(
            state, node, handle, nxt, level_ts, extended=True, stop_early_on=tuple(objectives)
        )
        verdict = slo.evaluate(run, objectives, **gate)
        state.book.set_verdict(idx, verdict, gate["confidence"])
        added.append(nxt.label)
    if added:
        note = f"extended past {ctx.level.label}: {', '.join(added)} (--slo-extend)"
        ctx.notes.append(note)
        state.notes.append(f"{ctx.engine} {ctx.test}: {note}")


def search_capacity(
    state: Session,
    node: str,
    handle: EngineHandle,
    ts: S.TestSettings,
    objectives: tuple[Objective, ...],
    spec: CapacitySpec,
) -> tuple[CapacityResult, Run | None]:
    """Run ``capacity.CapacitySearch`` with this test's settings (``spec``; a probe budget
    of 12 levels unless it sets one): every probe is a point of the test's sweep with its
    verdict. Returns the result and the run at the capacity (the last probe when no level
    passed), which becomes the test's primary point."""
    from pytest_llmslo import slo

    if not objectives:
        raise ConfigError(
            "a capacity search needs objectives: pass them (slo_capacity(ttft_p99 < 500)) or "
            "configure --slo / the marker's objectives="
        )
    if spec.max_probes is None:
        spec = dataclasses.replace(spec, max_probes=12)
    search = CapacitySearch(spec)
    ts = dataclasses.replace(ts, objectives=tuple(objectives))
    best: tuple[int, Run] | None = None
    last: tuple[int, Run] | None = None
    while (level := search.next_level()) is not None:
        idx, run = measure_level(state, node, handle, level, ts, stop_early_on=ts.objectives)
        verdict = slo.evaluate(run, ts.objectives, **gate_kwargs(ts))
        state.book.set_verdict(idx, verdict, ts.confidence)
        decided = run.health.valid or verdict.failures_decide
        passed: bool | None = verdict.passed if decided else None
        search.record(level, passed)
        last = (idx, run)
        if passed:
            best = (idx, run)
    result = search.result
    chosen = best or last
    ctx = state.contexts.get(node)
    cap = result.capacity.label if result.capacity is not None else "none"
    note = f"capacity {cap} after {result.probes} levels ({result.reason})"
    if ctx is not None:
        ctx.notes.append(note)
        ctx.capacity_result = result
        if chosen is not None:
            ctx.primary = chosen[0]
    engine = ctx.engine if ctx is not None else handle.config.display_name
    test = ctx.test if ctx is not None else node
    state.book.add_capacity(engine, test, result)
    state.notes.append(f"{node}: {note}")
    return result, (chosen[1] if chosen is not None else None)


def run_test_load(
    state: Session, node: str, handle: EngineHandle, level: LoadLevel, ts: S.TestSettings
) -> Run:
    """The load of test ``node``: its level, or, for a test that searches its capacity,
    the search (the run at the capacity, or the last probe when no level passed)."""
    ctx = state.contexts.get(node)
    if ctx is None or not ctx.capacity:
        return measure_level(state, node, handle, level, ts).run
    spec = CapacitySpec.from_level(ts.levels[0], max_value=ts.capacity_max)
    _result, found = search_capacity(state, node, handle, ts, ts.objectives, spec)
    if found is None:
        raise LoadError(f"{ctx.test}: the capacity search ran no level")
    return found


def inconclusive_message(state: Session, run: Run) -> str:
    """Why a level whose client run stayed invalid through the retries shows nothing
    about the engine (the ``Inconclusive`` error of its test)."""
    cut = run.meta.level_timeout
    if harness_cut(run) and cut is not None:
        cancelled = sum(1 for r in run.records if not r.ok)
        return (
            f"inconclusive at {run.level.label}: the level's time bound "
            f"({cut.get('bound_s')} s, --level-timeout) cut it during {cut.get('phase')}"
            f"{f' and its {cancelled} requests in flight' if cancelled else ''}; that is the "
            "harness's bound, not the engine's failure, and nothing was shown about its SLO. "
            "Raise --level-timeout (or set it to auto or none), or lower --duration or --warmup."
        )
    tries = 1 + sum(1 for n in point_notes(state, run) if n.startswith("try "))
    return (
        f"inconclusive at {run.level.label} after {tries} tr{'y' if tries == 1 else 'ies'}: "
        "the load generator, not the engine, was the bottleneck ("
        + "; ".join(run.health.reasons)
        + "). Nothing was shown about the engine's SLO: run on a quieter machine, with "
        "more client processes, or at a lower load."
    )


def after_test(state: Session, node: str, ctx: TestContext, *, body_error: bool = False) -> None:
    """What follows a test's body: the configured SLO (when the body asserted none) and
    the error gate, the sweep extension (also after a failed body: a failed last level is
    the usual case for extending) and the baseline comparison. Raises ``SloViolation`` or
    ``RegressionError`` for the test."""
    __tracebackhide__ = True
    if body_error:
        idx = primary(ctx)
        if idx is not None:
            # A fault level's recovery failed in the body: its steady part is judged all
            # the same, and the level reports both.
            with contextlib.suppress(Exception):
                fault_gate(state, ctx, idx, state.book.runs[idx], judge=False)
        extend_safely(state, node, ctx)
        return
    try:
        asked_workload_gate(state, ctx)
        configured_gate(state, ctx)
        quality_gate(state, ctx)
    finally:
        extend_safely(state, node, ctx)
    compare_with_baseline(state, ctx)


def load_test(
    state: Session, node: str, handle: EngineHandle, level: LoadLevel, ts: S.TestSettings
) -> Run:
    """The load of test ``node`` before its body runs (``run_test_load``); ``Inconclusive``
    when its client run stayed invalid through the retries (its body then does not run:
    nothing was shown about the engine)."""
    __tracebackhide__ = True
    run = run_test_load(state, node, handle, level, ts)
    if inconclusive(run, ts):
        raise Inconclusive(inconclusive_message(state, run))
    return run


@contextlib.contextmanager
def bound(state: Session, run: Run) -> Iterator[Run]:
    """``run`` as the current run of ``assert_goodput``/``assert_slo`` without a run, in
    the judging open in this context (one opened for the block when none is); what was
    judged and not read back yet when the block ends is recorded on the points of the runs
    judged (``record_judgement``)."""
    from pytest_llmslo.slo.judging import judging

    with judging(run=run) as (open_judging, _opened):
        try:
            yield run
        finally:
            open_judging.bind(None)
            ctx = state.current
            record_judgement(state, ctx, open_judging.take())


def record_judgement(state: Session, ctx: TestContext | None, judgement: Judgement) -> None:
    """Keep what a test's assertions judged: each verdict on the point of the run it
    judged (and, for the test ``ctx``, among its verdicts), each recovery among its
    recoveries, each quality verdict on its point (``record_quality``)."""
    from pytest_llmslo.slo import QualityVerdict, RecoveryVerdict

    for judged in judgement.verdicts:
        if ctx is not None:
            ctx.verdicts.append(judged.verdict)
        idx = state.book.index_of(judged.run)
        if idx is not None:
            conf = ctx.settings.confidence if ctx is not None else state.defaults.confidence
            state.book.set_verdict(idx, judged.verdict, conf)
    if ctx is None:
        return
    ctx.recoveries.extend(judgement.of(RecoveryVerdict))
    for quality in judgement.of(QualityVerdict):
        record_quality(state, ctx, quality)


def run_test(state: Session, node: str) -> Generator[None, T, T]:
    """The protocol of test ``node`` around its body, which runs where this yields (the
    body's result is sent in, its exception thrown in; what it returned is returned).

    While the body runs the test is the session's current one, and a judging is open
    (``slo.judging``: the one its load fixture bound the run in, else one of its own,
    with the test's engine for ``assert_startup``); after the body, what its assertions
    judged is read back and recorded (``record_judgement``), then ``after_test`` (the
    configured gate, the extension, the baseline comparison; after a body that raised,
    the extension alone, and nothing after an engine's death or an interrupt); then every
    level the test measured is told to ``hooks.level_result``. The plugin's
    ``pytest_runtest_call`` wrapper is ``yield from run_test(...)``; ``call_test`` runs
    it around a function (``llmslo run``)."""
    from pytest_llmslo.slo.judging import judging

    __tracebackhide__ = True
    ctx = state.contexts[node]
    state.current = ctx
    cold_start = state.roster.meta.get(ctx.engine, {}).get("cold_start")
    try:
        with judging() as (open_judging, _opened):
            open_judging.bind_engine(ctx.engine, cold_start)
            try:
                try:
                    result = yield
                finally:
                    record_judgement(state, ctx, open_judging.take())
            except BaseException as exc:
                if not isinstance(exc, (KeyboardInterrupt, EngineDiedError, GeneratorExit)):
                    after_test(state, node, ctx, body_error=True)
                raise
            finally:
                open_judging.bind_engine(None, None)
            after_test(state, node, ctx)
            return result
    finally:
        state.current = None
        state.report_levels(ctx)


def call_test(state: Session, node: str, body: Callable[[], T]) -> T:
    """``body()`` as the body of test ``node``, within ``run_test``'s protocol."""
    __tracebackhide__ = True
    protocol: Generator[None, T, T] = run_test(state, node)
    next(protocol)
    try:
        result = body()
    except BaseException as exc:
        protocol.throw(exc)  # raises it again, or the error after_test raised
        raise
    try:
        protocol.send(result)
    except StopIteration as done:
        return cast(T, done.value)
    raise RuntimeError("run_test yields once")
