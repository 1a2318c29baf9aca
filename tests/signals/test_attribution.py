"""The attribution rules on signals of known shape."""

from __future__ import annotations

from pytest_llmslo.signals.attribution import explain
from pytest_llmslo.signals.levelsignals import LevelSignals

BASE = {"engines": ("vllm",), "scrapes": 5}


def sig(**kw: object) -> LevelSignals:
    return LevelSignals(**{**BASE, **kw})  # type: ignore[arg-type]


def test_kv_cache_bound_queue() -> None:
    s = sig(queue_time_p99_ms=530.0, ttft_p99_ms=780.0, waiting_mean=14.0, running_mean=30.0,
            kv_usage_max=0.97, preemptions=38.0)  # fmt: skip
    a = explain("ttft", "p99", 812.0, s)
    assert a.kind == "kv-cache"
    assert a.text == (
        "engine queue time P99 530 ms (65 % of it) (14 waiting on average, 30 running, "
        "KV cache 97 %, 38 preemptions): KV-cache bound"
    )


def test_queue_bound_with_room_in_the_cache() -> None:
    s = sig(queue_time_p50_ms=200.0, ttft_p50_ms=380.0, kv_usage_max=0.4, preemptions=0.0)
    a = explain("ttft", "p50", 400.0, s)
    assert a.kind == "queue" and "queue-bound" in a.text


def test_prefill_bound() -> None:
    s = sig(queue_time_p99_ms=8.0, ttft_p99_ms=900.0, prompt_tok_s=20000.0,
            prefix_hit_rate=0.02, kv_usage_max=0.3)  # fmt: skip
    a = explain("ttft", "p99", 950.0, s)
    assert a.kind == "prefill"
    assert "the engine's own TTFT P99 is 900 ms, queue time 8 ms, 20000 prompt tok/s" in a.text
    assert "prefill-bound" in a.text


def test_client_or_network_bound() -> None:
    s = sig(queue_time_p99_ms=2.0, ttft_p99_ms=40.0)
    a = explain("ttft", "p99", 600.0, s)
    assert a.kind == "client"
    assert "560 ms (93 %) is spent between the client and the engine" in a.text


def test_itl_rules() -> None:
    assert explain("itl", "p50", 40, sig(itl_p50_ms=10.0)).kind == "client"
    assert explain("itl", "p50", 40, sig(itl_p50_ms=38.0, preemptions=5.0)).kind == "kv-cache"
    inter = sig(itl_p50_ms=38.0, prompt_tok_s=9000.0, generation_tok_s=1200.0)
    assert explain("itl", "p50", 40, inter).kind == "prefill-interference"
    plain = sig(itl_p50_ms=38.0, prompt_tok_s=2400.0, generation_tok_s=1200.0, running_mean=64.0)
    a = explain("tpot", "p50", 40, plain)
    assert a.kind == "decode" and "64 running" in a.text
    assert "prefill is 67 % of the tokens" in a.text  # ISL twice OSL is not interference


def test_e2e_goes_to_decode_when_ttft_is_small() -> None:
    s = sig(ttft_p99_ms=100.0, preemptions=12.0)
    assert explain("e2e", "p99", 5000, s).kind == "kv-cache"


def test_no_signals_says_so() -> None:
    a = explain(
        "ttft", "p99", 800, LevelSignals(note="no engine signals: GET /metrics answered 404")
    )
    assert a.kind == "unexplained" and "GET /metrics answered 404" in a.text
    assert explain("ttft", "p99", 800, None).kind == "unexplained"
    unknown = explain("ttft", "p99", 800, sig(running_mean=3.0))
    assert unknown.kind == "unexplained" and "engine TTFT and queue time unknown" in unknown.text
