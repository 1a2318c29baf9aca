"""The plugin's fixtures: ``slo_engine_factory`` and ``slo_engine`` (the engines, started
once each), ``slo_level``, ``slo_settings`` and ``slo_objectives`` (what the test asks),
and ``slo_run``, ``slo_load`` and ``slo_capacity`` (the loads it runs, each bound as the
current run of ``assert_goodput``). ``plugin.py`` registers them (pytest finds them in the
plugin's module)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_llmslo import session as core
from pytest_llmslo import settings as S
from pytest_llmslo import slo
from pytest_llmslo.capacity import CapacitySpec
from pytest_llmslo.engines.base import EngineHandle
from pytest_llmslo.errors import Inconclusive
from pytest_llmslo.records import LoadLevel, Run
from pytest_llmslo.session import EngineFactory, EngineRef

from .pluginstate import LevelParam, report_test, state_of

__all__ = [
    "slo_capacity",
    "slo_engine",
    "slo_engine_factory",
    "slo_level",
    "slo_load",
    "slo_objectives",
    "slo_run",
    "slo_settings",
]


@pytest.fixture(scope="session")
def slo_engine_factory(request: pytest.FixtureRequest) -> Iterator[EngineFactory]:
    """Starts engines by configured name, once each, lazily; stops them at session end."""
    state = state_of(request.config)
    if state.suite_property is None:
        # pytest's own fixture for JUnit suite properties: the run constants are written
        # with it at session end.
        state.suite_property = request.getfixturevalue("record_testsuite_property")
    factory = core.engine_factory(state)
    try:
        yield factory
    finally:
        with state.interrupts.shielded():
            factory.stop_all()


@pytest.fixture(scope="session")
def slo_engine(
    request: pytest.FixtureRequest, slo_engine_factory: EngineFactory
) -> Iterator[EngineHandle]:
    """The running engine of the current test (session-scoped per engine name): an
    ``EngineRef`` whose attributes are those of the engine running now, also after a
    restart.

    A start failure is an error on each of the engine's tests, with the log tail; an engine
    that cannot run here (no docker, GPU, package) skips them with the reason."""
    state = state_of(request.config)
    name = getattr(request, "param", None) or state.settings.engines[0]
    skip, failed = slo_engine_factory.try_start(name)
    # Outside any except block, so the report shows one message, not a chained traceback.
    if skip is not None:
        pytest.skip(skip)
    if failed is not None:  # an error of each test of this engine, without a traceback
        pytest.fail(failed, pytrace=False)
    try:
        # misc: EngineRef reads config, base_url and model from the engine's current
        # handle (read-only properties), where EngineHandle declares settable attributes.
        yield EngineRef(slo_engine_factory, name)  # type: ignore[misc]
    finally:
        # pytest tears this down when the next test uses another engine: one engine runs
        # at a time, which is what real engines on one set of GPUs need.
        with state.interrupts.shielded(deferred=True):
            slo_engine_factory.stop(name)


@pytest.fixture
def slo_level(request: pytest.FixtureRequest) -> LoadLevel:
    """The load level of the current test (its first level when not parametrized)."""
    param = getattr(request, "param", None)
    if isinstance(param, LevelParam):
        return param.level
    return state_of(request.config).defaults.levels[0]


@pytest.fixture
def slo_settings(request: pytest.FixtureRequest) -> S.TestSettings:
    """The resolved settings of the current test (CLI > env > run file > ini > marker > default)."""
    state = state_of(request.config)
    ctx = state.contexts.get(request.node.nodeid)
    return ctx.settings if ctx is not None else state.defaults


@pytest.fixture
def slo_objectives(slo_settings: S.TestSettings) -> tuple[Any, ...]:
    """The configured SLO of the current test (``--slo``, ini, marker ``objectives=``)."""
    return slo_settings.objectives


@pytest.fixture
def slo_run(
    request: pytest.FixtureRequest,
    slo_engine: EngineHandle,
    slo_level: LoadLevel,
    slo_settings: S.TestSettings,
) -> Iterator[Run]:
    """Runs the current test's load (engine x level x workload) and returns the ``Run``.

    The run is bound as the current run, so ``assert_goodput(ttft_p99 < 500)`` in the test
    body checks it."""
    state = state_of(request.config)
    node = request.node.nodeid
    try:
        run = core.load_test(state, node, slo_engine, slo_level, slo_settings)
    except Inconclusive:
        # The client stayed the bottleneck through the retries: the test errors (not an
        # SLO failure), and its report and properties say so.
        ctx = state.contexts.get(node)
        if ctx is not None:
            report_test(state, request.node, ctx, "setup")
        raise
    with core.bound(state, run):
        yield run


@pytest.fixture
def slo_load(
    request: pytest.FixtureRequest, slo_engine: EngineHandle, slo_settings: S.TestSettings
) -> Iterator[Callable[..., Run]]:
    """Run any load against the current engine: ``slo_load(level, **settings)``.

    ``level`` is a ``LoadLevel`` or an int (concurrency); keyword arguments override the
    test's settings (``isl=``, ``osl=``, ``requests=``, ``warmup=``, ``duration_s=``, ...).
    The run is recorded in the reports and bound as the current run."""
    state = state_of(request.config)

    def load(level: LoadLevel | int | float | None = None, **overrides: Any) -> Run:
        lv, ts = core.other_load(slo_settings, level, overrides)
        run = core.run_level(state, request.node.nodeid, slo_engine, lv, ts)
        slo.bind_run(run)
        return run

    yield load
    slo.unbind_run()


@pytest.fixture
def slo_capacity(
    request: pytest.FixtureRequest, slo_engine: EngineHandle, slo_settings: S.TestSettings
) -> Iterator[Callable[..., Any]]:
    """Search the highest load that meets the SLO (``capacity.CapacitySearch``: exponential
    probe, then bisection). ``slo_capacity(*objectives, mode="concurrency", start=1,
    max_value=None, max_probes=12)`` (the fields of ``capacity.CapacitySpec``) returns the
    ``CapacityResult``; every probed level is recorded as a point of this test's sweep (so
    its knee is the capacity), and the run at the capacity is bound as the current run."""
    state = state_of(request.config)

    def search(*objectives: Any, mode: str = "concurrency", **kw: Any) -> Any:
        objs = tuple(objectives) or slo_settings.objectives
        # arg-type: mode is a user's string; CapacitySpec checks it (a ValueError naming the
        # modes), as it checks the other fields.
        spec = CapacitySpec(mode, **kw)  # type: ignore[arg-type]
        result, run = core.search_capacity(
            state, request.node.nodeid, slo_engine, slo_settings, objs, spec
        )
        if run is not None:
            slo.bind_run(run)
        return result

    yield search
    slo.unbind_run()
