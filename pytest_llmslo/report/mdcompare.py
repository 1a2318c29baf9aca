"""A document comparison (``regression.DocumentComparison``) as Markdown: a heading with
the outcome, the differing constants when the runs are not comparable, otherwise one table
per compared point (metric, baseline, new, delta, delta %, tolerance, status) with the
regressions in bold and the noise judgements under it. ``report.markdown`` gives it as
``render_comparison`` too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_llmslo.report.mdtable import escape_cell, table
from pytest_llmslo.report.paths import relative_paths

if TYPE_CHECKING:
    from pytest_llmslo.regression import Comparison, DocumentComparison

__all__ = ["render_comparison"]


def _comparison_block(c: Comparison) -> list[str]:
    from pytest_llmslo.regression import ROW_HEADERS, row_cells

    level = "-" if c.level is None else c.level.label
    head = f"### {escape_cell(c.engine)} · `{escape_cell(c.test)}` · {level} · {c.status}"
    old, new = c.versions
    if old is not None or new is not None:
        head += f" · engine {escape_cell(old or '?')} → {escape_cell(new or '?')}"
    lines = [head, ""]
    if not c.comparable:
        lines.append("Not compared, the runs differ:")
        lines.append("")
        lines.extend(f"- {escape_cell(p)}" for p in c.problems)
        return lines
    headers = list(ROW_HEADERS)
    headers[1], headers[2] = c.labels
    rows = []
    for r in c.rows:
        cells = row_cells(r)
        if r.status == "regressed":
            cells = [f"**{x}**" for x in cells]
        rows.append(cells)
    lines.extend(table(headers, rows, {1, 2, 3, 4, 5}))
    notes = [r for r in c.rows if r.status in ("noise", "regressed") and r.noise is not None]
    details = []
    for r in notes:
        n = r.noise
        if n is None or n.noise is None:
            continue
        if n.method in ("bootstrap", "order-statistic"):
            low = "-∞" if n.low is None else f"{n.low:+.1f}"
            high = "+∞" if n.high is None else f"{n.high:+.1f}"
            text = (
                f"change in [{low}, {high}] ms ({100 * n.confidence:g}% {n.method} interval), "
                f"rank test p={n.p_value:.3g}, n={n.n_old}/{n.n_new}"
            )
        else:
            text = f"{n.method.removesuffix('-test')} test p={n.p_value:.3g}, n={n.n_old}/{n.n_new}"
        if n.note:
            text += f"; {n.note}"
        details.append(f"- `{r.metric}` ({r.status}): {escape_cell(text)}")
    if details:
        lines.append("")
        lines.extend(details)
    if c.notes:
        lines.append("")
        lines.extend(f"_{escape_cell(note)}_" for note in c.notes)
    return lines


def render_comparison(result: DocumentComparison, *, title: str | None = None) -> str:
    """A document comparison as Markdown (see the module docstring)."""
    from pytest_llmslo.regression import RULE

    status = result.status
    icon = {"regressed": "❌", "not comparable": "⚠️"}.get(status, "✅")
    heading = title or f"pytest-llmslo comparison: {result.labels[0]} → {result.labels[1]}"
    lines = [f"## {escape_cell(heading)}", "", f"{icon} **{status}**"]
    if result.mismatch:
        lines.append("")
        lines.append("Not compared: the pinned constants differ.")
        lines.append("")
        lines.extend(f"- {escape_cell(m)}" for m in result.mismatch)
        return relative_paths("\n".join(lines) + "\n")
    if result.tolerances:
        tol = ", ".join(f"`{k}` {t.label}" for k, t in result.tolerances.items())
        lines.append("")
        lines.append(f"Tolerances: {tol}")
    for note in result.notes:
        lines.append("")
        lines.append(f"_{escape_cell(note)}_")
    counts: dict[str, int] = {}
    for c in result.comparisons:
        counts[c.status] = counts.get(c.status, 0) + 1
    if result.comparisons:
        lines.append("")
        n = len(result.comparisons)
        lines.append(
            f"{n} point{'s' if n != 1 else ''} compared: "
            + ", ".join(f"{k} {s}" for s, k in counts.items())
        )
        # Regressions first: the reader of a red CI run looks for them.
        order = sorted(result.comparisons, key=lambda c: (not c.regressed, c.comparable))
        for c in order:
            lines.append("")
            lines.extend(_comparison_block(c))
    else:
        lines.append("")
        lines.append("No point (engine, test, load level) is in both documents.")
    if result.only_old:
        lines.append("")
        lines.append(
            f"Only in {escape_cell(result.labels[0])}: " + escape_cell(", ".join(result.only_old))
        )
    if result.only_new:
        lines.append("")
        lines.append(
            f"Only in {escape_cell(result.labels[1])}: " + escape_cell(", ".join(result.only_new))
        )
    lines.append("")
    lines.append(f"<sub>{escape_cell(RULE)}</sub>")
    return relative_paths("\n".join(lines) + "\n")
