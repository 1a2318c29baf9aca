"""A fault level's steady part: the requests that ran outside the fault's impact window
(from its injection to its measured recovery) are the ones its latency objectives judge;
a fault that never recovered leaves the requests before it; a fault not done, all."""

from __future__ import annotations

from pytest_llmslo import slo
from pytest_llmslo.faults.steady import steady_run, steady_split

try:
    from tests.metrics_helpers import make_run, rec, steady
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import make_run, rec, steady  # type: ignore[no-redef]


def _level() -> object:
    """Ten seconds, a request sent every 500 ms (TTFT 50 ms, 10 tokens 10 ms apart); a fault
    at 4.0 s cuts the one running then and makes those sent until 6.0 s slow (900 ms)."""
    recs = []
    for i in range(20):
        sent = i * 500.0
        if i == 7:  # sent at 3.5 s, running at 4.0 s: the fault cuts it
            recs.append(rec(i, sent=sent, chunks=[sent + 50], end=4050.0, kind="reset"))
        elif 8 <= i < 12:  # sent from 4.0 s to 5.5 s: slow while the engine recovers
            recs.append(steady(i, sent=sent, ttft=900.0, gap=10.0, n=10))
        else:
            recs.append(steady(i, sent=sent, ttft=50.0, gap=10.0, n=10))
    return make_run(recs, start=0.0, end=10_000.0)


def test_the_impact_window_runs_from_the_fault_to_its_recovery() -> None:
    run = _level()
    split = steady_split(run, [{"asked_s": 4.0, "recovered_at_s": 6}])
    # The cut request (running at 4.0 s) and the four sent from 4.0 s to 5.5 s.
    assert split.windows == ((4.0, 6.0),)
    assert split.impact == 5 and split.steady == 15 and not split.unrecovered
    assert [r.index for r in steady_run(run, split).records] == [
        *range(7),
        *range(12, 20),
    ]
    # Judged over the whole level the fault fails the objective; over the steady part, not.
    assert not slo.evaluate(run, [slo.ttft_p99 < 500]).passed
    verdict = slo.evaluate(steady_run(run, split), [slo.ttft_p99 < 500])
    assert verdict.passed and verdict.results[0].count == 15
    assert split.describe() == (
        "a fault level: the latency objectives judged the 15 requests that ran outside the "
        "fault's impact window (4.0 s to 6.0 s); the 5 sent in it or running when the fault "
        "came are the recovery's to judge"
    )


def test_a_fault_that_never_recovered_leaves_the_requests_before_it() -> None:
    run = _level()
    why = "never 3 s in a row with goodput >= 90% of 4.0 tok/s"
    split = steady_split(run, [{"asked_s": 4.0, "recovered_at_s": None, "why": why}])
    assert split.windows == ((4.0, None),)
    assert split.steady == 7 and split.impact == 13
    assert split.unrecovered == (f"the fault at 4.0 s never recovered: {why}",)
    assert "(4.0 s to the end)" in split.describe()


def test_a_fault_that_was_not_done_has_no_impact_window() -> None:
    run = _level()
    split = steady_split(run, [{"asked_s": 4.0, "error": "no replica to kill"}, "junk"])
    assert split.windows == () and split.steady == 20 and split.impact == 0
