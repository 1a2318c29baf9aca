"""The metric catalogue: every metric and statistic the package names, in one place.

Latency metrics (``METRICS``, in ms; ``GAP_METRICS`` are measured between tokens), the
percentiles a summary keeps (``PERCENTILES``), how a statistic is written and read
(``parse_stat``, ``stat_name``, ``qkey``), the flat names of the SLO DSL
(``DSL_STATS``, ``SYMBOLS``: ``ttft_p99``, ``itl_mean``, ...) and what a regression check
can gate on (``METRIC_SPECS``: each metric's kind, direction, unit and tolerance units).
The DSL, summaries, the JSON samples, the comparison and the reports all read these, so a
new metric is added here once. Imports nothing of the package.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DSL_STATS",
    "GAP_METRICS",
    "METRICS",
    "METRIC_SPECS",
    "PERCENTILES",
    "SYMBOLS",
    "MetricKind",
    "MetricSpec",
    "Stat",
    "canonical_metric",
    "parse_stat",
    "qkey",
    "stat_name",
    "valid_metric_names",
]


METRICS: tuple[str, ...] = ("ttft", "ttfot", "itl", "tpot", "e2e")


PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
#: The statistics of the DSL's flat names (``ttft_p99``), one per kept percentile and the mean.
DSL_STATS: tuple[str, ...] = ("p50", "p90", "p95", "p99", "p999", "mean")
#: Every flat name of the DSL: the metrics themselves and ``<metric>_<stat>``.
SYMBOLS: tuple[str, ...] = (*METRICS, *(f"{m}_{st}" for m in METRICS for st in DSL_STATS))


# Metrics measured from a gap between two tokens: a completed request with fewer than two
# tokens (or one chunk) has no gap, so it cannot violate their threshold (vLLM counts a
# one-token request's TPOT as 0 for --goodput). Metrics measured from an event (first
# token, last byte) that never happened cannot be shown to meet a threshold.
GAP_METRICS: frozenset[str] = frozenset({"itl", "tpot"})


Stat = float | Literal["mean"]


def parse_stat(stat: object) -> Stat:
    """Normalise a statistic: ``99``, ``99.9``, ``"p99"``, ``"p999"``, ``"99.9"``,
    ``"mean"`` -> a float percentile in (0, 100) or ``"mean"``. ValueError otherwise.

    ``"p999"`` is P99.9 and ``"p9999"`` P99.99 (digits after the first two are decimals),
    matching the flat names ``ttft_p999``."""
    if isinstance(stat, str):
        s = stat.strip().lower()
        if s in ("mean", "avg", "average"):
            return "mean"
        if s == "median":
            return 50.0
        if s.startswith("p"):
            s = s[1:]
            if s.isdigit() and len(s) > 2:
                if s[2:].strip("0") == "":
                    # "p100" is not P10.0 by intent, and P100 is no percentile.
                    raise ValueError(f"ambiguous statistic {stat!r}; write e.g. p10 or p99.9")
                s = s[:2] + "." + s[2:]
        try:
            q = float(s)
        except ValueError:
            raise ValueError(f"unknown statistic {stat!r}") from None
    elif isinstance(stat, bool):
        raise ValueError(f"unknown statistic {stat!r}")
    elif isinstance(stat, int | float):
        q = float(stat)
    else:
        raise ValueError(f"unknown statistic {stat!r}")
    if not 0.0 < q < 100.0 or math.isnan(q):
        raise ValueError(f"a percentile must be in (0, 100), got {stat!r}")
    return q


def stat_name(stat: Stat) -> str:
    """``50.0`` -> ``"p50"``, ``99.9`` -> ``"p999"``, ``99.5`` -> ``"p995"``, ``"mean"``.

    The inverse of :func:`parse_stat` for percentiles with two integer digits; others are
    written ``p7.5``."""
    if stat == "mean":
        return "mean"
    q = float(stat)
    text = f"{q:g}"
    if q >= 10 and "e" not in text:
        return "p" + text.replace(".", "")
    return "p" + text


def qkey(q: float) -> str:
    """Mapping key used in JSON for a percentile: ``"50"``, ``"99.9"``."""
    return f"{q:g}"


MetricKind = Literal["latency", "rate", "fraction", "level"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A metric a comparison can gate on. ``field`` is the summary field (rates and
    fractions) or the distribution name (latencies, with ``stat``); ``units`` are the
    absolute tolerance units accepted besides ``%``."""

    name: str
    kind: MetricKind
    higher_is_better: bool
    unit: str
    field: str
    stat: float | str | None = None
    units: tuple[str, ...] = ()


def _build_specs() -> dict[str, MetricSpec]:
    specs: dict[str, MetricSpec] = {}
    rates = (
        ("goodput", "goodput_tok_s", "tok/s"),
        ("goodput_req", "goodput_req_s", "req/s"),
        ("throughput", "output_tok_s", "tok/s"),
        ("total_throughput", "total_tok_s", "tok/s"),
        ("req_s", "req_s", "req/s"),
    )
    for name, fld, unit in rates:
        specs[name] = MetricSpec(name, "rate", True, unit, fld, units=(unit,))
    specs["attainment"] = MetricSpec(
        "attainment", "fraction", True, "", "attainment", units=("pp",)
    )
    specs["error_rate"] = MetricSpec(
        "error_rate", "fraction", False, "", "error_rate", units=("pp",)
    )
    # The load a capacity search found (concurrency or req/s): only "%" tolerances.
    specs["capacity"] = MetricSpec("capacity", "level", True, "", "capacity")
    for metric in METRICS:
        for sname in DSL_STATS:
            stat = parse_stat(sname)
            name = f"{metric}_{sname}"
            specs[name] = MetricSpec(
                name, "latency", False, "ms", metric, stat, units=("ms", "s", "us")
            )
    return specs


#: Every metric name ``parse_tolerances`` accepts.
METRIC_SPECS: Mapping[str, MetricSpec] = _build_specs()


_METRIC_ALIASES = {
    "goodput_tok_s": "goodput",
    "goodput_req_s": "goodput_req",
    "output_tok_s": "throughput",
    "total_tok_s": "total_throughput",
    "req/s": "req_s",
}


def valid_metric_names() -> str:
    rates = [n for n, s in METRIC_SPECS.items() if s.kind != "latency"]
    return ", ".join(rates) + f", and <{'|'.join(METRICS)}>_<{'|'.join(DSL_STATS)}>"


def canonical_metric(text: str) -> str | None:
    name = text.strip().lower()
    name = _METRIC_ALIASES.get(name, name)
    if name in METRIC_SPECS:
        return name
    # ttft.p99 / ttft_p99.9 / ttft_99 / ttft_median spellings of the stored percentiles
    metric, sep, stat = name.partition("_")
    if not sep:
        metric, sep, stat = name.partition(".")
    if not stat:
        return None
    try:
        canon = f"{metric}_{stat_name(parse_stat(stat))}"
    except ValueError:
        return None
    return canon if canon in METRIC_SPECS else None
