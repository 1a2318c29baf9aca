"""Other runs beside a run in the HTML report: a baseline (``--slo-compare``) or the runs of
other days (``llmslo report RUN.json OTHER.json ...``).

``Runs`` pairs each point of the run with the same test, engine and level in every other
run and compares them with the regression check's own ``compare_test`` (the default
tolerances: the verdict a ``--slo-compare`` would give). The page shows, per test, each
level's figures in every run side by side with the verdict of each comparison; per level,
the old and new value of each metric, its change and its verdict; in the header, how many
levels regressed; and the other runs' sweeps dashed on the charts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from pytest_llmslo.document.results import Results, Sweep
from pytest_llmslo.judged import judged_stat
from pytest_llmslo.regression import (
    ROW_HEADERS,
    Comparison,
    Judging,
    Pairing,
    compare_test,
    row_cells,
)
from pytest_llmslo.report.htmlcells import cell
from pytest_llmslo.sweep import SweepPoint, finite_or_none, point_goodput

__all__ = ["Runs", "run_label"]

#: The figures of a level shown side by side: (header, value, digits).
_FIGURES = (
    ("out tok/s", lambda p: finite_or_none(p.summary.output_tok_s), 1),
    ("goodput tok/s", point_goodput, 1),
    ("TTFT P99 ms", lambda p: judged_stat(p, "ttft", 99), 1),
    ("ITL P50 ms", lambda p: judged_stat(p, "itl", 50), 2),
)

_STATUS_CLASS = {
    "regressed": "fail",
    "improved": "pass",
    "unchanged": "unchecked",
    "not comparable": "invalid",
}


def run_label(results: Results, fallback: str) -> str:
    """A run's name on the page: its file's name without ``.json``."""
    if not results.source:
        return fallback
    name = Path(results.source).name
    return name[:-5] if name.endswith(".json") else name


def _status(text: str) -> str:
    return f'<span class="badge {_STATUS_CLASS.get(text, "unchecked")}">{escape(text)}</span>'


@dataclass
class Runs:
    """The run, the other runs by label, and each point's comparison with each of them
    (by the point's index in the run and the other run's label; None: no such level)."""

    results: Results
    label: str = "this run"
    others: list[tuple[str, Results]] = field(default_factory=list)
    compared: dict[tuple[int, str], Comparison | None] = field(default_factory=dict)
    matched: dict[tuple[int, str], SweepPoint] = field(default_factory=dict)

    @classmethod
    def of(cls, results: Results, baselines: Sequence[Results]) -> Runs:
        runs = cls(results, run_label(results, "this run"))
        taken = {runs.label}
        for n, other in enumerate(baselines, start=1):
            label = run_label(other, f"run {n}")
            while label in taken:
                label += f" ({n})"
            taken.add(label)
            runs.others.append((label, other))
            runs._compare(label, other)
        return runs

    def _compare(self, label: str, other: Results) -> None:
        pairing = Pairing(other, self.results, Judging(labels=(label, self.label)))
        index = {id(p): i for i, p in enumerate(self.results.points)}
        groups: dict[tuple[str, str], list[SweepPoint]] = {}
        for p in self.results.points:
            groups.setdefault((p.engine, p.test), []).append(p)
        for (engine, test), pts in groups.items():
            used: set[int] = set()
            tc = compare_test(pairing, engine, test, pts, used=used)
            for p, comparison in tc.points:
                self.compared[(index[id(p)], label)] = comparison
        for i, p in enumerate(self.results.points):
            same = [
                q
                for q in other.points
                if (q.engine, q.test, q.level.label) == (p.engine, p.test, p.level.label)
            ]
            if same:
                self.matched[(i, label)] = same[-1]

    # ----------------------------------------------------------------- page parts

    def header_lines(self) -> list[str]:
        out = []
        for label, _other in self.others:
            found = [c for (_i, lb), c in self.compared.items() if lb == label and c is not None]
            regressed = sum(c.regressed for c in found)
            improved = sum(c.improved and not c.regressed for c in found)
            differ = sum(not c.comparable for c in found)
            cls = "fail" if regressed else "pass"
            text = (
                f"against {label}: {len(found)} levels compared, {regressed} regressed, "
                f"{improved} improved" + (f", {differ} not comparable" if differ else "")
            )
            out.append(
                f'<p class="verdict {cls}" data-compared="{escape(label)}">{escape(text)}</p>'
            )
        return out

    def constants_lines(self) -> list[str]:
        if not self.others:
            return []
        rows = [(self.label, self.results), *self.others]
        body = "".join(
            f"<tr><td>{escape(label)}</td><td>{escape(r.source or '')}</td>"
            f"<td>{escape(r.created_utc)}</td>"
            f"<td>{escape(' '.join(r.harness.values()))}</td><td>{len(r.points)}</td></tr>"
            for label, r in rows
        )
        return [
            "<h3>Runs shown</h3>",
            '<table class="runs"><tr><th>run</th><th>file</th><th>made</th><th>harness</th>'
            f"<th>levels</th></tr>{body}</table>",
        ]

    def baseline_sweeps(self, test: str, mode: str) -> list[tuple[str, Sweep]]:
        return [
            (label, s)
            for label, other in self.others
            for s in other.sweeps()
            if s.test == test and s.mode == mode
        ]

    def test_lines(self, test: str) -> str:
        if not self.others:
            return ""
        labels = [self.label, *(label for label, _ in self.others)]
        head = "".join(
            f'<th colspan="{len(_FIGURES)}">{escape(label)}</th>' for label in labels
        ) + "".join(f"<th>vs {escape(label)}</th>" for label, _ in self.others)
        sub = "".join(f"<th>{escape(h)}</th>" for h, _f, _d in _FIGURES) * len(labels)
        sub += "<th>verdict</th>" * len(self.others)
        rows = []
        for i, p in enumerate(self.results.points):
            if p.test != test:
                continue
            cells = "".join(cell(f(p), d) for _h, f, d in _FIGURES)
            for label, _ in self.others:
                q = self.matched.get((i, label))
                cells += "".join(cell(None if q is None else f(q), d) for _h, f, d in _FIGURES)
            for label, _ in self.others:
                c = self.compared.get((i, label))
                cells += f"<td>{_status(c.status) if c is not None else 'not in that run'}</td>"
            rows.append(
                f'<tr data-point="{i}"><td>{escape(p.engine)}</td><td>{escape(p.level.label)}</td>'
                f"{cells}</tr>"
            )
        return (
            '<h3>Runs side by side</h3><div class="scroll"><table class="side">'
            f'<tr><th rowspan="2">engine</th><th rowspan="2">level</th>{head}</tr>'
            f"<tr>{sub}</tr>{''.join(rows)}</table></div>"
        )

    def level_lines(self, p: SweepPoint) -> str:
        i = self.results.points.index(p)
        out = []
        for label, _ in self.others:
            c = self.compared.get((i, label))
            if c is None:
                out.append(f'<p class="sub">Not in {escape(label)}.</p>')
                continue
            out.append(f"<h4>Against {escape(label)}: {_status(c.status)}</h4>")
            if not c.comparable:
                out.append("<ul>" + "".join(f"<li>{escape(x)}</li>" for x in c.problems) + "</ul>")
                continue
            headers = list(ROW_HEADERS)
            headers[1], headers[2] = c.labels
            head = "".join(f"<th>{escape(h)}</th>" for h in headers)
            rows = "".join(
                f'<tr class="{escape(r.status)}">'
                + "".join(f"<td>{escape(x)}</td>" for x in row_cells(r))
                + "</tr>"
                for r in c.rows
            )
            out.append(f'<table class="compare"><tr>{head}</tr>{rows}</table>')
            out.extend(f'<p class="sub">{escape(n)}</p>' for n in c.notes)
        return "".join(out)
