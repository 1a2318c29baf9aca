"""A metric is one catalogue entry plus its formula: a throwaway one, time to second token,
registered here, is parsed by the DSL, summarised, gated, counted in goodput, given its
regression specs and JUnit figures, and gone again once taken out."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest

import pytest_llmslo
from pytest_llmslo import catalog, metrics, slo
from pytest_llmslo.catalog import Metric
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.report.junit import testcase_properties

try:
    from tests.metrics_helpers import make_run, rec
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import make_run, rec  # type: ignore[no-redef]


TT2T = Metric(
    "tt2t",
    lambda c: c.since_sent(c.nth_chunk_ns(1), c.ok & (c.chunk_counts > 1)),
    undefined="streamed fewer than two output chunks",
    headline=("p50", "p99"),
    title="second output chunk − request sent",
)


@pytest.fixture
def tt2t() -> Iterator[Metric]:
    catalog.register(TT2T)
    metrics.clear_cache()
    try:
        yield TT2T
    finally:
        catalog.unregister("tt2t")
        metrics.clear_cache()
        for name in list(vars(pytest_llmslo)):
            if name.startswith("tt2t"):  # the package root caches what it looked up
                delattr(pytest_llmslo, name)


def _run():
    # Second chunks 20, 30, 40 ms after their sends; one request with a single chunk (no
    # second token: undefined, never good) and one failed request.
    recs = [
        rec(0, sent=0, chunks=[5, 20, 25], completion=3),
        rec(1, sent=10, chunks=[15, 40, 45], completion=3),
        rec(2, sent=20, chunks=[25, 60, 70], completion=3),
        rec(3, sent=0, chunks=[5], completion=1),
        rec(4, sent=0, chunks=[5, 9], kind="reset"),
    ]
    return make_run(recs, start=0, end=100)


def test_the_dsl_knows_a_registered_metric(tt2t: Metric) -> None:
    assert "tt2t" in catalog.METRICS and "tt2t_p999" in catalog.SYMBOLS
    objective = slo.Objective("tt2t", 99.0, "<", 50.0)
    assert slo.parse_objectives("tt2t_p99 < 50ms") == (objective,)
    assert slo.parse_objectives("tt2t.p99 < 0.05s") == (objective,)
    assert (slo.tt2t_p99 < 50) == objective
    assert (slo.tt2t.p99 < 50) == objective
    assert (pytest_llmslo.tt2t_p99 < 50) == objective
    assert slo.symbols()["tt2t_mean"] == slo.StatSymbol("tt2t", "mean")
    with pytest.raises(TypeError, match=r"needs a statistic: write `tt2t\.p99"):
        slo.tt2t < 50  # noqa: B015
    with pytest.raises(ConfigError, match="valid metrics: ttft, ttfot, itl, tpot, e2e, tt2t;"):
        slo.parse_objectives("x_p99 < 1")
    # What a regression check can gate on follows the catalogue too.
    assert catalog.METRIC_SPECS["tt2t_p99"].field == "tt2t"
    assert catalog.canonical_metric("tt2t.p99") == "tt2t_p99"


def test_summarize_carries_a_registered_metric(tt2t: Metric) -> None:
    run = _run()
    values = metrics.per_request(run)["tt2t"]
    assert values[:3].tolist() == pytest.approx([20.0, 30.0, 40.0])
    assert math.isnan(values[3]) and math.isnan(values[4])
    s = metrics.summarize(run)
    d = s.distributions["tt2t"]
    assert (d.count, d.unit) == (3, "ms")
    assert d.p(50) == pytest.approx(30.0) and d.mean == pytest.approx(30.0)
    assert s.metric("tt2t_p50") == pytest.approx(30.0)
    # A failed request counts as +inf in what the summary shows beside the survivors.
    assert s.with_failures is not None and math.isinf(s.with_failures["tt2t"][99.0])
    assert type(s).from_dict(s.to_dict()).distributions["tt2t"] == d
    assert metrics.aggregate_values(run, "tt2t").tolist() == pytest.approx([20.0, 30.0, 40.0])


def test_a_registered_metric_is_gated(tt2t: Metric) -> None:
    run = _run()
    values, failed = metrics.gate_values(run, "tt2t")
    assert failed == 1 and np.isinf(values).sum() == 1
    # P50 over 20, 30, 40 and the failed request's +inf.
    v = slo.evaluate(run, [slo.tt2t_p50 < 45])
    assert v.passed and v.results[0].observed == pytest.approx(35.0)
    assert (v.results[0].count, v.results[0].failed) == (4, 1)
    assert not slo.evaluate(run, "tt2t_p50 < 30").passed
    # Goodput: an event that never came cannot meet the threshold (an event metric).
    assert v.good == 3 and v.attainment == pytest.approx(3 / 5)
    assert (
        "tt2t_p50: 1 completed request(s) streamed fewer than two output chunks; tt2t is "
        "undefined for them and they are not good" in v.format()
    )
    props = dict(testcase_properties(metrics.summarize(run), v))
    # JUnit prints the judged figure, the verdict's own (the failed request as +inf).
    assert float(props["llmslo.tt2t_p50_ms"]) == pytest.approx(35.0)
    assert "llmslo.tt2t_p99_ms" in props


def test_a_metric_taken_out_is_gone() -> None:
    catalog.register(TT2T)
    catalog.unregister("tt2t")
    assert "tt2t" not in catalog.METRICS and "tt2t_p99" not in catalog.METRIC_SPECS
    assert "tt2t" not in metrics.summarize(_run()).distributions
    with pytest.raises(ConfigError, match="unknown metric 'tt2t'"):
        slo.parse_objectives("tt2t_p99 < 50")
    with pytest.raises(AttributeError):
        _ = slo.tt2t_p99


def test_bad_entries_are_refused() -> None:
    f = TT2T.values
    with pytest.raises(ValueError, match="already in the catalogue"):
        catalog.register(Metric("ttft", f))
    for bad in ("TT2T", "tt_2t", "2tt", ""):
        with pytest.raises(ValueError, match="lower-case letters and digits"):
            Metric(bad, f)
    for taken in ("mean", "p99", "goodput", "throughput"):
        with pytest.raises(ValueError, match="already names a statistic or a run figure"):
            Metric(taken, f)
    with pytest.raises(ValueError, match="a metric's unit is 'ms'"):
        Metric("tt2t", f, unit="s")
    with pytest.raises(ValueError, match="per is 'request' or 'token'"):
        Metric("tt2t", f, per="chunk")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown statistic"):
        Metric("tt2t", f, headline=("p1x",))
    with pytest.raises(ValueError, match="built-in metric"):
        catalog.unregister("ttft")
    with pytest.raises(KeyError):
        catalog.unregister("tt2t")
    assert catalog.METRICS == ("ttft", "ttfot", "itl", "tpot", "e2e")


def test_a_formula_of_the_wrong_shape_is_named() -> None:
    catalog.register(Metric("bad", lambda c: c.sent_ns[:1]))
    try:
        with pytest.raises(
            TypeError, match=r"metric 'bad' is per request: .* one value per record"
        ):
            metrics.summarize(_run())
    finally:
        catalog.unregister("bad")
        metrics.clear_cache()
    catalog.register(Metric("bad", lambda c: c.sent_ns, per="token"))
    try:
        with pytest.raises(TypeError, match="metric 'bad' is per token"):
            metrics.summarize(_run())
    finally:
        catalog.unregister("bad")
        metrics.clear_cache()
