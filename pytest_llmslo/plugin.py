"""pytest glue over the session core (``session/``, which knows nothing of pytest): the
hooks here hand it node ids and callbacks (a line to say, a progress line, a warning).

In session order: options and ini keys generated from ``settings.SPECS``; configure (the
``slo`` marker, the ``Session`` in ``config.stash``, the xdist refusal); each SLO test
parametrized over engine x load level (``test_chat[sim-c32]``, the engine parameter
session-scoped so each engine starts once); the fixtures ``slo_engine``, ``slo_level``,
``slo_settings``, ``slo_objectives``, ``slo_run``, ``slo_load`` and ``slo_capacity``
(``fixtures.py``, registered here; what they share with the hooks: ``pluginstate.py``);
each test's body within the session's per-test protocol (``session.run_test``: after it
the configured gate, the extension and the baseline comparison); JUnit properties and
system-out, the terminal summary, and the results document after every test (partial) and
at session end.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo import session as core
from pytest_llmslo import settings as S
from pytest_llmslo.errors import (
    ConfigError,
    EngineDiedError,
    Inconclusive,
    LlmSloWarning,
)
from pytest_llmslo.redact import redact
from pytest_llmslo.session import TestContext, Voice

from . import fixtures
from .fixtures import slo_capacity as slo_capacity
from .fixtures import slo_engine as slo_engine
from .fixtures import slo_engine_factory as slo_engine_factory
from .fixtures import slo_level as slo_level
from .fixtures import slo_load as slo_load
from .fixtures import slo_objectives as slo_objectives
from .fixtures import slo_run as slo_run
from .fixtures import slo_settings as slo_settings
from .pluginstate import (
    ITEMS_KEY,
    JUNIT_PLUGIN,
    STATE_KEY,
    LevelParam,
    attach_properties,
    report_test,
)

SLO_MARKER = "slo"
ENGINE_ARG = "slo_engine"
LEVEL_ARG = "slo_level"
# Fixtures whose use makes a test an SLO test (parametrized over engine x level).
SLO_FIXTURES = (ENGINE_ARG, LEVEL_ARG, "slo_run")
README_XDIST = core.README_XDIST


# ------------------------------------------------------------------------------- options


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_llmslo import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    # --help: the options most runs need in full, then one section per topic
    # (settings.TOPICS) with each option's default; --slo-help-all prints them all in full.
    # An old spelling (--duration) is taken, not shown, and warned about (pytest_configure).
    for topic, title, specs in S.help_sections():
        group = parser.getgroup(f"llmslo-{topic}", f"pytest-llmslo {title}")
        if topic == "common":
            group.addoption(
                "--slo-help-all",
                action="store_true",
                dest="llmslo_help_all",
                help="Print every option in full and exit.",
            )
            group.addoption(
                "--slo-config",
                dest="llmslo_config",
                metavar="FILE",
                help="A run file (TOML or YAML) of settings. Default: pyproject.toml "
                "[tool.llmslo].",
            )
        for spec in specs:
            flag, kw = S.argparse_option(spec, brief=topic != "common")
            group.addoption(flag, **kw)
            alias = S.alias_option(spec)
            if alias:
                group.addoption(alias[0], **alias[1])
    for spec in S.SPECS:
        parser.addini(spec.ini, help=S.ini_help(spec), type="string", default="")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    """A misspelt ``--slo-`` option is a usage error that names the closest one, before
    pytest's own "unrecognized arguments" (which names none)."""
    text = S.misspelt_option(args)
    if text:
        raise pytest.UsageError(text)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if config.getoption("llmslo_help_all", False):
        print(S.reference_text())
        return 0
    return None


def _hide_ini_help(config: pytest.Config) -> None:
    """For ``pytest --help`` alone, once the settings are read: leave out the ninety ini
    keys, one per option (``--slo-help-all`` and docs/options.md list each with its
    option). pytest keeps them in a private table; where it has another shape, every key
    stays listed."""
    table = getattr(getattr(config, "_parser", None), "_inidict", None)
    if not isinstance(table, dict):
        return
    for spec in S.SPECS:
        table.pop(spec.ini, None)


def _warn_deprecated(config: pytest.Config) -> None:
    """A deprecation warning for each old spelling of an option given (``--duration``) on
    the command line, in PYTEST_ADDOPTS or in the ini file's addopts."""
    args = [
        *config.getini("addopts"),
        *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
        *config.invocation_params.args,
    ]
    for text in S.deprecated_used(args):
        config.issue_config_time_warning(pytest.PytestDeprecationWarning(text), stacklevel=2)


RUN_FILE_KEY = pytest.StashKey[tuple[S.RunFile | None]]()


def _run_file(config: pytest.Config) -> S.RunFile | None:
    """The session's run file (``--slo-config``, else ``[tool.llmslo]`` of the rootdir's
    pyproject.toml), read once."""
    if RUN_FILE_KEY not in config.stash:
        path = config.getoption("llmslo_config", None)
        file: S.RunFile | None
        if path:
            file = S.read_run_file(config.invocation_params.dir / path)
        else:
            file = S.pyproject_run_file(config.rootpath)
        config.stash[RUN_FILE_KEY] = (file,)
    return config.stash[RUN_FILE_KEY][0]


def _sources(config: pytest.Config) -> S.Sources:
    cli = S.given_cli(lambda dest: config.getoption(dest, S.UNSET))
    ini = {s.ini: config.getini(s.ini) for s in S.SPECS}
    return S.Sources.from_environ(cli, ini, file=_run_file(config))


# ----------------------------------------------------------------------------- configure


def _usage(exc: Exception) -> pytest.UsageError:
    return pytest.UsageError(str(exc))


def _xdist_active(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput"):
        return True
    n = config.getoption("numprocesses", None)
    return bool(n) and n != 0


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _quiet_asyncio_loop_scope(config)
    config.addinivalue_line(
        "markers",
        "slo(*objectives, concurrency=[...], rate=[...], isl=, osl=, objectives=, strict=, "
        "...): an SLO test of LLM serving engines, parametrized over engine x load level "
        "(pytest-llmslo; see README.md).",
    )
    _warn_deprecated(config)
    try:
        session = S.resolve_session(_sources(config))
        state = core.Session(
            session,
            _sources(config),
            rootpath=config.rootpath,
            inipath=config.inipath,
            invocation_dir=config.invocation_params.dir,
            voice=Voice(
                say=lambda msg: _say(config, msg),
                progress=lambda label, requests, warmup: _progress(config, label, requests, warmup),
                warn=lambda node, msg: _warn(config, node, msg),
            ),
            hooks=core.SessionHooks.calling(
                lambda hook, **kw: getattr(config.hook, hook)(config=config, **kw)
            ),
        )
    except ConfigError as exc:
        raise _usage(exc) from None
    config.stash[STATE_KEY] = state
    # From here on SIGINT and SIGTERM are recorded and acted on at safe points, in any
    # phase and with any engine; no signal cuts the writing of the results (interrupts.py).
    state.interrupts.install()
    for text in session.warnings:
        config.issue_config_time_warning(LlmSloWarning(text), stacklevel=2)
    from pytest_llmslo.report.junit import SystemOutCollector

    config.pluginmanager.register(SystemOutCollector(), JUNIT_PLUGIN)
    if config.getoption("help", False):
        _hide_ini_help(config)
    if _xdist_active(config):
        _refuse_xdist(config, state)
    try:
        core.prepare(state)
    except ConfigError as exc:
        raise _usage(exc) from None


def _quiet_asyncio_loop_scope(config: pytest.Config) -> None:
    """pytest-asyncio warns in every project whose ini lacks
    ``asyncio_default_fixture_loop_scope``, about async fixtures an SLO suite does not
    have: ignored while the key is unset, within pytest's configure-time
    ``warnings.catch_warnings``."""
    if not config.pluginmanager.hasplugin("asyncio"):
        return
    try:
        if config.getini("asyncio_default_fixture_loop_scope"):
            return
    except ValueError:
        return
    import warnings

    warnings.filterwarnings(
        "ignore",
        message='The configuration option "asyncio_default_fixture_loop_scope" is unset',
        category=pytest.PytestDeprecationWarning,
    )


def _refuse_xdist(config: pytest.Config, state: core.Session) -> None:
    """SLO tests under xdist would start one engine per worker and run loads in parallel
    on one machine, which corrupts every number. An explicit SLO session (``-m slo`` or any
    llmslo option on the command line) is refused; otherwise SLO tests are skipped in the
    workers with the same reason, so a project's other tests still run in parallel."""
    reason = state.disabled_reason = core.XDIST_REASON
    if hasattr(config, "workerinput"):
        return
    markexpr = config.getoption("markexpr", "") or ""
    explicit = SLO_MARKER in markexpr.replace("(", " ").replace(")", " ").split()
    explicit = explicit or bool(S.given_cli(lambda dest: config.getoption(dest, S.UNSET)))
    if explicit:
        raise pytest.UsageError(reason)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is None:
        return
    if state.roster.factory is not None:
        with state.interrupts.shielded():
            state.roster.factory.stop_all()
    state.interrupts.uninstall()
    collector = config.pluginmanager.get_plugin(JUNIT_PLUGIN)
    xmlpath = config.getoption("xmlpath", None)
    if collector is not None and xmlpath and not hasattr(config, "workerinput"):
        prefix = config.getoption("junitprefix", None)
        collector.properties.update(core.junit_outcomes(state))
        error = collector.write(xmlpath, config.invocation_params.dir, prefix=prefix)
        if error:
            _say(config, f"llmslo: {error}")


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = config.stash.get(STATE_KEY, None)
    if state is None:
        return None
    engines = core.engines_text(state, state.settings.engines)
    line = "llmslo: " + S.describe(state.settings, state.defaults, engines=engines)
    line += f" (CLI > env > run file > ini > marker; json={state.settings.json_path or 'off'})"
    marked = state.settings.sources.get("engine", "default") == "default"
    if marked or state.defaults.sources.get("concurrency", "default") == "default":
        line += "; a test's marker may set its own: see each test's line after collection"
    if state.disabled_reason:
        line += " (disabled under xdist)"
    return [redact(line)]


def pytest_report_collectionfinish(
    config: pytest.Config, start_path: Path, items: list[pytest.Item]
) -> list[str] | None:
    """What each SLO test will really run, once collected: its engines and levels (a
    marker's, not the session's defaults) and its workload."""
    state = config.stash.get(STATE_KEY, None)
    if state is None or not state.contexts:
        return None
    from pytest_llmslo.report.estimate import plan_lines

    lines = [*core.tests_overview(state), *plan_lines(state.contexts.values())]
    return [redact(line) for line in lines]


# ------------------------------------------------------------------------ parametrization


def _marker_settings(state: core.Session, definition: Any, where: str) -> S.TestSettings:
    merged: dict[str, Any] = {}
    # Closest marker last so that a function's marker overrides its class's and module's.
    for mark in reversed(list(definition.iter_markers(name=SLO_MARKER))):
        merged.update(S.split_marker(mark.args, mark.kwargs, where))
    return S.resolve_test(state.sources, merged, where)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = metafunc.config.stash.get(STATE_KEY, None)
    if state is None:
        return
    marked = metafunc.definition.get_closest_marker(SLO_MARKER) is not None
    uses = any(name in metafunc.fixturenames for name in SLO_FIXTURES)
    if not (marked or uses):
        return
    where = metafunc.definition.nodeid
    try:
        settings = _marker_settings(state, metafunc.definition, where)
        engines, skip_reason = core.plan_test(state, settings, where)
    except ConfigError as exc:
        state.marker_errors.append(str(exc))
        return
    levels = list(settings.levels)
    for name in (ENGINE_ARG, LEVEL_ARG):
        if name not in metafunc.fixturenames:
            metafunc.fixturenames.append(name)
    if skip_reason is not None:
        engine_params = [pytest.param(None, marks=pytest.mark.skip(reason=skip_reason), id="none")]
        metafunc.parametrize(ENGINE_ARG, engine_params, indirect=True, scope="session")
    else:
        metafunc.parametrize(ENGINE_ARG, engines, indirect=True, ids=engines, scope="session")
    ids = S.level_ids(levels)
    # The last level is marked so the extension runs in that test.
    values = [
        pytest.param(LevelParam(lv, settings, i == len(levels) - 1, ids[i]), id=ids[i])
        for i, lv in enumerate(levels)
    ]
    if settings.capacity:
        # One test per engine: the search picks its own levels, from the first one up.
        values = [pytest.param(LevelParam(levels[0], settings, False, "capacity"), id="capacity")]
    metafunc.parametrize(LEVEL_ARG, values, indirect=True)


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is None:
        return
    if state.marker_errors:
        raise pytest.UsageError("\n".join(dict.fromkeys(state.marker_errors)))
    config.stash[ITEMS_KEY] = {item.nodeid: item for item in items}
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or LEVEL_ARG not in callspec.params:
            continue
        if item.get_closest_marker(SLO_MARKER) is None:
            item.add_marker(SLO_MARKER)
        param: LevelParam = callspec.params[LEVEL_ARG]
        engine = callspec.params[ENGINE_ARG]
        ctx = TestContext(
            test=_sweep_test_id(item, engine, param.id),
            engine=engine,
            level=param.level,
            settings=param.settings,
            last_level=param.last,
            capacity=param.id == "capacity" and param.settings.capacity,
        )
        core.add_test(state, item.nodeid, ctx)
        if state.disabled_reason:
            item.add_marker(pytest.mark.skip(reason=state.disabled_reason))


def _sweep_test_id(item: pytest.Item, engine: str, level_id: str) -> str:
    """The node id without the engine and level parameters: what the levels share. Our two
    ids are adjacent in the callspec id (one hook call parametrizes both): remove them."""
    nodeid = item.nodeid
    callspec = getattr(item, "callspec", None)
    if callspec is None or "[" not in nodeid:
        return nodeid
    base = nodeid[: len(nodeid) - len(callspec.id) - 2]
    rest = callspec.id.replace(f"{engine}-{level_id}", "", 1)
    rest = rest.replace("--", "-").strip("-")
    return f"{base}[{rest}]" if rest else base


# --------------------------------------------------------------------------- running loads


def _progress(config: pytest.Config, label: str, requests: int, warmup: int) -> Any:
    """The live progress line of a level: shown on a terminal or with -v, written with
    capture suspended so it never lands in a test's captured output."""
    from pytest_llmslo.report.progress import LevelProgress

    tr = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    tty = bool(tr is not None and getattr(tr, "isatty", False))
    verbosity = config.get_verbosity()

    def write(text: str) -> None:
        if tr is None:  # never: the progress is disabled without a terminal reporter
            return
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            tr.write(text, flush=True)

    def begin() -> None:
        if tr is None:
            return
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            tr.ensure_newline()

    enabled = tr is not None and (verbosity > 0 or tty) and verbosity >= 0
    return LevelProgress(label, write=write, tty=tty, enabled=enabled, begin=begin)


def _say(config: pytest.Config, msg: str) -> None:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None or config.get_verbosity() < 0:
        return
    capman = config.pluginmanager.get_plugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        tr.ensure_newline()
        tr.write_line(msg)


def _warn(config: pytest.Config, node: str, msg: str) -> None:
    """A warning located at the test ``node`` (pytest's warning summary)."""
    item = config.stash.get(ITEMS_KEY, {}).get(node)
    if item is not None:
        item.warn(LlmSloWarning(msg))
    else:
        import warnings

        warnings.warn(LlmSloWarning(msg), stacklevel=2)


# ------------------------------------------------------------------------------- hooks


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    # The gates fail the test; their frames are the plugin's and the core's, not the user's.
    __tracebackhide__ = True
    state = item.config.stash.get(STATE_KEY, None)
    ctx = state.contexts.get(item.nodeid) if state is not None else None
    if state is None or ctx is None:
        return (yield)
    try:
        return (yield from core.run_test(state, item.nodeid))
    finally:
        if ctx.point_keys:
            report_test(state, item, ctx, "call")
        else:
            attach_properties(state, item, ctx)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """An engine that died (or did not start) is reported by what happened to it (how it
    exited, its log tail), not by a Python traceback through the plugin."""
    report = yield
    excinfo = call.excinfo
    if report.failed and excinfo is not None:
        if isinstance(excinfo.value, (EngineDiedError, Inconclusive)):
            report.longrepr = f"{excinfo.typename}: {excinfo.value}"
    return report


# A test's own code (fixtures, function, teardown) may block anywhere: there a signal
# interrupts it where it lands, as Python's Ctrl-C does (interrupts.py: ``foreign``).


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    if getattr(getattr(fixturedef, "func", None), "__module__", None) == fixtures.__name__:
        return (yield)  # the plugin's own fixtures act on signals at their safe points
    with _foreign(request.config):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[Any]:
    with _foreign(pyfuncitem.config):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    with _foreign(item.config):
        return (yield)


def _foreign(config: pytest.Config) -> contextlib.AbstractContextManager[None]:
    state = config.stash.get(STATE_KEY, None)
    return contextlib.nullcontext() if state is None else state.interrupts.foreign()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    state = item.config.stash.get(STATE_KEY, None)
    if state is not None:  # a safe point: a signal recorded before this test stops here
        state.interrupts.checkpoint()
    try:
        return (yield)
    finally:
        if state is not None and state.book.dirty and state.settings.json_path:
            # A signal now is raised once the document is written.
            with state.interrupts.shielded(deferred=True):
                core.write_json(state, complete=False)


# ------------------------------------------------------------------------- session end


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE_KEY, None)
    if state is None:
        return
    guard = state.interrupts
    # Nothing here is cut by a signal: a second Ctrl-C or SIGTERM is noted, the results
    # are written (partial), then the session ends as interrupted.
    with guard.shielded():
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED or guard.interrupted
        if state.suite_property is not None and state.points:
            for name, value in core.suite_properties(state):
                state.suite_property(name, value)
        interrupted = core.finish(state, interrupted=interrupted)
        # Interrupted, stop the engines now (after the results are safe); otherwise the
        # fixture teardown that follows does it (and pytest_unconfigure as a last resort).
        if interrupted and state.roster.factory is not None:
            state.roster.factory.stop_all()
    if interrupted:
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    elif state.write_errors and session.exitstatus == pytest.ExitCode.OK:
        # Green tests whose numbers were lost are not a success.
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is None:
        return
    tr = terminalreporter
    # 100 columns unless the terminal is wider: CI logs are not terminals (80 by default).
    width = min(max(config.get_terminal_writer().fullwidth, 100), 120)
    # The lines under each level (signals, traffic, notes) with -v.
    detail = config.get_verbosity() > 0
    for kind, text in core.summary_report(state, width, detail=detail):
        if kind in ("=", "-"):
            tr.write_sep(kind, text)
        else:
            tr.write_line(text, red=kind == "error", bold=kind == "error")
