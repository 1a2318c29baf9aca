"""The SVG chart: valid XML, one series per engine and panel, the knee and the Pareto
frontier marked, axes with ticks and labels, a legend, escaped text."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import xml.etree.ElementTree as ET

import pytest

from pytest_llmslo.document import Results
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.report.svg import PALETTE, frontier_points, nice_ticks, render_svg
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
    assert [p.get("class") for p in panels] == ["panel latency", "panel goodput", "panel itl"]
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


def test_knee_is_marked_on_every_panel(sweep_factory):
    points = sweep_factory("vllm")
    knee = find_knee(points)
    assert knee.level is not None
    root = parse(chart(points))
    rings = [c for c in root.iter(f"{NS}circle") if c.get("class") == "knee"]
    assert len(rings) == 3
    assert texts(root).count(f"knee {knee.level.label}") == 3


def test_pareto_frontier_marks_the_frontier_points(sweep_factory):
    points = sweep_factory("vllm") + sweep_factory("sglang", ttft=lambda c: 40.0 * c)
    root = parse(chart(points))
    (pareto,) = groups(root, "pareto")
    assert len(pareto.findall(f"{NS}rect")) == len(frontier_points(points))
    assert pareto.find(f"{NS}polyline").get("stroke-dasharray")


def test_axes_have_ticks_and_labels(sweep_factory):
    root = parse(chart(sweep_factory("vllm")))
    labels = texts(root)
    for label in ("output throughput (tok/s)", "TTFT P99 (ms)", "concurrency", "goodput (tok/s)"):
        assert label in labels
    assert "throughput vs TTFT P99" in labels and "concurrency vs goodput" in labels
    assert "concurrency vs ITL P50" in labels and "ITL P50 (ms)" in labels
    numeric = [t for t in labels if re.fullmatch(r"-?[0-9.]+k?", t)]
    assert len(numeric) >= 18  # at least 3 ticks on each of 6 axes


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
        "SLO threshold",
    ]
    baseline = [g for g in root.iter(f"{NS}g") if g.get("class") == "series baseline"]
    assert len(baseline) == 3
    assert all(g.find(f"{NS}polyline").get("stroke-dasharray") for g in baseline)


def test_each_kind_of_level_names_its_axis(sweep_factory):
    root = parse(chart(sweep_factory("vllm", levels=(1, 2, 4), rate=True)))
    assert "request rate (req/s)" in texts(root) and "request rate vs goodput" in texts(root)
    trace = [
        dataclasses.replace(
            p,
            level=LoadLevel.trace(p.level.value),
            summary=dataclasses.replace(p.summary, level=LoadLevel.trace(p.level.value)),
        )
        for p in sweep_factory("vllm", levels=(1, 2, 4), rate=True)
    ]
    labels = texts(parse(chart(trace)))
    assert "trace speed-up (x)" in labels and "trace speed-up vs goodput" in labels
    assert not any("req/s" in t for t in labels)
    assert "knee x2" in labels or "knee x4" in labels or "knee x1" in labels


def test_invalid_points_are_hollow(point_factory):
    points = [point_factory(1, ttft_ms=50.0), point_factory(4, ttft_ms=80.0, valid=False)]
    root = parse(chart(points))
    markers = [c for c in root.iter(f"{NS}circle") if c.get("r") == "4"]
    assert sorted(c.get("fill") for c in markers) == [PALETTE[0]] * 3 + ["white"] * 3


def test_text_is_escaped(point_factory):
    kw = {"engine": "a<b>&c", "test": "test_x[\"q\" & 'r']"}
    points = [point_factory(1, ttft_ms=50.0, **kw), point_factory(2, ttft_ms=60.0, **kw)]
    svg = chart(points, title="<script>alert(1)</script>")
    root = parse(svg)
    assert "<script>" not in svg
    assert "<script>alert(1)</script>" in texts(root)
    assert "test_x[\"q\" & 'r']" in texts(root)
    assert [g.get("data-engine") for g in groups(root, "series")] == ["a<b>&c"] * 3


def test_empty_and_degenerate_inputs(point_factory):
    parse(chart([]))
    one = parse(chart([point_factory(1, ttft_ms=50.0)]))
    assert "nan" not in ET.tostring(one, encoding="unicode").lower()
    bare = [point_factory(c, ttft_ms=50.0, objectives=None) for c in (1, 2)]
    assert "no data" in texts(parse(chart(bare)))  # no goodput without objectives


def test_several_tests_stack_rows(sweep_factory):
    points = sweep_factory("vllm") + sweep_factory("vllm", test="test_long")
    root = parse(chart(points))
    assert len(groups(root, "panel")) == 6
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
        "SLO threshold",
    ]


def test_a_test_swept_in_two_modes_gets_two_rows(sweep_factory):
    points = sweep_factory("vllm") + sweep_factory("vllm", levels=(1, 2, 4), rate=True)
    root = parse(chart(points))
    titles = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "test-title"]
    assert titles == ["test_chat (concurrency)", "test_chat (rate)"]
    labels = texts(root)
    assert "concurrency" in labels and "request rate (req/s)" in labels


def test_a_points_hover_title_has_its_engine_signals(point_factory):
    import dataclasses

    p = point_factory(8, ttft_ms=50.0)
    sig = {"engines": ["vllm"], "queue_time_p99_ms": 530.0, "kv_usage_max": 0.97,
           "preemptions": 38.0, "energy_j_per_token": 0.41}  # fmt: skip
    p = dataclasses.replace(p, summary=dataclasses.replace(p.summary, signals=sig))
    other = point_factory(4, ttft_ms=60.0)
    titles = [t.text or "" for t in parse(chart([p, other])).iter(f"{NS}title")]
    assert any(
        "engine: queue P99 530.0 ms, KV 97 %, 38 preemptions, 0.41 J/token" in t for t in titles
    ), titles


# --------------------------------------------------------------------------- layout

#: A character's width, a glyph's ascent and descent, as shares of the font size: a
#: sans-serif font's (the chart's) are within these.
EM_WIDTH, ASCENT, DESCENT = 0.6, 0.75, 0.2


def label_boxes(root: ET.Element) -> list[tuple[str, tuple[float, float, float, float]]]:
    """The box of every horizontal text in the chart, from its position, font size,
    anchor and length."""
    out = []
    for t in root.iter(f"{NS}text"):
        if t.get("transform"):  # the rotated y-axis labels, beside the tick labels
            continue
        text = t.text or ""
        x, y, size = float(t.get("x")), float(t.get("y")), float(t.get("font-size"))
        w = EM_WIDTH * size * len(text)
        anchor = t.get("text-anchor", "start")
        left = x if anchor == "start" else x - w if anchor == "end" else x - w / 2
        out.append((text, (left, y - ASCENT * size, left + w, y + DESCENT * size)))
    return out


def overlapping(root: ET.Element) -> list[tuple[str, str]]:
    boxes = label_boxes(root)
    return [
        (a, b)
        for (a, p), (b, q) in itertools.combinations(boxes, 2)
        if p[0] < q[2] and q[0] < p[2] and p[1] < q[3] and q[1] < p[3]
    ]


def crowded(sweep_factory) -> list[SweepPoint]:
    """Six engines whose knees are at one level, close together: their labels would sit
    on each other (as "knee c48" did five times over)."""
    return [
        p
        for i, engine in enumerate(
            ("vllm", "sglang", "trtllm", "dyn-vllm", "dyn-sglang", "dyn-trt")
        )
        for p in sweep_factory(engine, levels=(4, 8, 16), ttft=lambda c, i=i: (30 + i) * c)
    ]


@pytest.mark.parametrize("case", ["crowded", "two tests", "baseline", "rate and trace"])
def test_no_two_labels_overlap(sweep_factory, case):
    points = crowded(sweep_factory)
    base = None
    if case == "two tests":
        points += sweep_factory("vllm", test="test_long", levels=(1, 2, 4, 8))
    elif case == "baseline":
        base = [dataclasses.replace(p, engine=p.engine) for p in crowded(sweep_factory)]
    elif case == "rate and trace":
        points += sweep_factory("vllm", levels=(1, 2, 4), rate=True)
    root = parse(chart(points, baseline=base, title="nightly"))
    knees = [t for t in root.iter(f"{NS}text") if t.get("class") == "knee-label"]
    assert len(knees) >= 18  # six engines x three panels
    assert overlapping(root) == []


def test_labels_of_one_level_stack_with_leader_lines(sweep_factory):
    # Identical engines: every knee at the same spot, every label moved off the next.
    points = [p for e in "abcdef" for p in sweep_factory(e, levels=(4, 8, 16))]
    root = parse(chart(points))
    assert overlapping(root) == []
    assert any(line.get("class") == "leader" for line in root.iter(f"{NS}line"))


def y_of(panel: ET.Element, value: float) -> float:
    """The pixel y of ``value`` on a panel's y axis, from two of its tick labels (drawn
    4 px under their tick)."""
    ticks = [
        (float(t.text), float(t.get("y")) - 4)
        for t in panel.iter(f"{NS}text")
        if t.get("text-anchor") == "end" and re.fullmatch(r"[0-9.]+", t.text or "")
        and not t.get("class")
    ]  # fmt: skip
    (v0, y0), (v1, y1) = ticks[0], ticks[-1]
    return y0 + (value - v0) * (y1 - y0) / (v1 - v0)


def test_slo_thresholds_are_drawn_on_their_axes(sweep_factory):
    root = parse(chart(sweep_factory("vllm", gap_ms=15.0)))
    panels = {p.get("class").split()[1]: p for p in groups(root, "panel")}
    for kind, value, label in (("latency", 500, "SLO ttft_p99 < 500 ms"),
                               ("itl", 30, "SLO itl_p50 < 30 ms")):  # fmt: skip
        lines = [x for x in panels[kind].iter(f"{NS}line") if x.get("class") == "slo"]
        assert len(lines) == 1, kind
        assert lines[0].get("y1") == lines[0].get("y2")
        assert float(lines[0].get("y1")) == pytest.approx(y_of(panels[kind], value), abs=0.2)
        assert label in texts(panels[kind])
    # Goodput has no threshold of its own here.
    assert not [x for x in panels["goodput"].iter(f"{NS}line") if x.get("class") == "slo"]


def test_a_threshold_far_above_the_points_is_named_not_drawn(sweep_factory):
    points = sweep_factory("vllm", levels=(1, 2), ttft=lambda c: 10.0 * c)
    root = parse(chart(points))
    latency = next(p for p in groups(root, "panel") if "latency" in p.get("class"))
    assert not [x for x in latency.iter(f"{NS}line") if x.get("class") == "slo"]
    assert "SLO ttft_p99 < 500 ms (above the chart)" in texts(latency)


def test_a_single_point_test_gets_a_table(sweep_factory, point_factory):
    points = sweep_factory("vllm") + [
        point_factory(8, ttft_ms=60.0, engine=e, test="test_gate") for e in ("vllm", "sglang")
    ]
    root = parse(chart(points))
    assert len(groups(root, "panel")) == 3  # test_chat's, none for test_gate
    (table,) = groups(root, "point-table")
    rows = [g for g in table.iter(f"{NS}g") if g.get("class") == "row"]
    assert [g.get("data-engine") for g in rows] == ["vllm", "sglang"]
    cells = [t.text for t in rows[0].iter(f"{NS}text")]
    assert cells[:2] == ["vllm", "c8"] and cells[-1] == "pass"
    assert overlapping(root) == []


def test_failed_points_are_never_on_the_frontier(point_factory):
    points = [
        point_factory(1, ttft_ms=50.0),
        point_factory(8, ttft_ms=60.0),
        point_factory(32, ttft_ms=60.0, gap_ms=40.0),  # the most throughput: ITL fails
    ]
    failed = points[2]
    assert failed.outcome == "fail" and pareto_front(points)[2]  # on the naive frontier
    assert failed not in frontier_points(points)
    root = parse(chart(points))
    (pareto,) = groups(root, "pareto")
    corners = {(float(r.get("x")) + 4, float(r.get("y")) + 4) for r in pareto.findall(f"{NS}rect")}
    latency = next(p for p in groups(root, "panel") if "latency" in p.get("class"))
    marks = {
        (float(c.get("cx")), float(c.get("cy"))): c.find(f"{NS}title").text
        for c in latency.iter(f"{NS}circle")
        if c.get("r") == "4"
    }
    assert len(corners) == len(frontier_points(points)) == 2
    for at in corners:
        assert "c32" not in marks[(round(at[0], 1), round(at[1], 1))]


def test_the_title_names_model_and_hardware(sweep_factory):
    engines = {
        "sim": {
            "version": "0.1",
            "simulated": {"model": "meta-llama/Llama-3.1-70B-Instruct", "precision": "FP8",
                          "hardware": "4x H100-SXM-80GB", "engine": "vllm"},
        }
    }  # fmt: skip
    root = parse(render_svg(Results.of(sweep_factory("sim"), engines=engines), title="nightly"))
    (setup,) = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "testbed"]
    assert setup == "Llama-3.1-70B-Instruct FP8 on 4x H100-SXM-80GB (simulated)"
    gpu = "NVIDIA H100 80GB HBM3, 81559 MiB"
    constants = {"per_engine": {"vllm": {"model": "/models/Llama-3.1-8B", "precision": "bf16",
                                         "hardware": {"gpus": [gpu, gpu]}}}}  # fmt: skip
    root = parse(render_svg(Results.of(sweep_factory("vllm"), constants=constants)))
    (setup,) = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "testbed"]
    assert setup == "Llama-3.1-8B bf16 on 2x NVIDIA H100 80GB HBM3"
