"""When added capacity shows in goodput: a closed loop whose good requests per second
double at a known second, its drain at the end left out, and the cases that cannot be
told (too short, no gain, never steady)."""

from __future__ import annotations

from pytest_llmslo.metrics.timetocapacity import good_series, time_to_capacity
from pytest_llmslo.slo import ttft_p99

try:
    from tests.metrics_helpers import make_run, rec
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import make_run, rec  # type: ignore[no-redef]


def _loop(
    seconds: int, per_second: dict[int, int], slow_from: int | None = None, tokens: int = 10
) -> list:
    """Requests of 10 tokens, each starting and ending inside one second: ``per_second[s]``
    of them in second ``s`` (the default 4), then a second with one request (the drain).
    From ``slow_from`` on the first token comes 900 ms after the send (TTFT too high)."""
    out = []
    for s in range(seconds):
        n = per_second.get(s, 4)
        for k in range(n):
            sent = s * 1000 + k * (800 / n)
            ttft = 900 if slow_from is not None and s >= slow_from else 5
            first = min(sent + ttft, s * 1000 + 990)
            chunks = [first + i * 0.5 for i in range(tokens)]
            out.append(rec(len(out), sent=sent, chunks=chunks))
    last = seconds * 1000
    out.append(rec(len(out), sent=last + 1, chunks=[last + 10 + i for i in range(tokens)]))
    return out


def test_goodput_per_second_doubles_where_the_capacity_came() -> None:
    run = make_run(_loop(12, {s: 8 for s in range(6, 12)}))
    series = good_series(run)
    assert [round(v) for v in series[:12]] == [40] * 6 + [80] * 6
    got = time_to_capacity(run, asked_s=4.5, window_s=3, share=0.9)
    assert got["before_tok_s"] == 40.0 and got["after_tok_s"] == 80.0
    assert got["gain"] == 2.0
    assert got["shows_at_s"] == 6
    assert got["capacity_s"] == 1.5
    assert "why" not in got


def test_only_good_requests_count() -> None:
    # Twice the requests from second 6, but their TTFT misses the objective: no gain in
    # goodput (throughput alone would have doubled).
    run = make_run(_loop(12, {s: 8 for s in range(6, 12)}, slow_from=6))
    got = time_to_capacity(run, asked_s=4.5, objectives=(ttft_p99 < 500,))
    assert got["capacity_s"] is None
    assert got["why"].startswith("no gain to see: goodput 40.0 tok/s before the scale-up")


def test_a_level_too_short_around_the_ask_says_so() -> None:
    run = make_run(_loop(5, {}))
    got = time_to_capacity(run, asked_s=3.2, window_s=3)
    assert got["capacity_s"] is None
    assert got["why"].startswith("too short to tell: 3 whole second(s) before the scale-up")


def test_goodput_that_never_settles_is_not_a_capacity() -> None:
    # Up at the end only, and for fewer seconds than the window.
    per = {s: 4 for s in range(12)}
    per.update({6: 8, 8: 8, 10: 8, 11: 8})
    got = time_to_capacity(make_run(_loop(12, per)), asked_s=4.5, window_s=3)
    assert got["shows_at_s"] is None
    assert got["why"] == "goodput never held 90% of 80.0 tok/s for 3 s"
