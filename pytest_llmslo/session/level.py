"""Stages 2 to 6 of a level (job, records, summary, point): one level of one test run.

The plan (``levelplan.LevelTask``) becomes the level's ``LoadJob`` (``load_level``, the one
call of the load generator), whose ``Run`` comes back with the session's fields added to
its ``RunMeta`` (the engine's prefix cache and signals, faults, a scale-up), retried while
the client run is invalid (``measure_level``); it is summarised once and recorded as a
point of the test's sweep (``record``), which its verdict later completes
(``PointBook.set_verdict``). docs/architecture.md, "One level, forward"."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from pytest_llmslo import settings as S
from pytest_llmslo.engines.base import EngineHandle
from pytest_llmslo.engines.managed import ResetsCache, WorkerMetrics
from pytest_llmslo.errors import EngineDiedError, LoadInterrupted
from pytest_llmslo.records import LoadLevel, Run
from pytest_llmslo.runmeta import RunMeta

from .factory import Progress, exit_reason
from .levelplan import LevelTask, plan_level
from .state import Session, TestContext

if TYPE_CHECKING:
    from pytest_llmslo.load import ClientSettings
    from pytest_llmslo.load import Progress as LoadProgress
    from pytest_llmslo.metrics import RunSummary
    from pytest_llmslo.records import ClientHealth
    from pytest_llmslo.signals.scraper import Scraper
    from pytest_llmslo.slo import Objective


__all__ = [
    "Measured",
    "check_prefix_share",
    "harness_cut",
    "inconclusive",
    "load_level",
    "load_text",
    "measure_level",
    "point_notes",
    "record",
    "reset_engine_cache",
    "run_level",
    "start_signals",
    "usage_note",
    "with_signals",
]


class Measured(NamedTuple):
    """A measured level: the index of its point and its run."""

    # assignment: the field shadows tuple.index (the method), which nothing here calls.
    index: int  # type: ignore[assignment]
    run: Run


def run_level(
    state: Session,
    node: str,
    handle: EngineHandle,
    level: LoadLevel,
    ts: S.TestSettings,
    *,
    extended: bool = False,
    stop_early_on: tuple[Objective, ...] | None = None,
) -> Run:
    """The run of ``measure_level`` (the ``slo_load`` fixture's)."""
    return measure_level(
        state, node, handle, level, ts, extended=extended, stop_early_on=stop_early_on
    ).run


def measure_level(
    state: Session,
    node: str,
    handle: EngineHandle,
    level: LoadLevel,
    ts: S.TestSettings,
    *,
    extended: bool = False,
    stop_early_on: tuple[Objective, ...] | None = None,
) -> Measured:
    """Run one level, retried up to ``ts.retries`` times while the client run is invalid;
    record it as a point of the test's sweep. ``stop_early_on``: the objectives an early
    stop watches, for the levels where ``--slo-early-stop=auto`` turns it on (capacity
    probes, sweep extensions)."""
    from pytest_llmslo import slo

    task = plan_level(
        state, node, handle, level, ts, extended=extended, stop_early_on=stop_early_on
    )
    handle = task.handle
    tries: list[str] = []
    for attempt in range(ts.retries + 1):
        label = f"{task.engine} {level.label}" + (f" (retry {attempt})" if attempt else "")
        progress = state.progress(label, ts.requests or 0, task.warmup)
        if hasattr(progress, "where") and task.ctx is not None:
            live: Any = progress  # a LevelProgress says where the session stands
            live.where = _where(state, task.ctx)
        started = time.monotonic()
        run = _try_level(state, task, progress, tries)
        if run.health.valid or attempt >= ts.retries or not handle.alive():
            break
        if slo.failures_fail(run, ts.max_error_rate):
            break  # the failures decide the level (``inconclusive``): no retry can change it
        why = "; ".join(run.health.reasons)
        tries.append(f"try {attempt + 1} was an invalid client run: {why}")
        progress.close(
            f"invalid client run, retrying ({attempt + 1} of {ts.retries}, --slo-retries): {why}"
        )
    progress.close(_run_line(run))
    idx = record(state, task, run, tries)
    seconds = time.monotonic() - started
    if state.timing.level_took(idx, seconds):
        from pytest_llmslo.report.estimate import estimate_basis, estimate_line

        state.timing.basis = estimate_basis(run, task.warmup, seconds)
        line = estimate_line(state.contexts.values(), task.ctx, run, task.warmup, seconds)
        if line:
            state.say(line)
    if not handle.alive():
        _died_during(state, task, run)
    return Measured(idx, run)


def _where(state: Session, ctx: TestContext) -> Callable[[float], str]:
    """Where the session stands while a level of ``ctx`` runs, given its seconds so far."""
    from pytest_llmslo.report.estimate import where_text

    return lambda elapsed: where_text(state.contexts.values(), ctx, state.timing.basis, elapsed)


def _try_level(state: Session, task: LevelTask, progress: Progress, tries: list[str]) -> Run:
    """One try of a level: the engine's prefix cache emptied where it can be (a retry sends
    the same prompts again), its signals scraped over the load, the load run. Ctrl-C or
    SIGTERM records what was measured and stops the session (``KeyboardInterrupt``)."""
    partial: Run | None = None
    measured: Run | None = None  # this try's load, once it returned
    signame: str | None = None
    cache = reset_engine_cache(task.handle, task.ts)
    scraper = start_signals(task.handle, task.ts, task.client)
    try:
        try:
            meta = task.meta.with_(cache=cache)
            run = load_level(task, meta, _watch_measuring(progress, scraper))
            measured = run
            return check_prefix_share(with_signals(run, scraper), task.ts)
        except LoadInterrupted as exc:
            partial = exc.run if isinstance(exc.run, Run) else None
            if partial is not None:
                partial = with_signals(partial, scraper)
            signame = exc.signal
            raise
        finally:
            if scraper is not None and not scraper.stopped:
                scraper.stop()
    except (LoadInterrupted, KeyboardInterrupt):
        # Interrupted after the load returned (its signals' last scrape): the requests
        # were all measured, and are kept.
        kept = partial if partial is not None else measured
        _interrupted(state, task, kept, signame, progress, tries)


def load_level(
    task: LevelTask, meta: RunMeta, progress: Callable[[LoadProgress], None] | None
) -> Run:
    """The level's load, run by the load generator (``load.run_load_sync``) with the
    session's fields ``meta`` in its run's meta: the one call of the load generator."""
    from pytest_llmslo import load

    from .faultlevel import fault_proxy, fault_triggers, with_faults
    from .scaleuplevel import scale_trigger, with_scale_up

    ts = task.ts
    trigger = scale_trigger(ts.scale_up, task.handle, progress, ts.duration_s)
    with fault_proxy(ts.faults, task.client) as (client, proxy):
        faults, callback = fault_triggers(
            ts.faults, task.handle, proxy, trigger or progress, ts.duration_s
        )
        run = load.run_load_sync(
            load.LoadJob(
                client,
                task.workload,
                task.level,
                requests=ts.requests,
                warmup=task.warmup,
                duration_s=ts.duration_s,
                grace_s=ts.grace_s,
                level_timeout_s=ts.level_bound_s(task.level),
                progress=callback,
                meta=meta.to_dict(),
                thresholds=ts.health_thresholds(),
                early_stop=task.early_stop,
                records_memory=ts.records_memory,
                workers=task.workers,
                say=task.say,
            )
        )
        if faults:
            run = with_faults(run, ts.faults, faults, ts.objectives)
    if trigger is None or ts.scale_up is None:
        return run
    return with_scale_up(run, ts.scale_up, trigger, ts.objectives)


def _interrupted(
    state: Session,
    task: LevelTask,
    partial: Run | None,
    signame: str | None,
    progress: Progress,
    tries: list[str],
) -> NoReturn:
    """Ctrl-C or SIGTERM during a level: what was measured is recorded, and the session
    stops (``KeyboardInterrupt``; the results document is written at session end)."""
    kept = 0
    if partial is not None:
        record(state, task, partial, tries)
        kept = len(partial.records)
    by = f" by {signame}" if signame else ""
    # The session is stopping (through this level, not a checkpoint of its own).
    state.interrupts.note(signame)
    progress.close(f"interrupted{by}; the {kept} measured requests are kept")
    # Ctrl-C and SIGTERM stop the session (pytest's own handling); the partial run is kept.
    raise KeyboardInterrupt from None


def _died_during(state: Session, task: LevelTask, run: Run) -> NoReturn:
    """The engine died during the level: an ``EngineDiedError`` with how it exited and its
    log tail; the level measured so far is kept."""
    engine, handle = task.engine, task.handle
    restart = (
        "it is restarted for the next test"
        if state.roster.factory is not None
        and state.roster.factory.restarts.get(engine, 0) < state.roster.factory.max_restarts
        else "it is not restarted (--engine-restarts)"
    )
    raise EngineDiedError(
        f"engine {engine!r} {exit_reason(handle)} during the load at {task.level.label}; "
        f"{run.ok_count} of {len(run.records)} requests completed (the results "
        f"measured so far are kept in the report); {restart}",
        handle.log_tail(),
    )


def start_signals(
    handle: EngineHandle, ts: S.TestSettings, client: ClientSettings
) -> Scraper | None:
    """A started ``signals.scraper.Scraper`` on the engine's /metrics (and the URLs of its
    config's ``metrics_urls`` option: a Dynamo deployment's workers), or None when
    ``--slo-signals`` is off."""
    if not ts.signals:
        return None
    from pytest_llmslo.signals.scraper import Scraper, ScrapeSettings

    workers = handle.metrics_urls if isinstance(handle, WorkerMetrics) else ()
    urls = [handle.base_url.rstrip("/") + "/metrics", *workers]
    extra = (handle.config.options or {}).get("metrics_urls") if handle.config else None
    if isinstance(extra, str):
        extra = [extra]
    urls.extend(str(u) for u in extra or ())
    key = client.api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    # A scrape never takes longer than the level may.
    bound = ts.level_bound_s()
    deadline = ts.signals_timeout_s if bound is None else min(ts.signals_timeout_s, bound)
    settings = ScrapeSettings(
        interval_s=ts.signals_interval_s,
        headers=headers,
        verify=client.ssl_context() if handle.base_url.startswith("https") else True,
        deadline_s=deadline,
        timeout_s=min(2.0, deadline),
    )
    return Scraper(list(dict.fromkeys(urls)), settings, dcgm_url=ts.dcgm_url).start()


def reset_engine_cache(handle: EngineHandle, ts: S.TestSettings) -> dict[str, Any]:
    """Empty the engine's prefix cache before a level (``--reset-cache``): ``auto`` where
    the harness started the engine, ``on`` for an external one too. What was done, for
    the level's record: ``{"mode", "reset", "how", "why"}``."""
    mode = ts.reset_cache
    if mode == "off":
        return {"mode": mode, "reset": False, "why": "--reset-cache=off"}
    if mode == "auto" and handle.config.kind == "external":
        return {
            "mode": mode,
            "reset": False,
            "why": "an engine the harness did not start is reset only with --reset-cache=on",
        }
    if not isinstance(handle, ResetsCache):
        return {"mode": mode, "reset": False, "why": "this engine cannot empty its cache"}
    return {"mode": mode, **handle.reset_cache()}


def check_prefix_share(run: Run, ts: S.TestSettings) -> Run:
    """``run`` with its cache record (``meta["cache"]``) completed by the engine's prefix-hit
    rate, the share the workload was built to have, and a warning when the first is far
    above the second (``signals.prefix_share``)."""
    from pytest_llmslo.signals.levelsignals import LevelSignals
    from pytest_llmslo.signals.prefix_share import expected_prefix_share, warm_cache_warning

    meta = run.meta
    cache = dict(meta.cache or {})
    hit = LevelSignals.from_dict(meta.signals).prefix_hit_rate if meta.signals else None
    cal = meta.calibration or {}  # the load generator's
    overhead = cal.get("overhead") if cal and cal.get("fitted") else None
    kind, _ = ts.dataset_kind()
    if ts.evals is not None:  # eval items share their template and repeat a few: unknown
        kind = "evals"
    expected = expected_prefix_share(
        kind,
        isl=ts.isl,
        osl=ts.osl,
        prefix_len=ts.prefix_len,
        turns=ts.turns,
        overhead=float(overhead) if isinstance(overhead, (int, float)) else 0.0,
    )
    if isinstance(hit, (int, float)):
        cache["prefix_hit_rate"] = round(float(hit), 4)
    if expected is not None:
        cache["expected_prefix_share"] = round(expected, 4)
    warning = warm_cache_warning(hit if isinstance(hit, (int, float)) else None, expected)
    if warning:
        cache["warning"] = warning
    return dataclasses.replace(run, meta=meta.with_(cache=cache))


def _watch_measuring(progress: Progress, scraper: Scraper | None) -> Callable[[LoadProgress], None]:
    """The load's progress callback, which also tells the scraper when the measured part
    begins (its counters' baseline: warm-up is not counted)."""
    if scraper is None:
        return progress

    def report(p: LoadProgress) -> None:
        if getattr(p, "phase", None) == "measuring":
            scraper.mark_measuring()
        progress(p)

    return report


def with_signals(run: Run, scraper: Scraper | None) -> Run:
    """``run`` with the level's signals in its meta (``RunMeta.signals``)."""
    if scraper is None:
        return run
    return dataclasses.replace(run, meta=run.meta.with_(signals=scraper.stop().to_dict()))


def record(state: Session, task: LevelTask, run: Run, tries: Sequence[str] = ()) -> int:
    """Record ``run`` as a point of the test's sweep, summarised (the one summary of the
    level: a verdict brings its goodput, ``PointBook.set_verdict``) with its samples and
    the notes on what makes it less than a clean measurement; returns its index."""
    from pytest_llmslo import metrics
    from pytest_llmslo.document import compact_samples
    from pytest_llmslo.sweep import SweepPoint

    node, engine, level, ts = task.node, task.engine, task.level, task.ts
    summary = metrics.summarize(run, ts.objectives, confidence=ts.confidence)
    try:
        samples = compact_samples(run)
    except Exception:  # samples only help later comparisons
        samples = None
    notes: list[str] = []
    comparable = True
    if summary.short_outputs and summary.completed:
        share = summary.short_outputs / summary.completed
        text = (
            f"{summary.short_outputs} of {summary.completed} completed requests "
            f"({share:.0%}) returned fewer tokens than the pinned output length"
        )
        if share > ts.max_short_outputs:
            comparable = False
            text += (
                f", more than the {ts.max_short_outputs:.0%} allowed (--max-short-outputs): "
                "not comparable; the server ignores ignore_eos/min_tokens, so this level ran "
                "another workload (use --pin-output=false if that is expected)"
            )
            # Located at the test (pytest's warning summary).
            state.warn(node, f"llmslo {engine} {level.label}: {text}")
        notes.append(text)
    if summary.usage_mismatches and summary.completed:
        comparable = usage_note(state, task, summary, notes) and comparable
    if summary.level_timeout:
        notes.append(
            f"cut by the level's time bound ({ts.level_bound_s(level):g} s, --level-timeout) "
            f"during {summary.level_timeout}"
        )
    early = run.meta.early_stop
    if early is not None:
        notes.append(
            f"stopped early after {len(run.records)} requests (--slo-early-stop): "
            f"{early.get('reason')}"
        )
    cache = run.meta.cache
    if cache is not None and cache.get("warning"):
        notes.append(str(cache["warning"]))
        state.warn(node, f"llmslo {engine} {level.label}: {cache['warning']}")
    if cache is not None and cache.get("mode") == "on" and not cache.get("reset"):
        notes.append(
            "the prefix cache was not emptied before this level (--reset-cache=on): "
            f"{cache.get('why')}"
        )
    notes.extend(tries)
    if tries and inconclusive(run, ts):
        notes.append(f"inconclusive after {len(tries) + 1} tries: the client stayed the bottleneck")
    point = SweepPoint(
        engine=engine,
        test=task.test,
        level=level,
        summary=summary,
        verdict=None,
        samples=samples,
        interrupted=bool(run.meta.interrupted),
        comparable=comparable,
        notes=tuple(notes),
        cache=dict(cache) if cache is not None else None,
        scale_up=run.meta.scale_up,
        faults=None if run.meta.faults is None else list(run.meta.faults),
        series=run.meta.series,
        quality=run.meta.quality,
    )
    idx = state.book.add(run, point)
    if task.ctx is not None:
        task.ctx.point_keys.append(idx)
    return idx


def usage_note(state: Session, task: LevelTask, summary: RunSummary, notes: list[str]) -> bool:
    """The level's note on usage counts that disagreed with the stream; False when there
    were more than ``--max-usage-mismatch`` of them (the level is then not comparable)."""
    n, done = summary.usage_mismatches, summary.completed
    share = n / done
    text = (
        f"{n} of {done} completed requests ({share:.0%}) reported a usage.completion_tokens "
        f"that disagrees with the stream ({summary.usage_claimed_tokens} tokens claimed, "
        f"{summary.usage_streamed_tokens} streamed, which are what is counted)"
    )
    ts = task.ts
    ok = share <= ts.max_usage_mismatch
    if not ok:
        text += (
            f", more than the {ts.max_usage_mismatch:.0%} allowed (--max-usage-mismatch): "
            "not comparable; a server that packs several tokens into a chunk must say how "
            "many: token ids, or usage on every chunk (vLLM, SGLang, Dynamo: --extra-body "
            '\'{"stream_options": {"continuous_usage_stats": true}}\')'
        )
        state.warn(task.node, f"llmslo {task.engine} {task.level.label}: {text}")
    notes.append(text)
    return ok


def _run_line(run: Run) -> str:
    from pytest_llmslo import metrics

    ok = run.ok_count
    n = len(run.records)
    line = f"{ok}/{n} requests ok in {run.duration_s:.1f} s"
    timeout = run.meta.level_timeout
    if timeout is not None:
        line += f" [cut by the level's time bound during {timeout.get('phase')}]"
    if run.meta.early_stop is not None:
        line += " [stopped early: its verdict was settled]"
    if ok < n:
        top = metrics.failure_messages(run, 1)
        if top:
            line += f" [most failures: {top[0]}]"
    mismatched = metrics.usage_mismatches(run)[0]
    if mismatched:
        line += f" [usage disagreed with the stream in {mismatched} requests]"
    if not run.health.valid:
        line += " [client-limited: " + "; ".join(run.health.reasons) + "]"
    cache = run.meta.cache
    if cache is not None and cache.get("warning"):
        line += f" [{cache['warning']}]"
    return line + load_text(run.health)


def load_text(health: ClientHealth) -> str:
    """The load the client applied against the load asked, for the level's line:
    `` [3.9 of 4 in flight]`` (a closed loop), `` [9.8 of 10 req/s sent]`` (an open loop)."""
    if health.load_kind == "in_flight":
        return f" [{health.load_achieved:.1f} of {health.load_asked:g} in flight]"
    if health.load_kind == "arrival_rate":
        return f" [{health.load_achieved:.3g} of {health.load_asked:.3g} req/s sent]"
    return ""


def point_notes(state: Session, run: Run) -> tuple[str, ...]:
    """The notes of the point ``run`` was recorded as."""
    idx = state.book.index_of(run)
    return () if idx is None else state.points[idx].notes


def inconclusive(run: Run, ts: S.TestSettings) -> bool:
    """Whether a level ends inconclusive: the harness's own time bound cut it
    (``harness_cut``), or its client run stayed invalid and its failed requests do not fail
    it on their own. The failure gates are judged before the client's health
    (``slo.failures_fail``): a level where every request failed, or more than
    ``--slo-max-error-rate`` did, is an SLO failure with the error texts, whatever the
    client's state."""
    from pytest_llmslo import slo

    if harness_cut(run):
        return True
    return not run.health.valid and not slo.failures_fail(run, ts.max_error_rate)


def harness_cut(run: Run) -> bool:
    """Whether the level's time bound (``--level-timeout``) cut the level while no request
    failed for another reason: what it cut is the harness's doing, not the engine's."""
    if run.meta.level_timeout is None:
        return False
    return all(r.ok or r.error_kind == "cancelled" for r in run.records)
