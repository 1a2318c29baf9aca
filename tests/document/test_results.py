"""``Results``: built once from a session's objects or from its document, and every report
the same either way."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
from document_helpers import CONSTANTS, capacity_result

from pytest_llmslo.document import EngineEntry, Results, build_document
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.redact import forget_all, remember
from pytest_llmslo.report import csvexport, markdown, svg, terminal
from pytest_llmslo.sweep import SweepPoint, find_knee

SIM_META = {
    "kind": "sim",
    "model": "llmslo-sim",
    "version": "sim-1.2",
    "simulated": {"hardware": "H100", "precision": "fp8", "engine": "vllm", "deployment": "tp1"},
}


def _with_signals(p: SweepPoint) -> SweepPoint:
    signals = {
        "engines": ["sim"],
        "queue_time_p99_ms": 12.5,
        "waiting_mean": 1.5,
        "kv_usage_max": 0.4,
        "ttft_p99_ms": 80.0,
        "client_minus_engine_ttft_p99_ms": 3.25,
    }
    traffic = {"offered_req_s": 2.0, "sent_req_s": 1.9}
    return dataclasses.replace(
        p, summary=dataclasses.replace(p.summary, signals=signals, traffic=traffic)
    )


@pytest.fixture
def session_results(
    sweep_factory: Callable[..., list[SweepPoint]], point_factory: Callable[..., SweepPoint]
) -> Results:
    """What a session of two engines measured: a concurrency and a rate sweep of one test
    (with engine signals, a failing and a client-limited level, a capacity search), a test
    that asserted no SLO, and an interrupted level."""
    sim = [_with_signals(p) for p in sweep_factory("sim", samples=True)]
    rates = [point_factory(r, ttft_ms=40.0 * r, rate=True) for r in (1.0, 2.0, 4.0)]
    invalid = point_factory(64, ttft_ms=900.0, valid=False, failed=5)
    vllm = sweep_factory("vllm", levels=(1, 4, 8), ttft=lambda c: 30.0 * c)
    unchecked = sweep_factory("vllm", levels=(1, 2), objectives=None, test="test_plain")
    cut = dataclasses.replace(point_factory(16, ttft_ms=60.0, engine="vllm"), interrupted=True)
    points = [*sim, *rates, invalid, *vllm, *unchecked, cut]
    return Results.of(
        points,
        constants=CONSTANTS,
        engines={"sim": SIM_META, "vllm": {"version": "0.11.0"}},
        capacities={("vllm", "test_chat"): capacity_result()},
    )


def _read_back(results: Results) -> Results:
    """``results`` as ``llmslo report`` sees them: written as a document, read from JSON."""
    doc = json.loads(json.dumps(build_document(results)))
    return Results.from_document(doc, source="run.json")


def test_reports_of_a_document_are_the_sessions_own(session_results: Results) -> None:
    back = _read_back(session_results)
    assert back.points and len(back.points) == len(session_results.points)
    assert markdown.render_report(back) == markdown.render_report(session_results)
    assert csvexport.render_csv(back) == csvexport.render_csv(session_results)
    assert svg.render_svg(back, title="t") == svg.render_svg(session_results, title="t")
    for width in (100, 140):
        assert terminal.render_summary(back, width) == terminal.render_summary(
            session_results, width
        )
    # And the document made again from what was read is the one that was written.
    assert build_document(back) == json.loads(json.dumps(build_document(session_results)))


def test_a_document_gives_its_knees_capacities_and_engines(session_results: Results) -> None:
    back = _read_back(session_results)
    assert back.source == "run.json" and back.complete
    assert back.created_utc == session_results.created_utc
    assert back.capacities == session_results.capacities
    assert back.engines["sim"] == EngineEntry("sim-1.2", SIM_META)
    assert back.engine_version("vllm") == "0.11.0" and back.engine_version("other") is None
    # One stored knee per sweep; the test swept in two load modes has no single one.
    assert set(back.knees) == {
        ("sim", "test_chat", "concurrency"),
        ("sim", "test_chat", "rate"),
        ("vllm", "test_chat", "concurrency"),
        ("vllm", "test_plain", "concurrency"),
    }
    assert set(back.test_knees()) == {("vllm", "test_chat"), ("vllm", "test_plain")}
    assert session_results.knees == {} and session_results.test_knees() == {}


def test_sweeps_in_document_order_with_their_positions(session_results: Results) -> None:
    sweeps = session_results.sweeps()
    assert [(s.engine, s.test, s.mode) for s in sweeps] == [
        ("sim", "test_chat", "concurrency"),
        ("sim", "test_chat", "rate"),
        ("vllm", "test_chat", "concurrency"),
        ("vllm", "test_plain", "concurrency"),
    ]
    points = session_results.points
    for s in sweeps:
        assert [points[i] for i in s.indices] == list(s.points)
        assert s.knee == find_knee(s.points)
    sim = sweeps[0]
    assert [p.level.label for p in sim.points][-1] == "c64"
    at = sim.knee_point()
    assert at is not None and points[at].level == sim.knee.level
    # A stored knee is used for its own sweep.
    given = dataclasses.replace(sim.knee, level=LoadLevel.concurrency(1), index=0)
    stored = dataclasses.replace(
        session_results, knees={("sim", "test_chat", "concurrency"): given}
    )
    assert stored.sweeps()[0].knee is given
    assert stored.sweeps()[1].knee == sweeps[1].knee


def test_engines_from_handles_mappings_and_entries() -> None:
    class Handle:
        def metadata(self) -> dict[str, Any]:
            return {"kind": "vllm", "gpus": "1"}

        def version(self) -> str:
            return "0.10.1"

    entry = EngineEntry("1", {"kind": "x"})
    results = Results.of([], engines={"a": Handle(), "b": {"version": 2}, "c": entry})
    assert results.engines == {
        "a": EngineEntry("0.10.1", {"kind": "vllm", "gpus": "1"}),
        "b": EngineEntry("2", {"version": 2}),
        "c": entry,
    }
    assert results.created_utc.endswith("Z")


def test_redacted_masks_the_constants_and_the_engines_metadata() -> None:
    remember("sk-secret-123")
    try:
        results = Results.of(
            [],
            constants={"endpoint": "chat", "note": "key sk-secret-123"},
            engines={"vllm": {"command": ["vllm", "--api-key", "sk-secret-123"]}},
        )
        masked = results.redacted()
        assert masked.constants["note"] == "key ***"
        assert masked.engines["vllm"].metadata["command"] == ["vllm", "--api-key", "***"]
        assert "sk-secret-123" in json.dumps(results.constants)  # the original is unchanged
    finally:
        forget_all()
