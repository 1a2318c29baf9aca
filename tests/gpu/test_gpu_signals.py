"""NVML's GPU figures checked against GPU work that really ran.

A real model decodes on the card (``model_server.py``: a random-weight Llama-shaped
decoder, bf16, greedy with its KV cache) behind an OpenAI-compatible API, and a whole SLO
session measures it as an external engine. The figures the session reports for each level
must agree with what is known independently of the harness: the model's weights (the
server's own count) are on the card, the card was busy while the model decoded, and the
energy counter's change over the level agrees with the power NVML sampled times the
level's length. Runs where an NVIDIA GPU, ``torch`` and ``nvidia-ml-py`` are there
(``pytest -m gpu``); elsewhere it skips with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

SERVER = Path(__file__).with_name("model_server.py")
MODEL = "llmslo-gpu-check"


def _no_gpu() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as e:  # ImportError, NVMLError
        return f"NVML is not usable: {e}"
    return None


@pytest.fixture(scope="module")
def model_server() -> Iterator[tuple[str, float]]:
    """(base URL, MiB of weights) of the model server, started on the GPU."""
    why = _no_gpu()
    if why:
        pytest.skip(f"needs an NVIDIA GPU: {why}")
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        weights, url = 0.0, ""
        for line in proc.stdout or ():
            if line.startswith("weights "):
                weights = float(line.split()[1])
            if line.startswith("ready on "):
                url = line.split("ready on ", 1)[1].strip()
                break
        assert url, f"the model server did not start (exit {proc.poll()})"
        yield url, weights
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


SLO_TEST = """
import pytest
from pytest_llmslo import assert_slo, ttft_p99

@pytest.mark.slo(concurrency=[1, 4], isl=128, osl=96, requests=24, warmup=2)
def test_gpu(slo_run):
    assert_slo(ttft_p99 < 60000)
"""


def test_nvml_figures_match_the_work_a_real_model_did(
    model_server: tuple[str, float], slo_pytester: pytest.Pytester
) -> None:
    url, weights_mib = model_server
    slo_pytester.makepyfile(test_gpu=SLO_TEST)
    # Where the package is on the path but not installed (a GPU host's own Python), the
    # plugin is named on the command line instead of found by its entry point.
    installed = any(e.name == "llmslo" for e in entry_points(group="pytest11"))
    plugin = () if installed else ("-p", "pytest_llmslo.plugin")
    result = slo_pytester.runpytest_subprocess(
        *plugin, "-p", "no:cacheprovider", "--engine=external", f"--engine-url={url}",
        f"--model={MODEL}", "--slo-json=r.json", "--junitxml=j.xml", "--signals-interval=0.2",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "J/token" in out, out
    doc = json.loads((slo_pytester.path / "r.json").read_text())
    assert len(doc["points"]) == 2
    for point in doc["points"]:
        s = point["summary"]
        gpu = s["signals"]["gpu"]
        print("level", point["level"], "duration_s", s["duration_s"], "gpu", gpu)
        assert gpu["source"] == "nvml" and gpu["devices"] >= 1
        # The weights the server put on the card are in the memory NVML saw in use.
        assert gpu["mem_used_mib_max"] >= weights_mib
        # The card was busy decoding: one request after another, back to back.
        assert gpu["util_pct_mean"] >= 5 and gpu["util_pct_max"] >= 10
        # Two NVML readings that share no code path: the energy counter's change over the
        # level, and the instantaneous power sampled during it times the level's length.
        duration = s["duration_s"]
        assert gpu["energy_j"] > 0 and gpu["power_w_mean"] > 0
        ratio = gpu["energy_j"] / (gpu["power_w_mean"] * duration)
        assert 0.5 < ratio < 2.0, (gpu, duration)
        per_token = s["signals"]["energy_j_per_token"]
        assert per_token == pytest.approx(gpu["energy_j"] / s["output_tokens"])
    xml = (slo_pytester.path / "j.xml").read_text()
    assert 'name="llmslo.gpu.energy_j"' in xml
