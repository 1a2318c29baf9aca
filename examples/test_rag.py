"""Long-prompt RAG: 3k-token prompts whose first 2k tokens are one of 4 shared document
prefixes (a prefix cache helps), short answers. Prefill dominates: TTFT is the SLO."""

import pytest

from pytest_llmslo import assert_goodput, e2e_p99, ttft_p99


@pytest.mark.slo(
    concurrency=[8, 32],
    workload="shared_prefix",
    num_prefixes=4,
    prefix_len=2048,
    isl=3072,
    osl=64,
    requests=64,
    warmup=4,  # raised to one wave (the concurrency) per level
    duration=12,
    # Every level passes: extend the sweep past c32 (x1.5 per level) until goodput falls
    # below half its best, to find where this workload's capacity ends.
    extend=True,
)
def test_rag(slo_run):
    assert_goodput(ttft_p99 < 1500, e2e_p99 < 4000)
