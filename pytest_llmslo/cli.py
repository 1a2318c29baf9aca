"""The ``llmslo`` command: reports and regression comparisons of run documents, outside
pytest.

    llmslo report RUN.json [--markdown OUT.md] [--svg OUT.svg] [--width N]
    llmslo compare A B [--fail goodput:5%,ttft_p99:10%] [--engine OLD=NEW]
                       [--markdown OUT.md] [--svg OUT.svg] [--root DIR]

``report`` prints the tables of the terminal summary (``report/terminal.py``) for a run
document written with ``--slo-json``, with the capacity of each test that searched it.
``compare`` compares every point of ``B`` with the same test, engine and load level in
``A`` (paths of run documents, or names of baselines saved with ``--slo-save`` under
``--root``, default ``.llmslo/baselines``) and prints the per-point comparison
(``compare.py`` has the rule), and the capacity of each test that searched it on both
sides.

``--markdown PATH`` writes a Markdown summary too; ``-`` prints it to standard output in
place of the text; it is appended, not replaced, with ``--append`` or when PATH is
``$GITHUB_STEP_SUMMARY`` (that file collects every step's summary). ``--svg PATH``
writes the chart (``report/svg.py``).

Exit status: 0 done (no regression); 1 a regression; 2 a usage error, a missing or
malformed document, or runs whose pinned constants differ (the message names them).
User errors print one line to standard error, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pytest_llmslo import baselines
from pytest_llmslo._version import __version__
from pytest_llmslo.errors import ConfigError

__all__ = ["EXIT_OK", "EXIT_REGRESSED", "EXIT_USAGE", "build_parser", "main"]

EXIT_OK = 0
EXIT_REGRESSED = 1
EXIT_USAGE = 2

PROG = "llmslo"


class _UsageError(Exception):
    """A user error found after parsing: reported in one line, exit status 2."""


def _tolerances(text: str) -> Any:
    from pytest_llmslo.tolerances import parse_tolerances

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


def _add_outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--markdown",
        metavar="PATH",
        help="also write a Markdown summary to PATH ('-': print it instead of the text)",
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="append the Markdown to PATH instead of replacing it "
        "(automatic when PATH is $GITHUB_STEP_SUMMARY)",
    )
    p.add_argument("--svg", metavar="PATH", help="also write an SVG chart to PATH")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Reports and regression comparisons of pytest-llmslo run documents.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    rep = sub.add_parser(
        "report",
        help="print the sweep tables of a run document",
        description="Print the sweep tables and Pareto summary of a run document "
        "(written with --slo-json or saved with --slo-save).",
    )
    rep.add_argument("run", metavar="RUN.json", help="a run document")
    _add_outputs(rep)
    rep.add_argument(
        "--width",
        type=_width,
        default=None,
        help="width of the text tables in columns (default: the terminal's, 80 to 160)",
    )

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
    _add_outputs(cmp_)
    return parser


# --------------------------------------------------------------------------- helpers


def _read(source: str, root: str | None = None) -> dict[str, Any]:

    try:
        return baselines.load_baseline(source, root=root or baselines.DEFAULT_BASELINE_ROOT)
    except ConfigError as exc:
        raise _UsageError(str(exc)) from None


def _points_and_knees(doc: dict[str, Any], source: str) -> tuple[list[Any], dict[Any, Any]]:
    from pytest_llmslo.report.jsonio import load_points
    from pytest_llmslo.report.markdown import document_knees

    try:
        return load_points(doc), document_knees(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise _UsageError(f"{source}: a point cannot be read: {exc!r}") from None


def _terminal_width(requested: int | None) -> int:
    if requested is not None:
        return requested
    return max(80, min(shutil.get_terminal_size((100, 24)).columns, 160))


def _write_text(path: str, text: str, *, append: bool) -> None:
    target = Path(path)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and os.path.abspath(summary) == os.path.abspath(path):
        append = True
    try:
        if target.parent and not target.parent.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
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
    from pytest_llmslo.report.markdown import document_capacities

    doc = _read(args.run, root=None)
    points, knees = _points_and_knees(doc, args.run)
    width = _terminal_width(args.width)
    capacities = document_capacities(doc)
    lines = terminal.render_summary(points, knees, width, capacities) if points else []
    if not points:
        lines = [f"{args.run}: no load level was measured"]
    if not doc.get("complete", True):
        lines.insert(0, f"{args.run}: partial results (the session was interrupted)")
    markdown = svg = None
    if args.markdown:
        from pytest_llmslo.report.markdown import render_report

        markdown = render_report(doc)
    if args.svg:
        from pytest_llmslo.report.svg import render_svg

        svg = render_svg(points, knees, title=Path(args.run).name)
    _emit(args, "\n".join(lines), markdown, svg, out)
    return EXIT_OK


def _label(source: str) -> str:
    name = Path(source).name
    return name[:-5] if name.endswith(".json") else name


def _compare(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_llmslo import compare

    old_doc = _read(args.old, args.root)
    new_doc = _read(args.new, args.root)
    labels = (_label(args.old), _label(args.new))
    if labels[0] == labels[1]:
        labels = (f"{labels[0]} (baseline)", f"{labels[1]} (new)")
    result = compare.compare_documents(
        old_doc,
        new_doc,
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

        old_points, _ = _points_and_knees(old_doc, args.old)
        new_points, knees = _points_and_knees(new_doc, args.new)
        svg = render_svg(
            new_points, knees, baseline=old_points, title=f"{labels[0]} -> {labels[1]}"
        )
    _emit(args, result.format(), markdown, svg, out)
    if args.svg and not result.comparable:
        print(f"{PROG}: no chart written: the runs are not comparable", file=sys.stderr)
    if result.regressed:
        return EXIT_REGRESSED
    if result.constants_differ:
        return EXIT_USAGE
    return EXIT_OK


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
        return 130


if __name__ == "__main__":
    sys.exit(main())
