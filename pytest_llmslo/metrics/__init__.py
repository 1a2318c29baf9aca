"""Records -> numbers: per-request latencies, token gaps, throughput, goodput and the
confidence bounds that say whether a percentile can be trusted.

Every definition lives here once, with its formula; each latency metric's per-request
formula is its catalogue entry (``catalog.BUILTIN``), computed over a run's columns.
Timestamps in the records are int nanoseconds from ``time.perf_counter_ns()``; every
latency this package returns is in milliseconds (float64), every rate per second.

One file per concept:

- ``columns``: the per-request arrays of a run, cached, and each metric's values by its
  formula; ``gaps`` and ``ragged``: the token gaps (ITL) and samples grouped by request;
- ``values``: a metric's values per request, pooled for a gate, or for a threshold (the
  formulas are written out there);
- ``distribution``: percentiles and their confidence bounds;
- ``gates``: every request in a gate, failed ones as the worst value;
- ``throughput``: the window rates are counted over; ``goodput``: good requests;
- ``failures``: failed requests by kind and message; ``outputs``: short outputs and
  usage that disagrees with the stream;
- ``summary``: ``RunSummary`` and ``summarize``; ``traffic``: offered against sent rate,
  by turn and by conversation.
- ``timeseries``: a level's per-second series from the per-request samples a results
  document holds (its times, TTFT, ITL, outcome and tokens).

Confidence bounds are distribution-free, from binomial order statistics (the argument
behind MLPerf LoadGen's early stopping): with n i.i.d. samples and p = q/100, the order
statistic X_(k) (1-based) exceeds the true p-quantile ξ_p with probability
P(X_(k) ≥ ξ_p) = P(Binomial(n, p) ≤ k − 1). The one-sided upper bound at confidence c is
X_(k) for the smallest k with P(Binomial(n, p) < k) ≥ c. It exists only when even the
maximum suffices, 1 − p^n ≥ c, i.e. n ≥ log(1 − c) / log(p): that n is
:func:`samples_needed` (299 for P99 at 95 %, 2995 for P99.9). For ``itl`` the samples are
token gaps, which are correlated within a request: the bound over pooled gaps is then
optimistic, and the per-request ITL thresholds of goodput are the sturdier gate.
"""

from __future__ import annotations

from typing import Any

from pytest_llmslo import catalog as _catalog
from pytest_llmslo.catalog import PERCENTILES, Stat
from pytest_llmslo.catalog import parse_stat as parse_stat
from pytest_llmslo.catalog import qkey as qkey
from pytest_llmslo.catalog import stat_name as stat_name
from pytest_llmslo.stats import DEFAULT_CONFIDENCE as DEFAULT_CONFIDENCE
from pytest_llmslo.stats import (
    lower_confidence_bound,
    lower_rank,
    percentile,
    samples_needed,
    upper_confidence_bound,
    upper_rank,
)

from . import traffic as traffic
from .columns import clear_cache
from .distribution import Distribution
from .failures import MAX_ERROR_MESSAGES as MAX_ERROR_MESSAGES
from .failures import ErrorMessage as ErrorMessage
from .failures import failure_counts, failure_messages
from .gates import Threshold, gate_statistic, gate_values, meets_threshold
from .goodput import Goodput, goodput
from .outputs import output_pinned as output_pinned
from .outputs import short_outputs, usage_mismatches
from .summary import RunSummary, summarize
from .throughput import Window, throughput_window
from .throughput import WindowKind as WindowKind
from .values import aggregate_values, per_request, request_values, token_gaps

__all__ = [
    "METRICS",
    "PERCENTILES",
    "Distribution",
    "Goodput",
    "RunSummary",
    "Stat",
    "Threshold",
    "Window",
    "aggregate_values",
    "clear_cache",
    "failure_counts",
    "failure_messages",
    "gate_statistic",
    "gate_values",
    "goodput",
    "lower_confidence_bound",
    "lower_rank",
    "meets_threshold",
    "per_request",
    "percentile",
    "request_values",
    "samples_needed",
    "short_outputs",
    "summarize",
    "throughput_window",
    "token_gaps",
    "upper_confidence_bound",
    "upper_rank",
    "usage_mismatches",
]


def __getattr__(name: str) -> Any:
    # The catalogue's names follow its registrations (catalog.register).
    if name in ("METRICS", "GAP_METRICS"):
        return getattr(_catalog, name)
    raise AttributeError(f"module 'pytest_llmslo.metrics' has no attribute {name!r}")
