"""A pre-deploy CI gate: one load level, strict mode. Strict gates on the one-sided 95 %
upper confidence bound of each percentile, not the point estimate, so the gate cannot pass
on too few samples: a P90 needs at least 29 requests, a P99 at least 299."""

import pytest

from pytest_llmslo import itl_p50, ttft_p90


@pytest.mark.slo(
    ttft_p90 < 400,
    itl_p50 < 25,
    concurrency=[8],
    strict=True,
    isl=512,
    osl=64,
    requests=48,
    warmup=4,
    duration=12,
    min_attainment=0.9,
)
def test_ci_gate(slo_run):
    # No assert needed: the marker's objectives are the gate (strict, >= 90 % attainment).
    assert len(slo_run.records) >= 29
