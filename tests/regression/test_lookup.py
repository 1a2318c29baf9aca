"""Finding points, capacity searches and metric values in results."""

from __future__ import annotations

from dataclasses import replace

import pytest
from regression_helpers import CAP8, capacity, point, results, sweep

from pytest_llmslo import regression
from pytest_llmslo.records import LoadLevel


def test_find_point_by_level_dict_and_label():
    pts = [point([100.0] * 30, level=LoadLevel.concurrency(c)) for c in (1, 4, 8)]
    doc = results(pts)
    assert regression.find_point(doc, "test_chat", "vllm", LoadLevel.concurrency(4)) is pts[1]
    assert regression.find_point(doc, "test_chat", "vllm", {"mode": "concurrency", "value": 8})
    assert regression.find_point(doc, "test_chat", "vllm", "c1") is pts[0]
    assert regression.find_point(doc, "test_chat", "vllm", "c16") is None
    assert regression.find_point(doc, "test_other", "vllm", "c1") is None
    assert regression.find_point(doc, "test_chat", "sglang", "c1") is None


def test_find_point_rate_levels_and_repeats():
    first = point([100.0] * 30, level=LoadLevel.rate(2.5))
    again = point([150.0] * 30, level=LoadLevel.rate(2.5))
    doc = results([first, again])
    found = regression.find_point(doc, "test_chat", "vllm", "r2.5")
    assert found is not None
    assert regression.metric_value(found, "ttft_p50") == pytest.approx(150.0, abs=0.5)
    assert regression.find_point(doc, "test_chat", "vllm", LoadLevel.rate(2.5, "constant")) is None
    with pytest.raises(ValueError, match="not a load level label"):
        regression.find_point(doc, "test_chat", "vllm", "x3")


def test_metric_value_prefers_the_verdict_for_goodput():
    p = point([100.0] * 50)
    assert p.verdict is not None
    d = replace(
        p,
        verdict=replace(p.verdict, goodput_tok_s=123.0),
        summary=replace(p.summary, goodput_tok_s=456.0),
    )
    assert regression.metric_value(d, "goodput") == 123.0
    d = replace(d, verdict=None)
    assert regression.metric_value(d, "goodput") == 456.0
    assert regression.metric_value(d, "ttft_p999") is not None
    empty = replace(d.summary.distributions["ttft"], count=0)
    dists = {**d.summary.distributions, "ttft": empty}
    d = replace(d, summary=replace(d.summary, distributions=dists))
    assert regression.metric_value(d, "ttft_p50") is None


def test_find_capacity_and_its_point():
    pts = sweep("vllm", 1.0, (1, 4, 8))
    doc = results(pts, capacities={("vllm", "test_chat"): capacity(8, CAP8)})
    cap = regression.find_capacity(doc, "test_chat", "vllm", "concurrency")
    assert cap is not None and cap.value == 8.0
    assert regression.find_capacity(doc, "test_chat", "vllm", "rate") is None
    assert regression.find_capacity(doc, "test_other", "vllm") is None
    assert regression.capacity_point(cap) == LoadLevel.concurrency(8)
    # No level passed: the test was judged by its last probe.
    assert regression.capacity_point(capacity(None, [(1, False)])) == LoadLevel.concurrency(1)
