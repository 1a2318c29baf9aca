"""Pushing a run's levels as metrics: to a Prometheus Pushgateway (``prometheus_client``,
a dependency) and to an OpenTelemetry collector over OTLP/HTTP with JSON (``httpx``, a
dependency: no OpenTelemetry SDK needed).

Prometheus: one gauge per metric, ``llmslo_<metric>_<unit>`` in base units
(``llmslo_ttft_p99_seconds``, ``llmslo_throughput_tokens_per_second``,
``llmslo_attainment_ratio``), labelled ``engine``, ``test``, ``level``; pushed with
``PUT`` under ``job`` (the previous push of that job is replaced).

OTLP: the per-request latencies as the OpenTelemetry GenAI server histograms, with the
semantic conventions' names, units and explicit bucket boundaries:
``gen_ai.server.time_to_first_token``, ``gen_ai.server.time_per_output_token`` and
``gen_ai.server.request.duration`` (seconds), one data point per level (delta
temporality, the level's time), attributes ``llmslo.engine``, ``llmslo.test``,
``llmslo.level`` and ``gen_ai.request.model``; and each level metric as a gauge
``llmslo.<metric>``. POSTed to ``URL/v1/metrics``.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Mapping
from typing import Any

from pytest_llmslo._version import __version__
from pytest_llmslo.document import Results
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.sweep import SweepPoint

from .levelmetrics import LevelMetric, level_metrics

__all__ = ["GENAI_HISTOGRAMS", "otlp_body", "push_gateway", "push_otlp", "registry_of"]

#: The GenAI server histograms: (name, sample column, bucket boundaries in seconds).
GENAI_HISTOGRAMS: tuple[tuple[str, str, tuple[float, ...]], ...] = (
    (
        "gen_ai.server.time_to_first_token",
        "ttft_ms",
        (
            0.001,
            0.005,
            0.01,
            0.02,
            0.04,
            0.06,
            0.08,
            0.1,
            0.25,
            0.5,
            0.75,
            1.0,
            2.5,
            5.0,
            7.5,
            10.0,
        ),
    ),
    (
        "gen_ai.server.time_per_output_token",
        "tpot_ms",
        (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5),
    ),
    (
        "gen_ai.server.request.duration",
        "e2e_ms",
        (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92),
    ),
)
TIMEOUT_S = 10.0
_UNITS = {
    "ms": ("seconds", 1e-3),
    "tok/s": ("tokens_per_second", 1.0),
    "req/s": ("requests_per_second", 1.0),
    "": ("ratio", 1.0),
}


def _prom(m: LevelMetric) -> tuple[str, float]:
    suffix, scale = _UNITS.get(m.unit, ("", 1.0))
    name = f"llmslo_{m.metric}_{suffix}".rstrip("_")
    return name, m.value * scale


def registry_of(results: Results) -> Any:
    """A ``prometheus_client`` registry with a gauge per metric of ``results``' levels."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    gauges: dict[str, Any] = {}
    for m in level_metrics(results):
        name, value = _prom(m)
        if name not in gauges:
            gauges[name] = Gauge(
                name, f"pytest-llmslo {m.metric} per level", ["engine", "test", "level"],
                registry=registry,
            )  # fmt: skip
        gauges[name].labels(engine=m.engine, test=m.test, level=m.level).set(value)
    return registry


def push_gateway(results: Results, url: str, job: str = "llmslo") -> None:
    """PUT the levels' gauges to the Pushgateway at ``url`` under ``job``; ``ConfigError``
    when it cannot be reached or refuses."""
    from prometheus_client import push_to_gateway

    try:
        push_to_gateway(url, job=job, registry=registry_of(results), timeout=TIMEOUT_S)
    except OSError as exc:
        raise ConfigError(f"Pushgateway {url}: {exc}") from None


def _attrs(values: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"key": k, "value": {"stringValue": v}} for k, v in values.items()]


def _model(results: Results, engine: str) -> str | None:
    per_engine = results.constants.get("per_engine")
    mine = per_engine.get(engine) if isinstance(per_engine, Mapping) else None
    model = mine.get("model") if isinstance(mine, Mapping) else results.constants.get("model")
    return model if isinstance(model, str) else None


def _histogram(
    point: SweepPoint, column: str, bounds: tuple[float, ...], attrs: list[dict[str, Any]], now: int
) -> dict[str, Any] | None:
    values = (point.samples or {}).get(column)
    if not isinstance(values, list | tuple):
        return None
    secs = [v / 1e3 for v in values if isinstance(v, int | float) and math.isfinite(v)]
    if not secs:
        return None
    counts = [0] * (len(bounds) + 1)
    for v in secs:
        counts[bisect.bisect_left(bounds, v)] += 1  # a bucket is (previous, bound]
    start = now - int(point.summary.duration_s * 1e9) if point.summary.duration_s else now
    return {
        "attributes": attrs,
        "startTimeUnixNano": str(start),
        "timeUnixNano": str(now),
        "count": str(len(secs)),
        "sum": sum(secs),
        "min": min(secs),
        "max": max(secs),
        "bucketCounts": [str(c) for c in counts],
        "explicitBounds": list(bounds),
    }


def otlp_body(results: Results, now_ns: int | None = None) -> dict[str, Any]:
    """The OTLP/JSON ``ExportMetricsServiceRequest`` of ``results``."""
    now = now_ns if now_ns is not None else time.time_ns()
    metrics: list[dict[str, Any]] = []
    for name, column, bounds in GENAI_HISTOGRAMS:
        points = []
        for p in results.points:
            labels = {
                "llmslo.engine": p.engine,
                "llmslo.test": p.test,
                "llmslo.level": p.level.label,
            }
            model = _model(results, p.engine)
            if model:
                labels["gen_ai.request.model"] = model
            dp = _histogram(p, column, bounds, _attrs(labels), now)
            if dp is not None:
                points.append(dp)
        if points:
            metrics.append(
                {
                    "name": name,
                    "unit": "s",
                    "histogram": {"dataPoints": points, "aggregationTemporality": 1},
                }
            )
    gauges: dict[str, list[dict[str, Any]]] = {}
    units: dict[str, str] = {}
    for m in level_metrics(results):
        _, value = _prom(m)
        attrs = _attrs({"llmslo.engine": m.engine, "llmslo.test": m.test, "llmslo.level": m.level})
        gauges.setdefault(f"llmslo.{m.metric}", []).append(
            {"attributes": attrs, "timeUnixNano": str(now), "asDouble": value}
        )
        units[f"llmslo.{m.metric}"] = {"ms": "s", "tok/s": "{token}/s", "req/s": "{request}/s"}.get(
            m.unit, "1"
        )
    for name, points in gauges.items():
        metrics.append({"name": name, "unit": units[name], "gauge": {"dataPoints": points}})
    resource = {"attributes": _attrs({"service.name": "pytest-llmslo"})}
    scope = {"name": "pytest-llmslo", "version": __version__}
    return {
        "resourceMetrics": [
            {"resource": resource, "scopeMetrics": [{"scope": scope, "metrics": metrics}]}
        ]
    }


def push_otlp(results: Results, url: str) -> int:
    """POST ``otlp_body`` to ``url`` (``/v1/metrics`` appended unless there); return the
    HTTP status. ``ConfigError`` when it cannot be reached or refuses."""
    import httpx

    target = url if url.rstrip("/").endswith("/v1/metrics") else url.rstrip("/") + "/v1/metrics"
    try:
        response = httpx.post(target, json=otlp_body(results), timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise ConfigError(f"OTLP endpoint {target}: {exc}") from None
    if not 200 <= response.status_code < 300:
        raise ConfigError(
            f"OTLP endpoint {target} answered HTTP {response.status_code}: {response.text[:200]!r}"
        )
    return response.status_code
