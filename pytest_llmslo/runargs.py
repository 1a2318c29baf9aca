"""The options of ``llmslo run`` and ``llmslo config``, generated from the settings'
table: the options most runs need in ``--help``, the others by topic in its epilog and in
full with ``--help-all``, the run file (``-f``), and the sources they make."""

from __future__ import annotations

import argparse
from typing import Any

from pytest_llmslo import settings as S
from pytest_llmslo.cliargs import add_width

__all__ = [
    "ENGINE_SPECS",
    "NO_ENGINE_NOTE",
    "add_config",
    "add_run",
    "add_settings",
    "sources",
]


class _HelpAll(argparse.Action):
    """``llmslo run --help-all``: every option in full, by topic, then exit."""

    def __init__(self, option_strings: list[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        parser.print_usage()
        print(S.reference_text("run"))
        parser.exit()


#: The settings that choose what ``llmslo run`` measures; none given, it is the sim.
ENGINE_SPECS = ("engine", "engine_url")
NO_ENGINE_NOTE = (
    "no --engine given: measuring the built-in simulator (sim, no GPU); give --engine NAME "
    "or --engine-url URL to measure a real engine"
)


def add_run(sub: Any) -> None:
    """The `run` command."""
    run = sub.add_parser(
        "run",
        help="run an SLO sweep of one or more engines, no test file needed",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [--engine NAME] [--concurrency N[,N] | --rate R[,R]] "
        "[--duration DURATION] [--slo SPEC] [options]",
        description=(
            "Start the engines, run the sweep (or the capacity search), judge each level\n"
            "against the SLO and print the sweep tables, the knee and the Pareto summary, as\n"
            "`pytest -m slo` does for a test. Without --engine it measures the built-in\n"
            "simulator (sim). Defaults suit a terminal: 30 s of measurement per level after 20\n"
            "warm-up requests. Exit status: 0 every level met the SLO, 1 a level did not (or\n"
            "errored, or was inconclusive), 2 a usage error, 130 interrupted (the results so\n"
            "far are written)."
        ),
        epilog=S.run_epilog(),
    )
    run.add_argument("--help-all", action=_HelpAll, help="print every option in full and exit")
    run.add_argument(
        "--name",
        default="llmslo-run",
        help="the test name the sweep is recorded under (default: llmslo-run)",
    )
    add_width(run, "table width (default: the terminal's)")
    add_settings(run)


def add_settings(p: argparse.ArgumentParser) -> None:
    """The run file and the settings' options of ``run`` and ``config``: the options most
    runs need in full; the others taken but listed by name in the epilog (``--help-all``
    prints them in full). The defaults shown are those that apply here."""
    p.add_argument(
        "-f",
        "--config",
        dest="run_file",
        metavar="FILE",
        help="a run file (TOML or YAML, docs/options.md names its keys) with the settings of "
        "the sweep; an option given here overrides it",
    )
    for topic, title, specs in S.help_sections("run"):
        group = p.add_argument_group(title) if topic == "common" else p
        for spec in specs:
            flag, kw = S.argparse_option(spec, ini=False, defaults=S.RUN_DEFAULTS)
            if topic != "common":
                kw["help"] = argparse.SUPPRESS
            group.add_argument(flag, **kw)
            alias = S.alias_option(spec, ini=False)
            if alias:
                group.add_argument(alias[0], **alias[1])


def add_config(sub: Any) -> None:
    cfg = sub.add_parser(
        "config",
        help="print the settings a run would use, each with where it came from",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print every setting `llmslo run` would use with these options (and "
        "-f FILE, and the LLMSLO_* variables), each with its source,\nthen check them as "
        "the run would. Exit status: 0 they are valid, 2 a usage error.",
        epilog=S.run_epilog(),
    )
    add_settings(cfg)


def sources(args: argparse.Namespace) -> S.Sources:
    """The sources of ``llmslo run``'s settings: its options, the run file (a bad one is a
    ``ConfigError``), the variables."""
    cli = S.given_cli(lambda d: getattr(args, d, S.UNSET))
    file = S.read_run_file(args.run_file) if args.run_file else None
    return S.Sources.from_environ(cli, {}, defaults=S.RUN_DEFAULTS, file=file)
