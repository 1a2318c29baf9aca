"""The argparse pieces the ``llmslo`` subcommands share: the parser with one-line usage
errors, the exit statuses, the value parsers and the options several subcommands take."""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REGRESSED",
    "EXIT_USAGE",
    "PROG",
    "OneLineErrorParser",
    "UsageError",
    "add_append",
    "add_baseline_root",
    "add_engines_file",
    "add_history_root",
    "add_width",
    "positive_int",
    "table_width",
]

EXIT_OK = 0
EXIT_REGRESSED = 1
#: ``llmslo run``: a level did not meet the SLO, errored or was inconclusive.
EXIT_FAILED = 1
EXIT_USAGE = 2
#: ``llmslo run``: stopped by SIGINT or SIGTERM (128 + SIGINT, as shells report Ctrl-C).
EXIT_INTERRUPTED = 130

PROG = "llmslo"


class UsageError(Exception):
    """A user error found after parsing: reported in one line, exit status 2."""


class OneLineErrorParser(argparse.ArgumentParser):
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


def table_width(text: str) -> int:
    """``--width N``: the width of the text tables, at least 40 columns."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Could not parse value: {text!r}.") from None
    if value < 40:
        raise argparse.ArgumentTypeError(f"width must be at least 40 columns, got {value}")
    return value


def positive_int(text: str) -> int:
    """A count such as ``--last N``: a positive integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Could not parse value: {text!r}.") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_width(p: argparse.ArgumentParser, help: str) -> None:
    """``--width N``, the text tables' width (default: the terminal's)."""
    p.add_argument("--width", type=table_width, default=None, help=help)


def add_append(p: argparse.ArgumentParser) -> None:
    """``--append``: a Markdown summary is appended to its file, not written over it."""
    p.add_argument(
        "--append",
        action="store_true",
        help="append the Markdown to PATH instead of replacing it "
        "(automatic when PATH is $GITHUB_STEP_SUMMARY)",
    )


def add_history_root(p: argparse.ArgumentParser, default: str | None = None) -> None:
    """``--history DIR``: the run history that ``latest``, ``latest~N`` and run ids name."""
    p.add_argument(
        "--history",
        default=default,
        metavar="DIR",
        help=f"the run history's directory (default: {default or '.llmslo/runs'})",
    )


def add_baseline_root(p: argparse.ArgumentParser) -> None:
    """``--root DIR``: where named baselines are saved."""
    p.add_argument(
        "--root",
        default=None,
        metavar="DIR",
        help="where named baselines are saved (default: .llmslo/baselines)",
    )


def add_engines_file(p: argparse.ArgumentParser) -> None:
    """``--engine NAME`` and ``--engines-file F``: the configured engine a command is about."""
    p.add_argument("--engine", required=True, metavar="NAME", help="a configured engine")
    p.add_argument(
        "--engines-file",
        metavar="F",
        default=None,
        help="TOML file with [engines.NAME] tables (default: ./pyproject.toml's "
        "[tool.llmslo.engines.NAME])",
    )
