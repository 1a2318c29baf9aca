"""CSV export of a session's results: one row per engine x test x load level, for a
spreadsheet or a plotting script (``--slo-csv PATH``, ``llmslo run --csv PATH``, ``llmslo report
--csv PATH``).

Columns (``COLUMNS``): what was run (engine and version, test, load mode, level and its
label), how it ended (``outcome``: one of ``judged.OUTCOMES``; ``knee``: 1 on
the sweep's knee level; ``interrupted``, ``valid``), the counts and rates (requests,
completed, failed, error rate, output/total tok/s, req/s, goodput tok/s, attainment) and,
per latency metric of the catalogue, P50, P90, P99 and the mean in ms as the gate judged
them (``judged.judged_stat``: ``inf`` where failed requests decide it), each metric's
sample count (``ttft_n``: requests, failed ones counted as the gate counts them; token gaps
for itl) and ``too_few``: the figures, space-separated (``ttft_p99_ms ttft_p90_ms``), from
fewer samples than their percentile needs (a P99 needs 100). An empty cell is a
value that does not exist (no goodput without objectives, no ITL for one-token answers).
Numbers are written as Python writes floats, with no unit in the cell: the unit is in
the column name.
"""

from __future__ import annotations

import csv
import io
import math
from typing import TYPE_CHECKING, Any

from pytest_llmslo.catalog import METRICS
from pytest_llmslo.document.jsonable import jsonable
from pytest_llmslo.document.results import Results
from pytest_llmslo.judged import judged_stat, level_outcome, stat_count
from pytest_llmslo.judged import thin as judged_thin

if TYPE_CHECKING:
    from pytest_llmslo.sweep import Knee, SweepPoint

__all__ = ["COLUMNS", "render_csv"]

_STATS: tuple[tuple[str, float | str], ...] = (
    ("p50", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("mean", "mean"),
)

COLUMNS: tuple[str, ...] = (
    "engine",
    "engine_version",
    "test",
    "mode",
    "level",
    "label",
    "outcome",
    "knee",
    "interrupted",
    "valid",
    "requests",
    "completed",
    "failed",
    "error_rate",
    "duration_s",
    "output_tok_s",
    "total_tok_s",
    "req_s",
    "goodput_tok_s",
    "attainment",
    *(f"{m}_{name}_ms" for m in METRICS for name, _ in _STATS),
    *(f"{m}_n" for m in METRICS),
    "too_few",
)


def _stat(p: SweepPoint, metric: str, stat: float | str) -> Any:
    """The judged figure (``judged.judged_stat``); ``inf`` where failed requests decide it."""
    v = judged_stat(p, metric, stat)
    if v is None or math.isnan(v):
        return None
    return "inf" if v == math.inf else "-inf" if v == -math.inf else v


def _row(results: Results, p: SweepPoint, knee: bool, sweep_knee: Knee | None) -> list[Any]:
    s = p.summary
    # The verdict's goodput is computed from the objectives the test asserted.
    judged = p.verdict if p.verdict is not None else s
    values: dict[str, Any] = {
        "engine": p.engine,
        "engine_version": results.engine_version(p.engine),
        "test": p.test,
        "mode": p.level.mode,
        "level": f"{float(p.level.value):g}",
        "label": p.level.label,
        "outcome": level_outcome(p, sweep_knee).outcome,
        "knee": 1 if knee else 0,
        "interrupted": 1 if p.interrupted else 0,
        "valid": 1 if s.valid else 0,
        "requests": s.requests,
        "completed": s.completed,
        "failed": s.failed,
        "error_rate": s.error_rate,
        "duration_s": s.duration_s,
        "output_tok_s": s.output_tok_s,
        "total_tok_s": s.total_tok_s,
        "req_s": s.req_s,
        "goodput_tok_s": judged.goodput_tok_s,
        "attainment": judged.attainment,
    }
    thin: list[str] = []
    for m in METRICS:
        for name, stat in _STATS:
            values[f"{m}_{name}_ms"] = _stat(p, m, stat)
            if values[f"{m}_{name}_ms"] is not None and judged_thin(p, m, stat):
                thin.append(f"{m}_{name}_ms")
        values[f"{m}_n"] = stat_count(p, m, 99.0)
    values["too_few"] = " ".join(thin)
    cells = (jsonable(values[c]) for c in COLUMNS)  # NaN and infinities: no value
    return ["" if v is None else v for v in cells]


def _knees(results: Results) -> tuple[set[int], dict[int, Knee]]:
    """Indices into ``results.points`` of each sweep's knee level (``knee.index``), and
    each point's sweep knee by index."""
    out: set[int] = set()
    of: dict[int, Knee] = {}
    for sweep in results.sweeps():
        of.update(dict.fromkeys(sweep.indices, sweep.knee))
        idx = sweep.knee.index
        if isinstance(idx, int) and 0 <= idx < len(sweep.indices):
            out.add(sweep.indices[idx])
    return out, of


def render_csv(results: Results) -> str:
    """The points of ``results`` as CSV text (header row first), in the order they were
    measured."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    knees, of = _knees(results)
    for i, p in enumerate(results.points):
        writer.writerow(_row(results, p, i in knees, of.get(i)))
    return buf.getvalue()
