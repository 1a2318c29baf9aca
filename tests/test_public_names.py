"""The public names, spelled out: the DSL's flat names and ``__all__`` are generated from the
metric catalogue, so this list is what notices a name that went missing."""

from __future__ import annotations

import importlib

import pytest

import pytest_llmslo
from pytest_llmslo import catalog, metrics, session, slo

METRIC_NAMES = ["ttft", "ttfot", "itl", "tpot", "e2e"]
STATS = ["p50", "p90", "p95", "p99", "p999", "mean"]

DSL = [
    "ttft", "ttfot", "itl", "tpot", "e2e",
    "ttft_p50", "ttft_p90", "ttft_p95", "ttft_p99", "ttft_p999", "ttft_mean",
    "ttfot_p50", "ttfot_p90", "ttfot_p95", "ttfot_p99", "ttfot_p999", "ttfot_mean",
    "itl_p50", "itl_p90", "itl_p95", "itl_p99", "itl_p999", "itl_mean",
    "tpot_p50", "tpot_p90", "tpot_p95", "tpot_p99", "tpot_p999", "tpot_mean",
    "e2e_p50", "e2e_p90", "e2e_p95", "e2e_p99", "e2e_p999", "e2e_mean",
]  # fmt: skip

#: The phases of an engine's start: the names of ``assert_startup``'s objectives.
START_PHASES = [
    "image_pulled_s", "scheduled_s", "container_created_s", "spawned_s",
    "container_started_s", "port_open_s", "pod_ready_s", "ready_s", "model_listed_s",
    "first_token_s",
]  # fmt: skip

ROOT = [
    "__version__",
    *DSL,
    "Objective", "ObjectiveResult", "Verdict",
    "assert_goodput", "assert_slo", "evaluate", "parse_objectives", "current_run", "bind_run",
    "assert_startup", *START_PHASES,
    "assert_recovery",
    "assert_quality", "accuracy",
    "LoadLevel", "Run", "RequestRecord", "ClientHealth", "RunSummary", "Distribution",
    "summarize",
    "SweepPoint", "Knee", "CapacitySearch", "CapacitySpec", "find_knee", "pareto_front",
    "WorkloadSpec", "ClientSettings", "LoadJob", "run_load", "run_load_sync",
    "EngineConfig", "EngineHandle", "start_engine", "TestSettings",
    "LlmSloError", "ConfigError", "EngineUnavailable", "EngineStartError", "EngineDiedError",
    "LoadInterrupted", "SloViolation", "RegressionError", "Inconclusive", "LlmSloWarning",
]  # fmt: skip

SLO = [
    "DEFAULT_MAX_ERROR_RATE", "DEFAULT_MIN_ATTAINMENT", "STATS", "MetricSymbol", "Objective",
    "ObjectiveResult", "StatSymbol", "Verdict", "assert_goodput", "assert_slo", "bind_run",
    "current_run", "evaluate", "failures_fail", "parse_objectives", "settled", "unbind_run",
    *DSL,
    "StartupObjective", "StartupSymbol", "StartupVerdict", "assert_startup",
    *START_PHASES,
    "RecoveryResult", "RecoveryVerdict", "assert_recovery",
    "QualityObjective", "QualityResult", "QualityVerdict", "accuracy", "assert_quality",
    "judge_quality", "parse_quality", "wilson_interval",
]  # fmt: skip

METRICS_ALL = [
    "METRICS", "PERCENTILES", "Distribution", "Goodput", "RunSummary", "Stat", "Threshold",
    "Window", "aggregate_values", "clear_cache", "failure_counts", "failure_messages",
    "gate_statistic", "gate_values", "goodput", "lower_confidence_bound", "lower_rank",
    "meets_threshold", "per_request", "percentile", "request_values", "samples_needed",
    "short_outputs", "summarize", "throughput_window", "token_gaps", "upper_confidence_bound",
    "upper_rank", "usage_mismatches",
]  # fmt: skip

CATALOG = [
    "BUILTIN", "CATALOGUE", "DSL_STATS", "GAP_METRICS", "METRICS", "METRIC_SPECS",
    "PERCENTILES", "SYMBOLS", "Columns", "Metric", "MetricKind", "MetricSpec", "Per", "Stat",
    "canonical_metric", "parse_stat", "qkey", "register", "stat_name", "unregister",
    "valid_metric_names",
]  # fmt: skip

#: What the plugin, ``llmslo run`` and the tests drive a session with; the rest of its
#: modules' names are imported from the modules themselves.
SESSION = [
    "README_XDIST", "XDIST_REASON", "EngineFactory", "EngineRef", "Progress",
    "Session", "SessionHooks", "TestContext", "Voice", "add_test", "bound",
    "call_test", "check_inputs", "engine_factory", "engines_text", "finish", "json_path",
    "junit_outcomes", "junit_properties", "load_test", "measure_level", "other_load",
    "output_flags", "plan_test", "prepare", "run_level", "run_test", "search_capacity",
    "suite_properties", "summary_lines_of_test", "summary_report", "tests_overview", "write_json",
    "write_reports",
]  # fmt: skip


def test_the_catalogue_names_the_built_in_metrics() -> None:
    assert list(catalog.METRICS) == METRIC_NAMES
    assert list(catalog.CATALOGUE) == METRIC_NAMES
    assert [m.name for m in catalog.BUILTIN] == METRIC_NAMES
    assert list(catalog.DSL_STATS) == STATS
    assert list(catalog.SYMBOLS) == DSL
    assert catalog.GAP_METRICS == {"itl", "tpot"}
    assert set(slo.symbols()) == set(DSL)


def test_the_package_root_exports() -> None:
    assert pytest_llmslo.__all__ == ROOT
    assert len(set(ROOT)) == len(ROOT)


@pytest.mark.parametrize(
    ("module", "expected"),
    [(slo, SLO), (metrics, METRICS_ALL), (catalog, CATALOG), (session, SESSION)],
    ids=["slo", "metrics", "catalog", "session"],
)
def test_module_exports(module: object, expected: list[str]) -> None:
    assert sorted(module.__all__) == sorted(expected)  # type: ignore[attr-defined]
    assert len(set(module.__all__)) == len(module.__all__)  # type: ignore[attr-defined]
    for name in expected:
        assert getattr(module, name) is not None, name


def test_every_root_name_resolves_to_its_module() -> None:
    for name in ROOT:
        value = getattr(pytest_llmslo, name)
        assert value is not None, name
    for name in DSL:
        assert getattr(pytest_llmslo, name) == getattr(slo, name), name
    assert repr(pytest_llmslo.ttft_p99) == "ttft_p99"
    assert repr(slo.e2e) == "e2e" and repr(slo.itl.p999) == "itl_p999"


def test_star_imports_give_the_listed_names() -> None:
    for module, expected in (("pytest_llmslo.slo", SLO), ("pytest_llmslo.metrics", METRICS_ALL)):
        ns: dict[str, object] = {}
        exec(f"from {module} import *", ns)
        assert set(expected) <= set(ns), module
        importlib.import_module(module)


def test_the_start_phases_are_the_cold_start_phases() -> None:
    from pytest_llmslo.engines.coldstart import PHASES

    # The package root spells them itself (its import stays cheap): they must not drift.
    assert list(PHASES) == START_PHASES
    assert repr(pytest_llmslo.first_token_s) == "first_token_s"
    assert pytest_llmslo.ready_s == slo.ready_s
