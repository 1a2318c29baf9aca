"""The SVG chart: valid XML, one series per engine and panel, the knee and the Pareto
frontier marked, axes with ticks and labels, a legend, escaped text."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET

import pytest

from pytest_llmslo.document import Results
from pytest_llmslo.report.svg import PALETTE, nice_ticks, render_svg
from pytest_llmslo.sweep import SweepPoint, find_knee, pareto_front

NS = "{http://www.w3.org/2000/svg}"


def chart(
    points: list[SweepPoint], *, baseline: list[SweepPoint] | None = None, title: str | None = None
) -> str:
    """The chart of a session that measured ``points`` (against one that measured
    ``baseline``)."""
    base = None if baseline is None else Results.of(baseline)
    return render_svg(Results.of(points), baseline=base, title=title)


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg.encode("utf-8"))
    assert root.tag == f"{NS}svg"
    return root


def groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [
        g
        for g in root.iter(f"{NS}g")
        if (g.get("class") or "").split() and cls in g.get("class", "")
    ]


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}text")]


def test_two_engines_two_panels(sweep_factory):
    points = sweep_factory("vllm") + sweep_factory("sglang", ttft=lambda c: 40.0 * c)
    root = parse(chart(points, title="nightly"))
    panels = groups(root, "panel")
    assert [p.get("class") for p in panels] == ["panel latency", "panel goodput"]
    for panel in panels:
        series = [g for g in panel.iter(f"{NS}g") if g.get("class") == "series"]
        assert [g.get("data-engine") for g in series] == ["vllm", "sglang"]
        for g in series:
            assert len(g.findall(f"{NS}circle[@r='4']")) == 5  # one marker per level
            assert len(g.findall(f"{NS}polyline")) == 1
    strokes = {
        g.get("data-engine"): g.find(f"{NS}polyline").get("stroke") for g in groups(root, "series")
    }
    assert strokes == {"vllm": PALETTE[0], "sglang": PALETTE[1]}
    assert "nightly" in texts(root)


def test_knee_is_marked_on_both_panels(sweep_factory):
    points = sweep_factory("vllm")
    knee = find_knee(points)
    assert knee.level is not None
    root = parse(chart(points))
    rings = [c for c in root.iter(f"{NS}circle") if c.get("class") == "knee"]
    assert len(rings) == 2
    assert texts(root).count(f"knee {knee.level.label}") == 2


def test_pareto_frontier_marks_the_frontier_points(sweep_factory):
    points = sweep_factory("vllm") + sweep_factory("sglang", ttft=lambda c: 40.0 * c)
    root = parse(chart(points))
    (pareto,) = groups(root, "pareto")
    assert len(pareto.findall(f"{NS}rect")) == sum(pareto_front(points))
    assert pareto.find(f"{NS}polyline").get("stroke-dasharray")


def test_axes_have_ticks_and_labels(sweep_factory):
    root = parse(chart(sweep_factory("vllm")))
    labels = texts(root)
    for label in ("output throughput (tok/s)", "TTFT P99 (ms)", "concurrency", "goodput (tok/s)"):
        assert label in labels
    assert "throughput vs TTFT P99" in labels and "concurrency vs goodput" in labels
    numeric = [t for t in labels if re.fullmatch(r"-?[0-9.]+k?", t)]
    assert len(numeric) >= 12  # at least 3 ticks on each of 4 axes


def test_legend_names_engines_baseline_knee_and_frontier(sweep_factory):
    points = sweep_factory("vllm")
    base = sweep_factory("vllm", ttft=lambda c: 45.0 * c)
    root = parse(chart(points, baseline=base))
    (legend,) = groups(root, "legend")
    assert [t.text for t in legend.iter(f"{NS}text")] == [
        "vllm",
        "vllm (baseline)",
        "knee",
        "Pareto frontier",
    ]
    baseline = [g for g in root.iter(f"{NS}g") if g.get("class") == "series baseline"]
    assert len(baseline) == 2
    assert all(g.find(f"{NS}polyline").get("stroke-dasharray") for g in baseline)


def test_rate_sweep_axis_label(sweep_factory):
    root = parse(chart(sweep_factory("vllm", levels=(1, 2, 4), rate=True)))
    assert "rate (req/s)" in texts(root)


def test_invalid_points_are_hollow(point_factory):
    points = [point_factory(1, ttft_ms=50.0), point_factory(4, ttft_ms=80.0, valid=False)]
    root = parse(chart(points))
    markers = [c for c in root.iter(f"{NS}circle") if c.get("r") == "4"]
    assert sorted(c.get("fill") for c in markers) == [PALETTE[0]] * 2 + ["white"] * 2


def test_text_is_escaped(point_factory):
    p = point_factory(1, ttft_ms=50.0, engine="a<b>&c", test="test_x[\"q\" & 'r']")
    svg = chart([p], title="<script>alert(1)</script>")
    root = parse(svg)
    assert "<script>" not in svg
    assert "<script>alert(1)</script>" in texts(root)
    assert "test_x[\"q\" & 'r']" in texts(root)
    assert [g.get("data-engine") for g in groups(root, "series")] == ["a<b>&c", "a<b>&c"]


def test_empty_and_degenerate_inputs(point_factory):
    parse(chart([]))
    one = parse(chart([point_factory(1, ttft_ms=50.0)]))
    assert "nan" not in ET.tostring(one, encoding="unicode").lower()
    no_goodput = parse(chart([point_factory(1, ttft_ms=50.0, objectives=None)]))
    assert "no data" in texts(no_goodput)


def test_several_tests_stack_rows(sweep_factory):
    points = sweep_factory("vllm") + sweep_factory("vllm", test="test_long")
    root = parse(chart(points))
    assert len(groups(root, "panel")) == 4
    titles = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "test-title"]
    assert titles == ["test_chat", "test_long"]
    height = float(root.get("height"))
    assert height > 2 * 330


@pytest.mark.parametrize(
    "lo, hi",
    [(0, 1), (0, 237.4), (12.5, 13.1), (0, 1904.4), (3, 3), (-5, 5), (0.001, 0.0042), (0, 48000)],
)
def test_nice_ticks(lo, hi):
    ticks = nice_ticks(lo, hi)
    assert ticks[0] <= lo and ticks[-1] >= hi
    assert 2 <= len(ticks) <= 12
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1
    (step,) = steps
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 6) in (1.0, 2.0, 5.0)


def test_nice_ticks_rejects_non_finite():
    with pytest.raises(ValueError, match="finite"):
        nice_ticks(0, math.inf)


def test_legend_lists_only_the_series_drawn(sweep_factory):
    points = sweep_factory("vllm")
    base = sweep_factory("vllm") + sweep_factory("sglang")
    root = parse(chart(points, baseline=base))
    (legend,) = groups(root, "legend")
    assert [t.text for t in legend.iter(f"{NS}text")] == [
        "vllm",
        "vllm (baseline)",
        "sglang (baseline)",
        "knee",
        "Pareto frontier",
    ]


def test_a_test_swept_in_two_modes_gets_two_rows(sweep_factory):
    points = sweep_factory("vllm") + sweep_factory("vllm", levels=(1, 2, 4), rate=True)
    root = parse(chart(points))
    titles = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "test-title"]
    assert titles == ["test_chat (concurrency)", "test_chat (rate)"]
    labels = texts(root)
    assert "concurrency" in labels and "rate (req/s)" in labels


def test_a_points_hover_title_has_its_engine_signals(point_factory):
    import dataclasses

    p = point_factory(8, ttft_ms=50.0)
    sig = {"engines": ["vllm"], "queue_time_p99_ms": 530.0, "kv_usage_max": 0.97,
           "preemptions": 38.0, "energy_j_per_token": 0.41}  # fmt: skip
    p = dataclasses.replace(p, summary=dataclasses.replace(p.summary, signals=sig))
    titles = [t.text or "" for t in parse(chart([p])).iter(f"{NS}title")]
    assert any(
        "engine: queue P99 530.0 ms, KV 97 %, 38 preemptions, 0.41 J/token" in t for t in titles
    ), titles
