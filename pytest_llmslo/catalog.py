"""The metric catalogue: every metric and statistic the package names, in one place.

Each latency metric is one :class:`Metric` entry carrying its per-request formula, a
function of a run's columns (``Metric("ttft", lambda c: c.since_sent(...))``, AIPerf's one
class per metric): the metrics package computes it, the SLO DSL makes its symbols
(``ttft``, ``ttft_p99``, ``ttft.p99``), and the summaries, the gates, the JSON samples, the
comparison and the reports read it from here. So adding a metric is one entry in
``BUILTIN`` (or a :func:`register` call) plus its formula.

Derived from the entries: ``METRICS`` (their names, in ms), ``GAP_METRICS`` (those measured
between tokens), the flat names of the SLO DSL (``DSL_STATS``, ``SYMBOLS``: ``ttft_p99``,
``itl_mean``, ...) and what a regression check can gate on (``METRIC_SPECS``: each
metric's kind, direction, unit and tolerance units). Also here: the percentiles a summary
keeps (``PERCENTILES``) and how a statistic is written and read (``parse_stat``,
``stat_name``, ``qkey``).

Imports nothing of the package, nor numpy: a formula only uses the columns object it is
given (arrays with numpy's operators, and the helpers of :class:`Columns`), so
``import pytest_llmslo`` stays cheap.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, Protocol

__all__ = [
    "BUILTIN",
    "CATALOGUE",
    "DSL_STATS",
    "GAP_METRICS",
    "METRICS",
    "METRIC_SPECS",
    "PERCENTILES",
    "SYMBOLS",
    "Columns",
    "Metric",
    "MetricKind",
    "MetricSpec",
    "Per",
    "Stat",
    "canonical_metric",
    "parse_stat",
    "qkey",
    "register",
    "stat_name",
    "unregister",
    "valid_metric_names",
]


PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)


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


#: The statistics of the DSL's flat names (``ttft_p99``), one per kept percentile and the mean.
DSL_STATS: tuple[str, ...] = (*(stat_name(q) for q in PERCENTILES), "mean")


# --------------------------------------------------------------------------- regression specs


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

    @property
    def quantile(self) -> float:
        """The percentile a latency spec reads (``stat`` as a number, 99.0 for a P99);
        ``ValueError`` for a mean or a spec without a statistic."""
        if isinstance(self.stat, (int, float)):
            return float(self.stat)
        raise ValueError(f"comparison metric {self.name} reads no percentile ({self.stat!r})")


_RATES = (
    ("goodput", "goodput_tok_s", "tok/s"),
    ("goodput_req", "goodput_req_s", "req/s"),
    ("throughput", "output_tok_s", "tok/s"),
    ("total_throughput", "total_tok_s", "tok/s"),
    ("req_s", "req_s", "req/s"),
)
#: The run figures a comparison gates on besides the latencies: no metric may take their names.
_RUN_FIGURES = frozenset(name for name, _, _ in _RATES) | {"attainment", "error_rate", "capacity"}
_RUN_FIGURES |= {"accuracy", "drift"}  # of the eval answers (regression.answers)


def _run_specs() -> dict[str, MetricSpec]:
    specs: dict[str, MetricSpec] = {}
    for name, fld, unit in _RATES:
        specs[name] = MetricSpec(name, "rate", True, unit, fld, units=(unit,))
    specs["attainment"] = MetricSpec(
        "attainment", "fraction", True, "", "attainment", units=("pp",)
    )
    specs["error_rate"] = MetricSpec(
        "error_rate", "fraction", False, "", "error_rate", units=("pp",)
    )
    # The load a capacity search found (concurrency or req/s): only "%" tolerances.
    specs["capacity"] = MetricSpec("capacity", "level", True, "", "capacity")
    # The eval answers' accuracy and the share of them that changed (regression.answers).
    specs["accuracy"] = MetricSpec("accuracy", "fraction", True, "", "accuracy", units=("pp",))
    specs["drift"] = MetricSpec("drift", "fraction", False, "", "drift", units=("pp",))
    return specs


def _latency_specs(metrics: tuple[str, ...]) -> dict[str, MetricSpec]:
    specs: dict[str, MetricSpec] = {}
    for metric in metrics:
        for sname in DSL_STATS:
            stat = parse_stat(sname)
            name = f"{metric}_{sname}"
            specs[name] = MetricSpec(
                name, "latency", False, "ms", metric, stat, units=("ms", "s", "us")
            )
    return specs


_METRIC_ALIASES = {
    "goodput_tok_s": "goodput",
    "goodput_req_s": "goodput_req",
    "output_tok_s": "throughput",
    "total_tok_s": "total_throughput",
    "req/s": "req_s",
}


# --------------------------------------------------------------------------- the entries


class Columns(Protocol):
    """What a formula reads: one run's columns, arrays aligned with its records (numpy
    arrays; ``metrics.columns.Columns`` builds them), and the helpers below. Times are int
    ns on the ``perf_counter_ns`` clock."""

    n: int
    #: bool: the request completed (2xx, no in-stream error, stream finished).
    ok: Any
    sent_ns: Any
    #: The last byte.
    end_ns: Any
    #: The first output chunk (content or reasoning); 0 where none came (see chunk_counts).
    first_chunk_ns: Any
    #: The first content chunk (not reasoning); -1 where none came.
    first_content_ns: Any
    chunk_counts: Any
    #: The tokens credited to the request (``RequestRecord.credit``).
    output_tokens: Any
    prompt_tokens: Any
    requested_output: Any

    def since_sent(self, ns: Any, defined: Any) -> Any:
        """Milliseconds from each request's send to ``ns``, NaN where not ``defined``."""
        ...

    def per_token(self, ms: Any, tokens: Any) -> Any:
        """``ms / tokens``, NaN where ``tokens`` < 1."""
        ...

    def nth_chunk_ns(self, k: int) -> Any:
        """The arrival of each request's k-th output chunk (0-based); -1 where it has none."""
        ...

    def token_gaps(self) -> Any:
        """The ITL samples (ms), one per token after each request's first chunk, grouped by
        request (a ``per="token"`` formula returns them)."""
        ...

    def value(self, metric: str) -> Any:
        """Another metric's values (a formula built on others, such as TPOT on E2E and TTFT)."""
        ...


Per = Literal["request", "token"]
_NAME = re.compile(r"[a-z][a-z0-9]*")


@dataclass(frozen=True, slots=True)
class Metric:
    """One latency metric (ms) and its formula.

    ``values(columns)`` gives, for ``per="request"``, one float per record (NaN for a
    failed request and where the metric is undefined); for ``per="token"``, the samples of
    every completed request grouped by request (``columns.token_gaps()``): the aggregate
    gate pools them, a goodput threshold takes each request's own statistic over its own,
    and a failed request counts once per token gap it asked for.
    ``gap``: measured between two tokens, so a request without such a gap (fewer than two
    tokens) cannot miss a goodput threshold; an event metric (``gap=False``) whose event
    never came cannot meet one. ``undefined`` says what a completed request lacked when the
    metric is undefined for it (the verdict's note); ``headline`` are the statistics a
    report's one-line figures carry (a JUnit test case's properties); ``title`` is the
    formula in words."""

    name: str
    values: Callable[[Columns], Any]
    unit: str = "ms"
    per: Per = "request"
    gap: bool = False
    undefined: str = ""
    headline: tuple[str, ...] = ("p50", "p99")
    title: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"a metric's name is lower-case letters and digits, starting with a letter "
                f"(the DSL writes <name>_p99), got {self.name!r}"
            )
        if self.name in DSL_STATS or self.name in _RUN_FIGURES or self.name in _METRIC_ALIASES:
            raise ValueError(f"{self.name!r} already names a statistic or a run figure")
        if self.unit != "ms":
            raise ValueError(
                f"metric {self.name!r}: the DSL, the gates and the tolerances read "
                f"milliseconds, so a metric's unit is 'ms', got {self.unit!r}"
            )
        if self.per not in ("request", "token"):
            raise ValueError(f"metric {self.name!r}: per is 'request' or 'token', got {self.per!r}")
        if not callable(self.values):
            raise TypeError(f"metric {self.name!r}: values must be a function of the columns")
        for st in self.headline:
            parse_stat(st)


BUILTIN: tuple[Metric, ...] = (
    Metric(
        "ttft",
        lambda c: c.since_sent(c.first_chunk_ns, c.ok & (c.chunk_counts > 0)),
        undefined="streamed no output chunk",
        headline=("p50", "p90", "p99"),
        title="first output chunk (content or reasoning) − request sent",
    ),
    Metric(
        "ttfot",
        lambda c: c.since_sent(c.first_content_ns, c.ok & (c.first_content_ns >= 0)),
        undefined="streamed no content chunk",
        headline=("p99",),
        title="first content chunk − request sent",
    ),
    Metric(
        "itl",
        lambda c: c.token_gaps(),
        per="token",
        gap=True,
        title="gap between successive output chunks ÷ tokens in the later chunk",
    ),
    Metric(
        "tpot",
        lambda c: c.per_token(c.value("e2e") - c.value("ttft"), c.output_tokens - 1),
        gap=True,
        headline=("p50", "p99", "mean"),
        title="(e2e − ttft) / (output_tokens − 1)",
    ),
    Metric("e2e", lambda c: c.since_sent(c.end_ns, c.ok), title="last byte − request sent"),
)

_ENTRIES: dict[str, Metric] = {}
#: Every metric by name, in order: the built-in ones, then the registered ones. A live view.
CATALOGUE: Mapping[str, Metric] = MappingProxyType(_ENTRIES)

# Derived from the entries by _derive() (again at each register/unregister).
#: The metrics' names (ms).
METRICS: tuple[str, ...] = ()
#: Metrics measured from a gap between two tokens: a completed request with fewer than two
#: tokens (or one chunk) has no gap, so it cannot violate their threshold (vLLM counts a
#: one-token request's TPOT as 0 for --goodput). Metrics measured from an event (first
#: token, last byte) that never happened cannot be shown to meet a threshold.
GAP_METRICS: frozenset[str] = frozenset()
#: Every flat name of the DSL: the metrics themselves and ``<metric>_<stat>``.
SYMBOLS: tuple[str, ...] = ()


def register(metric: Metric) -> Metric:
    """Add ``metric`` to the catalogue (after the built-in ones): from then on the DSL
    parses it, summaries carry its distribution and gates judge it. Modules that copied a
    name list at import (the CSV columns, the JSON samples) see it when it is registered
    before they are imported. ValueError for a name already taken."""
    if not isinstance(metric, Metric):
        raise TypeError(f"register() takes a catalog.Metric, got {type(metric).__name__}")
    if metric.name in _ENTRIES:
        raise ValueError(f"metric {metric.name!r} is already in the catalogue")
    _ENTRIES[metric.name] = metric
    _derive()
    return metric


def unregister(name: str) -> None:
    """Take a registered metric out again (the built-in ones stay)."""
    if any(m.name == name for m in BUILTIN):
        raise ValueError(f"{name!r} is a built-in metric and stays in the catalogue")
    if _ENTRIES.pop(name, None) is None:
        raise KeyError(f"no registered metric {name!r}")
    _derive()


_SPECS: dict[str, MetricSpec] = {}
#: Every metric name ``parse_tolerances`` accepts (a live view).
METRIC_SPECS: Mapping[str, MetricSpec] = MappingProxyType(_SPECS)


def _derive() -> None:
    """The names derived from the entries, rebuilt in place where a view was handed out."""
    global METRICS, GAP_METRICS, SYMBOLS
    METRICS = tuple(_ENTRIES)
    GAP_METRICS = frozenset(m.name for m in _ENTRIES.values() if m.gap)
    SYMBOLS = (*METRICS, *(f"{m}_{st}" for m in METRICS for st in DSL_STATS))
    _SPECS.clear()
    _SPECS.update(_run_specs())
    _SPECS.update(_latency_specs(METRICS))


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


for _metric in BUILTIN:
    _ENTRIES[_metric.name] = _metric
_derive()
del _metric
