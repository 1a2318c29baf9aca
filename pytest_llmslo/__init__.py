"""pytest-llmslo: SLOs of LLM serving engines as pytest performance tests.

    import pytest
    from pytest_llmslo import assert_goodput, itl_p50, ttft_p99

    @pytest.mark.slo(concurrency=[1, 8, 32])
    def test_chat(slo_run):
        assert_goodput(ttft_p99 < 500, itl_p50 < 30)

The plugin (``pytest_llmslo.plugin``, loaded through the ``pytest11`` entry point) runs each
SLO test over engine x load level; this module is the API a test imports: the metric
symbols of the SLO DSL, the assertion helpers, and the data types of runs and reports.
Submodules are imported lazily, so ``import pytest_llmslo`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import catalog as _catalog
from ._version import __version__
from .catalog import SYMBOLS as _SYMBOLS

#: The phases of an engine's start, the names of ``assert_startup``'s objectives
#: (``engines.coldstart.PHASES``, spelled here so that this import stays cheap).
_START_PHASES = (
    "image_pulled_s", "scheduled_s", "container_created_s", "spawned_s",
    "container_started_s", "port_open_s", "pod_ready_s", "ready_s", "model_listed_s",
    "first_token_s",
)  # fmt: skip

# name -> module that defines it
_EXPORTS: dict[str, str] = {
    **{name: "pytest_llmslo.slo" for name in _SYMBOLS},
    "Objective": "pytest_llmslo.slo",
    "ObjectiveResult": "pytest_llmslo.slo",
    "Verdict": "pytest_llmslo.slo",
    "assert_goodput": "pytest_llmslo.slo",
    "assert_slo": "pytest_llmslo.slo",
    "evaluate": "pytest_llmslo.slo",
    "parse_objectives": "pytest_llmslo.slo",
    "current_run": "pytest_llmslo.slo",
    "bind_run": "pytest_llmslo.slo",
    "assert_startup": "pytest_llmslo.slo",
    "assert_recovery": "pytest_llmslo.slo",
    "assert_quality": "pytest_llmslo.slo",
    "accuracy": "pytest_llmslo.slo",
    **{name: "pytest_llmslo.slo" for name in _START_PHASES},
    "LoadLevel": "pytest_llmslo.records",
    "Run": "pytest_llmslo.records",
    "RequestRecord": "pytest_llmslo.records",
    "ClientHealth": "pytest_llmslo.records",
    "RunSummary": "pytest_llmslo.metrics",
    "Distribution": "pytest_llmslo.metrics",
    "summarize": "pytest_llmslo.metrics",
    "SweepPoint": "pytest_llmslo.sweep",
    "Knee": "pytest_llmslo.sweep",
    "CapacitySearch": "pytest_llmslo.capacity",
    "CapacitySpec": "pytest_llmslo.capacity",
    "find_knee": "pytest_llmslo.sweep",
    "pareto_front": "pytest_llmslo.sweep",
    "WorkloadSpec": "pytest_llmslo.load",
    "ClientSettings": "pytest_llmslo.load",
    "LoadJob": "pytest_llmslo.load",
    "run_load": "pytest_llmslo.load",
    "run_load_sync": "pytest_llmslo.load",
    "EngineConfig": "pytest_llmslo.engines.base",
    "EngineHandle": "pytest_llmslo.engines.base",
    "start_engine": "pytest_llmslo.engines",
    "TestSettings": "pytest_llmslo.settings",
    "LlmSloError": "pytest_llmslo.errors",
    "ConfigError": "pytest_llmslo.errors",
    "EngineUnavailable": "pytest_llmslo.errors",
    "EngineStartError": "pytest_llmslo.errors",
    "EngineDiedError": "pytest_llmslo.errors",
    "LoadInterrupted": "pytest_llmslo.errors",
    "SloViolation": "pytest_llmslo.errors",
    "RegressionError": "pytest_llmslo.errors",
    "Inconclusive": "pytest_llmslo.errors",
    "LlmSloWarning": "pytest_llmslo.errors",
}

__all__ = [  # grouped by kind, not sorted
    "__version__",
    # the DSL: its flat names come from the metric catalogue (catalog.SYMBOLS)
    *_SYMBOLS,
    "Objective", "ObjectiveResult", "Verdict",
    "assert_goodput", "assert_slo", "evaluate", "parse_objectives", "current_run", "bind_run",
    # start objectives: assert_startup(ready_s < 60, first_token_s < 90)
    "assert_startup", *_START_PHASES,
    # recovery objectives on a level's faults: assert_recovery(max_recovery_s=5)
    "assert_recovery",
    # quality objectives on a level's eval answers: assert_quality(accuracy >= 0.95)
    "assert_quality", "accuracy",
    # runs and summaries
    "LoadLevel", "Run", "RequestRecord", "ClientHealth", "RunSummary", "Distribution",
    "summarize",
    # sweeps
    "SweepPoint", "Knee", "CapacitySearch", "CapacitySpec", "find_knee", "pareto_front",
    # the load generator and engines
    "WorkloadSpec", "ClientSettings", "LoadJob", "run_load", "run_load_sync",
    "EngineConfig", "EngineHandle", "start_engine", "TestSettings",
    # errors
    "LlmSloError", "ConfigError", "EngineUnavailable", "EngineStartError", "EngineDiedError",
    "LoadInterrupted", "SloViolation", "RegressionError", "Inconclusive", "LlmSloWarning",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None and name in _catalog.SYMBOLS:  # a metric registered after import
        module = "pytest_llmslo.slo"
    if module is None:
        raise AttributeError(f"module 'pytest_llmslo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cached: later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from pytest_llmslo.capacity import CapacitySearch, CapacitySpec
    from pytest_llmslo.engines import start_engine
    from pytest_llmslo.engines.base import EngineConfig, EngineHandle
    from pytest_llmslo.errors import (
        ConfigError,
        EngineDiedError,
        EngineStartError,
        EngineUnavailable,
        LlmSloError,
        LoadInterrupted,
        RegressionError,
        SloViolation,
    )
    from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load, run_load_sync
    from pytest_llmslo.metrics import Distribution, RunSummary, summarize
    from pytest_llmslo.records import ClientHealth, LoadLevel, RequestRecord, Run
    from pytest_llmslo.settings import TestSettings

    # The DSL's flat names (ttft_p99, ...) are generated from the catalogue: type checkers
    # see them through the module __getattr__ of pytest_llmslo.slo (MetricSymbol or
    # StatSymbol) and of this package.
    from pytest_llmslo.slo import (
        Objective,
        ObjectiveResult,
        Verdict,
        accuracy,
        assert_goodput,
        assert_quality,
        assert_recovery,
        assert_slo,
        assert_startup,
        bind_run,
        current_run,
        parse_objectives,
    )
    from pytest_llmslo.slo.evaluate import evaluate
    from pytest_llmslo.sweep import Knee, SweepPoint, find_knee, pareto_front
