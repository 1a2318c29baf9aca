"""``llmslo run`` and ``llmslo config``: one test's sweep (or capacity search) per engine
without a test file, through the session core the plugin uses, and the settings it would
use; and ``llmslo worker``'s arguments."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pytest_llmslo import runargs
from pytest_llmslo.cliargs import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    PROG,
    UsageError,
)
from pytest_llmslo.clireports import terminal_width
from pytest_llmslo.errors import ConfigError

if TYPE_CHECKING:
    from pytest_llmslo.session import EngineFactory, Session, TestContext

__all__ = ["add_worker", "config", "run"]


def _sources(args: argparse.Namespace) -> Any:
    """The sources of ``llmslo run``'s settings (``runargs.sources``); a bad run file is a
    usage error."""
    try:
        return runargs.sources(args)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def config(args: argparse.Namespace, out: TextIO) -> int:
    """``llmslo config``: the resolved settings with their sources, then their check."""
    from pytest_llmslo import settings as S

    sources = _sources(args)
    out.write("\n".join(S.explain(sources)) + "\n")
    try:
        S.resolve_session(sources)
        S.resolve_test(sources, S.split_marker((), {}, "llmslo-run"), "llmslo-run")
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


def add_worker(sub: Any) -> None:
    from pytest_llmslo.load.remote_worker import add_arguments

    add_arguments(
        sub.add_parser(
            "worker",
            help="serve a session's load as a remote worker",
            description="Connect to a session that listens with --worker-listen and send "
            "its share of every level's load until the session ends (docs/load.md, 'Remote "
            "workers'). Exit status: 0 the session ended, 1 an error (named), 130 "
            "interrupted.",
        )
    )


def _stderr_progress(label: str, stream: TextIO) -> Any:
    """The live progress line of a level on ``stream`` (in place on a terminal)."""
    from pytest_llmslo.report.progress import LevelProgress

    def write(text: str) -> None:
        stream.write(text)
        stream.flush()

    return LevelProgress(label, write=write, tty=bool(getattr(stream, "isatty", bool)()))


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``llmslo run``: one sweep (or capacity search) per engine, judged per level."""
    from pytest_llmslo import session as core
    from pytest_llmslo import settings as S
    from pytest_llmslo.interrupts import Interrupts
    from pytest_llmslo.report.estimate import plan_lines

    # SIGINT and SIGTERM are recorded and acted on at safe points from here on, and no
    # signal cuts the writing of what was measured (interrupts.py).
    guard = Interrupts()
    guard.install()
    try:
        sources = _sources(args)
        cwd = Path.cwd()
        try:
            settings = S.resolve_session(sources)
            state = core.Session(
                settings,
                sources,
                rootpath=cwd,
                invocation_dir=cwd,
                voice=core.Voice(
                    say=lambda msg: print(msg, file=err, flush=True),
                    progress=lambda label, _n, _w: _stderr_progress(label, err),
                ),
            )
            state.interrupts = guard
            core.prepare(state)
            core.plan_test(state, state.defaults, args.name)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        for text in settings.warnings:
            print(f"{PROG}: warning: {text}", file=err)
        if not any(S.lookup(S.SPEC_BY_NAME[n], sources, None, "")[2] for n in runargs.ENGINE_SPECS):
            print(f"{PROG}: {runargs.NO_ENGINE_NOTE}", file=err)
        contexts = _contexts(state, args.name)
        for line in [*core.tests_overview(state), *plan_lines(state.contexts.values())]:
            print(line, file=err, flush=True)
        failed: list[str] = []
        interrupted = False
        factory = core.engine_factory(state)
        try:
            for engine in settings.engines:
                guard.checkpoint()  # a safe point: a stop signal ends the sweep here
                _sweep_engine(state, factory, engine, contexts[engine], failed, err)
            guard.checkpoint()
        except KeyboardInterrupt:
            interrupted = True
        except BaseException:
            # Whatever ends the sweep, what was measured is written (partial) first.
            with guard.shielded():
                core.finish(state, interrupted=True)
                factory.stop_all()
            raise
        # The results first (a third signal during the engines' stop then loses nothing),
        # then the engines.
        with guard.shielded():
            interrupted = core.finish(state, interrupted=interrupted)
            factory.stop_all()
            if interrupted:
                how = guard.describe() or "interrupted"
                print(f"{PROG}: interrupted ({how}); the levels measured so far are kept", file=err)
            _print_summary(state, args, out, err, failed)
    finally:
        guard.uninstall()
    if interrupted:
        return EXIT_INTERRUPTED
    if failed or state.write_errors or not state.points:
        return EXIT_FAILED
    return EXIT_OK


def _contexts(state: Session, test: str) -> dict[str, list[tuple[str, TestContext]]]:
    """The tests of the run, one per engine and level (``node``, ``TestContext``),
    registered with the session before anything starts, so the plan and the estimate know
    them all."""
    from pytest_llmslo import session as core

    ts = state.defaults
    levels = [ts.levels[0]] if ts.capacity else list(ts.levels)
    out: dict[str, list[tuple[str, TestContext]]] = {}
    for engine in state.settings.engines:
        for i, level in enumerate(levels):
            node = f"{test}[{engine}-{'capacity' if ts.capacity else level.label}]"
            ctx = core.TestContext(
                test=test,
                engine=engine,
                level=level,
                settings=ts,
                last_level=i == len(levels) - 1 and not ts.capacity,
                capacity=ts.capacity,
            )
            core.add_test(state, node, ctx)
            out.setdefault(engine, []).append((node, ctx))
    return out


def _sweep_engine(
    state: Session,
    factory: EngineFactory,
    engine: str,
    tests: list[tuple[str, TestContext]],
    failed: list[str],
    err: TextIO,
) -> None:
    """Start ``engine`` and run its levels, each judged as a test's (the session's
    per-test protocol, ``session.run_test``, around an empty body); what failed goes to
    ``failed``."""
    from pytest_llmslo import session as core
    from pytest_llmslo.errors import (
        EngineDiedError,
        Inconclusive,
        LoadError,
        RegressionError,
        SloViolation,
    )

    unavailable, start_error = factory.try_start(engine)
    if unavailable or start_error:
        failed.append(" ".join((unavailable or start_error or "").split()))
        print(f"{PROG}: {unavailable or start_error}", file=err)
        return
    handle = factory.get(engine)
    for node, ctx in tests:
        level = ctx.level
        try:
            run = core.load_test(state, node, handle, level, ctx.settings)
            with core.bound(state, run):
                core.call_test(state, node, lambda: None)
        except (SloViolation, RegressionError, Inconclusive) as exc:
            first = str(exc).splitlines()[0]
            failed.append(f"{engine} {level.label}: {first}")
        except (EngineDiedError, LoadError) as exc:
            failed.append(f"{engine} {level.label}: {str(exc).splitlines()[0]}")
            print(f"{PROG}: {engine} {level.label}: {exc}", file=err)


def _print_summary(
    state: Session, args: argparse.Namespace, out: TextIO, err: TextIO, failed: list[str]
) -> None:
    from pytest_llmslo import session as core

    width = terminal_width(args.width)
    for kind, text in core.summary_report(state, width):
        if kind in ("=", "-"):
            print(f" {text} ".center(width, kind), file=out)
        else:
            print(text, file=err if kind == "error" else out)
    for line in failed:
        print(f"{PROG}: FAILED {line}", file=err)
