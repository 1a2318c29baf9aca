"""Per-second series from a document's per-request samples, against answers worked out by
hand."""

from __future__ import annotations

import pytest

from pytest_llmslo.metrics.timeseries import per_second


def _samples(*rows: tuple) -> dict[str, list]:
    keys = ("sent_s", "first_token_s", "end_s", "ok", "output_tokens", "ttft_ms", "itl_ms")
    return {k: [r[i] for r in rows] for i, k in enumerate(keys)}


def test_three_requests_over_two_and_a_half_seconds() -> None:
    s = per_second(
        _samples(
            # sent, first token, end, ok, tokens, ttft, itl
            (0.0, 0.5, 1.5, 1, 10, 500.0, 100.0),
            (0.5, 1.2, 2.5, 1, 13, 700.0, 50.0),
            (1.0, None, 1.25, 0, 0, None, None),  # failed before its first token
        )
    )
    assert s is not None
    assert s.seconds == (0.0, 1.0, 2.0)
    # [0,1): A all of it, B half; [1,2): A half, B all, C a quarter; [2,2.5): B, over 0.5 s.
    assert s.in_flight == pytest.approx((1.5, 1.75, 1.0))
    assert (s.completed, s.errors) == ((0, 1, 1), (0, 1, 0))
    # A: 10 tokens over 0.5..1.5 (10/s), B: 13 over 1.2..2.5 (10/s); the last bin is 0.5 s.
    assert s.output_tok_s == pytest.approx((5.0, 13.0, 10.0))
    # By the second the first token arrived; ITL by the second the request ended.
    assert s.ttft_p50_ms == (500.0, 700.0, None) and s.ttft_p99_ms == (500.0, 700.0, None)
    assert s.itl_p50_ms == (None, 100.0, 50.0)


def test_percentiles_within_a_second_and_a_burst_at_the_end() -> None:
    s = per_second(
        _samples(
            (0.0, 0.1, 0.2, 1, 4, 100.0, 10.0),
            (0.0, 0.2, 0.4, 1, 4, 200.0, 20.0),
            (0.0, 0.3, 0.6, 1, 4, 300.0, 30.0),
            (0.0, 1.5, 1.5, 1, 6, 1500.0, None),  # one chunk: its tokens at its end
            (0.0, None, 2.0, 0, 0, None, None),  # cut at the window's end, exactly 2 s
        )
    )
    assert s is not None and s.seconds == (0.0, 1.0)
    assert (s.completed, s.errors) == ((3, 1), (0, 1))
    # [0,1): 0.2 + 0.4 + 0.6 + 1 + 1; [1,2): the one-chunk request 0.5, the cut one 1.
    assert s.in_flight == pytest.approx((3.2, 1.5))
    assert s.output_tok_s == pytest.approx((12.0, 6.0))
    # Linear interpolation: P50 of 100, 200, 300 is 200; P99 is 300 - 0.02·100.
    assert s.ttft_p50_ms == (200.0, 1500.0)
    assert s.ttft_p99_ms[0] == pytest.approx(298.0)
    assert s.itl_p50_ms == (20.0, None)


def test_samples_without_times_have_no_series() -> None:
    assert per_second(None) is None
    assert per_second({"ttft_ms": [1.0], "ok": [1], "output_tokens": [3]}) is None
    assert per_second(_samples()) is None
