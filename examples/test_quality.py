"""What the engine answers, at the load where it is gated: the six setups of the reference
comparison (engines.toml) each answer 120 seeded arithmetic questions at concurrency 16,
every request of the level an eval item, and must show 90 % accuracy at 95 % confidence
(Wilson bound: too few items would be inconclusive, never a pass by luck). The sim answers
from its error model (docs/quality.md): right here, wrong under KV pressure or with a
quantisation penalty (``--engine-opt=sim-vllm.extra_args=--quant-penalty=0.3`` fails it)."""

import pytest

from pytest_llmslo import accuracy, assert_quality

ENGINES = [
    "sim-vllm",
    "sim-sglang",
    "sim-trtllm",
    "sim-dynamo-vllm",
    "sim-dynamo-sglang",
    "sim-dynamo-trtllm",
]


@pytest.mark.slo(
    engines=ENGINES,
    concurrency=[16],
    eval="arithmetic",
    requests=120,
    warmup=16,
)
def test_quality(slo_run):
    assert_quality(accuracy >= 0.9)
