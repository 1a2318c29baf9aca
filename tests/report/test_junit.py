"""JUnit properties: flat llmslo.* names, str values, every figure present."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from pytest_llmslo import slo
from pytest_llmslo.report import junit
from pytest_llmslo.report.junit import property_name, suite_properties
from pytest_llmslo.sweep import SweepPoint

NAME = re.compile(r"^llmslo\.[A-Za-z0-9_.]+$")


def props(point: SweepPoint, **kw: str) -> dict[str, str]:
    pairs = junit.testcase_properties(point.summary, point.verdict, **kw)
    assert all(NAME.match(k) for k, _ in pairs), pairs
    assert all(isinstance(v, str) for _, v in pairs)
    assert len({k for k, _ in pairs}) == len(pairs)  # flat and unique
    return dict(pairs)


def test_testcase_properties_figures(point_factory: Callable[..., SweepPoint]) -> None:
    p = point_factory(4, ttft_ms=100.0, failed=3)
    d = props(p, engine="sim", test="test_chat")
    for key in (
        "ttft_p50_ms",
        "ttft_p99_ms",
        "itl_p50_ms",
        "tpot_p50_ms",
        "e2e_p99_ms",
        "output_tok_s",
        "goodput_tok_s",
        "attainment",
        "requests",
        "failed",
        "level",
        "engine",
        "verdict",
    ):
        assert f"llmslo.{key}" in d, key
    s = p.summary
    assert d["llmslo.engine"] == "sim"
    assert d["llmslo.test"] == "test_chat"
    assert d["llmslo.level"] == "c4"
    assert d["llmslo.requests"] == "60"
    assert d["llmslo.failed"] == "3"
    assert d["llmslo.failures.http"] == "3"
    # The figure the gate judged, as every report prints it: the failures make it inf, not
    # the survivors' P99.
    assert d["llmslo.ttft_p99_ms"] == "inf"
    assert s.with_failures is not None
    assert float(d["llmslo.ttft_p50_ms"]) == round(s.with_failures["ttft"][50.0], 3)
    assert float(d["llmslo.output_tok_s"]) == round(s.output_tok_s, 3)
    assert float(d["llmslo.attainment"]) == round(p.verdict.attainment, 3)  # type: ignore[union-attr, arg-type]
    # 3 of 60 requests failed: they count as +inf, so TTFT P99 (a gate) is inf.
    assert d["llmslo.verdict"] == "fail"
    assert d["llmslo.outcome"] == "fail"
    assert d["llmslo.slo.ttft_p99.passed"] == "false"
    assert d["llmslo.valid"] == "true"


def test_per_objective_properties(point_factory: Callable[..., SweepPoint]) -> None:
    p = point_factory(16, ttft_ms=800.0)
    d = props(p)
    assert d["llmslo.verdict"] == "fail"
    assert d["llmslo.slo.ttft_p99.objective"] == "ttft_p99 < 500 ms"
    assert d["llmslo.slo.ttft_p99.threshold_ms"] == "500"
    assert d["llmslo.slo.ttft_p99.op"] == "<"
    assert float(d["llmslo.slo.ttft_p99.observed_ms"]) > 500
    assert d["llmslo.slo.ttft_p99.passed"] == "false"
    assert d["llmslo.slo.ttft_p99.count"] == "60"
    assert d["llmslo.slo.ttft_p99.samples_needed"] == "299"
    # 60 samples are too few for a P99 bound: left out, never an empty string.
    assert "llmslo.slo.ttft_p99.bound_ms" not in d
    assert d["llmslo.slo.itl_p50.passed"] == "true"
    assert "llmslo.slo.itl_p50.bound_ms" in d


def test_duplicate_objective_names_stay_distinct(point_factory: Callable[..., SweepPoint]) -> None:
    objs = (slo.Objective("ttft", 99, "<", 500.0), slo.Objective("ttft", 99, ">", 1.0))
    d = props(point_factory(1, ttft_ms=50.0, objectives=objs))
    assert d["llmslo.slo.ttft_p99.op"] == "<"
    assert d["llmslo.slo.ttft_p99_2.op"] == ">"


def test_states_invalid_and_unchecked(point_factory: Callable[..., SweepPoint]) -> None:
    invalid = props(point_factory(4, ttft_ms=50.0, valid=False))
    assert invalid["llmslo.verdict"] == "invalid"
    assert invalid["llmslo.valid"] == "false"
    assert invalid["llmslo.invalid_reasons"] == "schedule lag p99 48.0 ms > 10 ms"
    unchecked = props(point_factory(4, ttft_ms=50.0, objectives=None))
    assert unchecked["llmslo.verdict"] == "unchecked"
    assert "llmslo.goodput_tok_s" not in unchecked  # undefined without objectives
    assert not any(k.startswith("llmslo.slo.") for k in unchecked)


def test_rate_level(point_factory: Callable[..., SweepPoint]) -> None:
    d = props(point_factory(2.5, ttft_ms=50.0, rate=True))
    assert d["llmslo.level"] == "r2.5"
    assert d["llmslo.level_mode"] == "rate"
    assert d["llmslo.level_arrival"] == "poisson"


def test_suite_properties_flatten_constants() -> None:
    constants = {
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "precision": "fp8",
        "hardware": {"gpu name": "H100 80GB", "gpus": 4},
        "workload": {"kind": "synthetic", "isl": 512, "osl": 256, "path": None},
        "levels": ["c1", "c4", "c8"],
        "slo": [slo.Objective("ttft", 99, "<", 500.0)],
        "warmup": 200,
        "strict": False,
        "baseline": Path("/tmp/base.json"),
    }
    d = dict(suite_properties(constants))
    assert all(NAME.match(k) for k in d)
    assert d["llmslo.model"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert d["llmslo.hardware.gpu_name"] == "H100 80GB"
    assert d["llmslo.hardware.gpus"] == "4"
    assert d["llmslo.workload.isl"] == "512"
    assert "llmslo.workload.path" not in d  # None is left out
    assert d["llmslo.levels"] == "c1,c4,c8"
    assert d["llmslo.slo.0.label"] == "ttft_p99 < 500 ms"
    assert d["llmslo.slo.0.threshold"] == "500"
    assert d["llmslo.strict"] == "false"
    assert d["llmslo.baseline"] == "/tmp/base.json"


def test_testcase_properties_is_not_collected_as_a_test() -> None:
    assert junit.testcase_properties.__test__ is False  # type: ignore[attr-defined]


def test_property_name_sanitises() -> None:
    assert property_name("hardware", "gpu name (0)") == "llmslo.hardware.gpu_name_0"
    assert property_name("a/b", "", "c") == "llmslo.a_b.c"


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="test_chat" name="test_chat[sim-c16]">
<properties><property name="llmslo.level" value="c16"/>
<property name="llmslo.outcome" value="fail"/></properties></testcase>
<testcase classname="test_chat" name="test_chat[sim-c1]"/>
<testcase classname="test_chat" name="test_other"/>
</testsuite></testsuites>
"""


def test_set_properties_replaces_and_adds(tmp_path: Path) -> None:
    path = tmp_path / "j.xml"
    path.write_text(JUNIT)
    outcome = [("llmslo.outcome", "expected_miss"), ("llmslo.outcome_reason", "above the knee")]
    done = junit.set_properties(
        path,
        {
            "test_chat.py::test_chat[sim-c16]": outcome,
            "test_chat.py::test_chat[sim-c1]": [("llmslo.outcome", "pass")],
        },
    )
    assert done == 2
    cases = {c.get("name"): c for c in ET.parse(path).getroot().iter("testcase")}

    def got(name: str) -> dict[str | None, str | None]:
        return {p.get("name"): p.get("value") for p in cases[name].iter("property")}

    # Replaced in place, not duplicated; the other properties kept.
    assert got("test_chat[sim-c16]") == {
        "llmslo.level": "c16",
        "llmslo.outcome": "expected_miss",
        "llmslo.outcome_reason": "above the knee",
    }
    assert len(cases["test_chat[sim-c16]"].findall("properties/property")) == 3
    assert got("test_chat[sim-c1]") == {"llmslo.outcome": "pass"}
    assert got("test_other") == {}
