"""The exact commands and container configs each real-engine launcher produces, and that
every flag in them belongs to that engine's documented CLI.

SGLang and TensorRT-LLM do not run without a GPU, so their launchers are checked here
without running them; vLLM and Dynamo are also started for real (test_engines_vllm.py,
test_engines_dynamo.py). The flag sets below are copied from each engine's CLI source.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from docker.types import DeviceRequest

from pytest_llmslo.engines import EngineConfig, plan_engine
from pytest_llmslo.engines.runtimes import docker as dk
from pytest_llmslo.engines.runtimes.docker import container_specs
from pytest_llmslo.errors import ConfigError

# SGLang 0.5.21, python/sglang/srt/arg_groups/fields/*.py (ServerArgs fields turned into
# flags by arg_groups/arg_utils.py:add_cli_args_from_dataclass: --field-name plus the
# Arg(aliases=...)); the flags a launcher may emit or users commonly add.
SGLANG_FLAGS = {
    "--model-path", "--model", "--host", "--port", "--served-model-name", "--tp-size",
    "--tensor-parallel-size", "--dtype", "--quantization", "--context-length",
    "--mem-fraction-static", "--trust-remote-code", "--chunked-prefill-size",
    "--max-running-requests", "--enable-metrics", "--log-level", "--api-key",
    "--disaggregation-mode", "--disaggregation-transfer-backend",
    "--disaggregation-bootstrap-port",
}  # fmt: skip

# TensorRT-LLM, tensorrt_llm/commands/serve.py, the @click.option list of `serve`
# (NVIDIA/TensorRT-LLM, commit 00209af1). MODEL is the one positional argument.
TRTLLM_FLAGS = {
    "--tokenizer", "--custom_tokenizer", "--host", "--port", "--backend",
    "--custom_module_dirs", "--log_level", "--max_beam_width", "--max_batch_size",
    "--max_num_tokens", "--max_seq_len", "--tensor_parallel_size", "--tp_size",
    "--pipeline_parallel_size", "--pp_size", "--context_parallel_size", "--cp_size",
    "--moe_expert_parallel_size", "--ep_size", "--moe_cluster_parallel_size",
    "--cluster_size", "--gpus_per_node", "--free_gpu_memory_fraction",
    "--kv_cache_free_gpu_memory_fraction", "--num_postprocess_workers",
    "--trust_remote_code", "--revision", "--config", "--extra_llm_api_options",
    "--reasoning_parser", "--tool_parser", "--metadata_server_config_file", "--server_role",
    "--fail_fast_on_attention_window_too_large", "--otlp_traces_endpoint",
    "--disagg_cluster_uri", "--enable_chunked_prefill", "--media_io_kwargs",
    "--chat_template",
}  # fmt: skip

# vLLM 0.32.0, `python -m vllm.entrypoints.openai.api_server --help=all` (the same engine
# arguments as `vllm serve`); the flags the launcher emits (the KV transfer and KV events
# configs for Dynamo's disaggregated and KV-routed vLLM workers).
VLLM_FLAGS = {
    "--model", "--host", "--port", "--served-model-name", "--tensor-parallel-size",
    "--dtype", "--quantization", "--max-model-len", "--gpu-memory-utilization",
    "--max-num-seqs", "--enable-prefix-caching", "--enforce-eager", "--api-key",
    "--kv-transfer-config", "--kv-events-config",
}  # fmt: skip

# Dynamo 1.6.1: `python -m dynamo.frontend --help` and `python -m dynamo.mocker --help`
# of ai-dynamo 1.6.1; worker flags of dynamo/{vllm,trtllm}/backend_args.py (vLLM and SGLang
# workers take their engine's own flags above, plus --disaggregation-mode).
DYNAMO_FRONTEND_FLAGS = {
    "--http-host", "--http-port", "--discovery-backend", "--request-plane", "--event-plane",
    "--router-mode", "--namespace", "--model-name", "--model-path", "--kv-cache-block-size",
}  # fmt: skip
DYNAMO_MOCKER_FLAGS = {
    "--model-path", "--model-name", "--max-model-len", "--gpu-memory-utilization",
    "--speedup-ratio", "--response-replay-trace-path", "--disaggregation-mode",
    "--discovery-backend", "--request-plane", "--event-plane", "--num-workers",
}  # fmt: skip
DYNAMO_TRTLLM_FLAGS = {
    "--model", "--served-model-name", "--tensor-parallel-size", "--max-seq-len",
    "--free-gpu-memory-fraction", "--disaggregation-mode", "--extra-engine-args",
    "--discovery-backend", "--request-plane", "--event-plane", "--publish-kv-events",
}  # fmt: skip
DYNAMO_RUNTIME_FLAGS = {"--discovery-backend", "--request-plane", "--event-plane"}

DOCKER = dk.DockerRuntime()
HF_CACHE = dk.host_hf_cache()
GPU_ALL = [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]]}]
# What the docker SDK sends for --gpus all (DeviceRequest fills in the empty fields).
GPU_ALL_API = [dict(DeviceRequest(count=-1, capabilities=[["gpu"]]))]

GPU_CONFIG = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "tensor_parallel_size": 2,
    "dtype": "bfloat16",
    "max_model_len": 8192,
    "gpu_memory_utilization": 0.85,
    "port": 30001,
    "env": {"HF_TOKEN": "hf_secret_value"},
}


def flags(argv: list[str] | tuple[str, ...]) -> set[str]:
    return {a.split("=", 1)[0] for a in argv if a.startswith("--")}


def _value(argv: list[str] | tuple[str, ...], flag: str) -> str:
    """The value after ``flag``, which must appear exactly once."""
    assert list(argv).count(flag) == 1, (flag, argv)
    return argv[list(argv).index(flag) + 1]


def _labels_ok(labels: dict[str, str], kind: str) -> None:
    assert labels[dk.LABEL_SESSION] == dk.SESSION_ID
    assert labels[dk.LABEL_PID] == str(os.getpid())
    assert labels[dk.LABEL_KIND] == kind


# --- SGLang ----------------------------------------------------------------------------


def test_sglang_process_argv() -> None:
    cfg = EngineConfig(
        kind="sglang",
        name="sgl",
        python="/opt/sgl/bin/python",
        quantization="fp8",
        served_model_name="llama",
        **GPU_CONFIG,
    )
    plan = plan_engine(cfg)
    (proc,) = plan.processes
    assert list(proc.argv) == [
        "/opt/sgl/bin/python", "-m", "sglang.launch_server",
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
        "--host", "127.0.0.1", "--port", "30001",
        "--served-model-name", "llama",
        "--tp-size", "2",
        "--dtype", "bfloat16",
        "--quantization", "fp8",
        "--context-length", "8192",
        "--mem-fraction-static", "0.85",
    ]  # fmt: skip
    assert flags(proc.argv) <= SGLANG_FLAGS
    assert plan.model == "llama"
    assert proc.env == {"HF_TOKEN": "hf_secret_value"}


def test_sglang_container_config() -> None:
    cfg = EngineConfig(
        kind="sglang", runtime="docker", extra_args=("--enable-metrics",), **GPU_CONFIG
    )
    plan = plan_engine(cfg)
    (spec,) = container_specs(plan)
    kw = spec.run_kwargs()
    assert kw["image"] == "lmsysorg/sglang:v0.5.21"
    assert kw["command"] == [
        "python3", "-m", "sglang.launch_server",
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
        "--host", "127.0.0.1", "--port", "30001",
        "--tp-size", "2", "--dtype", "bfloat16", "--context-length", "8192",
        "--mem-fraction-static", "0.85", "--enable-metrics",
    ]  # fmt: skip
    assert "entrypoint" not in kw
    assert flags(kw["command"]) <= SGLANG_FLAGS
    assert kw["network_mode"] == "host" and kw["ipc_mode"] == "host"
    assert [dict(d) for d in kw["device_requests"]] == GPU_ALL_API
    assert kw["volumes"] == {HF_CACHE: {"bind": "/root/.cache/huggingface", "mode": "rw"}}
    assert kw["environment"] == {
        "HF_TOKEN": "hf_secret_value",
        "HF_HOME": "/root/.cache/huggingface",
    }
    _labels_ok(kw["labels"], "sglang")
    assert kw["detach"] is True
    assert kw["init"] is True
    assert DOCKER.known_version(plan) == "v0.5.21"
    # The secret is passed to the container but never shown.
    assert "hf_secret_value" not in repr(spec.describe())


# --- TensorRT-LLM ------------------------------------------------------------------------


def test_trtllm_process_argv(tmp_path: Path) -> None:
    cfg = EngineConfig(
        kind="trtllm",
        python="/opt/trt/bin/python",
        options={"config_dir": str(tmp_path), "backend": "pytorch"},
        **GPU_CONFIG,
    )
    (proc,) = plan_engine(cfg).processes
    yaml_path = str(tmp_path / "llm_api_options.yaml")
    assert list(proc.argv) == [
        "/opt/trt/bin/trtllm-serve", "meta-llama/Llama-3.1-8B-Instruct",
        "--host", "127.0.0.1", "--port", "30001",
        "--backend", "pytorch",
        "--tensor_parallel_size", "2",
        "--max_seq_len", "8192",
        "--free_gpu_memory_fraction", "0.85",
        "--config", yaml_path,
    ]  # fmt: skip
    assert flags(proc.argv) <= TRTLLM_FLAGS
    assert json.loads(Path(yaml_path).read_text()) == {"dtype": "bfloat16"}


def test_trtllm_container_config(tmp_path: Path) -> None:
    cfg = EngineConfig(
        kind="trtllm",
        runtime="docker",
        gpus="0,1",
        options={"config_dir": str(tmp_path)},
        **GPU_CONFIG,
    )
    plan = plan_engine(cfg)
    (spec,) = container_specs(plan)
    kw = spec.run_kwargs()
    # A tag NVIDIA documents (docker pull in the TensorRT-LLM 1.3.0rc24 docs).
    assert kw["image"] == "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc24"
    assert DOCKER.known_version(plan) == "1.3.0rc24"
    assert kw["command"][:2] == ["trtllm-serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert flags(kw["command"]) <= TRTLLM_FLAGS
    assert [dict(d) for d in kw["device_requests"]] == [
        dict(DeviceRequest(device_ids=["0", "1"], capabilities=[["gpu"]]))
    ]
    assert spec.device_requests == (
        {"Driver": "", "Count": 0, "DeviceIDs": ["0", "1"], "Capabilities": [["gpu"]]},
    )
    assert kw["network_mode"] == "host" and kw["ipc_mode"] == "host"
    # The generated --config file is visible inside the container at the same path.
    assert kw["volumes"][str(tmp_path)] == {"bind": str(tmp_path), "mode": "rw"}
    assert kw["volumes"][HF_CACHE]["bind"] == "/root/.cache/huggingface"
    _labels_ok(kw["labels"], "trtllm")
    assert plan.model == "meta-llama/Llama-3.1-8B-Instruct"


def test_trtllm_generated_config_dir_is_temporary(tmp_path: Path) -> None:
    made = plan_engine(EngineConfig(kind="trtllm", model="m", dtype="bfloat16"))
    (folder,) = made.temp_dirs
    assert made.processes[0].argv[-1] == os.path.join(folder, "llm_api_options.yaml")
    shutil.rmtree(folder)
    given = plan_engine(
        EngineConfig(kind="trtllm", model="m", dtype="bfloat16",
                     options={"config_dir": str(tmp_path)})
    )  # fmt: skip
    assert given.temp_dirs == ()  # the user's folder is never removed
    assert plan_engine(EngineConfig(kind="trtllm", model="m")).temp_dirs == ()


@pytest.mark.parametrize(
    ("extra", "match"),
    [({"quantization": "fp8"}, "no quantization flag"), ({"served_model_name": "x"}, "served")],
)
def test_trtllm_rejects_what_it_cannot_express(extra: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        plan_engine(EngineConfig(kind="trtllm", model="m", **extra))


# --- vLLM --------------------------------------------------------------------------------


def test_vllm_process_argv() -> None:
    cfg = EngineConfig(
        kind="vllm",
        python="/v/bin/python",
        quantization="fp8",
        served_model_name="llama",
        **GPU_CONFIG,
    )
    (proc,) = plan_engine(cfg).processes
    assert list(proc.argv) == [
        "/v/bin/python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", "meta-llama/Llama-3.1-8B-Instruct",
        "--host", "127.0.0.1", "--port", "30001",
        "--served-model-name", "llama",
        "--tensor-parallel-size", "2",
        "--dtype", "bfloat16",
        "--quantization", "fp8",
        "--max-model-len", "8192",
        "--gpu-memory-utilization", "0.85",
    ]  # fmt: skip
    assert flags(proc.argv) <= VLLM_FLAGS


def test_vllm_serve_entrypoint_and_bad_entrypoint() -> None:
    cfg = EngineConfig(
        kind="vllm", python="/v/bin/python", model="m", port=8000, options={"entrypoint": "serve"}
    )
    assert plan_engine(cfg).processes[0].argv[:3] == ("/v/bin/vllm", "serve", "m")
    with pytest.raises(ConfigError, match="Valid entrypoints: api_server, serve"):
        plan_engine(EngineConfig(kind="vllm", model="m", options={"entrypoint": "x"}))


def test_vllm_container_config() -> None:
    cfg = EngineConfig(kind="vllm", runtime="docker", host="0.0.0.0", **GPU_CONFIG)
    plan = plan_engine(cfg)
    (spec,) = container_specs(plan)
    kw = spec.run_kwargs()
    assert kw["image"] == "vllm/vllm-openai:v0.32.0"
    assert kw["entrypoint"] == ["vllm", "serve"]
    assert kw["command"] == [
        "meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port", "30001",
        "--tensor-parallel-size", "2", "--dtype", "bfloat16", "--max-model-len", "8192",
        "--gpu-memory-utilization", "0.85",
    ]  # fmt: skip
    assert flags(kw["command"]) <= VLLM_FLAGS
    # Bound to every interface on request, but the harness still talks to loopback.
    assert plan.base_url == "http://127.0.0.1:30001"
    assert [dict(d) for d in kw["device_requests"]] == GPU_ALL_API
    assert DOCKER.known_version(plan) == "v0.32.0"


@pytest.mark.parametrize("runtime", ["process", "docker"])
@pytest.mark.parametrize("form", [("--api-key", "sk-123"), ("--api-key=sk-123",)])
def test_vllm_api_key_goes_to_the_environment(runtime: str, form: tuple[str, ...]) -> None:
    # On the command line `ps` shows the key to every user; vLLM reads VLLM_API_KEY when
    # --api-key is absent.
    cfg = EngineConfig(
        kind="vllm", runtime=runtime, model="m", port=8000, extra_args=("--seed", "1", *form)
    )
    plan = plan_engine(cfg)
    if runtime == "docker":
        (spec,) = container_specs(plan)
        argv, env = spec.run_kwargs()["command"], spec.run_kwargs()["environment"]
    else:
        (proc,) = plan.processes
        argv, env = list(proc.argv), dict(proc.env)
    assert "sk-123" not in " ".join(argv) and "--api-key" not in " ".join(argv)
    assert argv[-2:] == ["--seed", "1"]
    assert env["VLLM_API_KEY"] == "sk-123"


def test_local_model_dir_is_mounted_read_only(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    cfg = EngineConfig(kind="vllm", runtime="docker", model=str(model), port=8000)
    (spec,) = container_specs(plan_engine(cfg))
    volumes = spec.run_kwargs()["volumes"]
    assert volumes[str(model)] == {"bind": str(model), "mode": "ro"}
    # The Hugging Face cache stays writable: the engine downloads into it.
    assert volumes[dk.host_hf_cache()]["mode"] == "rw"


def test_model_is_required() -> None:
    for kind in ("vllm", "sglang", "trtllm", "dynamo"):
        with pytest.raises(ConfigError, match="needs model="):
            plan_engine(EngineConfig(kind=kind))


def test_gpus_none_means_no_device_request() -> None:
    cfg = EngineConfig(
        kind="vllm", runtime="docker", model="m", gpus="none", image="vllm/vllm-openai-cpu:v0.32.0"
    )
    (spec,) = container_specs(plan_engine(cfg))
    assert spec.run_kwargs()["device_requests"] == []
    assert not spec.needs_gpu


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        (None, GPU_ALL),
        ("all", GPU_ALL),
        ("2", [{"Driver": "", "Count": 2, "DeviceIDs": None, "Capabilities": [["gpu"]]}]),
        (
            "device=1,3",
            [{"Driver": "", "Count": 0, "DeviceIDs": ["1", "3"], "Capabilities": [["gpu"]]}],
        ),
        ("none", []),
    ],
)
def test_device_requests(gpus: str | None, expected: list) -> None:
    assert dk.device_requests_for(gpus) == expected


# --- Dynamo ------------------------------------------------------------------------------


def test_dynamo_mocker_processes(tmp_path: Path) -> None:
    cfg = EngineConfig(
        kind="dynamo",
        model="/models/tiny",
        served_model_name="tiny",
        python="/d/bin/python",
        port=8080,
        options={"worker": "mocker", "file_kv_dir": str(tmp_path)},
    )
    plan = plan_engine(cfg)
    frontend, worker = plan.processes
    assert list(frontend.argv) == [
        "/d/bin/python", "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
        "--http-port", "8080", "--discovery-backend", "file", "--request-plane", "tcp",
        "--event-plane", "zmq",
    ]  # fmt: skip
    trace = str(tmp_path / "replay-trace.jsonl")
    assert list(worker.argv) == [
        "/d/bin/python", "-m", "dynamo.mocker", "--model-path", "/models/tiny",
        "--model-name", "tiny", "--discovery-backend", "file", "--request-plane", "tcp",
        "--event-plane", "zmq", "--response-replay-trace-path", trace,
    ]  # fmt: skip
    assert flags(frontend.argv) <= DYNAMO_FRONTEND_FLAGS
    assert flags(worker.argv) <= DYNAMO_MOCKER_FLAGS
    for p in plan.processes:
        assert p.env["DYN_FILE_KV"] == str(tmp_path)
        assert p.env["DYN_TCP_RPC_HOST"] == "127.0.0.1"
        assert p.env["DYN_EVENT_PLANE_HOST"] == "127.0.0.1"
    rows = [json.loads(line) for line in Path(trace).read_text().splitlines()]
    assert rows and all(len(r["output_token_ids"]) == r["output_length"] for r in rows)


def test_dynamo_vllm_disagg_processes_get_their_gpus(tmp_path: Path) -> None:
    cfg = EngineConfig(
        kind="dynamo",
        python="/d/bin/python",
        options={
            "worker": "vllm",
            "mode": "disagg",
            "prefill_workers": 1,
            "decode_workers": 2,
            "file_kv_dir": str(tmp_path),
            "prefill_args": ["--enforce-eager"],
        },
        **GPU_CONFIG,
    )
    plan = plan_engine(cfg)
    frontend, prefill, d1, d2 = plan.processes
    assert prefill.argv[1:3] == ("-m", "dynamo.vllm")
    assert prefill.argv[-1] == "--enforce-eager"
    assert "--disaggregation-mode" in prefill.argv
    assert prefill.argv[prefill.argv.index("--disaggregation-mode") + 1] == "prefill"
    assert d1.argv[d1.argv.index("--disaggregation-mode") + 1] == "decode"
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in (prefill, d1, d2)] == ["0,1", "2,3", "4,5"]
    worker_flags = flags(prefill.argv) - DYNAMO_RUNTIME_FLAGS - {"--disaggregation-mode"}
    assert worker_flags <= VLLM_FLAGS
    assert "CUDA_VISIBLE_DEVICES" not in frontend.env
    # Dynamo 1.6.1 refuses a prefill worker without --kv-transfer-config (ValueError in
    # dynamo/vllm/args.py, update_dynamo_config_with_engine); its
    # examples/backends/vllm/launch/disagg.sh gives both sides NIXL with kv_both.
    for w in (prefill, d1, d2):
        assert json.loads(_value(w.argv, "--kv-transfer-config")) == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
        }
    # Workers on one host: each NIXL side channel listens on a port of its own.
    side = [int(w.env["VLLM_NIXL_SIDE_CHANNEL_PORT"]) for w in (prefill, d1, d2)]
    assert len(set(side)) == 3 and plan.port not in side
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT" not in frontend.env


def test_dynamo_vllm_disagg_user_values_win(tmp_path: Path) -> None:
    mine = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
    cfg = EngineConfig(
        kind="dynamo",
        model="m",
        env={"VLLM_NIXL_SIDE_CHANNEL_PORT": "20097"},
        options={
            "worker": "vllm",
            "mode": "disagg",
            "file_kv_dir": str(tmp_path),
            "prefill_args": ["--kv-transfer-config", mine],
        },
    )
    _, prefill, decode = plan_engine(cfg).processes
    assert _value(prefill.argv, "--kv-transfer-config") == mine
    assert "NixlConnector" in _value(decode.argv, "--kv-transfer-config")
    assert prefill.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "20097"
    # argparse's underscore spelling counts as given too.
    cfg = EngineConfig(
        kind="dynamo",
        model="m",
        extra_args=(f"--kv_transfer_config={mine}",),
        options={"worker": "vllm", "mode": "disagg", "file_kv_dir": str(tmp_path)},
    )
    for w in plan_engine(cfg).processes[1:]:
        assert "--kv-transfer-config" not in w.argv
        assert w.argv[-1] == f"--kv_transfer_config={mine}"


def test_dynamo_vllm_kv_router_gets_kv_events_per_worker(tmp_path: Path) -> None:
    cfg = EngineConfig(
        kind="dynamo",
        model="m",
        options={"worker": "vllm", "workers": 2, "router_mode": "kv", "file_kv_dir": str(tmp_path)},
    )
    plan = plan_engine(cfg)
    frontend, w1, w2 = plan.processes
    assert _value(frontend.argv, "--router-mode") == "kv"
    events = [json.loads(_value(w.argv, "--kv-events-config")) for w in (w1, w2)]
    # Dynamo 1.6.1's vLLM worker publishes KV events only with a kv_events_config that
    # enables them (dynamo/vllm/args.py create_kv_events_config, main.py); the publisher is
    # read by the same worker, so it stays on loopback, on a port of its own per worker.
    for e in events:
        assert e["publisher"] == "zmq" and e["enable_kv_cache_events"] is True
        assert e["endpoint"].startswith("tcp://127.0.0.1:")
    ports = {int(e["endpoint"].rsplit(":", 1)[1]) for e in events}
    assert len(ports) == 2 and plan.port not in ports
    # Aggregated workers need no KV transfer and no side channel.
    assert "--kv-transfer-config" not in w1.argv
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT" not in w1.env
    # Without the KV router nothing is published; a user's own config is kept.
    plain = EngineConfig(
        kind="dynamo", model="m", options={"worker": "vllm", "file_kv_dir": str(tmp_path)}
    )
    assert "--kv-events-config" not in plan_engine(plain).processes[1].argv
    own = EngineConfig(
        kind="dynamo",
        model="m",
        extra_args=("--kv-events-config", '{"enable_kv_cache_events": true}'),
        options={"worker": "vllm", "router_mode": "kv", "file_kv_dir": str(tmp_path)},
    )
    w = plan_engine(own).processes[1]
    assert _value(w.argv, "--kv-events-config") == '{"enable_kv_cache_events": true}'


def test_dynamo_sglang_disagg_defaults(tmp_path: Path) -> None:
    cfg = EngineConfig(
        kind="dynamo",
        model="m",
        options={
            "worker": "sglang",
            "mode": "disagg",
            "prefill_workers": 2,
            "decode_workers": 1,
            "file_kv_dir": str(tmp_path),
        },
    )
    plan = plan_engine(cfg)
    _, p1, p2, decode = plan.processes
    # As Dynamo's examples/backends/sglang/launch/disagg.sh: NIXL (SGLang's default is
    # Mooncake), and a bootstrap server port for each prefill worker on this host.
    for w in (p1, p2, decode):
        assert _value(w.argv, "--disaggregation-transfer-backend") == "nixl"
        assert flags(w.argv) - DYNAMO_RUNTIME_FLAGS <= SGLANG_FLAGS
    boot = [int(_value(w.argv, "--disaggregation-bootstrap-port")) for w in (p1, p2)]
    assert len(set(boot)) == 2 and plan.port not in boot
    assert "--disaggregation-bootstrap-port" not in decode.argv
    # The user's choices win.
    cfg = dataclasses.replace(
        cfg,
        options={
            **cfg.options,
            "prefill_args": ["--disaggregation-bootstrap-port", "12345"],
            "decode_args": ["--disaggregation-transfer-backend=mooncake"],
        },
    )
    _, p1, p2, decode = plan_engine(cfg).processes
    assert _value(p1.argv, "--disaggregation-bootstrap-port") == "12345"
    assert "--disaggregation-transfer-backend" not in decode.argv
    assert decode.argv[-1] == "--disaggregation-transfer-backend=mooncake"
    # Aggregated SGLang workers get none of it.
    agg = EngineConfig(
        kind="dynamo", model="m", options={"worker": "sglang", "file_kv_dir": str(tmp_path)}
    )
    w = plan_engine(agg).processes[1]
    assert not {a for a in w.argv if a.startswith("--disaggregation")}


def test_dynamo_trtllm_disagg_engine_args(tmp_path: Path) -> None:
    cfg = EngineConfig(
        kind="dynamo",
        model="m",
        options={
            "worker": "trtllm",
            "mode": "disagg",
            "file_kv_dir": str(tmp_path),
            "router_mode": "kv",
        },
    )
    plan = plan_engine(cfg)
    _, prefill, decode = plan.processes
    # Dynamo's disaggregated TRT-LLM configs (examples/backends/trtllm/engine_configs/
    # qwen3/prefill.yaml, decode.yaml) set a KV cache transceiver on both sides.
    yamls = {}
    for w in (prefill, decode):
        path = _value(w.argv, "--extra-engine-args")
        yamls[_value(w.argv, "--disaggregation-mode")] = json.loads(Path(path).read_text())
        assert "--publish-kv-events" in w.argv  # the KV router needs its events
        assert flags(w.argv) <= DYNAMO_TRTLLM_FLAGS
    assert yamls == {
        "prefill": {
            "cache_transceiver_config": {"backend": "DEFAULT"},
            "disable_overlap_scheduler": True,
        },
        "decode": {"cache_transceiver_config": {"backend": "DEFAULT"}},
    }
    gen_dir = os.path.dirname(_value(prefill.argv, "--extra-engine-args"))
    assert gen_dir in plan.temp_dirs and str(tmp_path) not in plan.temp_dirs
    # In docker the generated files are seen at the same path.
    docker = plan_engine(dataclasses.replace(cfg, runtime="docker"))
    for spec in container_specs(docker)[1:]:
        path = _value(spec.command, "--extra-engine-args")
        assert spec.mounts[os.path.dirname(path)] == os.path.dirname(path)
    # A user's own YAML is used instead (it must set cache_transceiver_config itself).
    own = dataclasses.replace(
        cfg,
        extra_args=("--extra-engine-args", "/cfg/mine.yaml", "--no-publish-kv-events"),
        options={**cfg.options},
    )
    for w in plan_engine(own).processes[1:]:
        assert _value(w.argv, "--extra-engine-args") == "/cfg/mine.yaml"
        assert "--publish-kv-events" not in w.argv
    # Aggregated without the KV router: nothing added.
    agg = EngineConfig(
        kind="dynamo", model="m", options={"worker": "trtllm", "file_kv_dir": str(tmp_path)}
    )
    w = plan_engine(agg).processes[1]
    assert "--extra-engine-args" not in w.argv and "--publish-kv-events" not in w.argv


def test_dynamo_temporary_dirs_are_listed_for_removal(tmp_path: Path) -> None:
    made = plan_engine(EngineConfig(kind="dynamo", model="m", options={"worker": "mocker"}))
    (kv_dir,) = made.temp_dirs
    assert made.processes[0].env["DYN_FILE_KV"] == kv_dir
    # A directory the user names is never the launcher's to remove.
    given = plan_engine(
        EngineConfig(
            kind="dynamo", model="m", options={"worker": "mocker", "file_kv_dir": str(tmp_path)}
        )
    )
    assert given.temp_dirs == ()
    shutil.rmtree(kv_dir)


def test_dynamo_sglang_and_trtllm_worker_flags(tmp_path: Path) -> None:
    for worker, allowed in (("sglang", SGLANG_FLAGS), ("trtllm", DYNAMO_TRTLLM_FLAGS)):
        cfg = EngineConfig(
            kind="dynamo", options={"worker": worker, "file_kv_dir": str(tmp_path)}, **GPU_CONFIG
        )
        _, w = plan_engine(cfg).processes
        assert w.argv[1:3] == ("-m", f"dynamo.{worker}")
        assert flags(w.argv) - DYNAMO_RUNTIME_FLAGS <= allowed, worker


def test_dynamo_containers(tmp_path: Path) -> None:
    cfg = EngineConfig(
        kind="dynamo",
        runtime="docker",
        options={"worker": "sglang", "mode": "disagg", "file_kv_dir": str(tmp_path)},
        **{**GPU_CONFIG, "tensor_parallel_size": 1},
    )
    plan = plan_engine(cfg)
    frontend, prefill, decode = container_specs(plan)
    for spec in container_specs(plan):
        kw = spec.run_kwargs()
        assert kw["image"] == "nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.6.1"
        assert kw["network_mode"] == "host" and kw["ipc_mode"] == "host"
        assert kw["volumes"][str(tmp_path)] == {"bind": str(tmp_path), "mode": "rw"}
        assert kw["environment"]["DYN_FILE_KV"] == str(tmp_path)
        _labels_ok(kw["labels"], "dynamo")
    assert frontend.command[:3] == ("python3", "-m", "dynamo.frontend")
    assert frontend.device_requests == ()
    assert dict(prefill.device_requests[0])["DeviceIDs"] == ["0"]
    assert dict(decode.device_requests[0])["DeviceIDs"] == ["1"]
    assert DOCKER.known_version(plan) == "1.6.1"
    names = {s.name for s in container_specs(plan)}
    assert len(names) == 3


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"worker": "tgi"}, "Valid values: vllm, sglang, trtllm, mocker"),
        ({"mode": "split"}, "Valid values: agg, disagg"),
        ({"workers": 0}, "integer >= 1"),
        ({"discovery": "zk"}, "Valid values: file, etcd"),
    ],
)
def test_dynamo_bad_options(options: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        plan_engine(EngineConfig(kind="dynamo", model="m", options=options))


def test_dynamo_not_enough_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cfg = EngineConfig(
        kind="dynamo",
        model="m",
        tensor_parallel_size=2,
        gpus="0,1",
        options={"worker": "vllm", "workers": 2},
    )
    with pytest.raises(ConfigError, match="need 4 GPUs"):
        plan_engine(cfg)
    # The discovery directory made before the config was found bad is gone again.
    assert list(tmp_path.iterdir()) == []


def test_sim_container_config() -> None:
    cfg = EngineConfig(kind="sim", runtime="docker", port=8011, model="m")
    (spec,) = container_specs(plan_engine(cfg))
    kw = spec.run_kwargs()
    assert kw["image"] == "pytest-llmslo/sim:local"
    assert kw["command"][:3] == ["python3", "-m", "pytest_llmslo.sim"]
    assert kw["device_requests"] == []
    assert not spec.pull
    assert sys.executable not in kw["command"]


def test_local_model_dir_is_mounted_into_containers(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    cfg = EngineConfig(
        kind="dynamo",
        runtime="docker",
        model=str(model),
        options={"worker": "mocker", "discovery": "etcd"},
    )
    plan = plan_engine(cfg)
    frontend, worker = container_specs(plan)
    assert worker.mounts[str(model)] == str(model)
    trace = worker.command[worker.command.index("--response-replay-trace-path") + 1]
    assert os.path.dirname(trace) in worker.mounts
    assert worker.device_requests == ()  # the mocker needs no GPU
    assert frontend.command[-6:] == ("--discovery-backend", "etcd", "--request-plane", "tcp",
                                     "--event-plane", "zmq")  # fmt: skip
    assert plan.temp_dirs == (os.path.dirname(trace),)
    shutil.rmtree(os.path.dirname(trace))


# --- Dynamo's own parsers ------------------------------------------------------------------
# Where ai-dynamo is installed (``local.dynamo_python()``, set up by .ci/engines.sh), the
# argv the launcher builds is parsed by Dynamo itself rather than checked against the
# hand-copied flag sets above.

_PARSE = r"""
import json, sys
payload = json.load(sys.stdin)
out = []
for unit in payload:
    kind, argv = unit["kind"], unit["argv"]
    if kind == "frontend":
        sys.argv = ["dynamo.frontend", *argv]
        from dynamo.frontend.main import parse_args
        c, _, _ = parse_args()
        keys = ["http_host", "http_port", "discovery_backend", "request_plane",
                "event_plane", "router_mode"]
        out.append({k: getattr(c, k) for k in keys})
    elif kind == "mocker":
        from dynamo.mocker.args import parse_args
        a = vars(parse_args(argv))
        keys = ["model_path", "model_name", "max_model_len", "gpu_memory_utilization",
                "speedup_ratio", "response_replay_trace_path", "disaggregation_mode",
                "discovery_backend", "request_plane", "event_plane"]
        out.append({k: a.get(k) for k in keys})
    elif kind == "trtllm":
        from dynamo.trtllm.args import parse_args
        c = parse_args(argv)
        keys = ["model", "served_model_name", "tensor_parallel_size", "max_seq_len",
                "free_gpu_memory_fraction", "extra_engine_args", "publish_kv_events"]
        d = {k: getattr(c, k) for k in keys}
        d["disaggregation_mode"] = c.disaggregation_mode.value
        out.append(d)
    elif kind == "vllm":
        from dynamo.vllm.args import parse_args
        c = parse_args(argv)
        e = c.engine_args
        kt = e.kv_transfer_config
        out.append({
            "model": c.model, "served_model_name": c.served_model_name,
            "disaggregation_mode": c.disaggregation_mode.value,
            "tensor_parallel_size": e.tensor_parallel_size, "dtype": e.dtype,
            "max_model_len": e.max_model_len,
            "gpu_memory_utilization": e.gpu_memory_utilization,
            "kv_transfer": kt and {"kv_connector": kt.kv_connector, "kv_role": kt.kv_role},
            "use_kv_events": c.use_kv_events,
            "kv_events_endpoint": e.kv_events_config and e.kv_events_config.endpoint,
        })
print("PARSED " + json.dumps(out))
"""

# dynamo.trtllm.backend_args reads defaults off TensorRT-LLM's BuildConfig (the only use
# of tensorrt_llm while parsing); TensorRT-LLM has no CPU build, so a stand-in gives them.
_TRTLLM_STUB = """
from types import SimpleNamespace as _F
class BuildConfig:
    model_fields = {k: _F(default=v) for k, v in {"max_batch_size": 2048,
        "max_num_tokens": 8192, "max_seq_len": None, "max_beam_width": 1}.items()}
"""


def _parse_with_dynamo(
    python: Path, units: list[tuple[str, list[str]]], pythonpath: Sequence[Path] = ()
) -> list[dict]:
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in pythonpath)}
    payload = json.dumps([{"kind": k, "argv": list(a)} for k, a in units])
    out = subprocess.run([str(python), "-c", _PARSE], input=payload, capture_output=True,
                         text=True, timeout=600, env=env, cwd="/")  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("PARSED ")]
    parsed: list[dict] = json.loads(line[len("PARSED ") :])
    return parsed


def _dynamo_python() -> Path:
    from engines_helpers import DYNAMO_PYTHON, missing_module

    reason = missing_module(DYNAMO_PYTHON, "dynamo.frontend")
    if reason:
        pytest.skip(f"ai-dynamo is not installed: {reason}")
    return DYNAMO_PYTHON


def _args(spec_argv: tuple[str, ...], module: str) -> list[str]:
    """The arguments after ``python -m MODULE``."""
    assert spec_argv[1:3] == ("-m", module), spec_argv
    return list(spec_argv[3:])


def test_dynamo_frontend_and_mocker_argv_parse_with_dynamos_parsers(tmp_path: Path) -> None:
    python = _dynamo_python()
    cfg = EngineConfig(
        kind="dynamo",
        model="/models/tiny",
        served_model_name="tiny",
        port=8080,
        max_model_len=1024,
        gpu_memory_utilization=0.5,
        options={
            "worker": "mocker",
            "mode": "disagg",
            "router_mode": "kv",
            "speedup_ratio": 2.0,
            "file_kv_dir": str(tmp_path),
        },
    )
    frontend, prefill, decode = plan_engine(cfg).processes
    parsed = _parse_with_dynamo(
        python,
        [
            ("frontend", _args(frontend.argv, "dynamo.frontend")),
            ("mocker", _args(prefill.argv, "dynamo.mocker")),
            ("mocker", _args(decode.argv, "dynamo.mocker")),
        ],
    )
    assert parsed[0] == {
        "http_host": "127.0.0.1", "http_port": 8080, "discovery_backend": "file",
        "request_plane": "tcp", "event_plane": "zmq", "router_mode": "kv",
    }  # fmt: skip
    trace = str(tmp_path / "replay-trace.jsonl")
    for got, role in zip(parsed[1:], ("prefill", "decode"), strict=True):
        assert got == {
            "model_path": "/models/tiny", "model_name": "tiny", "max_model_len": 1024,
            "gpu_memory_utilization": 0.5, "speedup_ratio": 2.0,
            "response_replay_trace_path": trace, "disaggregation_mode": role,
            "discovery_backend": "file", "request_plane": "tcp", "event_plane": "zmq",
        }  # fmt: skip


def test_dynamo_trtllm_worker_argv_parses_with_dynamos_parser(tmp_path: Path) -> None:
    python = _dynamo_python()
    stub = tmp_path / "stub" / "tensorrt_llm"
    (stub / "llmapi").mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    (stub / "llmapi" / "__init__.py").write_text(_TRTLLM_STUB)
    cfg = EngineConfig(
        kind="dynamo",
        options={"worker": "trtllm", "mode": "disagg", "router_mode": "kv",
                 "file_kv_dir": str(tmp_path)},
        **{**GPU_CONFIG, "dtype": None},
    )  # fmt: skip
    plan = plan_engine(cfg)
    _, prefill, decode = plan.processes
    units = [("trtllm", _args(w.argv, "dynamo.trtllm")) for w in (prefill, decode)]
    parsed = _parse_with_dynamo(python, units, [tmp_path / "stub"])
    for got, w, role in zip(parsed, (prefill, decode), ("prefill", "decode"), strict=True):
        assert got == {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "served_model_name": "meta-llama/Llama-3.1-8B-Instruct",
            "tensor_parallel_size": 2, "max_seq_len": 8192, "free_gpu_memory_fraction": 0.85,
            "extra_engine_args": _value(w.argv, "--extra-engine-args"),
            "publish_kv_events": True, "disaggregation_mode": role,
        }  # fmt: skip
    for d in plan.temp_dirs:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.dynamo
@pytest.mark.vllm
def test_dynamo_vllm_worker_argv_parses_with_dynamos_vllm_parser(tmp_path: Path) -> None:
    """Dynamo's vLLM worker parser needs vLLM, which the Dynamo venv lacks (its vLLM extra
    is the GPU build): Dynamo's own package is put on the path of the vLLM CPU venv's
    Python, and parses there with vLLM's engine arguments."""
    from engines_helpers import VLLM_PYTHON, missing_module

    dyn_python = _dynamo_python()
    reason = missing_module(VLLM_PYTHON, "vllm")
    if reason:
        pytest.skip(f"vLLM is not installed: {reason}")
    import subprocess

    code = "import dynamo.vllm, os; print(os.path.dirname(dynamo.__path__[0]))"
    where = subprocess.run([str(dyn_python), "-c", code], capture_output=True, text=True,
                           timeout=120, check=True).stdout.strip()  # fmt: skip
    only_dynamo = tmp_path / "path"
    only_dynamo.mkdir()
    (only_dynamo / "dynamo").symlink_to(Path(where) / "dynamo")
    disagg = EngineConfig(
        kind="dynamo",
        options={"worker": "vllm", "mode": "disagg", "file_kv_dir": str(tmp_path)},
        **GPU_CONFIG,
    )
    kv = EngineConfig(
        kind="dynamo",
        options={"worker": "vllm", "router_mode": "kv", "file_kv_dir": str(tmp_path)},
        **GPU_CONFIG,
    )
    _, prefill, decode = plan_engine(disagg).processes
    _, agg = plan_engine(kv).processes
    workers = (prefill, decode, agg)
    units = [("vllm", _args(w.argv, "dynamo.vllm")) for w in workers]
    parsed = _parse_with_dynamo(VLLM_PYTHON, units, [only_dynamo])
    nixl = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    common = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "served_model_name": "meta-llama/Llama-3.1-8B-Instruct",
        "tensor_parallel_size": 2, "dtype": "bfloat16", "max_model_len": 8192,
        "gpu_memory_utilization": 0.85,
    }  # fmt: skip
    endpoint = json.loads(_value(agg.argv, "--kv-events-config"))["endpoint"]
    assert parsed == [
        {**common, "disaggregation_mode": "prefill", "kv_transfer": nixl,
         "use_kv_events": False, "kv_events_endpoint": None},
        {**common, "disaggregation_mode": "decode", "kv_transfer": nixl,
         "use_kv_events": False, "kv_events_endpoint": None},
        {**common, "disaggregation_mode": "agg", "kv_transfer": None,
         "use_kv_events": True, "kv_events_endpoint": endpoint},
    ]  # fmt: skip
