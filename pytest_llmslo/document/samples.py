"""The per-request samples a point carries in the results document: compact values (ms,
rounded to µs) aligned with the run's records, so that a later comparison can run rank
tests without the raw records."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pytest_llmslo.catalog import METRICS

if TYPE_CHECKING:
    from pytest_llmslo.records import Run

__all__ = ["SAMPLE_METRICS", "compact_samples"]

#: Per-request metrics carried as samples (ms), in this order.
SAMPLE_METRICS: tuple[str, ...] = METRICS


def compact_samples(run: Run, *, digits: int = 3) -> dict[str, list[float | None]]:
    """Per-request values of ``run`` for the document: ``<metric>_ms`` for ttft, ttfot,
    itl (the request's own gap statistic), tpot and e2e, rounded to ``digits`` decimals
    (µs), None where undefined (failed request, single-token output); plus ``ok`` (1/0) and
    ``output_tokens``. Aligned with ``run.records``."""
    import numpy as np  # only needed when samples are wanted

    from pytest_llmslo import metrics

    per = metrics.per_request(run)
    out: dict[str, list[Any]] = {}
    for name in SAMPLE_METRICS:
        values = per.get(name)
        if values is None:
            continue
        rounded = np.round(np.asarray(values, dtype=np.float64), digits)
        out[f"{name}_ms"] = [v if math.isfinite(v) else None for v in rounded.tolist()]
    out["ok"] = [1 if r.ok else 0 for r in run.records]
    out["output_tokens"] = [r.output_tokens for r in run.records]
    return out
