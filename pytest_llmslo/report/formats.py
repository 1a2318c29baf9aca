"""The report formats a session writes and ``llmslo report`` makes: one entry each.

An entry (``Format``) gives a format's name, the option that asks for it and the
``llmslo report`` flag (both from its name: ``markdown`` is ``--slo-markdown`` and
``llmslo report --markdown``), the writer (``render``: a ``document.Results`` in, text or
bytes out) and how it is named in messages. A format that can show several runs in one
view has ``render_runs`` too (the run and the others: a session's baseline, the extra
files of ``llmslo report RUN.json OTHER.json ...``). The session's output checks and writes
(``session.output_flags``, ``output_path``, ``write_reports``) and ``llmslo report``'s
flags are made from ``FORMATS``; nothing else names a format.

The option itself is declared where every option is, in ``settings.SPECS`` (``slo_<name>``,
topic ``outputs``), and the entry reads it by name (``Format.spec``): settings sits below
the reports and must not import them, and one table of options stays the one place an
option is declared. So a new format is its render function, its entry here (``register``)
and its ``SPECS`` entry with its README row; a test checks that the two tables agree.

The results document (``--slo-json``) is not a format: it is what the others are made
from, written after every test (``document.write_atomic``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pytest_llmslo import settings as S
from pytest_llmslo.document.results import Results
from pytest_llmslo.history.trend import HistoryRun
from pytest_llmslo.report.csvexport import render_csv
from pytest_llmslo.report.html import render_html, render_runs
from pytest_llmslo.report.markdown import render_report
from pytest_llmslo.report.svg import render_svg

__all__ = ["FORMATS", "Format", "register", "unregister"]

#: A format's writer: the results in, the file's text (or bytes) out.
Render = Callable[[Results], str | bytes]


class RenderRuns(Protocol):
    """A writer of several runs: the run, then the others it is shown beside; with the
    run ``history`` (the runs before it, oldest first) and the ``run`` record the history
    keeps for it, the run's trend."""

    def __call__(
        self,
        results: Results,
        others: Sequence[Results],
        /,
        *,
        history: Sequence[HistoryRun] = ...,
        record: Mapping[str, Any] | None = ...,
    ) -> str | bytes: ...


@dataclass(frozen=True, slots=True)
class Format:
    """One report format. ``report_help`` is the help of its ``llmslo report`` flag;
    ``summary``: a text summary (Markdown) that ``llmslo report --NAME -`` prints in place
    of the tables and ``--append`` appends to its file. ``render_runs``: the writer of
    several runs in one view, for a format that can show them (None: it cannot)."""

    name: str
    label: str
    render: Render
    report_help: str
    summary: bool = False
    render_runs: RenderRuns | None = None

    @property
    def option(self) -> str:
        """The name of its setting in ``settings.SPECS`` (``slo_markdown``)."""
        return f"slo_{self.name}"

    @property
    def flag(self) -> str:
        """The session's command-line flag (``--slo-markdown``)."""
        return "--" + self.option.replace("_", "-")

    @property
    def report_flag(self) -> str:
        """The ``llmslo report`` flag (``--markdown``)."""
        return "--" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        """The attribute of ``llmslo report``'s arguments that holds its path."""
        return self.name.replace("-", "_")

    @property
    def spec(self) -> S.Spec:
        """Its option's entry in ``settings.SPECS`` (``KeyError`` when it has none)."""
        return S.SPEC_BY_NAME[self.option]


#: Every report format, by name, in the order a session writes them.
FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add a report format (``ValueError`` for a name already taken)."""
    if fmt.name in FORMATS:
        raise ValueError(f"a report format named {fmt.name!r} is registered already")
    FORMATS[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    """Remove the report format ``name`` (a format a test registered)."""
    FORMATS.pop(name, None)


def _svg(results: Results) -> str:
    # A session's chart is titled by the harness, a document's by its file.
    title = Path(results.source).name if results.source else "pytest-llmslo"
    return render_svg(results, title=title)


register(
    Format(
        "markdown",
        "Markdown",
        render_report,
        "also write a Markdown summary to PATH ('-': print it instead of the text)",
        summary=True,
    )
)
register(Format("svg", "SVG", _svg, "also write an SVG chart to PATH"))
register(Format("csv", "CSV", render_csv, "also write one CSV row per engine, test and level"))
register(
    Format(
        "html",
        "HTML",
        render_html,
        "also write a self-contained HTML report to PATH (with OTHER.json files: the runs "
        "side by side, each level compared)",
        render_runs=render_runs,
    )
)
