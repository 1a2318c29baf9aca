"""The ``llmslo`` command: SLO sweeps, reports and regression comparisons outside pytest.

    llmslo run --engine sim --concurrency 1,8,32 --slo 'ttft_p99<500,itl_p50<30'
               [--slo-json RUN.json] [--slo-csv RUN.csv] [--slo-markdown RUN.md] [...]
    llmslo report RUN.json [OTHER.json ...] [--markdown OUT.md] [--svg OUT.svg]
                  [--csv OUT.csv] [--html OUT.html] [--width N]
    llmslo compare A B [--fail goodput:5%,ttft_p99:10%] [--engine OLD=NEW]
                       [--markdown OUT.md] [--svg OUT.svg] [--root DIR]
    llmslo history [--last N] | history show RUN      llmslo trend [METRIC] [--test T]
    llmslo export RUN [--github-smaller F] [--bencher F] [--requests-parquet F] [--otlp URL]
    llmslo render --engine NAME [--engines-file F]
    llmslo check --engine NAME [--engines-file F]
    llmslo worker --connect HOST:PORT [--name NAME] [--connect-timeout S]

``run`` starts the engines and runs the sweep (or the capacity search) of one test
without a test file, through the same session core as the plugin (``session/``): every
option is the plugin's (one table of settings, ``settings.SPECS``, with the same names,
environment variables and meaning), the levels are judged as a test's, and it prints the
same sweep tables, knees and Pareto summary and writes the same documents. Its defaults
suit a run at a terminal (``settings.RUN_DEFAULTS``: 30 s of measurement per level after 20
warm-up requests); it prints the plan before the first level and an estimate after it.
Its exit status: 0 every level met the SLO (or, without objectives, no level failed the
error gate), 1 a level did not, errored or was inconclusive, 2 a usage error (one line),
130 interrupted (SIGINT or SIGTERM, once or twice, in any phase: what was measured is
written, ``complete: false``, and a ``--slo-save`` baseline goes to ``NAME.partial``).

``report`` prints the tables of the terminal summary (``report/terminal.py``) for a run
document written with ``--slo-json``, with the capacity of each test that searched it, and
writes any report format from it (one flag per format, ``report.formats``). With other
run documents after the first (a baseline, the runs of other days), the formats that can
show several runs (``--html``) show them beside it, each level compared with theirs; the
others are a usage error with several documents.
``compare`` compares every point of ``B`` with the same test, engine and load level in
``A`` (paths of run documents, names of baselines saved with ``--slo-save`` under
``--root``, default ``.llmslo/baselines``, or runs of the history: ``latest``,
``latest~N``, a run id) and prints the per-point comparison
(``regression`` has the rule), and the capacity of each test that searched it on both
sides.

``--markdown PATH`` writes a Markdown summary too; ``-`` prints it to standard output in
place of the text; it is appended, not replaced, with ``--append`` or when PATH is
``$GITHUB_STEP_SUMMARY`` (that file collects every step's summary). ``--svg PATH``
writes the chart (``report/svg.py``).

``history`` lists the runs every session kept under ``.llmslo/runs`` (``--history DIR``);
``history show RUN`` prints one as ``report`` does. ``trend`` prints a metric across the
runs, per test, engine and level, with its change points (``history/``).

``render`` prints the objects the kubernetes runtime would apply for an engine with
``runtime = "kubernetes"`` (YAML, one document each, secrets as references), for review
or to commit; nothing is applied.

Exit status of ``report``/``compare``/``render``: 0 done (no regression); 1 a regression; 2 a usage
error, a missing or malformed document, or runs whose pinned constants differ (the message
names them). User errors print one line to standard error, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from pytest_llmslo import runargs
from pytest_llmslo._version import __version__
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.regression import baselines

if TYPE_CHECKING:
    from pytest_llmslo.document import Results
    from pytest_llmslo.session import EngineFactory, Session, TestContext

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REGRESSED",
    "EXIT_USAGE",
    "build_parser",
    "main",
]

EXIT_OK = 0
EXIT_REGRESSED = 1
#: ``llmslo run``: a level did not meet the SLO, errored or was inconclusive.
EXIT_FAILED = 1
EXIT_USAGE = 2
#: ``llmslo run``: stopped by SIGINT or SIGTERM (128 + SIGINT, as shells report Ctrl-C).
EXIT_INTERRUPTED = 130

PROG = "llmslo"


class _UsageError(Exception):
    """A user error found after parsing: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors: its usage block (for ``run``, dozens of lines
    of options) buries the one line that says what was wrong."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_USAGE,
            f"{self.prog}: error: {message}{self._suggestion(message)} (see {self.prog} --help)\n",
        )

    def _suggestion(self, message: str) -> str:
        """`` (did you mean --concurrency?)`` for a misspelt option of any subcommand."""
        from pytest_llmslo.suggest import closest

        if not message.startswith("unrecognized arguments:"):
            return ""
        known: set[str] = set(self._option_string_actions)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    known.update(sub._option_string_actions)
        for word in message.split(":", 1)[1].split():
            flag = word.split("=", 1)[0]
            if flag.startswith("--") and (match := closest(flag, known)):
                return f" (did you mean {match}?)"
        return ""


def _tolerances(text: str) -> Any:
    from pytest_llmslo.regression.tolerances import parse_tolerances

    try:
        tols = parse_tolerances(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not tols:
        raise argparse.ArgumentTypeError(
            f"Could not parse value: {text!r}. Expected METRIC:VALUE pairs such as "
            "goodput:5%,ttft_p99:10%."
        )
    return tols


def _engine_pair(text: str) -> tuple[str, str]:
    old, sep, new = text.partition("=")
    if not sep or not old.strip() or not new.strip():
        raise argparse.ArgumentTypeError(
            f"Could not parse value: {text!r}. Expected OLD=NEW, e.g. vllm-0.9=vllm-0.10."
        )
    return old.strip(), new.strip()


def _width(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Could not parse value: {text!r}.") from None
    if value < 40:
        raise argparse.ArgumentTypeError(f"width must be at least 40 columns, got {value}")
    return value


def _add_append(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--append",
        action="store_true",
        help="append the Markdown to PATH instead of replacing it "
        "(automatic when PATH is $GITHUB_STEP_SUMMARY)",
    )


def _add_outputs(p: argparse.ArgumentParser) -> None:
    """``llmslo compare``'s outputs: the comparison as Markdown, the chart of both runs."""
    p.add_argument(
        "--markdown",
        metavar="PATH",
        help="also write a Markdown summary to PATH ('-': print it instead of the text)",
    )
    _add_append(p)
    p.add_argument("--svg", metavar="PATH", help="also write an SVG chart to PATH")
    p.add_argument(
        "--html",
        metavar="PATH",
        help="also write the self-contained HTML report of NEW with OLD beside it, each level "
        "compared (the report --slo-html and llmslo report --html write)",
    )


def _add_formats(p: argparse.ArgumentParser) -> None:
    """``llmslo report``'s outputs: one flag per report format (``report.formats``)."""
    from pytest_llmslo.report.formats import FORMATS

    for fmt in FORMATS.values():
        p.add_argument(fmt.report_flag, dest=fmt.dest, metavar="PATH", help=fmt.report_help)
        if fmt.summary:
            _add_append(p)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="SLO sweeps of LLM serving engines without a test file (run, with load "
        "from other hosts: worker), and the reports and regression comparisons of their "
        "results (report, compare). The same sweeps run as pytest tests: pytest -m slo "
        "(see README.md).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    runargs.add_run(sub, _width)
    _add_worker(sub)
    runargs.add_config(sub)

    rep = sub.add_parser(
        "report",
        help="print the sweep tables of a run document",
        description="Print the sweep tables and Pareto summary of a run document "
        "(written with --slo-json or saved with --slo-save).",
    )
    rep.add_argument("run", metavar="RUN.json", help="a run document")
    rep.add_argument(
        "others",
        metavar="OTHER.json",
        nargs="*",
        help="other run documents (a baseline, the runs of other days) shown beside RUN in "
        "the formats that can show several runs",
    )
    _add_formats(rep)
    rep.add_argument(
        "--width",
        type=_width,
        default=None,
        help="width of the text tables in columns (default: the terminal's, 80 to 160)",
    )

    _add_history(sub)
    _add_export(sub)
    _add_check(sub)

    cmp_ = sub.add_parser(
        "compare",
        help="compare a run with a baseline, per test, engine and load level",
        description="Compare every point of NEW with the same test, engine and load level "
        "in OLD. Exit status 1 on a regression, 2 when the runs' pinned constants differ.",
    )
    cmp_.add_argument("old", metavar="OLD", help="baseline: a run document or a baseline name")
    cmp_.add_argument("new", metavar="NEW", help="new run: a run document or a baseline name")
    cmp_.add_argument(
        "--fail",
        type=_tolerances,
        default=None,
        metavar="TOLERANCES",
        help="per-metric tolerances, e.g. goodput:5%%,ttft_p99:10%%,itl_p50:2ms "
        "(default: the built-in set, goodput/throughput 5%%, latencies 10%%, attainment 2pp)",
    )
    cmp_.add_argument(
        "--engine",
        action="append",
        type=_engine_pair,
        default=[],
        metavar="OLD=NEW",
        help="pair engine OLD of the baseline with engine NEW of the new run (repeatable; "
        "default: by name)",
    )
    cmp_.add_argument(
        "--root",
        default=None,
        metavar="DIR",
        help="where named baselines are saved (default: .llmslo/baselines)",
    )
    cmp_.add_argument(
        "--history",
        default=None,
        metavar="DIR",
        help="the run history that latest, latest~N and run ids name (default: .llmslo/runs)",
    )
    _add_outputs(cmp_)
    _add_render(sub)
    return parser


# --------------------------------------------------------------------------- helpers


def _read(source: str, root: str | None = None, history: str | None = None) -> dict[str, Any]:
    from pytest_llmslo.history import refs, store

    try:
        return refs.load_ref(
            source,
            runs_root=history or store.DEFAULT_HISTORY_ROOT,
            baselines_root=root or baselines.DEFAULT_BASELINE_ROOT,
        )[1]
    except ConfigError as exc:
        raise _UsageError(str(exc)) from None


def _results(doc: dict[str, Any], source: str) -> Results:
    from pytest_llmslo.document import Results

    try:
        return Results.from_document(doc, source=source)
    except (KeyError, TypeError, ValueError) as exc:
        raise _UsageError(f"{source}: a point cannot be read: {exc!r}") from None


def _terminal_width(requested: int | None) -> int:
    if requested is not None:
        return requested
    return max(80, min(shutil.get_terminal_size((100, 24)).columns, 160))


def _write_text(path: str, text: str | bytes, *, append: bool) -> None:
    target = Path(path)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and os.path.abspath(summary) == os.path.abspath(path):
        append = True
    try:
        if target.parent and not target.parent.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            with target.open("ab" if append else "wb") as fb:
                fb.write(text)
            return
        with target.open("a" if append else "w", encoding="utf-8") as f:
            if append and target.stat().st_size > 0:
                f.write("\n")
            f.write(text)
    except OSError as exc:
        raise _UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _emit(
    args: argparse.Namespace,
    text: str,
    markdown: str | None,
    svg: str | None,
    out: TextIO,
) -> None:
    if args.markdown == "-":
        out.write(markdown or "")
    else:
        out.write(text.rstrip("\n") + "\n")
        if args.markdown and markdown is not None:
            _write_text(args.markdown, markdown, append=args.append)
    if args.svg and svg is not None:
        _write_text(args.svg, svg, append=False)


# --------------------------------------------------------------------------- commands


def _report(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_llmslo.report import terminal
    from pytest_llmslo.report.formats import FORMATS

    results = _results(_read(args.run, root=None), args.run)
    asked = [(fmt, path) for fmt in FORMATS.values() if (path := getattr(args, fmt.dest, None))]
    others = [_results(_read(o, root=None), o) for o in args.others]
    if others:
        several = [f.report_flag for f in FORMATS.values() if f.render_runs is not None]
        single = [f.report_flag for f, _ in asked if f.render_runs is None]
        if single or not asked:
            raise _UsageError(
                f"several run documents are shown only by {', '.join(several) or 'no format'}"
                + (f", not by {', '.join(single)}" if single else "")
            )
    width = _terminal_width(args.width)
    lines = terminal.render_summary(results, width) if results.points else []
    if not results.points:
        lines = [f"{args.run}: no load level was measured"]
    if not results.complete:
        lines.insert(0, f"{args.run}: partial results (the session was interrupted)")
    made = [
        (
            fmt,
            path,
            fmt.render_runs(results, others) if others and fmt.render_runs else fmt.render(results),
        )
        for fmt, path in asked
    ]
    # A summary format given '-' is printed in place of the tables.
    printed = next((text for fmt, path, text in made if fmt.summary and path == "-"), None)
    if printed is not None:
        out.write(printed if isinstance(printed, str) else printed.decode("utf-8"))
    else:
        out.write("\n".join(lines).rstrip("\n") + "\n")
    for fmt, path, text in made:
        if path != "-" or not fmt.summary:
            _write_text(path, text, append=bool(fmt.summary and args.append))
    return EXIT_OK


def _label(source: str) -> str:
    name = Path(source).name
    return name[:-5] if name.endswith(".json") else name


def _compare(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_llmslo.regression import compare_documents

    old = _results(_read(args.old, args.root, args.history), args.old)
    new = _results(_read(args.new, args.root, args.history), args.new)
    labels = (_label(args.old), _label(args.new))
    if labels[0] == labels[1]:
        labels = (f"{labels[0]} (baseline)", f"{labels[1]} (new)")
    result = compare_documents(
        old,
        new,
        args.fail,
        engines=dict(args.engine) if args.engine else None,
        labels=labels,
    )
    markdown = svg = None
    if args.markdown:
        from pytest_llmslo.report.markdown import render_comparison

        markdown = render_comparison(result)
    if args.svg and result.comparable:
        from pytest_llmslo.report.svg import render_svg

        svg = render_svg(new, baseline=old, title=f"{labels[0]} -> {labels[1]}")
    _emit(args, result.format(), markdown, svg, out)
    if args.html:
        from pytest_llmslo.report.formats import FORMATS

        render_runs = FORMATS["html"].render_runs
        if render_runs is not None:
            _write_text(args.html, render_runs(new, [old]), append=False)
    if args.svg and not result.comparable:
        print(f"{PROG}: no chart written: the runs are not comparable", file=sys.stderr)
    if result.regressed:
        return EXIT_REGRESSED
    if result.constants_differ:
        return EXIT_USAGE
    return EXIT_OK


# --------------------------------------------------------------------------- history


def _add_history(sub: Any) -> None:
    from pytest_llmslo.history import command

    hist = command.add_history(sub)
    _add_formats(hist)
    hist.add_argument("--width", type=_width, default=None, help="table width")
    command.add_trend(sub)


def _trend_charts(args: argparse.Namespace, series: Any) -> None:
    from pytest_llmslo.report.trendchart import render_trend_html, render_trend_svg

    if args.svg:
        _write_text(args.svg, render_trend_svg(series), append=False)
    if args.html:
        _write_text(
            args.html, render_trend_html(series, f"llmslo trend: {args.metric}"), append=False
        )


def _history(args: argparse.Namespace, out: TextIO) -> int:
    """``llmslo history``, ``history show RUN`` (printed as ``report`` prints) and
    ``llmslo trend``."""
    from pytest_llmslo.history import command

    try:
        if args.command == "trend":
            found = command.trend_series(args)
            lines = command.trend_lines(args, found)
            _trend_charts(args, found[1])
        elif args.action == "show":
            args.run, args.others = str(command.show_path(args)), []
            return _report(args, out)
        else:
            if args.ref:
                raise _UsageError(f"unexpected argument {args.ref!r} (history show RUN?)")
            lines = command.history_lines(args)
    except ConfigError as exc:
        raise _UsageError(str(exc)) from None
    out.write("\n".join(lines).rstrip("\n") + "\n")
    return EXIT_OK


# --------------------------------------------------------------------------- export


def _add_export(sub: Any) -> None:
    from pytest_llmslo.exports.command import add_export

    add_export(sub)


def _export(args: argparse.Namespace, out: TextIO) -> int:
    """``llmslo export RUN``: the exports asked for (``exports/``)."""
    from pytest_llmslo.exports.command import export

    results = _results(_read(args.run, args.root, args.history), args.run)
    try:
        lines = export(args, results)
    except ConfigError as exc:
        raise _UsageError(str(exc)) from None
    out.write("\n".join(lines) + "\n")
    return EXIT_OK


# --------------------------------------------------------------------------- render


def _add_render(sub: Any) -> None:
    ren = sub.add_parser(
        "render",
        help='print the Kubernetes manifests of an engine with runtime = "kubernetes"',
        description="Print the objects the kubernetes runtime would apply for the engine "
        "(YAML, one document each, secrets as Secret references); nothing is applied.",
    )
    ren.add_argument("--engine", required=True, metavar="NAME", help="a configured engine")
    ren.add_argument(
        "--engines-file",
        metavar="F",
        default=None,
        help="TOML file with [engines.NAME] tables (default: ./pyproject.toml's "
        "[tool.llmslo.engines.NAME])",
    )


def _render(args: argparse.Namespace, out: TextIO) -> int:
    """``llmslo render``: the manifests of one engine, as YAML."""
    from pytest_llmslo.engines import load_engine_configs, plan_engine, resolve_engine
    from pytest_llmslo.engines.runtimes.k8s.render import render_manifests
    from pytest_llmslo.engines.tempdirs import remove_dirs
    from pytest_llmslo.errors import EngineUnavailable

    source = args.engines_file or ("pyproject.toml" if Path("pyproject.toml").exists() else None)
    try:
        configs = load_engine_configs(source) if source else {}
        config = resolve_engine(args.engine, configs)
        if config.runtime != "kubernetes":
            raise _UsageError(
                f"engine {args.engine!r} has runtime={config.runtime!r}: render prints the "
                'objects of runtime = "kubernetes"'
            )
        plan = plan_engine(config)
        try:
            out.write(render_manifests(plan))
        finally:
            remove_dirs(plan.temp_dirs)
    except (ConfigError, EngineUnavailable) as exc:
        raise _UsageError(str(exc)) from None
    return EXIT_OK


# --------------------------------------------------------------------------- check


def _add_check(sub: Any) -> None:
    chk = sub.add_parser(
        "check",
        help='check a cluster for what an engine with runtime = "kubernetes" needs',
        description="Before anything is applied: read the cluster the engine's kubeconfig "
        "names and list what it lacks (namespace, CRDs, RBAC, GPUs, runtime class, "
        "Secrets, the cache's access mode). Exit 1 when something is missing.",
    )
    chk.add_argument("--engine", required=True, metavar="NAME", help="a configured engine")
    chk.add_argument(
        "--engines-file",
        metavar="F",
        default=None,
        help="TOML file with [engines.NAME] tables (default: ./pyproject.toml's "
        "[tool.llmslo.engines.NAME])",
    )


def _check(args: argparse.Namespace, out: TextIO) -> int:
    """``llmslo check``: the preflight of one engine's cluster (exit 1: something missing)."""
    from pytest_llmslo.engines import load_engine_configs, resolve_engine
    from pytest_llmslo.engines.runtimes.k8s.preflight import check_engine
    from pytest_llmslo.errors import EngineUnavailable

    source = args.engines_file or ("pyproject.toml" if Path("pyproject.toml").exists() else None)
    try:
        return check_engine(resolve_engine(args.engine, load_engine_configs(source or {})), out)
    except (ConfigError, EngineUnavailable) as exc:
        raise _UsageError(str(exc)) from None


# --------------------------------------------------------------------------- run


def _sources(args: argparse.Namespace) -> Any:
    """The sources of ``llmslo run``'s settings (``runargs.sources``); a bad run file is a
    usage error."""
    from pytest_llmslo import runargs

    try:
        return runargs.sources(args)
    except ConfigError as exc:
        raise _UsageError(str(exc)) from None


def _config(args: argparse.Namespace, out: TextIO) -> int:
    """``llmslo config``: the resolved settings with their sources, then their check."""
    from pytest_llmslo import settings as S

    sources = _sources(args)
    out.write("\n".join(S.explain(sources)) + "\n")
    try:
        S.resolve_session(sources)
        S.resolve_test(sources, S.split_marker((), {}, "llmslo-run"), "llmslo-run")
    except ConfigError as exc:
        raise _UsageError(str(exc)) from None
    return EXIT_OK


def _add_worker(sub: Any) -> None:
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


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``llmslo run``: one sweep (or capacity search) per engine, judged per level."""
    from pytest_llmslo import session as core
    from pytest_llmslo import settings as S
    from pytest_llmslo.interrupts import Interrupts
    from pytest_llmslo.report.plan import plan_lines

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
            raise _UsageError(str(exc)) from None
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
    for engine in state.session.engines:
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

    width = _terminal_width(args.width)
    for kind, text in core.summary_report(state, width):
        if kind in ("=", "-"):
            print(f" {text} ".center(width, kind), file=out)
        else:
            print(text, file=err if kind == "error" else out)
    for line in failed:
        print(f"{PROG}: FAILED {line}", file=err)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``llmslo`` command with ``argv`` (default: ``sys.argv[1:]``); return the
    exit status (see the module docstring) instead of exiting."""
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        code = exc.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_USAGE)
    out = sys.stdout
    try:
        if args.command == "report":
            return _report(args, out)
        if args.command == "run":
            return _run(args, out, sys.stderr)
        if args.command == "render":
            return _render(args, out)
        if args.command == "check":
            return _check(args, out)
        if args.command in ("history", "trend"):
            return _history(args, out)
        if args.command == "export":
            return _export(args, out)
        if args.command == "config":
            return _config(args, out)
        if args.command == "worker":
            from pytest_llmslo.load.remote_worker import command

            return command(args, sys.stderr)
        return _compare(args, out)
    except _UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # `llmslo report run.json | head`: the reader left; not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")  # stays open until the interpreter exits
        except OSError:
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
