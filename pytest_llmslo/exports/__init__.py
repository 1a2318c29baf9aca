"""Exports of a run to where teams look: the levels as continuous-benchmarking JSON
(``benchjson``: github-action-benchmark's custom formats, Bencher's BMF), pushed as
metrics (``push``: a Prometheus Pushgateway, OTLP/HTTP with the OpenTelemetry GenAI
names), and the per-request records as JSONL or Parquet (``requests``); ``levels`` is the
table they share, ``command`` is ``llmslo export``."""

from __future__ import annotations
