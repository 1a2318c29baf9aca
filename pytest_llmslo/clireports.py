"""``llmslo report``, ``compare``, ``history``, ``trend`` and ``export``: the commands that
read run documents (paths, baseline names, runs of the history) and print or write what
they show."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pytest_llmslo.cliargs import (
    EXIT_OK,
    EXIT_REGRESSED,
    EXIT_USAGE,
    PROG,
    UsageError,
    add_append,
    add_baseline_root,
    add_history_root,
    add_width,
)
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.regression import baselines

if TYPE_CHECKING:
    from pytest_llmslo.document import Results

__all__ = [
    "add_compare",
    "add_export",
    "add_history",
    "add_report",
    "compare",
    "export",
    "history",
    "report",
    "terminal_width",
]


def add_report(sub: Any) -> None:
    """The ``report`` subcommand's arguments."""
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
    add_width(rep, "width of the text tables in columns (default: the terminal's, 80 to 160)")


def add_compare(sub: Any) -> None:
    """The ``compare`` subcommand's arguments."""
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
    add_baseline_root(cmp_)
    add_history_root(cmp_)
    _add_outputs(cmp_)


def add_history(sub: Any) -> None:
    from pytest_llmslo.history import command

    hist = command.add_history(sub)
    _add_formats(hist)
    add_width(hist, "table width")
    command.add_trend(sub)


def add_export(sub: Any) -> None:
    from pytest_llmslo.exports import command

    command.add_export(sub)


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


def _add_outputs(p: argparse.ArgumentParser) -> None:
    """``llmslo compare``'s outputs: the comparison as Markdown, the chart of both runs."""
    p.add_argument(
        "--markdown",
        metavar="PATH",
        help="also write a Markdown summary to PATH ('-': print it instead of the text)",
    )
    add_append(p)
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
            add_append(p)


def _read(source: str, root: str | None = None, history: str | None = None) -> dict[str, Any]:
    from pytest_llmslo.history import refs, store

    try:
        return refs.load_ref(
            source,
            runs_root=history or store.DEFAULT_HISTORY_ROOT,
            baselines_root=root or baselines.DEFAULT_BASELINE_ROOT,
        )[1]
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _results(doc: dict[str, Any], source: str) -> Results:
    from pytest_llmslo.document import Results

    try:
        return Results.from_document(doc, source=source)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{source}: a point cannot be read: {exc!r}") from None


def terminal_width(requested: int | None) -> int:
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
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


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


def report(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_llmslo.report import terminal
    from pytest_llmslo.report.formats import FORMATS

    results = _results(_read(args.run, root=None), args.run)
    asked = [(fmt, path) for fmt in FORMATS.values() if (path := getattr(args, fmt.dest, None))]
    others = [_results(_read(o, root=None), o) for o in args.others]
    if others:
        several = [f.report_flag for f in FORMATS.values() if f.render_runs is not None]
        single = [f.report_flag for f, _ in asked if f.render_runs is None]
        if single or not asked:
            raise UsageError(
                f"several run documents are shown only by {', '.join(several) or 'no format'}"
                + (f", not by {', '.join(single)}" if single else "")
            )
    width = terminal_width(args.width)
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


def compare(args: argparse.Namespace, out: TextIO) -> int:
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


def _trend_charts(args: argparse.Namespace, series: Any) -> None:
    from pytest_llmslo.report.trendchart import render_trend_html, render_trend_svg

    if args.svg:
        _write_text(args.svg, render_trend_svg(series), append=False)
    if args.html:
        _write_text(
            args.html, render_trend_html(series, f"llmslo trend: {args.metric}"), append=False
        )


def history(args: argparse.Namespace, out: TextIO) -> int:
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
            return report(args, out)
        else:
            if args.ref:
                raise UsageError(f"unexpected argument {args.ref!r} (history show RUN?)")
            lines = command.history_lines(args)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    out.write("\n".join(lines).rstrip("\n") + "\n")
    return EXIT_OK


def export(args: argparse.Namespace, out: TextIO) -> int:
    """``llmslo export RUN``: the exports asked for (``exports/``)."""
    from pytest_llmslo.exports import command

    results = _results(_read(args.run, args.root, args.history), args.run)
    try:
        lines = command.export(args, results)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    out.write("\n".join(lines) + "\n")
    return EXIT_OK
