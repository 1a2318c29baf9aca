"""The baseline a session compares with (``--slo-compare``, ``--slo-compare-fail``): read
before anything starts, and each test's primary point (or capacity) compared with the
same test, engine and level in it."""

from __future__ import annotations

from pytest_llmslo.document import Results
from pytest_llmslo.errors import ConfigError, RegressionError
from pytest_llmslo.history import gate, refs, store
from pytest_llmslo.history.trend import HistoryRun
from pytest_llmslo.regression import Judging, Pairing, compare_test, tolerances

from .state import Session, TestContext, baseline_root, history_root, primary

__all__ = ["compare_with_baseline", "load_baseline"]


def load_baseline(state: Session) -> None:
    """The baseline and tolerances of ``--slo-compare`` / ``--slo-compare-fail``, read
    before anything starts; a ``ConfigError`` naming the option when they cannot be."""
    settings = state.settings
    if not settings.compare and not settings.compare_fail:
        return

    try:
        state.tolerances = tolerances.parse_tolerances(settings.compare_fail)
    except (ConfigError, ValueError) as exc:
        label = settings.sources.get("slo_compare_fail", "--slo-compare-fail")
        raise ConfigError(f"{label}: {exc}") from None
    if settings.compare == gate.HISTORY:
        _load_history(state)
    elif settings.compare:
        label = settings.sources.get("slo_compare", "--slo-compare")
        runs = history_root(state) or state.rootpath / ".llmslo" / "runs"
        try:
            name, doc = refs.load_ref(
                settings.compare, runs_root=runs, baselines_root=baseline_root(state)
            )
        except (ConfigError, OSError, ValueError) as exc:
            raise ConfigError(f"{label}: {exc}") from None
        try:
            state.baseline = Results.from_document(doc, source=settings.compare)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{label}: a point cannot be read: {exc!r}") from None
        # A run of the history is named by its id: "latest" changes with every session.
        state.baseline_source = (
            settings.compare if name == settings.compare else (f"{settings.compare} (run {name})")
        )
        if not state.baseline.complete:
            state.notes.append(
                f"warning: baseline {settings.compare!r} is incomplete (its session was "
                "interrupted): tests it lacks are not compared"
            )


#: ``--slo-compare=history`` reads this many of the newest runs.
HISTORY_RUNS = 30


def _load_history(state: Session) -> None:
    """``--slo-compare=history``: the newest runs of the history, read before anything
    starts; a run that cannot be read is left out with a note."""
    root = history_root(state) or state.rootpath / ".llmslo" / "runs"
    entries, problems = store.list_runs(root)
    runs: list[HistoryRun] = []
    for entry in entries[-HISTORY_RUNS:]:
        try:
            runs.append(HistoryRun(entry, Results.from_document(store.read_run(entry.path))))
        except (ConfigError, KeyError, TypeError, ValueError) as exc:
            problems.append(f"{entry.path}: {exc}")
    state.notes.extend(f"warning: run history: {p}, left out" for p in problems)
    if not runs:
        state.notes.append(
            f"--slo-compare=history: no run in the run history under {root} yet: "
            "nothing is compared; this session's run starts it"
        )
    state.history_runs = runs
    state.baseline_source = f"the run history ({root})"


def _compare_with_history(state: Session, ctx: TestContext, idx: int) -> None:
    """``--slo-compare=history``: the test's point against the last stable segment of its
    history (``history.gate``)."""
    point = state.points[idx]
    key = f"{ctx.engine} {ctx.test} {point.level.label}"
    if ctx.capacity_result is not None:
        reason = "a capacity search is compared with a baseline, not the run history"
        _not_compared(state, ctx, key, reason, f"not compared: {reason}")
        return
    if not point.comparable:
        reason = "the level is not comparable: " + "; ".join(point.notes)
        _not_compared(state, ctx, key, reason, f"not compared, {reason}")
        return
    runs = gate.comparable_runs(state.history_runs or [], state.constants(), ctx.test, ctx.engine)
    judging = Judging.of(state.tolerances or None, confidence=ctx.settings.confidence)
    comparison = gate.judge_against_history(runs, point, judging)
    if comparison is None:
        reason = "no run of the history measured it with the same constants"
        _not_compared(state, ctx, key, reason, reason)
        return
    ctx.comparison = comparison
    state.comparisons.append((key, comparison))
    if comparison.regressed:
        __tracebackhide__ = True
        raise RegressionError(
            f"regression against the run history ({ctx.engine}, {point.level.label}):\n"
            f"{comparison.format()}",
            point.verdict,
        )


def compare_with_baseline(state: Session, ctx: TestContext) -> None:
    """``--slo-compare``: the same test, engine and level in the baseline; a regression
    beyond the tolerance fails this test. A test that searched its capacity is compared
    with the baseline's search of the same test and engine: by the capacity itself, and by
    the points at the capacity when both searches ended at the same level
    (``regression.compare_test``)."""
    if state.baseline is None and state.history_runs is None:
        return
    idx = primary(ctx)
    if idx is None:
        return
    if state.history_runs is not None:
        _compare_with_history(state, ctx, idx)
        return
    baseline = state.baseline
    if baseline is None:
        return
    point = state.points[idx]
    source = state.baseline_source
    capacity = ctx.capacity_result
    if not point.comparable:
        key = f"{ctx.engine} {ctx.test} {point.level.label}"
        reason = "the level is not comparable: " + "; ".join(point.notes)
        _not_compared(state, ctx, key, reason, f"not compared, {reason}")
        return
    # The level the test is judged by (a slo_load level may differ from its parameter).
    key = f"{ctx.engine} {ctx.test} {'capacity' if capacity is not None else point.level.label}"
    judging = Judging.of(state.tolerances or None, confidence=ctx.settings.confidence)
    pairing = Pairing(baseline, state.results(), judging)
    if capacity is not None:
        tested = compare_test(
            pairing, ctx.engine, ctx.test, (), capacity=capacity, at_capacity=point
        )
        comparison = tested.capacity
        missing = f"the baseline {source} has no capacity search of this test"
    else:
        tested = compare_test(pairing, ctx.engine, ctx.test, (point,))
        comparison = tested.points[0][1]
        missing = f"not in the baseline {source}"
    if comparison is None:
        _not_compared(state, ctx, key, missing, missing)
        return
    if comparison.constants_differ:
        reason = f"constants differ: {'; '.join(comparison.problems)}"
        _not_compared(state, ctx, key, reason, f"not compared, {reason}")
        return
    if not comparison.comparable:
        reason = "; ".join(comparison.problems)
        _not_compared(state, ctx, key, reason, f"not compared: {reason}")
        return
    ctx.comparison = comparison
    state.comparisons.append((key, comparison))
    if comparison.regressed:
        __tracebackhide__ = True
        where = "capacity" if capacity is not None else point.level.label
        raise RegressionError(
            f"regression against baseline {source} ({ctx.engine}, {where}):\n{comparison.format()}",
            point.verdict,
        )


def _not_compared(state: Session, ctx: TestContext, key: str, reason: str, line: str) -> None:
    """A comparison that did not run: said in the summary (``line``), in the test's own
    report section and in its JUnit properties (``reason``)."""
    state.mismatches.append(f"{key}: {line}")
    ctx.compare_skip = reason
    ctx.notes.append(f"not compared with baseline {state.baseline_source}: {reason}")
