"""What a session writes: the results document, the report formats (``report.formats``),
the saved baseline (``finish``), and the JUnit properties of its tests and suite."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_llmslo.document import write_atomic, write_atomic_bytes, write_atomic_text
from pytest_llmslo.history import provenance, store
from pytest_llmslo.history.trend import HistoryRun, read_runs
from pytest_llmslo.redact import redact
from pytest_llmslo.regression import baselines

from .state import (
    Session,
    TestContext,
    baseline_root,
    history_root,
    primary,
    resolve_path,
)

__all__ = [
    "finish",
    "json_path",
    "junit_outcomes",
    "junit_properties",
    "output_flags",
    "output_path",
    "remember_run",
    "save_session_baseline",
    "suite_properties",
    "write_json",
    "write_reports",
]


def output_flags() -> dict[str, str]:
    """The output settings of a session and their command-line flags: the results
    document's and each report format's (``report.formats.FORMATS``)."""
    from pytest_llmslo.report.formats import FORMATS

    return {"slo_json": "--slo-json", **{f.option: f.flag for f in FORMATS.values()}}


def json_path(state: Session) -> Path | None:
    """Where the results document goes (``--slo-json``), or None."""
    return output_path(state, "slo_json")


def output_path(state: Session, name: str) -> Path | None:
    """The resolved path of output setting ``name`` (``output_flags``)."""
    p = state.settings.outputs.get(name)
    if not p:
        return None
    return resolve_path(state, p, name)


#: A report that shows the run's trend reads this many of the newest runs of the history.
TREND_RUNS = 30


def _history_for_reports(state: Session) -> list[HistoryRun]:
    """The runs of the history before this session's, for the reports that show its
    trend (those read for ``--slo-compare=history`` when they were); a history that
    cannot be read is a note."""
    if state.history_runs is not None:
        return list(state.history_runs)
    root = history_root(state)
    if root is None:
        return []
    runs, problems = read_runs(root, TREND_RUNS)
    state.notes.extend(f"warning: run history: {p} (not in the report's trend)" for p in problems)
    return runs


def write_reports(
    state: Session, *, complete: bool, record: Mapping[str, Any] | None = None
) -> None:
    """The report formats asked for (``report.formats``: the Markdown summary, the SVG
    chart, the CSV table, the HTML page), each written whole or not at all; errors are
    noted, and fail the session as a lost results file does. ``record``: the ``run``
    record the history will keep for this run; a format that shows several runs then
    shows the run's trend across the history."""
    from pytest_llmslo.report.formats import FORMATS

    paths = [(fmt, output_path(state, fmt.option)) for fmt in FORMATS.values()]
    if all(p is None for _, p in paths) or not state.points:
        return
    # Made from what the document says: its secrets masked, in the constants and the
    # engines' metadata as in every text written.
    results = state.results(complete=complete).redacted()
    trend = record is not None and any(p and f.render_runs for f, p in paths)
    history = _history_for_reports(state) if trend else []
    for fmt, path in paths:
        if path is None:
            continue
        try:
            # A format that shows several runs shows the baseline (--slo-compare) beside,
            # and the trend of the run history.
            others = [state.baseline] if state.baseline is not None else []
            if fmt.render_runs is not None and (others or history):
                out = fmt.render_runs(results, others, history=history, record=record)
            else:
                out = fmt.render(results)
            if isinstance(out, bytes):
                write_atomic_bytes(path, out)
            elif fmt.summary and is_step_summary(path):
                append_text(path, redact(out))
            else:
                write_atomic_text(path, redact(out))
            note = f"{fmt.label} report written to {path}"
            if note not in state.notes:
                state.notes.append(note)
        except Exception as exc:
            state.write_errors.append(
                f"ERROR: could not write the {fmt.label} report to {path}: {exc!r}"
            )


def is_step_summary(path: Path) -> bool:
    """Whether ``path`` is ``$GITHUB_STEP_SUMMARY``: the file where every step of a GitHub
    Actions job appends its summary, so a summary written there is appended, not replaced
    (as ``llmslo compare --markdown`` does)."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not summary:
        return False
    return os.path.abspath(summary) == os.path.abspath(path)


def append_text(path: Path, text: str) -> None:
    """``text`` appended to ``path``, after a blank line when the file holds something."""
    with path.open("a", encoding="utf-8") as f:
        if f.tell() > 0:
            f.write("\n")
        f.write(text)


def write_json(state: Session, *, complete: bool) -> bool:
    """Write the results document (the one writer of it: a temporary file renamed into
    place, ``write_atomic``); False (and an error note) when it could not be."""
    path = json_path(state)
    if path is None:
        return True
    try:
        # A third stop signal ends the process only once the file is in place.
        with state.interrupts.writing():
            write_atomic(path, state.document(complete=complete))
        state.book.dirty = False
    except Exception as exc:
        msg = f"ERROR: could not write the results to {path}: {exc!r}"
        if msg not in state.write_errors:
            state.write_errors.append(msg)
        return False
    return True


def save_session_baseline(state: Session, *, interrupted: bool) -> None:
    """``--slo-save NAME``: the session's document as a baseline (a partial one as
    ``NAME.partial``, which never replaces the baseline)."""
    name = state.settings.save
    if not name or not state.points:
        return
    try:
        saved = baselines.save_baseline(
            state.document(complete=not interrupted), name, root=baseline_root(state)
        )
        if interrupted:
            partial = baselines.partial_name(name)
            state.notes.append(
                f"the session was interrupted: baseline {name!r} was left as it was; the "
                f"partial results are saved as {partial!r} in {saved}"
            )
        else:
            state.notes.append(f"baseline {name!r} saved to {saved}")
    except Exception as exc:
        state.write_errors.append(f"ERROR: could not save baseline {name!r}: {exc!r}")


def finish(state: Session, *, interrupted: bool = False) -> bool:
    """The session's outputs: the results document, the Markdown, SVG and CSV reports and
    the saved baseline. What could not be written is in ``state.write_errors``.

    No stop signal cuts them (``state.interrupts.shielded``); one that arrived before or
    while they were written makes them partial (``complete: false``, the baseline saved
    as ``NAME.partial``). Returns whether the session was interrupted."""
    guard = state.interrupts
    state.remote.close()
    with guard.shielded():
        interrupted = interrupted or guard.interrupted
        record = _run_record(state)
        _write_outputs(state, interrupted=interrupted, record=record)
        if not interrupted and guard.interrupted:
            interrupted = True  # a signal while they were written: they are partial now
            _write_outputs(state, interrupted=True, record=record)
        save_session_baseline(state, interrupted=interrupted)
        remember_run(state, interrupted=interrupted, record=record)
    return interrupted


def _run_record(state: Session) -> dict[str, Any] | None:
    """The ``run`` record the history will keep for this session (None when it keeps
    none): made once, so that the reports name the run as the history does."""
    if history_root(state) is None or not state.points:
        return None
    return provenance.run_record(state.document(complete=True), state.rootpath)


def _shown(path: Path) -> str:
    """``path`` as a note shows it: relative to the working directory when it is under it
    (``.llmslo/runs``, not the whole absolute path), else as it is."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (OSError, ValueError):
        return str(path)


def remember_run(
    state: Session, *, interrupted: bool, record: Mapping[str, Any] | None = None
) -> None:
    """Keep the session's document in the run history (``--slo-history``, on by default)
    with its provenance (``record``, made now when not given), and prune the history
    (``--slo-history-keep``/``-days``). A history that cannot be written is a warning,
    never a failure of the session."""
    root = history_root(state)
    if root is None or not state.points:
        return
    settings = state.settings
    try:
        doc = state.document(complete=not interrupted)
        record = record or provenance.run_record(doc, state.rootpath)
        path = store.save_run(doc, record, root)
        state.notes.append(f"run {path.stem} kept in the run history ({_shown(root)})")
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        state.notes.append(
            f"warning: the run was not kept in the run history {root}: {why} "
            "(--slo-history=DIR names another directory, --slo-history=none keeps none)"
        )
        return
    try:
        store.prune(root, keep=settings.history_keep, days=settings.history_days, spare=path.stem)
    except (OSError, ValueError) as exc:
        state.notes.append(f"warning: the run history {root} was not pruned: {exc}")


def _write_outputs(state: Session, *, interrupted: bool, record: Mapping[str, Any] | None) -> None:
    if state.settings.json_path:
        write_json(state, complete=not interrupted)
    write_reports(state, complete=not interrupted, record=record)


def junit_properties(state: Session, ctx: TestContext) -> list[tuple[str, str]]:
    """The JUnit properties of a test case: its primary point's numbers and verdict, its
    notes, and its comparison with the baseline (or why it was not compared)."""
    from pytest_llmslo.report import junit

    idx = primary(ctx)
    if idx is None:
        return []
    point = state.points[idx]
    try:
        props = junit.testcase_properties(
            point.summary,
            point.verdict,
            engine=ctx.engine,
            test=ctx.test,
            interrupted=point.interrupted,
            point=point,
        )
    except Exception as exc:  # the report must not change a test's outcome
        props = [("llmslo.error", repr(exc))]
    props.extend(
        junit.cold_start_properties(state.roster.meta.get(ctx.engine, {}).get("cold_start"))
    )
    props.extend(junit.scale_up_properties(point.scale_up))
    props.extend(junit.fault_properties(point.faults))
    props.extend(junit.quality_properties(point.quality))
    if not point.comparable:
        props.append(("llmslo.comparable", "false"))
    props.extend((f"llmslo.notes.{i}", n) for i, n in enumerate(point.notes, 1))
    cache = point.cache if isinstance(getattr(point, "cache", None), Mapping) else None
    if cache is not None:
        props.append(("llmslo.cache_reset", str(bool(cache.get("reset"))).lower()))
    if ctx.comparison is not None:
        props.append(("llmslo.baseline", str(state.baseline_source)))
        props.append(("llmslo.regressed", str(bool(ctx.comparison.regressed)).lower()))
        props.extend(ctx.comparison.properties())
    elif ctx.compare_skip is not None:
        props.append(("llmslo.baseline", str(state.baseline_source)))
        props.append(("llmslo.compare.status", "not_compared"))
        props.append(("llmslo.compare.reason", ctx.compare_skip))
    return [(k, redact(str(v))) for k, v in props]


def junit_outcomes(state: Session) -> dict[str, list[tuple[str, str]]]:
    """Each test case's outcome as its finished sweep judges it (``judged.level_outcome``
    against the sweep's knee), by node id: a test case is judged before its sweep's knee
    exists, so the JUnit file gets these once the session is done, as every other output
    prints them. Empty, with a note, when they cannot be had: reporting never breaks the
    run."""
    from pytest_llmslo.judged import level_outcome
    from pytest_llmslo.report import junit
    from pytest_llmslo.sweep import Knee

    knees: dict[int, Knee] = {}
    try:
        for sweep in state.results().sweeps():
            knees.update(dict.fromkeys(sweep.indices, sweep.knee))
    except Exception as exc:
        state.notes.append(f"warning: the JUnit outcomes were not set against the knee: {exc!r}")
        return {}
    out: dict[str, list[tuple[str, str]]] = {}
    for nodeid, ctx in state.contexts.items():
        idx = primary(ctx)
        if idx is None or idx >= len(state.points):
            continue
        outcome = level_outcome(state.points[idx], knees.get(idx))
        out[nodeid] = [(k, redact(v)) for k, v in junit.outcome_properties(outcome)]
    return out


def suite_properties(state: Session) -> list[tuple[str, str]]:
    """The run constants as JUnit suite properties (per test and per engine they are in
    the document; "hardware" has each engine's at a glance)."""
    from pytest_llmslo.report import junit

    consts = {k: v for k, v in state.constants().items() if k not in ("tests", "per_engine")}
    props = junit.suite_properties(consts)
    for name, meta in state.roster.meta.items():
        props.extend(junit.cold_start_properties(meta.get("cold_start"), name))
    return [(k, redact(str(v))) for k, v in props]
