"""The load generator: one harness for every engine.

``run_load`` / ``run_load_sync`` run one ``LoadJob``: they stream a ``WorkloadSpec`` to an
OpenAI-compatible server described by ``ClientSettings`` at a ``LoadLevel`` and return a
``Run`` of raw records.
See docs/load.md for the semantics (warm-up, duration bound, health checks).
"""

from __future__ import annotations

from .client import ClientSettings, HttpxTransport, RawExchange, build_record, request_body
from .health import HealthThresholds
from .job import EarlyStop, LoadJob, Progress
from .levelplan import auto_processes
from .promptlengths import LengthModel, fit_length_model
from .runner import run_load, run_load_sync
from .schedule import arrival_offsets_ns
from .sse import StreamResult, decode_stream, parse_body, split_events
from .workload import Prompt, WorkloadSpec, build_prompts, check_workload

__all__ = [
    "ClientSettings",
    "EarlyStop",
    "HealthThresholds",
    "HttpxTransport",
    "LengthModel",
    "LoadJob",
    "Progress",
    "Prompt",
    "RawExchange",
    "StreamResult",
    "WorkloadSpec",
    "arrival_offsets_ns",
    "auto_processes",
    "build_prompts",
    "build_record",
    "check_workload",
    "decode_stream",
    "fit_length_model",
    "parse_body",
    "request_body",
    "run_load",
    "run_load_sync",
    "split_events",
]
