"""Terminal renderers: knee marker on the right row, invalid rows flagged, 100 columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_llmslo import slo
from pytest_llmslo.catalog import PERCENTILES
from pytest_llmslo.document import Results
from pytest_llmslo.metrics import Distribution, RunSummary
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.report.signaltext import CLIENT_LEGEND, signals_name
from pytest_llmslo.report.terminal import (
    fmt_ms,
    fmt_pct,
    fmt_tok,
    render_pareto,
    render_summary,
    render_sweep,
    render_verdict,
)
from pytest_llmslo.sweep import Knee, SweepPoint, find_knee

WIDTH = 100


def table_rows(lines: list[str]) -> dict[str, str]:
    """Table rows by load label (the second field of a row)."""
    rows = {}
    for line in lines:
        fields = line[1:].split()
        label = fields[0] if fields else ""
        if label[:1] in "cr" and label[1:2].isdigit() and not label.endswith(":"):
            rows[fields[0]] = line
    return rows


def test_sweep_table_marks_the_knee_row(sweep_factory: Callable[..., list[SweepPoint]]) -> None:
    pts = sweep_factory("sim")  # TTFT P99 ~ 1.2 x 50 c: c8 passes (470 ms), c16 fails
    lines = render_sweep("sim", pts)
    rows = table_rows(lines)
    assert list(rows) == ["c1", "c4", "c8", "c16", "c32"]
    assert rows["c8"].startswith("*")
    assert [label for label, row in rows.items() if row.startswith("*")] == ["c8"]
    assert rows["c4"].rstrip().endswith("pass")
    # Above the knee a miss is expected: named, not FAIL.
    assert "exp. miss ttft_p99" in rows["c16"] and "FAIL" not in rows["c16"]
    assert lines[0] == "sim | test_chat | concurrency sweep, 5 levels"
    knee_line = next(line for line in lines if "knee:" in line)
    assert knee_line.startswith("* knee: c8, goodput ")
    goodput = round(find_knee(pts).goodput_tok_s)  # type: ignore[arg-type]
    assert f"goodput {goodput} tok/s" in knee_line
    assert "(c16 missed above it, as expected past the knee)" in " ".join(lines)
    assert all(len(line) <= WIDTH for line in lines)


def test_sweep_table_columns_and_formats(point_factory: Callable[..., SweepPoint]) -> None:
    p = point_factory(4, ttft_ms=100.0, gap_ms=12.5)
    lines = render_sweep("sim", [p])
    header = lines[1]
    for name in ("load", "TTFT p50", "TTFT p99", "ITL p50", "TPOT p50", "out tok/s"):
        assert name in header
    assert "good tok/s" in header and "attain" in header and "verdict" in header
    row = table_rows(lines)["c4"]
    fields = row[1:].split()
    ttft_p99 = p.summary.distributions["ttft"].p(99)
    # The requests behind the latencies, then the TTFT P99 from fewer than the 100 samples
    # a P99 needs: marked, with the legend under the table.
    assert fields[1] == str(p.summary.requests) and p.summary.requests < 100
    assert fields[3] == f"{ttft_p99:.1f}†"
    assert fields[4] == "12.5"  # ITL P50, ms with one decimal
    assert fields[6] == str(round(p.summary.output_tok_s))
    assert fields[8] == "100.0%"
    assert any(line.strip().startswith("† from fewer samples than") for line in lines)


def test_invalid_rows_are_flagged(
    sweep_factory: Callable[..., list[SweepPoint]], point_factory: Callable[..., SweepPoint]
) -> None:
    pts = sweep_factory("sim", levels=(1, 4))
    pts.append(point_factory(8, ttft_ms=60.0, valid=False))
    lines = render_sweep("sim", pts)
    row = table_rows(lines)["c8"]
    assert row.startswith("!") and row.rstrip().endswith("inconclusive")
    note = " ".join(line.strip() for line in lines)
    assert "inconclusive (no verdict; excluded from knee and Pareto)" in note
    why = "c8: the load generator, not the engine, was the bottleneck: schedule lag p99 48.0 ms"
    assert why in note
    # The invalid c8 passed its objectives but is not the knee.
    assert table_rows(lines)["c4"].startswith("*")


def test_no_knee_and_unchecked(sweep_factory: Callable[..., list[SweepPoint]]) -> None:
    failing = sweep_factory("sim", ttft=lambda c: 1000.0)
    lines = render_sweep("sim", failing)
    assert not any(row.startswith("*") for row in table_rows(lines).values())
    assert any(line.startswith("knee: none - no level met every objective") for line in lines)

    unchecked = sweep_factory("sim", objectives=None)
    lines = render_sweep("sim", unchecked)
    assert all(row.rstrip().endswith("-") for row in table_rows(lines).values())
    assert any("no knee" in line for line in lines)


def test_all_passed_says_capacity_may_be_higher(
    sweep_factory: Callable[..., list[SweepPoint]],
) -> None:
    lines = render_sweep("sim", sweep_factory("sim", ttft=lambda c: 10.0))
    assert table_rows(lines)["c32"].startswith("*")
    assert "capacity may be higher" in " ".join(lines)


def test_a_knee_over_passes_names_the_levels_that_were_not_judged(
    point_factory: Callable[..., SweepPoint],
) -> None:
    """A level that errored (no verdict) or was inconclusive is no pass: "every level
    passed" beside it was false."""
    import dataclasses

    from pytest_llmslo.report.markdown import render_sweeps

    sweep = [
        point_factory(1, ttft_ms=10.0),
        dataclasses.replace(point_factory(4, ttft_ms=10.0), verdict=None),
        point_factory(8, ttft_ms=10.0, valid=False),
    ]
    text = " ".join(" ".join(render_sweep("sim", sweep)).split())
    assert "every level passed" not in text
    assert "every judged level passed; not judged: c4 no verdict, c8 inconclusive" in text
    md = "\n".join(render_sweeps(sweep))
    assert "every level passed" not in md
    assert "not judged: c4 no verdict, c8 inconclusive" in md


def test_given_knee_is_used(sweep_factory: Callable[..., list[SweepPoint]]) -> None:
    pts = sweep_factory("sim")
    forced = Knee(LoadLevel.concurrency(1), 0, 1.0, None)
    rows = table_rows(render_sweep("sim", pts, forced))
    assert rows["c1"].startswith("*") and not rows["c8"].startswith("*")
    rows = table_rows(render_sweep("sim", pts, {("sim", "test_chat"): forced}))
    assert rows["c1"].startswith("*")


def test_several_tests_render_one_block_each(
    sweep_factory: Callable[..., list[SweepPoint]],
) -> None:
    pts = sweep_factory("sim", test="test_chat") + sweep_factory("sim", test="test_rag")
    lines = render_sweep("sim", pts)
    assert "sim | test_chat | concurrency sweep, 5 levels" in lines
    assert "sim | test_rag | concurrency sweep, 5 levels" in lines
    assert sum(1 for line in lines if "knee:" in line) == 2
    with pytest.raises(ValueError, match="mapping keyed by test"):
        render_sweep("sim", pts, find_knee(pts[:5]))


def test_nothing_measured() -> None:
    assert render_sweep("sim", []) == ["sim: no load level was measured"]


def test_pareto_marks_the_frontier(sweep_factory: Callable[..., list[SweepPoint]]) -> None:
    fast = sweep_factory("fast", ttft=lambda c: 20.0 * c)
    slow = sweep_factory("slow", ttft=lambda c: 100.0 * c)
    lines = render_pareto({"fast": fast, "slow": slow})
    assert lines[0].startswith("Pareto | test_chat |")
    at_knee = lines[lines.index("  at each engine's knee:") + 2 :][:2]
    # fast's knee (c16, TTFT P99 ~ 380 ms) beats slow's (c4) on both axes.
    assert at_knee[0].split()[:3] == ["*", "fast", "c16"]
    assert at_knee[1].split()[:2] == ["slow", "c4"]
    over = next(line for line in lines if line.startswith("  over all points"))
    # The frontier is drawn from the points that met their SLO, as the SVG's and HTML's.
    assert "that met their SLO on the frontier" in over
    assert all(len(line) <= WIDTH for line in lines)


def test_pareto_engine_without_knee(sweep_factory: Callable[..., list[SweepPoint]]) -> None:
    ok = sweep_factory("ok")
    bad = sweep_factory("bad", ttft=lambda c: 2000.0)
    lines = render_pareto({"ok": ok, "bad": bad})
    assert any("bad: no knee (no level met every objective" in line for line in lines)


def test_summary_fits_100_columns_with_long_names(
    sweep_factory: Callable[..., list[SweepPoint]], point_factory: Callable[..., SweepPoint]
) -> None:
    long_engine = "dynamo-disaggregated-prefill-decode-trtllm-tp8-" + "x" * 40
    long_test = "test_" + "very_long_parametrized_name_" * 5 + "[sim-c8]"
    pts = sweep_factory(long_engine, test=long_test, levels=(1, 10000))
    pts += sweep_factory("vllm", test=long_test, levels=(1, 4, 8))
    pts.append(point_factory(2.5, ttft_ms=30.0, engine="vllm", test="rate_test", rate=True))
    pts.append(
        point_factory(
            123456, ttft_ms=90000.0, engine="vllm", test=long_test, valid=False, requests=5
        )
    )
    lines = render_summary(Results.of(pts))
    assert max(len(line) for line in lines) <= WIDTH
    assert any("Pareto |" in line for line in lines)
    assert any(line.startswith("vllm | rate_test | rate sweep, 1 level") for line in lines)


def test_summary_single_engine_has_no_pareto(
    sweep_factory: Callable[..., list[SweepPoint]],
) -> None:
    lines = render_summary(Results.of(sweep_factory("sim")))
    assert not any("Pareto" in line for line in lines)


def test_render_verdict_uses_the_verdict_table(point_factory: Callable[..., SweepPoint]) -> None:
    p = point_factory(16, ttft_ms=800.0)
    lines = render_verdict(p.verdict)  # type: ignore[arg-type]
    assert lines == p.verdict.format().splitlines()  # type: ignore[union-attr]
    assert lines[0].startswith("SLO FAILED")


def test_formatters() -> None:
    assert fmt_ms(12.345) == "12.3"
    assert fmt_ms(None) == "-"
    assert fmt_tok(1234.6) == "1235"
    assert fmt_tok(None) == "-"
    assert fmt_pct(0.995) == "99.5%"
    assert fmt_pct(None) == "-"


@pytest.mark.parametrize("width", [64, 72, 80, 87, 88, 100, 120])
def test_narrow_terminals_drop_columns_not_the_knee(
    width: int,
    sweep_factory: Callable[..., list[SweepPoint]],
    point_factory: Callable[..., SweepPoint],
) -> None:
    pts = sweep_factory("sim") + sweep_factory("vllm", ttft=lambda c: 20.0 * c)
    pts.append(point_factory(48, ttft_ms=60.0, valid=False))
    lines = render_summary(Results.of(pts), width=width)
    assert max(len(line) for line in lines) <= width
    sim = render_sweep("sim", pts, width=width)
    rows = table_rows(sim)
    assert rows["c8"].startswith("*") and rows["c48"].startswith("!")
    assert "TTFT p99" in sim[1] and "good tok/s" in sim[1]
    # Columns lose a space each below 102, then the sample count goes, then TPOT below 88.
    assert ("TPOT p50" in sim[1]) is (width >= 88)
    assert ("TTFT p50" in sim[1]) is (width >= 79)
    assert "miss" in rows["c16"] and rows["c48"].endswith("inconclusive")


def test_concurrency_and_rate_levels_of_one_test_are_two_sweeps(
    sweep_factory: Callable[..., list[SweepPoint]], point_factory: Callable[..., SweepPoint]
) -> None:
    pts = sweep_factory("sim", levels=(1, 4, 8))
    pts += [point_factory(r, ttft_ms=40.0 * r, rate=True) for r in (1.0, 2.5, 5.0)]
    lines = render_sweep("sim", pts)
    assert "sim | test_chat | concurrency sweep, 3 levels" in lines
    assert "sim | test_chat | rate sweep, 3 levels" in lines
    assert sum(1 for line in lines if "knee:" in line) == 2
    assert table_rows(lines)["r5"].startswith("*")
    assert render_summary(Results.of(pts))


def _exact_point(
    c: int, ttft50: float, ttft99: float, out: float, good: float, att: float, *, valid: bool = True
) -> SweepPoint:
    """A point with exactly these figures (no run behind it)."""

    def dist(name: str, p50: float, p99: float) -> Distribution:
        pct = dict.fromkeys(PERCENTILES, p99)
        pct[50.0] = p50
        return Distribution(name=name, count=100, mean=p50, percentiles=pct)

    level = LoadLevel.concurrency(c)
    summary = RunSummary(
        level=level,
        requests=100,
        completed=100,
        failed=0,
        failures={},
        error_rate=0.0,
        duration_s=10.0,
        distributions={
            "ttft": dist("ttft", ttft50, ttft99),
            "itl": dist("itl", 10.04, 30.0),
            "tpot": dist("tpot", 11.25, 12.0),
            "e2e": dist("e2e", 3 * ttft50, 3 * ttft99),
        },
        output_tok_s=out,
        total_tok_s=3 * out,
        req_s=out / 100,
        valid=valid,
        invalid_reasons=() if valid else ("loop lag p99 80.0 ms",),
    )
    objective = slo.Objective("ttft", 99, "<", 500.0)
    result = slo.ObjectiveResult(objective, ttft99, None, 100, 299, ttft99 < 500)
    verdict = slo.Verdict(
        results=(result,),
        passed=valid and ttft99 < 500,
        goodput_tok_s=good,
        goodput_req_s=good / 100,
        attainment=att,
        min_attainment=None,
        min_goodput_tok_s=None,
        strict=False,
        run_valid=valid,
    )
    return SweepPoint("vllm", "test_chat", level, summary, verdict)


def test_sweep_table_golden() -> None:
    pts = [
        _exact_point(1, 40.0, 50.0, 100.4, 100.4, 1.0),
        _exact_point(8, 200.0, 300.0, 700.6, 690.0, 0.985),
        _exact_point(16, 450.0, 700.0, 1200.0, 300.0, 0.25),
        _exact_point(32, 900.0, 1500.0, 1250.0, 0.0, 0.0, valid=False),
    ]
    assert render_sweep("vllm", pts) == [
        "vllm | test_chat | concurrency sweep, 4 levels",
        "     load    n TTFT p50 TTFT p99 ITL p50 TPOT p50 out tok/s good tok/s attain  verdict",
        "       c1  100     40.0     50.0    10.0     11.2       100        100 100.0%  pass",
        "*      c8  100    200.0    300.0    10.0     11.2       701        690  98.5%  pass",
        "      c16  100    450.0    700.0    10.0     11.2      1200        300  25.0%  exp. miss ttft_p99",  # noqa: E501
        "!     c32  100    900.0   1500.0    10.0     11.2      1250          0   0.0%  inconclusive",  # noqa: E501
        "* knee: c8, goodput 690 tok/s, attainment 98.5% (c16 missed above it, as expected past the knee)",  # noqa: E501
        "! inconclusive (no verdict; excluded from knee and Pareto): c32: the load generator, not the engine,",  # noqa: E501
        "    was the bottleneck: loop lag p99 80.0 ms",
    ]


def test_capacity_is_shown_under_its_sweep(
    sweep_factory: Callable[..., list[SweepPoint]],
) -> None:
    from pytest_llmslo.capacity import CapacitySearch, CapacitySpec

    search = CapacitySearch(CapacitySpec("concurrency"))
    while (level := search.next_level()) is not None:
        search.record(level, level.value <= 4)
    points = sweep_factory("sim") + sweep_factory("vllm")
    results = Results.of(points, capacities={("sim", "test_chat"): search.result})
    lines = render_summary(results, 100)
    text = "\n".join(lines)
    assert text.count("capacity: c4 (c5 failed), 6 levels: bracketed to the resolution") == 1
    assert "  probes: c1 pass, c2 pass, c4 pass, c8 FAIL, c6 FAIL, c5 FAIL" in text
    # Under the sim sweep, not the vllm one.
    assert text.index("capacity: c4") < text.index("vllm | test_chat |")
    assert all(len(line) <= 100 for line in lines)


def test_signal_columns_and_line(point_factory: Callable[..., SweepPoint]) -> None:
    import dataclasses

    p = point_factory(48, ttft_ms=100.0, gap_ms=12.5)
    sig = {
        "engines": ["vllm"], "queue_time_p99_ms": 530.0, "kv_usage_max": 0.97,
        "preemptions": 38.0, "waiting_mean": 14.0, "running_mean": 30.0,
        "ttft_p99_ms": 780.0, "client_minus_engine_ttft_p99_ms": 32.0,
    }  # fmt: skip
    p = dataclasses.replace(p, summary=dataclasses.replace(p.summary, signals=sig))
    wide = render_sweep("sim", [p], width=130)
    assert "queue p99" in wide[1] and "preempt" in wide[1]
    fields = table_rows(wide)["c48"][1:].split()
    assert fields[9:12] == ["530.0", "97%", "38"]
    text = " ".join(line.strip() for line in wide)  # the line wraps at the width
    assert (
        "c48: sim signals (vLLM-style /metrics): queue P99 530.0 ms, 14.0 waiting, "
        "30.0 running, KV 97 %, 38 preemptions, engine TTFT P99 780.0 ms (client +32.0 ms)" in text
    )
    # At 100 columns the client's figures keep their room; the line stays.
    narrow = render_sweep("sim", [p], width=100)
    assert "queue p99" not in narrow[1] and "TPOT p50" in narrow[1]
    assert any("sim signals (vLLM-style /metrics): queue" in line for line in narrow)
    # Absent signals: a note, and no columns.
    none = {
        "sources": ["http://e/metrics"],
        "note": "no engine signals: GET /metrics answered HTTP 404",
    }
    q = dataclasses.replace(p, summary=dataclasses.replace(p.summary, signals=none))
    lines = render_sweep("sim", [q], width=130)
    assert "queue p99" not in lines[1]
    assert any("c48: no engine signals: GET /metrics answered HTTP 404" in line for line in lines)
    # No /metrics, but NVML read the card: its figures are shown all the same.
    gpu = {"source": "nvml", "devices": 1, "util_pct_mean": 71.0, "power_w_mean": 412.0}
    g = dataclasses.replace(
        p,
        summary=dataclasses.replace(
            p.summary, signals={**none, "gpu": gpu, "energy_j_per_token": 0.8}
        ),
    )
    text = " ".join(line.strip() for line in render_sweep("sim", [g], width=200))
    assert (
        "c48: no engine signals: GET /metrics answered HTTP 404; GPU 71 %, 412 W, 0.80 J/token"
        in text
    )


def test_the_table_shows_the_latencies_the_gates_compared() -> None:
    # 10 % of the requests failed: the gate's TTFT P99 is +inf (failures count as the
    # worst value), and the table used to show the survivors' 50 ms next to "FAIL ttft_p99".
    from pytest_llmslo.metrics import summarize
    from pytest_llmslo.report.terminal import sweep_row_cells
    from tests.metrics_helpers import make_run, rec, steady

    recs = [steady(i, sent=0, ttft=10 + i * 5, gap=5, n=8) for i in range(9)]
    recs.append(rec(9, sent=0, chunks=(), end=300, kind="reset"))
    run = make_run(recs)
    verdict = slo.evaluate(run, [slo.ttft_p99 < 500])
    s = summarize(run)
    point = SweepPoint("sim", "t", run.level, s, verdict)
    cells = sweep_row_cells(point)
    assert cells[3] == "∞†" and verdict.results[0].observed == float("inf")
    # P50 over all ten, the failure as the highest: the gate's P50, not the survivors' 30.
    gate_p50 = slo.evaluate(run, [slo.ttft_p50 < 500]).results[0].observed
    assert cells[2] == f"{gate_p50:.1f}" and gate_p50 != s.distributions["ttft"].p(50)
    # The same after the JSON round trip (null stands for +inf there).
    again = RunSummary.from_dict(s.to_dict())
    assert sweep_row_cells(SweepPoint("sim", "t", run.level, again, verdict))[1:4] == cells[1:4]
    # Without failures: the distributions, as before.
    clean = summarize(make_run(recs[:9]))
    assert clean.with_failures is None
    shown = sweep_row_cells(SweepPoint("sim", "t", run.level, clean, None))[3]
    assert shown == f"{clean.distributions['ttft'].p(99):.1f}†"  # 9 requests for a P99


def test_signals_are_named_for_the_engine_measured() -> None:
    assert signals_name("vllm", ["vllm"]) == "vllm signals"
    assert signals_name("sim-dynamo-sglang", ["sglang"]) == "sim-dynamo-sglang signals"
    # The sim answers in vLLM's names whatever engine it imitates.
    assert signals_name("sim-sglang", ["vllm"]) == "sim-sglang signals (vLLM-style /metrics)"
    assert signals_name("trt", ["trtllm"]) == "trt signals (TRT-LLM-style /metrics)"


def _with_signals(p: SweepPoint, **sig: Any) -> SweepPoint:
    import dataclasses

    signals = {"engines": ["vllm"], "queue_time_p99_ms": 5.0, **sig}
    return dataclasses.replace(p, summary=dataclasses.replace(p.summary, signals=signals))


def test_summary_leads_with_verdicts_then_pareto(
    sweep_factory: Callable[..., list[SweepPoint]],
) -> None:
    pts = sweep_factory("fast", ttft=lambda c: 20.0 * c) + sweep_factory("slow")
    lines = render_summary(Results.of(pts))
    assert lines[0].split()[:3] == ["pass", "fast", "|"]
    assert (
        lines[0]
        == "pass  fast | test_chat: 4/5 levels passed; c32 expected miss; knee c16, 479 good tok/s"
    )
    assert lines[1].split()[1] == "slow"
    pareto = next(i for i, line in enumerate(lines) if line.startswith("Pareto |"))
    sweep = next(i for i, line in enumerate(lines) if line.startswith("fast | test_chat |"))
    assert 2 < pareto < sweep


def test_no_pareto_table_for_a_test_run_on_one_engine(
    sweep_factory: Callable[..., list[SweepPoint]],
) -> None:
    # test_chat on two engines, test_rag on one: only test_chat has a table.
    pts = sweep_factory("a") + sweep_factory("b") + sweep_factory("a", test="test_rag")
    lines = render_summary(Results.of(pts))
    assert [line for line in lines if line.startswith("Pareto |")] == [
        next(line for line in lines if line.startswith("Pareto | test_chat |"))
    ]


def test_per_level_detail_and_the_client_legend_only_with_detail(
    sweep_factory: Callable[..., list[SweepPoint]],
) -> None:
    pts = [
        _with_signals(p, ttft_p99_ms=10.0, client_minus_engine_ttft_p99_ms=3.0)
        for p in sweep_factory("a") + sweep_factory("b")
    ]
    full = render_summary(Results.of(pts), detail=True)
    assert any("a signals (vLLM-style /metrics):" in line for line in full)
    # The legend once, however many lines show the figure.
    assert sum("(client +3.0 ms)" in line for line in full) > 1
    assert full.count(CLIENT_LEGEND) == 1
    short = render_summary(Results.of(pts), detail=False)
    assert not any("signals" in line and "queue P99" in line for line in short)
    assert CLIENT_LEGEND not in short
    # A signal line and a weight line (P99 from 60 requests) a level.
    assert short[-1].startswith("(20 lines of per-level detail")
    assert short[-1].endswith("-v shows them)")
    # The sweep tables stay: one row per level.
    assert [line for line in short if line.startswith("a | test_chat")] == [
        line for line in full if line.startswith("a | test_chat")
    ]
    # No figure, no legend.
    plain = [_with_signals(p) for p in sweep_factory("a")]
    assert CLIENT_LEGEND not in render_summary(Results.of(plain))
