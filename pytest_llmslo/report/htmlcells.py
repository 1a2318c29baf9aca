"""The pieces every part of the HTML report is made of: a number's table cell (shown
rounded, exact in ``data-v``), an outcome's badge, a key-value table, a list of texts,
the figures of a point by column name, and an objective's bound as a chart's threshold.
Every text is escaped here."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from pytest_llmslo.judged import (
    THIN_LEGEND,
    THIN_MARK,
    fmt_judged,
    judged_stat,
    stat_count,
    thin,
)
from pytest_llmslo.report.htmlcharts import Threshold
from pytest_llmslo.sweep import (
    SweepPoint,
    finite_or_none,
    point_attainment,
    point_goodput,
)

__all__ = [
    "OUTCOME",
    "OUTCOME_CLASS",
    "badge",
    "bounds",
    "cell",
    "kv_table",
    "lines",
    "point_cell",
    "point_value",
    "slug",
    "thin_legend",
]

#: The outcomes as the page names them (``judged.OUTCOMES``, and the point statuses of
#: ``sweep.PointStatus``), and the class of their badge: only ``fail`` is red.
OUTCOME = {
    "pass": "passed",
    "fail": "missed",
    "invalid": "inconclusive",
    "unchecked": "no SLO",
    "expected_miss": "expected miss",
    "inconclusive": "inconclusive",
    "cut": "cut",
    "interrupted": "interrupted",
    "no_slo": "no SLO",
}
OUTCOME_CLASS = {
    "expected_miss": "unchecked",
    "inconclusive": "invalid",
    "cut": "invalid",
    "interrupted": "invalid",
    "no_slo": "unchecked",
}


def slug(text: str) -> str:
    """An id for an anchor: the text's letters and digits, others as ``-``."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def point_value(p: SweepPoint, key: str) -> float | None:
    """The figure ``key`` of a point as the results document has it: a summary field
    (``output_tok_s``), ``goodput``, ``attainment`` (as a percentage) or a metric's
    percentile (``ttft:99``)."""
    if key == "goodput":
        return point_goodput(p)
    if key == "attainment":
        a = point_attainment(p)
        return None if a is None else 100.0 * a
    if ":" in key:
        metric, stat = key.split(":")
        return judged_stat(p, metric, float(stat))
    return finite_or_none(getattr(p.summary, key, None))


def cell(value: float | None, digits: int) -> str:
    """A number's table cell: the value shown rounded, the exact one in ``data-v``."""
    if value is None:
        return '<td class="n na">–</td>'
    if math.isinf(value):
        # Failed requests decide the figure (``judged.judged_stat``).
        return f'<td class="n" data-v="{value!r}">{fmt_judged(value)}</td>'
    return f'<td class="n" data-v="{value!r}">{value:,.{digits}f}</td>'


def point_cell(p: SweepPoint, key: str, digits: int) -> str:
    """The cell of figure ``key`` of a point (``point_value``); a percentile's carries its
    sample count (``data-n`` and its title) and ``THIN_MARK`` when it rests on fewer
    samples than it needs."""
    text = cell(point_value(p, key), digits)
    if ":" not in key:
        return text
    metric, stat = key.split(":")
    n = stat_count(p, metric, float(stat))
    mark = THIN_MARK if thin(p, metric, float(stat)) and "na" not in text else ""
    head, body = text.split(">", 1)
    title = f"from {n} samples" + (" (fewer than this percentile needs)" if mark else "")
    return f'{head} data-n="{n}" title="{title}">{body.replace("</td>", mark + "</td>")}'


def thin_legend(table: str) -> str:
    """The legend of ``THIN_MARK`` when the table's HTML shows one, else nothing."""
    return f'<p class="sub">{escape(THIN_LEGEND)}</p>' if THIN_MARK in table else ""


def badge(status: str) -> str:
    """An outcome (``pass``, ``fail``, ``invalid``, ``unchecked``) as a coloured label."""
    cls = OUTCOME_CLASS.get(status, status)
    return f'<span class="badge {escape(cls)}">{escape(OUTCOME.get(status, status))}</span>'


def kv_table(rows: Iterable[tuple[str, str]], cls: str) -> str:
    """A table of one name and one value per row."""
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="kv {cls}">{body}</table>'


def lines(texts: Iterable[str], cls: str) -> str:
    """A list of the texts that are not blank (none: nothing)."""
    items = "".join(f"<li>{escape(t.strip())}</li>" for t in texts if t.strip())
    return f'<ul class="{cls}">{items}</ul>' if items else ""


def bounds(objectives: Sequence[Any], metric: str, stat: float) -> list[Threshold]:
    """The bounds of the ``objectives`` on ``metric``'s ``stat``, as thresholds on y."""
    out = []
    for o in objectives:
        if o.metric == metric and o.stat == stat:
            out.append(Threshold(o.threshold, f"SLO {o.label}"))
    return out
