"""Two results compared test by test (``compare_test``, which the session runs after each
test, and ``compare_documents``): pairing points and engines, constants that differ,
capacities, incomplete baselines."""

from __future__ import annotations

from dataclasses import replace

import pytest
from regression_helpers import (
    A100,
    CAP8,
    CONSTANTS,
    H100,
    capacity,
    per_engine_constants,
    point,
    results,
    sweep,
)

from pytest_llmslo import regression
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.regression import Judging, Pairing, compare_test


def test_compare_documents_pairs_points():
    old = results(sweep("vllm", 1.0, (1, 4, 8)), version="0.9")
    new = results(sweep("vllm", 1.3, (1, 4, 16), seed=100), version="0.10")
    dc = regression.compare_documents(old, new, "ttft_p50:10%")
    assert [c.level.label for c in dc.comparisons] == ["c1", "c4"]
    assert all(c.regressed for c in dc.comparisons)
    assert dc.comparisons[0].versions == ("0.9", "0.10")
    assert dc.only_old == ("vllm | test_chat | c8",)
    assert dc.only_new == ("vllm | test_chat | c16",)
    assert dc.regressed and dc.status == "regressed"
    text = dc.format()
    assert "only in baseline (not compared): vllm | test_chat | c8" in text
    assert "2 points compared: 2 regressed" in text
    assert dc.to_dict()["status"] == "regressed"


def test_compare_documents_pairs_single_engines_with_different_names():
    old = results(sweep("vllm-0.9", 1.0, (1,)))
    new = results(sweep("vllm-0.10", 1.0, (1,)))
    dc = regression.compare_documents(old, new, "ttft_p50:10%")
    assert len(dc.comparisons) == 1 and not dc.regressed
    assert "paired by position" in dc.notes[0]
    explicit = regression.compare_documents(
        old, new, "ttft_p50:10%", engines={"vllm-0.9": "vllm-0.10"}
    )
    assert len(explicit.comparisons) == 1 and not explicit.notes


def test_compare_documents_with_different_constants_compares_nothing():
    old = results(sweep("vllm", 1.0, (1,)))
    new = results(sweep("vllm", 2.0, (1,)), {**CONSTANTS, "model": "other"})
    dc = regression.compare_documents(old, new, "ttft_p50:10%")
    assert not dc.comparable and dc.constants_differ and not dc.regressed
    assert dc.comparisons == ()
    assert dc.mismatch == ('model: "llama-3.1-8b" (baseline) != "other" (new)',)
    assert "NOT COMPARABLE" in dc.format() and "model:" in dc.format()


def test_compare_documents_per_test_constants():
    a = sweep("vllm", 1.0, (1,))
    b = sweep("vllm", 2.0, (1,))
    long_a = [point([100.0] * 50, test="test_long")]
    long_b = [point([300.0] * 50, test="test_long")]
    old = results(a + long_a, {**CONSTANTS, "tests": {"test_long": {"isl": 4096}}})
    new = results(b + long_b, {**CONSTANTS, "tests": {"test_long": {"isl": 8192}}})
    dc = regression.compare_documents(old, new, "ttft_p50:10%")
    by_test = {c.test: c for c in dc.comparisons}
    assert by_test["test_chat"].regressed
    assert by_test["test_long"].constants_differ and not by_test["test_long"].regressed
    assert by_test["test_long"].problems == ("isl: 4096 (baseline) != 8192 (new)",)
    assert dc.comparable and dc.constants_differ


def test_compare_documents_compares_capacities():
    old_pts, new_pts = sweep("vllm", 1.0, (1, 4, 8)), sweep("vllm", 1.0, (1, 4))
    key = ("vllm", "test_chat")
    old = results(old_pts, capacities={key: capacity(8, CAP8)})
    cap4 = capacity(4, [(1, True), (2, True), (4, True), (8, False), (6, False), (5, False)])
    new = results(new_pts, capacities={key: cap4})
    dc = regression.compare_documents(old, new, "ttft_p50:1000%")
    caps = [c for c in dc.comparisons if any(r.metric == "capacity" for r in c.rows)]
    assert len(caps) == 1 and caps[0].regressed and dc.regressed
    assert "capacity" in dc.format()


def test_compare_documents_warns_about_an_incomplete_baseline():
    old = replace(results(sweep("vllm", 1.0, (1,))), complete=False)
    new = results(sweep("vllm", 1.0, (1,)))
    dc = regression.compare_documents(old, new, "ttft_p50:100%")
    assert any("baseline is incomplete" in n for n in dc.notes)
    assert "baseline is incomplete (its session was interrupted)" in dc.format()


def test_one_engine_pairs_with_its_points_in_a_baseline_of_several():
    old_pts = sweep("vllm", 1.0, (1,)) + sweep("sglang", 1.0, (1,))
    old = results(old_pts, per_engine_constants(vllm=H100, sglang=A100))
    new = results(sweep("vllm", 1.0, (1,)), per_engine_constants(vllm=H100))
    dc = regression.compare_documents(old, new, "ttft_p50:100%")
    assert dc.comparable and not dc.constants_differ
    assert [c.engine for c in dc.comparisons] == ["vllm"] and dc.comparisons[0].comparable
    assert dc.only_old == ("sglang | test_chat | c1",)


def test_other_gpus_are_not_compared_another_client_is():
    old = results(sweep("vllm", 1.0, (1,)), per_engine_constants(vllm=H100))
    on_a100 = {**H100, "hardware": {"gpus": ["NVIDIA A100"]}}
    new = results(sweep("vllm", 1.0, (1,)), per_engine_constants(vllm=on_a100))
    dc = regression.compare_documents(old, new, "ttft_p50:100%")
    assert not dc.comparable
    assert dc.mismatch == ('hardware.gpus: ["NVIDIA H100"] (baseline) != ["NVIDIA A100"] (new)',)
    laptop = per_engine_constants(vllm=H100)
    laptop["client"] = {"machine": "arm64", "cpus": 2, "python": "3.12.0"}
    dc = regression.compare_documents(
        old, results(sweep("vllm", 1.0, (1,)), laptop), "ttft_p50:100%"
    )
    assert dc.comparable and len(dc.comparisons) == 1 and dc.comparisons[0].comparable


# --------------------------------------------------------------------------- compare_test


def test_compare_test_pairs_one_tests_points_by_level():
    old = results(sweep("vllm", 1.0, (1, 4)) + sweep("vllm", 1.0, (4,), seed=50))
    again = sweep("vllm", 1.5, (4,), seed=7)
    new_points = [*sweep("vllm", 1.5, (1, 4, 8), seed=100), *again]
    pairing = Pairing(old, results(new_points), Judging.of("ttft_p50:10%"))
    tested = compare_test(pairing, "vllm", "test_chat", new_points)
    assert [p for p, _ in tested.points] == new_points
    c1, c4, c8, c4_again = (c for _, c in tested.points)
    assert c1 is not None and c1.regressed and c1.versions == ("0.9", "0.9")
    assert c8 is None  # no c8 in the baseline
    # c4 was measured twice on each side: the first new c4 pairs with the last old c4,
    # the second with the one left.
    assert c4 is not None and c4_again is not None
    assert c4.rows[0].old == pytest.approx(old.points[2].summary.metric("ttft", 50))
    assert c4_again.rows[0].old == pytest.approx(old.points[1].summary.metric("ttft", 50))
    assert tested.capacity is None
    # Another test, or an engine paired with another one, finds none.
    assert compare_test(pairing, "vllm", "test_other", new_points[:1]).points[0][1] is None
    renamed = Pairing(old, results(new_points), engines={"vllm": "vllm-new"})
    assert compare_test(renamed, "vllm", "test_chat", new_points[:1]).points[0][1] is None


def test_compare_test_by_capacity_alone_or_with_the_points_where_it_ended():
    key = ("vllm", "test_chat")
    old_pts = sweep("vllm", 1.0, (1, 4, 8))
    new_pts = sweep("vllm", 1.0, (1, 4, 8), seed=100)
    old = results(old_pts, capacities={key: capacity(8, CAP8)})
    new = results(new_pts, capacities={key: capacity(8, CAP8)})
    pairing = Pairing(old, new, Judging.of("ttft_p50:1000%"))
    cap = capacity(8, CAP8)
    alone = compare_test(pairing, "vllm", "test_chat", (), capacity=cap).capacity
    assert alone is not None and [r.metric for r in alone.rows] == ["capacity"]
    at = compare_test(pairing, "vllm", "test_chat", (), capacity=cap, at_capacity=new_pts[2])
    assert at.capacity is not None and [r.metric for r in at.capacity.rows] == [
        "capacity",
        "ttft_p50",
    ]
    assert at.capacity.level == LoadLevel.concurrency(8) and at.points == ()
    # The baseline searched no capacity of this test: nothing to compare it with.
    bare = Pairing(results(old_pts), new)
    assert compare_test(bare, "vllm", "test_chat", (), capacity=cap).capacity is None


def test_compare_test_with_other_constants_compares_nothing():
    key = ("vllm", "test_chat")
    old = results(sweep("vllm", 1.0, (1,)), capacities={key: capacity(8, CAP8)})
    new = results(sweep("vllm", 1.0, (1,)), {**CONSTANTS, "osl": 32})
    tested = compare_test(
        Pairing(old, new), "vllm", "test_chat", new.points, capacity=capacity(8, CAP8)
    )
    (_, c), cap = tested.points[0], tested.capacity
    assert c is not None and c.constants_differ and c.rows == ()
    assert c.problems == ("osl: 16 (baseline) != 32 (new)",)
    assert cap is not None and cap.constants_differ and cap.problems == c.problems
