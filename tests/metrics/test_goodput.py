"""Goodput and attainment under per-request thresholds, and the summary that carries them."""

from __future__ import annotations

import json

import pytest

from pytest_llmslo.metrics import (
    RunSummary,
    goodput,
    summarize,
)
from pytest_llmslo.records import LoadLevel

try:
    from tests.metrics_helpers import Obj, make_run, rec, steady
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import Obj, make_run, rec, steady  # type: ignore[no-redef]


def _goodput_run():
    # ttft / own mean itl (ms) per request; r4 failed; r5 has one token (no gap).
    recs = [
        steady(0, sent=0, ttft=100, gap=10, n=11),  # good for both
        steady(1, sent=0, ttft=600, gap=10, n=11),  # ttft too slow
        steady(2, sent=0, ttft=100, gap=50, n=11),  # itl too slow
        steady(3, sent=0, ttft=200, gap=20, n=11),  # good
        rec(4, sent=0, chunks=[10, 20], kind="reset", completion=2),  # failed, never good
        rec(5, sent=0, chunks=[300], end=300, completion=1),  # no gap: itl met vacuously
    ]
    # Six requests at once: a wave of c8 that did not fill (the measured window counts).
    return make_run(recs, start=0, end=2000, level=LoadLevel.concurrency(8))


def test_goodput_and_attainment_with_several_objectives() -> None:
    run = _goodput_run()
    objs = [Obj("ttft", 99.0, "<", 500), Obj("itl", 50.0, "<", 30)]
    gp = goodput(run, objs)
    assert gp.mask.tolist() == [True, False, False, True, False, True]
    assert gp.good == 3
    assert gp.attainment == pytest.approx(3 / 6)
    assert gp.req_s == pytest.approx(3 / 2.0)
    assert gp.tok_s == pytest.approx((11 + 11 + 1) / 2.0)
    s = summarize(run, objs)
    assert s.good == 3
    assert s.attainment == pytest.approx(0.5)
    assert s.goodput_tok_s == pytest.approx(11.5)
    assert s.objectives == ("ttft_p99 < 500 ms", "itl_p50 < 30 ms")


def test_goodput_single_objective_and_failed_never_good() -> None:
    run = _goodput_run()
    gp = goodput(run, [Obj("ttft", 99.0, "<", 10_000)])
    assert gp.good == 5  # all completed ones; the failed one never
    assert not gp.mask[4]


def test_goodput_event_metric_undefined_is_not_met() -> None:
    no_content = rec(0, sent=0, chunks=[10, 20], content=None, completion=2)
    run = make_run([no_content])
    assert goodput(run, [Obj("ttfot", 50.0, "<", 1e9)]).good == 0
    assert goodput(run, [Obj("tpot", 50.0, "<", 1e9)]).good == 1


def test_goodput_greater_than_objective() -> None:
    run = _goodput_run()
    gp = goodput(run, [Obj("ttft", 50.0, ">=", 200)])
    assert gp.mask.tolist() == [False, True, False, True, False, True]


def test_no_objectives_means_no_goodput_fields() -> None:
    s = summarize(_goodput_run())
    assert s.goodput_tok_s is None and s.attainment is None and s.good is None


def test_summary_metric_lookup() -> None:
    s = summarize(_goodput_run(), [Obj("ttft", 99.0, "<", 500)])
    assert s.metric("ttft", 99) == s.distributions["ttft"].p(99)
    assert s.metric("ttft", "p99") == s.metric("ttft_p99")
    assert s.metric("itl", "mean") == s.distributions["itl"].mean
    assert s.metric("output_tok_s") == s.output_tok_s
    with pytest.raises(KeyError):
        s.metric("ttft", 42)
    with pytest.raises(KeyError):
        s.metric("bogus_p99")


def test_summary_round_trip() -> None:
    run = _goodput_run()
    s = summarize(run, [Obj("ttft", 99.0, "<", 500), Obj("itl", 50.0, "<", 30)])
    d = s.to_dict()
    text = json.dumps(d, allow_nan=False)
    back = RunSummary.from_dict(json.loads(text))
    assert back.to_dict() == d
    assert back.level == LoadLevel.concurrency(8)
    assert back.distributions["ttft"].p(99) == s.distributions["ttft"].p(99)
    assert back.distributions["ttft"].ub(99) is None  # 5 samples
