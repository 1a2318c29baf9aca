"""Regression comparison: tolerances, classification (regressed / improved / within
tolerance / noise), pinned constants, baselines, document pairing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from pytest_llmslo import baselines, compare, constants, metrics, slo, tolerances
from pytest_llmslo import document as jsonio
from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document import Results
from pytest_llmslo.errors import ConfigError, RegressionError
from pytest_llmslo.records import LoadLevel, RequestRecord, Run
from pytest_llmslo.sweep import SweepPoint

MS = 1_000_000

OBJECTIVES = (slo.Objective("ttft", 99, "<", 1000.0), slo.Objective("itl", 50, "<", 30.0))

CONSTANTS: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "precision": "fp8",
    "hardware": {"machine": "x86_64", "cpus": 16, "python": "3.11.9", "sim_profile": "h100"},
    "workload": {"kind": "synthetic", "path": None, "isl": 512, "osl": 16, "tokenizer": "/a"},
    "dataset": None,
    "isl": 512,
    "osl": 16,
    "slo": [o.to_dict() for o in OBJECTIVES],
    "warmup": 10,
}


def run_with(
    ttft_ms: Sequence[float],
    *,
    level: LoadLevel | None = None,
    gap_ms: float = 10.0,
    tokens: int = 16,
    failed: int = 0,
    duration_scale: float = 1.0,
) -> Run:
    """A run with one request per TTFT value, sent back to back; the first ``failed``
    requests fail. ``duration_scale`` stretches the timeline with idle time between the
    requests (the same requests, lower throughput)."""
    records = []
    t = 0.0
    for i, ttft in enumerate(ttft_ms):
        bad = i < failed
        chunks = tuple(int((t + ttft + k * gap_ms) * MS) for k in range(tokens))
        records.append(
            RequestRecord(
                index=i,
                scheduled_ns=int(t * MS),
                sent_ns=int(t * MS),
                end_ns=chunks[-1],
                chunk_ns=() if bad else chunks,
                chunk_tokens=() if bad else (1,) * tokens,
                first_content_ns=None if bad else chunks[0],
                prompt_tokens=32,
                completion_tokens=None if bad else tokens,
                status=500 if bad else 200,
                error_kind="http" if bad else None,
                error="HTTP 500" if bad else None,
            )
        )
        span = (chunks[-1] / MS) + 1.0 - t
        t += span * duration_scale
    start = records[0].sent_ns
    end = start + int((records[-1].end_ns - start) * duration_scale)
    return Run(level or LoadLevel.concurrency(1), tuple(records), start, end)


def point(
    ttft_ms: Sequence[float],
    *,
    engine: str = "vllm",
    test: str = "test_chat",
    level: LoadLevel | None = None,
    objectives: Sequence[slo.Objective] | None = OBJECTIVES,
    samples: bool = True,
    **kw: Any,
) -> SweepPoint:
    level = level or LoadLevel.concurrency(8)
    run = run_with(ttft_ms, level=level, **kw)
    objs = tuple(objectives or ())
    summary = metrics.summarize(run, objs)
    verdict = slo.evaluate(run, objs) if objectives is not None else None
    return SweepPoint(
        engine, test, level, summary, verdict, jsonio.compact_samples(run) if samples else None
    )


def as_dict(p: SweepPoint) -> dict[str, Any]:
    return jsonio.jsonable(p.to_dict())


def document(
    points: Sequence[SweepPoint], constants: dict[str, Any] | None = None, version: str = "0.9"
) -> dict[str, Any]:
    engines = {p.engine: {"version": version} for p in points}
    return build(constants or CONSTANTS, engines, points)


def build(
    constants: dict[str, Any],
    engines: dict[str, Any],
    points: Sequence[SweepPoint],
    capacities: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    caps = {k: CapacityResult.from_dict(v) for k, v in (capacities or {}).items()}
    results = Results.of(points, constants=constants, engines=engines, capacities=caps)
    return jsonio.build_document(results)


def normal(mean: float, sd: float, n: int, seed: int) -> list[float]:
    return np.abs(np.random.default_rng(seed).normal(mean, sd, n)).tolist()


def row(c: compare.Comparison, metric: str) -> compare.ComparisonRow:
    (r,) = [r for r in c.rows if r.metric == metric]
    return r


# --------------------------------------------------------------------------- tolerances


def test_parse_tolerances_relative_and_absolute():
    tols = tolerances.parse_tolerances("goodput:5%,ttft_p99:10%,itl_p50:2ms")
    assert list(tols) == ["goodput", "ttft_p99", "itl_p50"]
    assert tols["goodput"] == tolerances.Tolerance("goodput", 5.0, True)
    assert tols["ttft_p99"].relative and tols["ttft_p99"].amount == 10.0
    assert tols["itl_p50"] == tolerances.Tolerance("itl_p50", 2.0, False)
    assert tols["goodput"].higher_is_better
    assert not tols["ttft_p99"].higher_is_better


def test_parse_tolerances_units_aliases_and_separators():
    tols = tolerances.parse_tolerances(
        "ttft.p99: 0.05s; tpot_p50=500us, throughput:100tok/s, attainment:2pp, "
        "goodput_tok_s:3%, e2e_p99.9:1%, req_s:0.5req/s, error_rate:1pp"
    )
    assert tols["ttft_p99"].amount == pytest.approx(50.0)
    assert tols["tpot_p50"].amount == pytest.approx(0.5)
    assert tols["throughput"] == tolerances.Tolerance("throughput", 100.0, False)
    assert tols["attainment"].amount == pytest.approx(0.02)
    assert tols["attainment"].label == "2 pp"
    assert "goodput" in tols and "e2e_p999" in tols
    assert tols["req_s"].label == "0.5 req/s"
    assert not tols["error_rate"].higher_is_better


def test_parse_tolerances_empty_means_defaults():
    assert tolerances.parse_tolerances("") == {}
    assert tolerances.parse_tolerances(None) == {}
    assert tolerances.parse_tolerances(" , ") == {}
    defaults = tolerances.parse_tolerances(tolerances.DEFAULT_TOLERANCES)
    assert {"goodput", "ttft_p99", "itl_p50"} <= set(defaults)


@pytest.mark.parametrize(
    "text, match",
    [
        ("goodput", r"'goodput'.*METRIC:VALUE.*Valid metrics: goodput"),
        ("latency:5%", r"Unknown metric 'latency'.*Valid metrics:.*ttft"),
        ("ttft_p75:5%", r"Unknown metric 'ttft_p75'"),
        ("goodput:5ms", r"does not fit goodput.*%, tok/s"),
        ("ttft_p99:5", r"'ttft_p99:5' has a unit.*%, ms, s, us"),
        ("ttft_p99:-5%", r"'ttft_p99:-5%'"),
        ("ttft_p99:fast", r"value 'fast'"),
        ("goodput:5%,goodput:3%", r"goodput given twice"),
        ("attainment:2tok/s", r"does not fit attainment.*pp"),
    ],
)
def test_parse_tolerances_errors_name_the_part(text, match):
    with pytest.raises(ConfigError, match=match):
        tolerances.parse_tolerances(text)


def test_tolerance_allowed():
    assert tolerances.Tolerance("ttft_p99", 10.0, True).allowed(200.0) == pytest.approx(20.0)
    assert tolerances.Tolerance("ttft_p99", 3.0, False).allowed(200.0) == 3.0
    assert tolerances.Tolerance("goodput", 5.0, True).label == "5%"
    assert tolerances.Tolerance("itl_p50", 2.0, False).label == "2 ms"


# --------------------------------------------------------------------------- classification


def test_regressed_latency_beyond_tolerance_and_noise():
    old = point(normal(200, 20, 400, 1))
    new = point(normal(260, 20, 400, 2))
    c = compare.compare_points(as_dict(old), as_dict(new), "ttft_p50:10%")
    r = row(c, "ttft_p50")
    assert r.status == "regressed"
    assert r.old == pytest.approx(old.summary.metric("ttft", 50))
    assert r.new == pytest.approx(new.summary.metric("ttft", 50))
    assert r.delta == pytest.approx(r.new - r.old)
    assert r.delta_pct == pytest.approx(100 * (r.new - r.old) / r.old)
    assert r.noise is not None and r.noise.noise is False
    assert r.noise.method == "order-statistic"
    assert r.noise.p_value < 1e-10
    assert c.regressed and c.status == "regressed"


def test_improved_latency():
    old = point(normal(260, 20, 400, 3))
    new = point(normal(200, 20, 400, 4))
    c = compare.compare_points(as_dict(old), as_dict(new), "ttft_p50:10%")
    assert row(c, "ttft_p50").status == "improved"
    assert not c.regressed and c.improved and c.status == "improved"


def test_within_tolerance():
    old = point(normal(200, 20, 400, 5))
    new = point(normal(205, 20, 400, 6))
    c = compare.compare_points(as_dict(old), as_dict(new), "ttft_p50:10%,ttft_p99:50ms")
    assert row(c, "ttft_p50").status == "within tolerance"
    assert row(c, "ttft_p99").status == "within tolerance"
    assert row(c, "ttft_p50").noise is None  # only judged beyond the tolerance
    assert c.status == "unchanged"


def test_beyond_tolerance_but_within_noise_is_noise_not_a_failure():
    # 60 requests: a P99 cannot be bounded from above, so no rise of it can be shown.
    old = point(normal(200, 40, 60, 7))
    new = point([v * 1.3 for v in normal(200, 40, 60, 8)])
    c = compare.compare_points(as_dict(old), as_dict(new), "ttft_p99:10%")
    r = row(c, "ttft_p99")
    assert r.delta_pct is not None and r.delta_pct > 10
    assert r.status == "noise"
    assert r.noise is not None and r.noise.noise is True
    assert "samples a side" in r.noise.note
    assert not c.regressed
    text = c.format()
    assert "ttft_p99" in text and "within noise" in text


def test_noisy_median_is_noise():
    # A wide distribution and few requests: a 15 % higher median is not distinguishable.
    old = point(normal(200, 120, 30, 9))
    new = point([v * 1.15 for v in normal(200, 120, 30, 10)])
    c = compare.compare_points(as_dict(old), as_dict(new), "ttft_p50:5%")
    assert row(c, "ttft_p50").status == "noise"


def test_mean_uses_a_seeded_bootstrap():
    old = point(normal(200, 20, 300, 11))
    new = point(normal(240, 20, 300, 12))
    a = compare.compare_points(as_dict(old), as_dict(new), "ttft_mean:5%")
    b = compare.compare_points(as_dict(old), as_dict(new), "ttft_mean:5%")
    r = row(a, "ttft_mean")
    assert r.status == "regressed"
    assert r.noise is not None and r.noise.method == "bootstrap"
    assert r.noise.low > 0
    assert (r.noise.low, r.noise.high) == (
        row(b, "ttft_mean").noise.low,
        row(b, "ttft_mean").noise.high,
    )


def test_without_samples_the_tolerance_decides():
    old = point(normal(200, 40, 60, 7), samples=False)
    new = point([v * 1.3 for v in normal(200, 40, 60, 8)], samples=False)
    c = compare.compare_points(as_dict(old), as_dict(new), "ttft_p99:10%")
    r = row(c, "ttft_p99")
    assert r.status == "regressed"
    assert r.noise is not None and r.noise.noise is None


def test_goodput_regression_has_no_noise_test():
    ttfts = [100.0] * 100
    old = point(ttfts)
    new = point(ttfts, duration_scale=1.25)  # same requests over a longer window
    c = compare.compare_points(as_dict(old), as_dict(new), "goodput:5%,throughput:30%")
    g = row(c, "goodput")
    assert g.status == "regressed"
    assert g.new == pytest.approx(g.old / 1.25, rel=1e-6)
    assert g.noise is not None and g.noise.method == "none"
    assert row(c, "throughput").status == "within tolerance"
    # Higher-is-better: the same change the other way is an improvement.
    back = compare.compare_points(as_dict(new), as_dict(old), "goodput:5%")
    assert row(back, "goodput").status == "improved"


def test_absolute_tolerance():
    ttfts = [100.0] * 100
    old, new = point(ttfts), point(ttfts, duration_scale=1.25)
    loss = row(compare.compare_points(as_dict(old), as_dict(new), "goodput:5%"), "goodput")
    allowed = -loss.delta + 1.0
    c = compare.compare_points(as_dict(old), as_dict(new), f"goodput:{allowed}tok/s")
    assert row(c, "goodput").status == "within tolerance"


def test_attainment_judged_by_a_proportion_test():
    ttfts = [100.0] * 200
    old = point(ttfts, failed=4)  # 98 % good
    new = point(ttfts, failed=10)  # 95 % good: -3 pp, beyond 1 pp, p ~ 0.11
    c = compare.compare_points(as_dict(old), as_dict(new), "attainment:1pp")
    r = row(c, "attainment")
    assert r.delta == pytest.approx(-0.03)
    assert r.status == "noise"
    assert r.noise is not None and r.noise.method == "two-proportion"
    worse = point(ttfts, failed=60)  # 70 % good
    c2 = compare.compare_points(as_dict(old), as_dict(worse), "attainment:1pp")
    assert row(c2, "attainment").status == "regressed"


def test_missing_value_is_na_and_never_fails():
    old = point([100.0] * 50, objectives=None)
    new = point([100.0] * 50, objectives=None)
    c = compare.compare_points(as_dict(old), as_dict(new), "goodput:5%,ttft_p50:10%")
    assert row(c, "goodput").status == "n/a"
    assert row(c, "ttft_p50").status == "within tolerance"
    assert not c.regressed
    assert "no value on one side" in c.format()


def test_default_tolerances_when_none_given():
    old, new = point([100.0] * 50), point([100.0] * 50)
    c = compare.compare_points(as_dict(old), as_dict(new))
    assert [r.metric for r in c.rows] == list(
        tolerances.parse_tolerances(tolerances.DEFAULT_TOLERANCES)
    )
    c2 = compare.compare_points(as_dict(old), as_dict(new), {})
    assert len(c2.rows) == len(c.rows)


def test_exact_tolerance_is_within():
    old = point([100.0] * 50, samples=False)
    new = point([110.0] * 50, samples=False)
    c = compare.compare_points(as_dict(old), as_dict(new), "ttft_p50:10ms")
    assert row(c, "ttft_p50").status == "within tolerance"


# --------------------------------------------------------------------------- not comparable


def test_different_levels_are_not_compared():
    old = point([100.0] * 50, level=LoadLevel.concurrency(8))
    new = point([200.0] * 50, level=LoadLevel.concurrency(16))
    c = compare.compare_points(as_dict(old), as_dict(new), "ttft_p50:10%")
    assert not c.comparable and not c.regressed and c.rows == ()
    assert "load level: c8 (baseline) != c16 (new)" in c.problems
    assert "NOT COMPARABLE" in c.format()


def test_different_objectives_are_not_compared():
    old = point([100.0] * 50)
    new = point([100.0] * 50, objectives=(slo.Objective("ttft", 99, "<", 200.0),))
    c = compare.compare_points(as_dict(old), as_dict(new), "goodput:5%")
    assert not c.comparable
    assert c.problems[0].startswith("slo: ")


def test_invalid_client_run_is_not_compared():
    old = as_dict(point([100.0] * 50))
    new = as_dict(point([300.0] * 50))
    new["summary"]["valid"] = False
    new["summary"]["invalid_reasons"] = ["schedule lag p99 48 ms > 10 ms"]
    c = compare.compare_points(old, new, "ttft_p50:10%")
    assert not c.comparable and not c.regressed
    assert "the new run is invalid" in c.problems[0]
    assert "schedule lag" in c.problems[0]


# --------------------------------------------------------------------------- format / raise


def test_format_has_old_and_new_for_an_assertion_message():
    old = point(normal(200, 20, 400, 1))
    new = point(normal(260, 20, 400, 2))
    c = compare.compare_points(
        as_dict(old), as_dict(new), "ttft_p50:10%,itl_p50:2ms", versions=("0.9.2", "0.10.0")
    )
    text = c.format()
    lines = text.splitlines()
    assert lines[0] == "vllm | test_chat | c8: REGRESSED vs baseline (engine 0.9.2 -> 0.10.0)"
    assert "baseline" in lines[1] and "new" in lines[1] and "tolerance" in lines[1]
    assert f"{row(c, 'ttft_p50').old:.1f} ms" in text
    assert f"{row(c, 'ttft_p50').new:.1f} ms" in text
    assert "REGRESSED" in text and "within tolerance" in text
    assert "beyond the tolerance 10%" in text
    assert "rule:" in text
    with pytest.raises(RegressionError) as exc:
        compare.assert_no_regression(c)
    assert isinstance(exc.value, AssertionError)
    assert str(exc.value) == text
    assert exc.value.verdict is c


def test_no_regression_does_not_raise():
    p = point([100.0] * 50)
    compare.assert_no_regression(compare.compare_points(as_dict(p), as_dict(p)))


def test_properties_and_to_dict():
    old = point(normal(200, 20, 400, 1))
    new = point(normal(260, 20, 400, 2))
    c = compare.compare_points(as_dict(old), as_dict(new), "ttft_p50:10%")
    props = dict(c.properties())
    assert props["llmslo.compare.status"] == "regressed"
    assert props["llmslo.compare.ttft_p50.status"] == "regressed"
    assert float(props["llmslo.compare.ttft_p50.old"]) == pytest.approx(
        row(c, "ttft_p50").old, rel=1e-5
    )
    d = c.to_dict()
    assert d["rows"][0]["noise"]["method"] == "order-statistic"
    assert d["level"]["value"] == 8.0


# --------------------------------------------------------------------------- constants


def test_identical_constants_match():
    assert constants.constants_mismatch(CONSTANTS, dict(CONSTANTS)) == []


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("model", "llama-3.1-70b", 'model: "llama-3.1-8b" (baseline) != "llama-3.1-70b" (new)'),
        ("precision", "bf16", 'precision: "fp8" (baseline) != "bf16" (new)'),
        ("isl", 1024, "isl: 512 (baseline) != 1024 (new)"),
        ("osl", 32, "osl: 16 (baseline) != 32 (new)"),
        ("dataset", "sharegpt.json", 'dataset: null (baseline) != "sharegpt.json" (new)'),
    ],
)
def test_each_pinned_constant_is_named(key, value, expected):
    assert constants.constants_mismatch(CONSTANTS, {**CONSTANTS, key: value}) == [expected]


def test_nested_constants_name_the_leaf():
    new = {**CONSTANTS, "workload": {**CONSTANTS["workload"], "isl": 1024}}
    new["hardware"] = {**CONSTANTS["hardware"], "sim_profile": "a100"}
    assert constants.constants_mismatch(CONSTANTS, new) == [
        'hardware.sim_profile: "h100" (baseline) != "a100" (new)',
        "workload.isl: 512 (baseline) != 1024 (new)",
    ]


def test_constants_ignore_machine_local_details():
    new = {**CONSTANTS, "workload": {**CONSTANTS["workload"], "tokenizer": "/elsewhere"}}
    new["hardware"] = {**CONSTANTS["hardware"], "python": "3.12.1"}
    new["warmup"] = 200  # not a pinned constant
    assert constants.constants_mismatch(CONSTANTS, new) == []


def test_dataset_paths_compare_by_file_name():
    a = {**CONSTANTS, "dataset": "/home/a/sharegpt.json"}
    a["workload"] = {**CONSTANTS["workload"], "path": "/home/a/sharegpt.json"}
    b = {**CONSTANTS, "dataset": "/ci/data/sharegpt.json"}
    b["workload"] = {**CONSTANTS["workload"], "path": "/ci/data/sharegpt.json"}
    assert constants.constants_mismatch(a, b) == []
    c = {**b, "dataset": "/ci/data/other.json"}
    assert constants.constants_mismatch(a, c)[0].startswith("dataset: ")


def test_slo_compared_by_objectives_in_any_spelling():
    texts = {**CONSTANTS, "slo": "itl_p50<30, ttft_p99 < 1000"}
    labels = {**CONSTANTS, "slo": [o.label for o in reversed(OBJECTIVES)]}
    assert constants.constants_mismatch(CONSTANTS, texts) == []
    assert constants.constants_mismatch(texts, labels) == []
    other = {**CONSTANTS, "slo": "ttft_p99<500,itl_p50<30"}
    (diff,) = constants.constants_mismatch(CONSTANTS, other)
    assert diff.startswith("slo: ") and "500" in diff


def test_constant_recorded_on_one_side_differs():
    new = {k: v for k, v in CONSTANTS.items() if k != "precision"}
    assert constants.constants_mismatch(CONSTANTS, new) == [
        'precision: "fp8" (baseline) != (not recorded) (new)'
    ]


def test_constants_for_test_applies_per_test_settings():
    consts = {**CONSTANTS, "tests": {"test_long": {"isl": 4096, "levels": ["c1"]}}}
    merged = constants.constants_for_test(consts, "test_long")
    assert merged["isl"] == 4096 and "tests" not in merged and "levels" not in merged
    assert constants.constants_for_test(consts, "test_other")["isl"] == 512


# --------------------------------------------------------------------------- find_point


def test_find_point_by_level_dict_and_label():
    pts = [point([100.0] * 30, level=LoadLevel.concurrency(c)) for c in (1, 4, 8)]
    doc = document(pts)
    assert (
        compare.find_point(doc, "test_chat", "vllm", LoadLevel.concurrency(4))["level"]["value"]
        == 4
    )
    assert compare.find_point(doc, "test_chat", "vllm", {"mode": "concurrency", "value": 8})
    assert compare.find_point(doc, "test_chat", "vllm", "c1")["level"]["value"] == 1
    assert compare.find_point(doc, "test_chat", "vllm", "c16") is None
    assert compare.find_point(doc, "test_other", "vllm", "c1") is None
    assert compare.find_point(doc, "test_chat", "sglang", "c1") is None


def test_find_point_rate_levels_and_repeats():
    first = point([100.0] * 30, level=LoadLevel.rate(2.5))
    again = point([150.0] * 30, level=LoadLevel.rate(2.5))
    doc = document([first, again])
    found = compare.find_point(doc, "test_chat", "vllm", "r2.5")
    assert found is not None
    assert compare.metric_value(found, "ttft_p50") == pytest.approx(150.0, abs=0.5)
    assert compare.find_point(doc, "test_chat", "vllm", LoadLevel.rate(2.5, "constant")) is None
    with pytest.raises(ValueError, match="not a load level label"):
        compare.find_point(doc, "test_chat", "vllm", "x3")


# --------------------------------------------------------------------------- baselines


def test_save_and_load_baseline(tmp_path):
    doc = document([point([100.0] * 30)])
    root = tmp_path / ".llmslo" / "baselines"
    path = baselines.save_baseline(doc, "vllm-0.9", root=root)
    assert path == root / "vllm-0.9.json"
    assert baselines.list_baselines(root) == ["vllm-0.9"]
    assert baselines.load_baseline("vllm-0.9", root=root) == jsonio.read_document(path)
    assert baselines.load_baseline(str(path), root=tmp_path / "elsewhere")["points"]
    assert baselines.load_baseline(path)["schema"] == jsonio.SCHEMA


@pytest.mark.parametrize("name", ["../x", "a/b", "x.json", "", ".hidden", "a b"])
def test_baseline_names_are_checked(tmp_path, name):
    with pytest.raises(ConfigError, match="not a valid baseline name"):
        baselines.save_baseline(document([point([100.0] * 30)]), name, root=tmp_path)


def test_missing_baseline_lists_the_saved_ones(tmp_path):
    baselines.save_baseline(document([point([100.0] * 30)]), "main", root=tmp_path)
    with pytest.raises(ConfigError, match=r"no baseline named 'nightly'.*saved baselines: main"):
        baselines.load_baseline("nightly", root=tmp_path)
    with pytest.raises(ConfigError, match="no baseline is saved there"):
        baselines.load_baseline("nightly", root=tmp_path / "empty")


def test_malformed_baseline_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(jsonio.DocumentError, match="not valid JSON"):
        baselines.load_baseline(bad)
    with pytest.raises(jsonio.DocumentError, match="no such file"):
        baselines.load_baseline(tmp_path / "missing.json")


# --------------------------------------------------------------------------- documents


def sweep(
    engine: str, scale: float, levels: Sequence[int] = (1, 4, 8), seed: int = 0
) -> list[SweepPoint]:
    return [
        point(
            [v * scale for v in normal(100.0 * c, 10.0 * c, 400, seed + c)],
            engine=engine,
            level=LoadLevel.concurrency(c),
        )
        for c in levels
    ]


def test_compare_documents_pairs_points():
    old = document(sweep("vllm", 1.0, (1, 4, 8)), version="0.9")
    new = document(sweep("vllm", 1.3, (1, 4, 16), seed=100), version="0.10")
    dc = compare.compare_documents(old, new, "ttft_p50:10%")
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
    old = document(sweep("vllm-0.9", 1.0, (1,)))
    new = document(sweep("vllm-0.10", 1.0, (1,)))
    dc = compare.compare_documents(old, new, "ttft_p50:10%")
    assert len(dc.comparisons) == 1 and not dc.regressed
    assert "paired by position" in dc.notes[0]
    explicit = compare.compare_documents(
        old, new, "ttft_p50:10%", engines={"vllm-0.9": "vllm-0.10"}
    )
    assert len(explicit.comparisons) == 1 and not explicit.notes


def test_compare_documents_with_different_constants_compares_nothing():
    old = document(sweep("vllm", 1.0, (1,)))
    new = document(sweep("vllm", 2.0, (1,)), {**CONSTANTS, "model": "other"})
    dc = compare.compare_documents(old, new, "ttft_p50:10%")
    assert not dc.comparable and dc.constants_differ and not dc.regressed
    assert dc.comparisons == ()
    assert dc.mismatch == ('model: "llama-3.1-8b" (baseline) != "other" (new)',)
    assert "NOT COMPARABLE" in dc.format() and "model:" in dc.format()


def test_compare_documents_per_test_constants():
    a = sweep("vllm", 1.0, (1,))
    b = sweep("vllm", 2.0, (1,))
    long_a = [point([100.0] * 50, test="test_long")]
    long_b = [point([300.0] * 50, test="test_long")]
    old = document(a + long_a, {**CONSTANTS, "tests": {"test_long": {"isl": 4096}}})
    new = document(b + long_b, {**CONSTANTS, "tests": {"test_long": {"isl": 8192}}})
    dc = compare.compare_documents(old, new, "ttft_p50:10%")
    by_test = {c.test: c for c in dc.comparisons}
    assert by_test["test_chat"].regressed
    assert by_test["test_long"].constants_differ and not by_test["test_long"].regressed
    assert by_test["test_long"].problems == ("isl: 4096 (baseline) != 8192 (new)",)
    assert dc.comparable and dc.constants_differ


def test_metric_value_prefers_the_verdict_for_goodput():
    d = as_dict(point([100.0] * 50))
    d["verdict"]["goodput_tok_s"] = 123.0
    d["summary"]["goodput_tok_s"] = 456.0
    assert compare.metric_value(d, "goodput") == 123.0
    d["verdict"] = None
    assert compare.metric_value(d, "goodput") == 456.0
    assert compare.metric_value(d, "ttft_p999") is not None
    d["summary"]["distributions"]["ttft"]["count"] = 0
    assert compare.metric_value(d, "ttft_p50") is None


def test_few_samples_are_judged_too():
    # 12 requests (a tiny CI session): a 2 % change of the median or the mean is noise.
    old = point(normal(200, 20, 12, 31))
    new = point([v * 1.02 for v in normal(200, 20, 12, 31)])
    c = compare.compare_points(as_dict(old), as_dict(new), "ttft_p50:0.1%,ttft_mean:0.1%")
    p50, mean = row(c, "ttft_p50"), row(c, "ttft_mean")
    assert p50.status == "noise" and p50.noise.method == "order-statistic"
    assert mean.status == "noise" and mean.noise.method == "rank-test"
    assert "rank test p=" in c.format()
    # A large shift is shown even with 12 samples.
    far = point([v * 3 for v in normal(200, 20, 12, 32)])
    c2 = compare.compare_points(as_dict(old), as_dict(far), "ttft_p50:10%,ttft_mean:10%")
    assert row(c2, "ttft_p50").status == "regressed"
    assert row(c2, "ttft_mean").status == "regressed"


# --------------------------------------------------------------------------- capacity


def capacity(value: int | None, probes: Sequence[tuple[int, bool]], mode: str = "concurrency"):
    history = tuple((LoadLevel.concurrency(c), passed) for c, passed in probes)
    failed = [c for c, passed in probes if not passed]
    return CapacityResult(
        mode=mode,  # type: ignore[arg-type]
        capacity=None if value is None else LoadLevel.concurrency(value),
        lower=None if value is None else float(value),
        upper=float(min(failed)) if failed else None,
        probes=len(probes),
        history=history,
        done=True,
        reason="bracketed to the resolution",
    ).to_dict()


CAP8 = [(1, True), (2, True), (4, True), (8, True), (16, False), (12, False), (10, False)]
CAP6 = [(1, True), (2, True), (4, True), (8, False), (6, True), (7, False)]
CAP7 = [(1, True), (2, True), (4, True), (8, False), (6, True), (7, True)]


def test_capacity_drop_beyond_the_default_tolerance_regresses():
    at8 = as_dict(point([100.0] * 30, level=LoadLevel.concurrency(8)))
    at6 = as_dict(point([100.0] * 30, level=LoadLevel.concurrency(6)))
    c = compare.compare_capacity(
        capacity(8, CAP8), capacity(6, CAP6), at8, at6, engine="sim", test="t"
    )
    cap = row(c, "capacity")
    assert (cap.old, cap.new, cap.status) == (8.0, 6.0, "regressed")
    assert cap.tolerance.label == "15%" and cap.delta_pct == pytest.approx(-25.0)
    assert c.regressed and c.comparable and c.level == LoadLevel.concurrency(6)
    # The points at c8 and c6 are other loads: only the capacity is compared, and said so.
    assert [r.metric for r in c.rows] == ["capacity"]
    assert c.notes == (
        "capacity c8 (baseline) vs c6 (new): the points at different loads are not "
        "compared, the capacity is",
    )
    text = c.format()
    assert "REGRESSED" in text.splitlines()[0] and "capacity c8 (baseline) vs c6" in text
    props = dict(c.properties())
    assert props["llmslo.compare.capacity.old"] == "8"
    assert props["llmslo.compare.capacity.new"] == "6"
    assert props["llmslo.compare.capacity.status"] == "regressed"
    # Without points, the capacity alone.
    alone = compare.compare_capacity(capacity(8, CAP8), capacity(6, CAP6))
    assert alone.regressed and alone.notes == ()


def test_capacity_within_tolerance_and_given_tolerance():
    c = compare.compare_capacity(capacity(8, CAP8), capacity(7, CAP7))
    assert row(c, "capacity").status == "within tolerance" and not c.regressed
    wide = compare.compare_capacity(
        capacity(8, CAP8), capacity(6, CAP6), None, None, "capacity:30%"
    )
    assert row(wide, "capacity").status == "within tolerance"
    tight = compare.compare_capacity(
        capacity(8, CAP8), capacity(7, CAP7), None, None, "capacity:0%"
    )
    assert row(tight, "capacity").status == "regressed"
    better = compare.compare_capacity(capacity(6, CAP6), capacity(8, CAP8))
    assert row(better, "capacity").status == "improved"


def test_capacity_none_passed_is_zero():
    none = capacity(None, [(1, False)])
    c = compare.compare_capacity(capacity(8, CAP8), none)
    assert row(c, "capacity").new == 0.0 and c.regressed
    both = compare.compare_capacity(none, none)
    assert row(both, "capacity").status == "within tolerance"


def test_capacity_at_the_same_level_compares_the_points_too():
    old = point(normal(200, 20, 400, 1))  # c8
    new = point(normal(260, 20, 400, 2))
    c = compare.compare_capacity(
        capacity(8, CAP8), capacity(8, CAP8), as_dict(old), as_dict(new), "ttft_p50:10%"
    )
    assert [r.metric for r in c.rows] == ["capacity", "ttft_p50"]
    assert row(c, "capacity").status == "within tolerance"
    assert row(c, "ttft_p50").status == "regressed" and c.regressed
    assert c.level == LoadLevel.concurrency(8)


def test_capacity_searches_of_other_modes_are_not_compared():
    rate = {**capacity(8, CAP8), "mode": "rate"}
    c = compare.compare_capacity(capacity(8, CAP8), rate)
    assert not c.comparable and "capacity search mode" in c.problems[0]


def test_capacity_tolerance_parses_and_is_not_a_point_metric():
    tols = tolerances.parse_tolerances("capacity:10%,ttft_p50:10%")
    assert tols["capacity"].higher_is_better and tols["capacity"].label == "10%"
    with pytest.raises(ConfigError, match="does not fit capacity"):
        tolerances.parse_tolerances("capacity:2ms")
    p = as_dict(point([100.0] * 30))
    c = compare.compare_points(p, p, tols)
    assert [r.metric for r in c.rows] == ["ttft_p50"]


def test_find_capacity_and_its_point():
    pts = sweep("vllm", 1.0, (1, 4, 8))
    doc = build(CONSTANTS, {"vllm": {}}, pts, capacities={("vllm", "test_chat"): capacity(8, CAP8)})
    cap = compare.find_capacity(doc, "test_chat", "vllm", "concurrency")
    assert cap is not None and cap["capacity"]["value"] == 8.0
    assert compare.find_capacity(doc, "test_chat", "vllm", "rate") is None
    assert compare.find_capacity(doc, "test_other", "vllm") is None
    assert compare.capacity_point(doc, cap) == LoadLevel.concurrency(8)
    # No level passed: the test was judged by its last probe.
    assert compare.capacity_point(doc, capacity(None, [(1, False)])) == LoadLevel.concurrency(1)


def test_compare_documents_compares_capacities():
    old_pts, new_pts = sweep("vllm", 1.0, (1, 4, 8)), sweep("vllm", 1.0, (1, 4))
    key = ("vllm", "test_chat")
    old = build(CONSTANTS, {"vllm": {}}, old_pts, capacities={key: capacity(8, CAP8)})
    cap4 = capacity(4, [(1, True), (2, True), (4, True), (8, False), (6, False), (5, False)])
    new = build(CONSTANTS, {"vllm": {}}, new_pts, capacities={key: cap4})
    dc = compare.compare_documents(old, new, "ttft_p50:1000%")
    caps = [c for c in dc.comparisons if any(r.metric == "capacity" for r in c.rows)]
    assert len(caps) == 1 and caps[0].regressed and dc.regressed
    assert "capacity" in dc.format()


# --------------------------------------------------------------------------- partial runs


def test_interrupted_points_are_not_compared():
    p = as_dict(point([100.0] * 30))
    cut = {**p, "interrupted": True}
    c = compare.compare_points(p, cut, "ttft_p50:10%")
    assert not c.comparable
    assert c.problems == ("the new run was interrupted before its load finished",)


def test_partial_document_never_replaces_a_baseline(tmp_path):
    full = document([point([100.0] * 30)])
    path = baselines.save_baseline(full, "main", root=tmp_path)
    before = path.read_bytes()
    partial = {**document([point([300.0] * 5)]), "complete": False}
    saved = baselines.save_baseline(partial, "main", root=tmp_path)
    assert saved == tmp_path / "main.partial.json"
    assert path.read_bytes() == before
    assert baselines.load_baseline("main.partial", root=tmp_path)["complete"] is False
    assert baselines.partial_name("main.partial") == "main.partial"


def test_compare_documents_warns_about_an_incomplete_baseline():
    old = {**document(sweep("vllm", 1.0, (1,))), "complete": False}
    new = document(sweep("vllm", 1.0, (1,)))
    dc = compare.compare_documents(old, new, "ttft_p50:100%")
    assert any("baseline is incomplete" in n for n in dc.notes)
    assert "baseline is incomplete (its session was interrupted)" in dc.format()


# --------------------------------------------------------------------------- per engine


def gpu_meta(kind: str = "vllm", gpus: Any = None, **kw: Any) -> dict[str, Any]:
    listed = [
        "NVIDIA H100 80GB HBM3, 81559 MiB, 535.104.05",
        "NVIDIA H100 80GB HBM3, 81559 MiB, 535.104.05",
        "NVIDIA A100-SXM4-40GB, 40960 MiB, 535.104.05",
    ]
    return {"kind": kind, "gpus": gpus, "model": "m", "hardware": {"cpus": 8, "gpus": listed}, **kw}


def test_engine_gpus_from_metadata():
    h100 = "NVIDIA H100 80GB HBM3, 81559 MiB"
    a100 = "NVIDIA A100-SXM4-40GB, 40960 MiB"
    # The driver version is left out; the list is sorted.
    assert constants.engine_gpus(gpu_meta()) == [a100, h100, h100]
    assert constants.engine_gpus(gpu_meta(gpus="all")) == [a100, h100, h100]
    assert constants.engine_gpus(gpu_meta(gpus="2")) == [h100, h100]
    assert constants.engine_gpus(gpu_meta(gpus="device=2")) == [a100]
    assert constants.engine_gpus(gpu_meta(gpus="0,2")) == [a100, h100]
    assert constants.engine_gpus(gpu_meta(gpus="none")) == []
    assert constants.engine_gpus({"kind": "vllm"}) is None
    # An external engine on another host: this machine's GPUs are not its.
    remote = gpu_meta("external", url="http://10.0.0.5:8000")
    assert constants.engine_gpus(remote) is None
    local = gpu_meta("external", url="http://127.0.0.1:8000")
    assert constants.engine_gpus(local) == [a100, h100, h100]


def test_engine_constants():
    c = constants.engine_constants(gpu_meta(gpus="2", quantization="fp8"))
    assert c == {
        "model": "m",
        "precision": "fp8",
        "hardware": {"gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB"] * 2},
    }
    sim = {"kind": "sim", "model": "llmslo-sim", "units": [{"argv": ["py", "--profile", "p1"]}]}
    assert constants.engine_constants(sim)["hardware"] == {"sim_profile": "p1"}
    assert constants.engine_constants(sim, sim_profile="p2")["hardware"] == {"sim_profile": "p2"}
    assert constants.engine_constants(sim, model="M", precision="bf16")["model"] == "M"
    # The client machine is no part of it.
    assert "cpus" not in json_text(c)


def json_text(value: Any) -> str:
    import json

    return json.dumps(value)


def per_engine_constants(**engines: dict[str, Any]) -> dict[str, Any]:
    base = {k: v for k, v in CONSTANTS.items() if k not in constants.ENGINE_CONSTANTS}
    return {
        **base,
        "model": ",".join(sorted({e["model"] for e in engines.values()})),
        "hardware": {n: e["hardware"] for n, e in engines.items()},
        "client": {"machine": "x86_64", "cpus": 8, "python": "3.11.9"},
        "per_engine": engines,
    }


H100 = {"model": "llama", "precision": "fp8", "hardware": {"gpus": ["NVIDIA H100"]}}
A100 = {"model": "llama", "precision": "bf16", "hardware": {"gpus": ["NVIDIA A100"]}}


def test_constants_for_test_takes_the_engines_own():
    consts = per_engine_constants(vllm=H100, sglang=A100)
    assert constants.constants_for_test(consts, "t", "sglang")["precision"] == "bf16"
    assert constants.constants_for_test(consts, "t", "vllm")["hardware"] == H100["hardware"]
    shared = constants.constants_for_test(consts, "t")
    assert not set(constants.ENGINE_CONSTANTS) & set(shared)
    assert "client" not in shared and "per_engine" not in shared


def test_one_engine_pairs_with_its_points_in_a_baseline_of_several():
    old_pts = sweep("vllm", 1.0, (1,)) + sweep("sglang", 1.0, (1,))
    old = document(old_pts, per_engine_constants(vllm=H100, sglang=A100))
    new = document(sweep("vllm", 1.0, (1,)), per_engine_constants(vllm=H100))
    dc = compare.compare_documents(old, new, "ttft_p50:100%")
    assert dc.comparable and not dc.constants_differ
    assert [c.engine for c in dc.comparisons] == ["vllm"] and dc.comparisons[0].comparable
    assert dc.only_old == ("sglang | test_chat | c1",)


def test_other_gpus_are_not_compared_another_client_is():
    old = document(sweep("vllm", 1.0, (1,)), per_engine_constants(vllm=H100))
    on_a100 = {**H100, "hardware": {"gpus": ["NVIDIA A100"]}}
    new = document(sweep("vllm", 1.0, (1,)), per_engine_constants(vllm=on_a100))
    dc = compare.compare_documents(old, new, "ttft_p50:100%")
    assert not dc.comparable
    assert dc.mismatch == ('hardware.gpus: ["NVIDIA H100"] (baseline) != ["NVIDIA A100"] (new)',)
    laptop = per_engine_constants(vllm=H100)
    laptop["client"] = {"machine": "arm64", "cpus": 2, "python": "3.12.0"}
    dc = compare.compare_documents(old, document(sweep("vllm", 1.0, (1,)), laptop), "ttft_p50:100%")
    assert dc.comparable and len(dc.comparisons) == 1 and dc.comparisons[0].comparable


def test_properties_leave_out_undefined_values():
    p = as_dict(point([100.0] * 30))
    q = {**p, "verdict": None, "summary": {**p["summary"], "goodput_tok_s": None}}
    c = compare.compare_points(p, q, "goodput:5%")
    props = dict(c.properties())
    assert props["llmslo.compare.goodput.status"] == "n/a"
    assert "llmslo.compare.goodput.new" in props or "llmslo.compare.goodput.old" in props
    assert all(v != "" for v in props.values())
