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

Each command lives in its module: ``clirun`` (run, config, worker), ``clireports`` (report,
compare, history, trend, export), ``clicluster`` (render, check); ``cliargs`` holds what
their parsers share.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from pytest_llmslo import clicluster, clireports, clirun, runargs
from pytest_llmslo._version import __version__
from pytest_llmslo.cliargs import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REGRESSED,
    EXIT_USAGE,
    PROG,
    OneLineErrorParser,
    UsageError,
)

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REGRESSED",
    "EXIT_USAGE",
    "build_parser",
    "main",
]


def build_parser() -> OneLineErrorParser:
    """The ``llmslo`` parser: one subcommand each, defined by the module that runs it."""
    parser = OneLineErrorParser(
        prog=PROG,
        description="SLO sweeps of LLM serving engines without a test file (run, with load "
        "from other hosts: worker), and the reports and regression comparisons of their "
        "results (report, compare). The same sweeps run as pytest tests: pytest -m slo "
        "(see README.md).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    runargs.add_run(sub)
    clirun.add_worker(sub)
    runargs.add_config(sub)
    clireports.add_report(sub)
    clireports.add_history(sub)
    clireports.add_export(sub)
    clicluster.add_check(sub)
    clireports.add_compare(sub)
    clicluster.add_render(sub)
    return parser


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
            return clireports.report(args, out)
        if args.command == "run":
            return clirun.run(args, out, sys.stderr)
        if args.command == "render":
            return clicluster.render(args, out)
        if args.command == "check":
            return clicluster.check(args, out)
        if args.command in ("history", "trend"):
            return clireports.history(args, out)
        if args.command == "export":
            return clireports.export(args, out)
        if args.command == "config":
            return clirun.config(args, out)
        if args.command == "worker":
            from pytest_llmslo.load.remote_worker import command

            return command(args, sys.stderr)
        return clireports.compare(args, out)
    except UsageError as exc:
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
