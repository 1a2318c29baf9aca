"""``llmslo history`` and ``llmslo trend``: their arguments and what they print (the
command itself, ``cli.py``, wires them; ``history show`` prints as ``llmslo report``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_llmslo.catalog import METRIC_SPECS
from pytest_llmslo.cliargs import add_history_root, positive_int
from pytest_llmslo.document import DocumentError, Results
from pytest_llmslo.errors import ConfigError

from .changepoint import DEFAULT_ALPHA, DEFAULT_MIN_CHANGE
from .refs import resolve_run
from .store import DEFAULT_HISTORY_ROOT, RunEntry, list_runs, printable, read_run
from .trend import HistoryRun, TrendSeries, format_trends, series_of

__all__ = ["add_history", "add_trend", "history_lines", "show_path", "trend_lines", "trend_series"]


def add_history(sub: Any) -> argparse.ArgumentParser:
    """``llmslo history [--last N]`` and ``llmslo history show RUN``."""
    hist: argparse.ArgumentParser = sub.add_parser(
        "history",
        help="list the runs of the run history",
        description="List the runs every session kept in the run history (newest last): "
        "id, time, commit, engines with their versions, points. `llmslo history show RUN` "
        "prints one as `llmslo report` does; RUN is latest, latest~N or a run id (prefix).",
    )
    add_history_root(hist, DEFAULT_HISTORY_ROOT)
    hist.add_argument("--last", type=positive_int, default=20, metavar="N", help="show N runs")
    hist.add_argument("action", nargs="?", choices=("list", "show"), default="list")
    hist.add_argument("ref", nargs="?", metavar="RUN", help="with show: the run to print")
    return hist


def add_trend(sub: Any) -> argparse.ArgumentParser:
    """``llmslo trend [METRIC]``."""
    tr: argparse.ArgumentParser = sub.add_parser(
        "trend",
        help="a metric across the runs of the history, with its change points",
        description="Print, per test, engine and load level, METRIC across the runs of the "
        "history, with the runs where it shifted (E-Divisive means, t-test) marked and "
        "what changed between the runs (engine version, image, commit, constants).",
    )
    tr.add_argument(
        "metric",
        nargs="?",
        default="throughput",
        metavar="METRIC",
        help="a comparison metric (default: throughput; e.g. itl_p50, ttft_p99, goodput)",
    )
    add_history_root(tr, DEFAULT_HISTORY_ROOT)
    tr.add_argument("--test", default=None, help="only this test")
    tr.add_argument("--engine", default=None, help="only this engine")
    tr.add_argument("--level", default=None, metavar="LABEL", help="only this level (c32)")
    tr.add_argument("--last", type=positive_int, default=30, metavar="N", help="the last N runs")
    tr.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        help=f"significance level of a change point (default {DEFAULT_ALPHA})",
    )
    tr.add_argument(
        "--min-change",
        type=float,
        default=DEFAULT_MIN_CHANGE,
        metavar="FRACTION",
        help=f"smallest relative change that is a change point (default {DEFAULT_MIN_CHANGE})",
    )
    tr.add_argument("--svg", metavar="PATH", help="also write the charts as SVG to PATH")
    tr.add_argument("--html", metavar="PATH", help="also write the charts and tables as HTML")
    return tr


def _engines_text(record: Mapping[str, Any]) -> str:
    engines = record.get("engines")
    if not isinstance(engines, Mapping):
        return "?"
    parts = []
    for name, info in list(engines.items())[:8]:
        version = printable(info.get("version"), 30) if isinstance(info, Mapping) else None
        label = printable(name, 30) or "?"
        parts.append(f"{label} {version}" if version else label)
    return ", ".join(parts) or "-"


def _row(e: RunEntry) -> list[str]:
    commit = e.commit[:10] if e.commit else "-"
    if e.commit and isinstance(e.record.get("commit"), Mapping) and e.record["commit"].get("dirty"):
        commit += "+"
    return [
        e.id,
        e.time.strftime("%Y-%m-%d %H:%M"),
        commit,
        _engines_text(e.record),
        str(e.points),
        "" if e.complete else "partial",
    ]


def history_lines(args: argparse.Namespace) -> list[str]:
    """The listing of ``llmslo history``."""
    runs, problems = list_runs(args.history)
    lines = [f"{args.history}: {p}" if not p.startswith(str(args.history)) else p for p in problems]
    if not runs:
        return [*lines, f"no run in the run history under {args.history}"]
    shown = runs[-args.last :]
    rows = [["run", "time (UTC)", "commit", "engines", "points", ""], *map(_row, shown)]
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if len(runs) > len(shown):
        lines.append(f"({len(runs) - len(shown)} older runs not shown; --last N shows more)")
    return lines


def show_path(args: argparse.Namespace) -> Path:
    """The document ``llmslo history show RUN`` prints."""
    if not args.ref:
        raise ConfigError("history show needs a run: latest, latest~N or a run id")
    runs, _problems = list_runs(args.history)
    return resolve_run(args.ref, runs, str(args.history)).path


def trend_series(args: argparse.Namespace) -> tuple[list[str], list[TrendSeries]]:
    """The series of ``llmslo trend`` and one line per run that was left out."""
    if args.metric not in METRIC_SPECS:
        raise ConfigError(
            f"unknown metric {args.metric!r}; valid: {', '.join(sorted(METRIC_SPECS))}"
        )
    if not 0 < args.alpha < 1 or args.min_change < 0:
        raise ConfigError("--alpha must be between 0 and 1 and --min-change >= 0")
    entries, problems = list_runs(args.history)
    runs = []
    for entry in entries[-args.last :]:
        try:
            runs.append(HistoryRun(entry, Results.from_document(read_run(entry.path))))
        except (DocumentError, KeyError, TypeError, ValueError) as exc:
            problems.append(f"{entry.path}: left out: {exc}")
    series = series_of(
        runs,
        args.metric,
        test=args.test,
        engine=args.engine,
        level=args.level,
        alpha=args.alpha,
        min_change=args.min_change,
    )
    return problems, series


def trend_lines(args: argparse.Namespace, found: tuple[list[str], list[TrendSeries]]) -> list[str]:
    """The tables of ``llmslo trend`` (``found``: ``trend_series``)."""
    problems, series = found
    if not series:
        return [*problems, f"no run under {args.history} has {args.metric} for these filters"]
    return [*problems, *format_trends(series)]
