"""Each engine's /metrics, parsed and mapped to the common signals over a level."""

from __future__ import annotations

import pytest
from expositions import dynamo_frontend, dynamo_worker, sglang, trtllm, vllm

from pytest_llmslo.signals.exposition import ExpositionError, Snapshot, parse, quantile
from pytest_llmslo.signals.levelsignals import MIN_GAUGE_SAMPLES, LevelSignals, compute


def _level(before: str, during: list[str], after: str) -> LevelSignals:
    """The level's signals, each scrape of ``during`` taken three times (the gauges need
    ``MIN_GAUGE_SAMPLES``), spread over the 10 s window."""
    b, a = parse(before), parse(after)
    d = [parse(t) for t in during for _ in range(MIN_GAUGE_SAMPLES)]
    for i, snap in enumerate(d):
        snap.t = 10.0 * (i + 0.5) / len(d)
    b.t, a.t = 0.0, 10.0
    return compute(b, d, a, ["http://e/metrics"])


RUNNING = 'vllm:num_requests_running{model_name="m"}'


def test_gauges_are_time_weighted_over_the_window_and_count_their_samples() -> None:
    # Running 10 at 1 s and 2 s, 40 at 9 s, in a 10 s window: each sample stands for the
    # time to halfway to its neighbours (1.5 s, 4 s, 4.5 s), so 23.5, not the plain 20.
    b, a = parse(vllm(0)), parse(vllm(1))
    b.t, a.t = 0.0, 10.0
    d = []
    for t, running in ((1.0, 10), (2.0, 10), (9.0, 40)):
        text = vllm(1).replace(f"{RUNNING} 30.0", f"{RUNNING} {running}")
        snap = parse(text)
        snap.t = t
        d.append(snap)
    s = compute(b, d, a, ["http://e/metrics"])
    assert s.gauge_samples == 3 and s.gauge_note is None
    assert s.running_mean == pytest.approx(23.5) and s.running_max == 40


def test_too_few_gauge_samples_say_so_instead_of_zero() -> None:
    # One scrape in the window (a short level): no mean from it, and none from the scrape
    # after the load either (the engine is idle by then).
    b, a = parse(vllm(0)), parse(vllm(1))
    b.t, a.t = 0.0, 10.0
    s = compute(b, [parse(vllm(1))], a, ["http://e/metrics"])
    assert s.running_mean is None and s.waiting_mean is None and s.kv_usage_mean is None
    assert s.gauge_samples == 1
    assert s.gauge_note is not None and s.gauge_note.startswith("1 gauge sample(s) in the")
    assert s.preemptions == 38  # the counters do not need samples in the window


def test_vllm_signals() -> None:
    s = _level(vllm(0), [vllm(1)], vllm(1))
    assert s.engines == ("vllm",) and s.scrapes == 5
    assert (s.running_mean, s.waiting_mean, s.kv_usage_max) == (30.0, 14.0, 0.97)
    assert s.preemptions == 38 and s.prefix_hit_rate == pytest.approx(0.2)
    assert s.queue_time_mean_ms == pytest.approx(450)
    assert s.queue_time_p99_ms is not None and 500 < s.queue_time_p99_ms <= 1000
    assert s.ttft_mean_ms == pytest.approx(600) and s.requests == 100
    assert s.itl_mean_ms == pytest.approx(25) and 20 <= (s.itl_p50_ms or 0) <= 30
    assert s.prompt_tok_s == pytest.approx(5120) and s.generation_tok_s == pytest.approx(2560)
    # Only the level's change counts: a second level reads the same.
    again = _level(vllm(1), [vllm(2)], vllm(2))
    assert again.ttft_mean_ms == pytest.approx(600) and again.preemptions == 38
    assert LevelSignals.from_dict(s.to_dict()) == s


def test_sglang_signals() -> None:
    s = _level(sglang(0), [sglang(1)], sglang(1))
    assert s.engines == ("sglang",)
    assert (s.running_mean, s.waiting_mean, s.kv_usage_mean) == (20.0, 2.0, 0.41)
    assert s.prefix_hit_rate == pytest.approx(0.62)  # its gauge: no counters published
    assert s.queue_time_mean_ms == pytest.approx(4) and s.ttft_mean_ms == pytest.approx(90)
    assert s.itl_mean_ms == pytest.approx(12) and s.preemptions is None


def test_trtllm_signals() -> None:
    s = _level(trtllm(0), [trtllm(1)], trtllm(1))
    assert s.engines == ("trtllm",)
    assert s.kv_usage_mean == pytest.approx(0.62) and s.prefix_hit_rate == pytest.approx(0.38)
    assert s.queue_time_mean_ms == pytest.approx(20) and s.ttft_mean_ms == pytest.approx(150)
    assert s.itl_mean_ms == pytest.approx(18) and s.running_mean is None


def test_dynamo_frontend_and_workers_merge() -> None:
    def snap(level: int) -> Snapshot:
        s = parse(dynamo_frontend(level))
        s.merge(parse(dynamo_worker(level, 80.0)))
        s.merge(parse(dynamo_worker(level, 90.0)))
        return s

    b, a = snap(0), snap(1)
    b.t, a.t = 0.0, 5.0
    during = [snap(1) for _ in range(MIN_GAUGE_SAMPLES)]
    for i, d in enumerate(during):
        d.t = 1.0 + i
    s = compute(b, during, a, ["front", "w1", "w2"])
    assert s.engines == ("dynamo", "vllm")
    assert (s.running_mean, s.waiting_mean) == (48.0, 6.0)
    # A percent, averaged over the workers: 85 % used.
    assert s.kv_usage_mean == pytest.approx(0.85)
    assert s.preemptions == 6  # the workers' own vLLM counters, summed
    assert s.ttft_mean_ms == pytest.approx(200) and s.itl_mean_ms == pytest.approx(20)
    assert s.prefix_hit_rate == pytest.approx(0.5)  # the workers' gauge
    # The frontend alone: the KV router's hit-rate histogram, its mean over the level.
    front = _level(dynamo_frontend(0), [dynamo_frontend(1)], dynamo_frontend(1))
    assert front.prefix_hit_rate == pytest.approx(0.25) and front.kv_usage_mean is None


def test_unknown_engine_gives_no_signals_with_a_note() -> None:
    text = "# TYPE http_requests counter\nhttp_requests_total 5\n"
    s = _level(text, [], text)
    assert not s.present and s.note is not None and "none of the known engine names" in s.note


@pytest.mark.parametrize(
    "text", ['vllm:num_requests_running{model_name="m" 3\n', "<html>404</html>\n{{{"]
)
def test_malformed_text(text: str) -> None:
    with pytest.raises(ExpositionError, match="not the Prometheus text format"):
        parse(text)


def test_histogram_quantile_interpolates_within_buckets() -> None:
    after = {0.1: 50.0, 0.2: 90.0, 0.4: 100.0, float("inf"): 100.0}
    assert quantile(None, after, 0.5) == pytest.approx(0.1)
    assert quantile(None, after, 0.7) == pytest.approx(0.15)
    assert quantile(None, after, 0.95) == pytest.approx(0.3)
    before = {0.1: 50.0, 0.2: 50.0, 0.4: 50.0, float("inf"): 50.0}
    assert quantile(before, after, 0.5) == pytest.approx(0.1625)  # only the change
    assert quantile(after, after, 0.5) is None
    assert quantile(None, {0.1: 0.0, float("inf"): 10.0}, 0.99) == 0.1  # +Inf: a lower bound
