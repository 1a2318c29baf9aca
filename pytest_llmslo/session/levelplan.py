"""Stage 1 of a level (plan): ``LevelTask``, what one level of one test runs, where and
how, planned before anything is sent (``plan_level``); and the level and settings of a
load a test asks for besides its own (``other_load``).

The plan is handed to ``level.py``, which makes the level's ``LoadJob`` of it (stage 2)
and runs it (stage 3, records): docs/architecture.md, "One level, forward"."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_llmslo import settings as S
from pytest_llmslo.engines.base import EngineHandle
from pytest_llmslo.errors import ConfigError, EngineDiedError, WorkloadError
from pytest_llmslo.records import LoadLevel, RequestRecord, Run
from pytest_llmslo.recordstore import RecordStore
from pytest_llmslo.runmeta import RunMeta

from .factory import exit_reason
from .state import Session, TestContext, prompt_salt

if TYPE_CHECKING:
    from pytest_llmslo.load import ClientSettings, WorkloadSpec
    from pytest_llmslo.load.remote import WorkerHub
    from pytest_llmslo.slo import Objective

__all__ = ["LevelTask", "other_load", "plan_level"]


@dataclasses.dataclass(frozen=True)
class LevelTask:
    """One level of one test as it is measured: where it is recorded (``node``, the test's
    context when the test is the session's), what runs (the engine's handle, the client
    settings, the level's workload and settings) and how (its warm-up, an early stop).
    ``meta``: the session's fields of the level's run (whose level it is)."""

    node: str
    ctx: TestContext | None
    handle: EngineHandle
    level: LoadLevel
    ts: S.TestSettings
    meta: RunMeta
    client: ClientSettings
    workload: WorkloadSpec
    warmup: int
    early_stop: Callable[[Sequence[RequestRecord]], str | None] | None = None
    #: The session's remote load workers (``--worker-listen``), None: local processes.
    workers: WorkerHub | None = None
    say: Callable[[str], None] | None = None

    @property
    def engine(self) -> str:
        return self.meta.engine or ""

    @property
    def test(self) -> str:
        return self.meta.test or ""


def plan_level(
    state: Session,
    node: str,
    handle: EngineHandle,
    level: LoadLevel,
    ts: S.TestSettings,
    *,
    extended: bool = False,
    stop_early_on: tuple[Objective, ...] | None = None,
) -> LevelTask:
    """What a level of test ``node`` runs: on the engine running now, with the test's
    client settings and this level's own workload. ``stop_early_on``: the objectives an
    early stop watches, for the levels where ``--slo-early-stop=auto`` turns it on
    (capacity probes, sweep extensions)."""
    ctx = state.contexts.get(node)
    engine = ctx.engine if ctx is not None else handle.config.display_name
    test = ctx.test if ctx is not None else node
    if state.roster.factory is not None and engine in state.roster.factory.configs:
        # The engine running now (restarted when it died during an earlier test).
        handle = state.roster.factory.get(engine)
    elif not handle.alive():
        raise EngineDiedError(
            f"engine {engine!r} is not running any more: {exit_reason(handle)}",
            handle.log_tail(),
        )
    # A marker's model= names the model to request from an engine that serves several;
    # a session's --model is what the engines serve (handle.model is its served name).
    model = handle.model
    if ts.model and ts.sources.get("model", "").startswith("@pytest"):
        model = ts.model
    try:
        # Levels never share prompts, a trace's blocks included (``for_level``); nor do
        # sessions, unless they share a salt (``--prompt-salt``).
        workload = ts.workload_spec(prompt_salt(state, ts)).for_level(level.mode, level.value)
    except (TypeError, ValueError, WorkloadError) as exc:
        raise ConfigError(f"{test}: bad workload: {exc}") from None
    version = state.roster.meta.get(engine, {}).get("version")
    return LevelTask(
        node=node,
        ctx=ctx,
        handle=handle,
        level=level,
        ts=ts,
        meta=RunMeta().with_(engine=engine, test=test, engine_version=version, extended=extended),
        client=ts.client_settings(handle.base_url, model),
        workload=workload,
        warmup=ts.warmup_for(level),
        early_stop=_early_stop(ts, level, stop_early_on),
        workers=state.remote.hub,
        say=state.say,
    )


def _early_stop(
    ts: S.TestSettings, level: LoadLevel, objectives: tuple[Objective, ...] | None
) -> Callable[[Sequence[RequestRecord]], str | None] | None:
    """The early-stop decision of a level (``slo.settled`` over the records so far), when
    ``--slo-early-stop`` is ``on``, or ``auto`` and the caller gave the objectives to watch
    (capacity probes, sweep extensions); None otherwise."""
    from pytest_llmslo import slo

    watch = objectives if objectives is not None else ts.objectives
    if ts.early_stop == "off" or not watch:
        return None
    if ts.early_stop == "auto" and objectives is None:
        return None

    def decide(records: Sequence[RequestRecord]) -> str | None:
        if isinstance(records, RecordStore):  # the records decoded so far, as columns
            start = int(records.column("sent_ns").min())
            end = int(records.column("end_ns").max())
        else:
            records = tuple(records)
            start = min(r.sent_ns for r in records)
            end = max(r.end_ns for r in records)
        partial = Run(level, records, start, end)
        return slo.settled(
            partial,
            watch,
            strict=ts.strict,
            confidence=ts.confidence,
            max_error_rate=ts.max_error_rate,
            planned=ts.requests,
            min_completed=ts.early_stop_min,
        )

    return decide


def other_load(
    ts: S.TestSettings, level: LoadLevel | float | None, overrides: Mapping[str, Any]
) -> tuple[LoadLevel, S.TestSettings]:
    """The level and settings of a load a test asks for besides its own (``slo_load``):
    ``level`` a ``LoadLevel``, a number (concurrency) or None (the test's first level);
    ``overrides`` fields of ``TestSettings``, a ``ConfigError`` naming the valid ones
    otherwise."""
    if level is None:
        level = ts.levels[0]
    elif not isinstance(level, LoadLevel):
        level = LoadLevel.concurrency(int(level))
    try:
        return level, dataclasses.replace(ts, **overrides)
    except TypeError as exc:
        fields = ", ".join(f.name for f in dataclasses.fields(S.TestSettings))
        raise ConfigError(f"slo_load: {exc}. Valid settings: {fields}.") from None
