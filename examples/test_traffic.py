"""Production-shaped traffic on the sim: multi-turn chat, and a replayed trace.

- ``test_multi_turn_chat``: 8 users at a time hold 4-turn conversations (each turn's prompt
  is the whole conversation so far plus a new message; 0.5 s of thinking between turns,
  drawn exponential). The prefix cache serves each history, so a later turn's TTFT stays
  near the first's although its prompt is several times longer.
- ``test_trace_replay``: the Mooncake-format sample in traces/ (bursty arrivals, most
  requests opening with one of three shared 1,024-token system prompts) replayed at twice
  its pace, at most 24 requests in flight; the shared blocks show as prefix-cache hits.
"""

from pathlib import Path

import pytest

from pytest_llmslo import assert_slo, itl_p50, ttft_p99
from pytest_llmslo.metrics import traffic

TRACE = Path(__file__).parent / "traces" / "mooncake_sample.jsonl"


@pytest.mark.slo(
    concurrency=[8],
    turns=4,
    think_time=0.5,
    think_distribution="exponential",
    isl=128,
    osl=64,
    requests=64,  # 16 conversations of 4 turns
    warmup=0,
    session_header="X-Session-ID",
)
def test_multi_turn_chat(slo_run):
    assert_slo(ttft_p99 < 500, itl_p50 < 30)
    turns = traffic.by_turn(slo_run)
    assert [t["turn"] for t in turns] == [0, 1, 2, 3]
    # Turn 4's prompt is about 4x turn 1's; with the history in the prefix cache its
    # prefill is only the new message and the last reply.
    first, last = turns[0], turns[-1]
    assert last["prompt_tokens_mean"] > 3 * first["prompt_tokens_mean"]
    assert last["ttft_p50_ms"] < 2 * first["ttft_p50_ms"]


@pytest.mark.slo(
    trace=str(TRACE),
    trace_speed=[2],
    max_concurrency=24,
    warmup=0,
    requests=None,
)
def test_trace_replay(slo_run):
    assert_slo(ttft_p99 < 2000, itl_p50 < 30)
    sent = traffic.summarize(slo_run)
    assert sent is not None and sent["trace"]["requests"] == 120
