"""The arithmetic eval under load on real vLLM (CPU build, a tiny random-weight Llama):
through the plugin at c=4, twice at temperature 0 with a fixed seed, and the answers'
digests compared. The model answers nonsense, so this is about the eval travelling in the
traffic and the determinism of greedy answers, not accuracy: the comparison names the
items whose answers changed. Needs ``bash .ci/engines.sh vllm model``."""

from __future__ import annotations

import json

import pytest
from engines_helpers import VLLM_PYTHON, missing_module

from pytest_llmslo import cli
from pytest_llmslo.engines import EngineConfig, start_engine
from pytest_llmslo.engines.local import vllm_cpu_config
from pytest_llmslo.errors import EngineUnavailable

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

TEST = """
import pytest

@pytest.mark.slo(concurrency=[4], eval="arithmetic")
def test_answers(slo_run):
    pass
"""


@pytest.fixture(scope="module")
def vllm_config() -> EngineConfig:
    reason = missing_module(VLLM_PYTHON, "vllm")
    if reason:
        pytest.skip(f"vLLM CPU build not available: {reason}")
    try:
        return vllm_cpu_config()
    except EngineUnavailable as exc:
        pytest.skip(str(exc))


def _session(pytester: pytest.Pytester, url: str, name: str) -> dict[str, object]:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--engine=external", f"--engine-url={url}",
        "--warmup=0", "--requests=24", "--isl=16", "--osl=16",
        "--extra-body", '{"temperature": 0, "seed": 0}',
        # The random-weight model emits tokens that decode to no text, so a few outputs look
        # short to the stream: explicitly allowed, this test is about the answers.
        "--max-short-outputs=100%", "--max-usage-mismatch=100%",
        "--client-max-lag=5000", "--client-max-cpu=1.5", "--client-min-load=0.3",
        f"--slo-json={name}", timeout=600,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    point = json.loads((pytester.path / name).read_text())["points"][0]
    quality: dict[str, object] = point["quality"]
    return quality


def test_arithmetic_eval_digests_across_two_runs_at_temperature_0(
    vllm_config: EngineConfig, slo_pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    slo_pytester.makepyfile(test_q=TEST)
    handle = start_engine(vllm_config)
    try:
        first = _session(slo_pytester, handle.base_url, "a.json")
        second = _session(slo_pytester, handle.base_url, "b.json")
    finally:
        handle.stop()
    assert first["items"] == second["items"] == 24
    assert first["failed"] == second["failed"] == 0
    a = {row[0]: row[2] for row in first["answers"]}  # type: ignore[attr-defined]
    b = {row[0]: row[2] for row in second["answers"]}  # type: ignore[attr-defined]
    assert set(a) == set(b)
    changed = sorted(i for i in a if a[i] != b[i])
    cli.main(["compare", str(slo_pytester.path / "a.json"), str(slo_pytester.path / "b.json")])
    out = capsys.readouterr().out
    # The comparison says how many answers changed; here, which ones, if any did.
    assert f"drift: {len(changed)} of 24 answers changed" in out, (changed, out)
    print(f"answers that changed between the two runs at temperature 0: {changed or 'none'}")
