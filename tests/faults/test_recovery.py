"""What a fault cost, from a level's requests: a closed loop whose requests fail at the
fault and whose goodput comes back at a known second; the objectives and the window that
recovery needs; the per-second series of the JSON."""

from __future__ import annotations

from pytest_llmslo.faults import fault_cost, level_series
from pytest_llmslo.slo import ttft_p99

try:
    from tests.metrics_helpers import make_run, rec
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import make_run, rec  # type: ignore[no-redef]


def _loop(seconds: int, per_second: dict[int, int], failed: dict[int, int] | None = None,
          slow: set[int] | None = None) -> list:  # fmt: skip
    """Requests of 10 tokens, each inside one second: ``per_second[s]`` (default 4) in
    second ``s``, ``failed[s]`` of them failing (a reset at 900 ms), those of the seconds
    in ``slow`` with a 900 ms TTFT; then one request in a last second (the drain)."""
    out = []
    failed = failed or {}
    for s in range(seconds):
        n = per_second.get(s, 4)
        for k in range(n):
            sent = s * 1000 + k * (800 / n)
            if k < failed.get(s, 0):
                cut = s * 1000 + 900
                out.append(rec(len(out), sent=sent, chunks=[sent + 1], end=cut, kind="reset"))
                continue
            first = min(sent + (900 if slow and s in slow else 5), s * 1000 + 990)
            out.append(rec(len(out), sent=sent, chunks=[first + i * 0.5 for i in range(10)]))
    last = seconds * 1000
    out.append(rec(len(out), sent=last + 1, chunks=[last + 10 + i for i in range(10)]))
    return out


def test_a_kill_costs_its_requests_and_recovery_starts_with_the_first_clean_window() -> None:
    # 4 good requests a second; at 4.5 s two fail, the next second carries 1, then 4 again.
    run = make_run(_loop(12, {5: 1}, failed={4: 2}))
    got = fault_cost(run, asked_s=4.5, window_s=3, share=0.9)
    assert got["before_tok_s"] == 40.0 and got["before_attainment"] == 1.0
    assert got["failed"] == 2 and got["failed_total"] == 2
    assert got["goodput_min_tok_s"] == 10.0 and got["goodput_dip"] == 0.75
    assert got["attainment_min"] == 0.5
    assert got["recovered_at_s"] == 6 and got["recovery_s"] == 1.5
    assert "why" not in got


def test_the_objectives_must_hold_again_for_the_window() -> None:
    # Goodput is back from second 6 by throughput, but TTFT stays too high until second 8.
    run = make_run(_loop(14, {}, failed={4: 2}, slow={5, 6, 7}))
    got = fault_cost(run, asked_s=4.5, objectives=(ttft_p99 < 500,), window_s=3)
    assert got["recovered_at_s"] == 8 and got["recovery_s"] == 3.5
    assert got["attainment_min"] == 0.25  # the last of each slow second is capped at 390 ms
    without = fault_cost(run, asked_s=4.5, window_s=3)  # no objectives: throughput only
    assert without["recovered_at_s"] == 5


def test_never_recovered_and_too_short_say_why() -> None:
    run = make_run(_loop(12, {s: 2 for s in range(5, 12)}, failed={4: 2}))
    got = fault_cost(run, asked_s=4.5, window_s=3, share=0.9)
    assert got["recovery_s"] is None and got["failed"] == 2
    assert got["why"] == (
        "never 3 s in a row with goodput >= 90% of 40.0 tok/s, no error and the objectives met"
    )
    short = fault_cost(make_run(_loop(6, {}, failed={4: 2})), asked_s=4.5, window_s=3)
    assert short["why"].startswith("the level's load ran 2 s from the fault's second on")
    first = fault_cost(make_run(_loop(6, {})), asked_s=0.5)
    assert first["why"] == "too short to tell: the fault came in the level's first second"


def test_the_level_series_holds_every_column_per_second() -> None:
    run = make_run(_loop(6, {}, failed={4: 2}, slow={2}))
    series = level_series(run, (ttft_p99 < 500,))
    assert series is not None
    assert series["seconds"] == list(range(7))
    assert series["errors"][:6] == [0, 0, 0, 0, 2, 0]
    assert series["completed"][:6] == [4, 4, 4, 4, 2, 4]
    # In the slow second 2, only the last request (capped at 390 ms) meets TTFT < 500 ms.
    assert series["goodput_tok_s"][:6] == [40.0, 40.0, 10.0, 40.0, 20.0, 40.0]
    assert series["output_tok_s"][2] == 40.0
    assert series["attainment"][:6] == [1.0, 1.0, 0.25, 1.0, 0.5, 1.0]
    assert series["ttft_p99_ms"][2] is not None and series["ttft_p99_ms"][2] > 500
    for key in ("in_flight", "ttft_p50_ms", "itl_p50_ms", "itl_p99_ms"):
        assert len(series[key]) == 7
