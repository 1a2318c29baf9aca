"""CSV export of a run document: one row per engine x test x load level, for a spreadsheet
or a plotting script (``--slo-csv PATH``, ``llmslo run --csv PATH``, ``llmslo report
--csv PATH``).

Columns (``COLUMNS``): what was run (engine and version, test, load mode, level and its
label), how it ended (``outcome``: pass, fail, inconclusive or unchecked; ``knee``: 1 on
the sweep's knee level; ``interrupted``, ``valid``), the counts and rates (requests,
completed, failed, error rate, output/total tok/s, req/s, goodput tok/s, attainment) and,
per latency metric of the catalogue, P50, P90, P99 and the mean in ms. An empty cell is a
value that does not exist (no goodput without objectives, no ITL for one-token answers).
Numbers are written as Python writes floats, with no unit in the cell: the unit is in
the column name.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from pytest_llmslo.catalog import METRICS, qkey
from pytest_llmslo.records import LoadLevel

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
)


def _stat(summary: Mapping[str, Any], metric: str, stat: float | str) -> Any:
    dist = (summary.get("distributions") or {}).get(metric) or {}
    if not dist.get("count"):
        return None
    if stat == "mean":
        return dist.get("mean")
    return (dist.get("percentiles") or {}).get(qkey(float(stat)))


def _knee_points(doc: Mapping[str, Any]) -> set[int]:
    """Indices into ``points`` of each sweep's knee level."""
    out: set[int] = set()
    for sweep in doc.get("sweeps") or ():
        knee = sweep.get("knee") or {}
        idx = knee.get("index")
        indices = sweep.get("points") or []
        if isinstance(idx, int) and 0 <= idx < len(indices):
            out.add(int(indices[idx]))
    return out


def _row(doc: Mapping[str, Any], i: int, p: Mapping[str, Any], knees: set[int]) -> list[Any]:
    summary = p.get("summary") or {}
    level = p.get("level") or {}
    verdict = p.get("verdict") or {}
    engine = str(p.get("engine", ""))
    version = ((doc.get("engines") or {}).get(engine) or {}).get("version")
    goodput = verdict.get("goodput_tok_s", summary.get("goodput_tok_s"))
    attainment = verdict.get("attainment", summary.get("attainment"))
    values: dict[str, Any] = {
        "engine": engine,
        "engine_version": version,
        "test": p.get("test"),
        "mode": level.get("mode"),
        "level": None if level.get("value") is None else f"{float(level['value']):g}",
        "label": LoadLevel.from_dict(level).label if level else "",
        "outcome": p.get("outcome"),
        "knee": 1 if i in knees else 0,
        "interrupted": 1 if p.get("interrupted") else 0,
        "valid": 1 if summary.get("valid", True) else 0,
        "requests": summary.get("requests"),
        "completed": summary.get("completed"),
        "failed": summary.get("failed"),
        "error_rate": summary.get("error_rate"),
        "duration_s": summary.get("duration_s"),
        "output_tok_s": summary.get("output_tok_s"),
        "total_tok_s": summary.get("total_tok_s"),
        "req_s": summary.get("req_s"),
        "goodput_tok_s": goodput,
        "attainment": attainment,
    }
    for m in METRICS:
        for name, stat in _STATS:
            values[f"{m}_{name}_ms"] = _stat(summary, m, stat)
    return ["" if values[c] is None else values[c] for c in COLUMNS]


def render_csv(doc: Mapping[str, Any]) -> str:
    """The document's points as CSV text (header row first), in the document's order."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    knees = _knee_points(doc)
    for i, p in enumerate(doc.get("points") or ()):
        writer.writerow(_row(doc, i, p, knees))
    return buf.getvalue()
