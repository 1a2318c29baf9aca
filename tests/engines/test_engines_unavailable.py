"""Clear reasons (``EngineUnavailable``) when docker, a GPU or a package is missing."""

from __future__ import annotations

import pytest

from pytest_llmslo.engines import EngineConfig, plan_engine, start_engine
from pytest_llmslo.engines import _common as common
from pytest_llmslo.engines.launchplan import LaunchPlan
from pytest_llmslo.engines.runtimes import docker as dk
from pytest_llmslo.engines.runtimes import process as process_runtime
from pytest_llmslo.engines.tempdirs import remove_dirs
from pytest_llmslo.errors import EngineUnavailable


def test_unreachable_daemon(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(EngineUnavailable, match="docker daemon not reachable"):
        dk.docker_client()
    with pytest.raises(EngineUnavailable, match="docker daemon not reachable"):
        start_engine(EngineConfig(kind="sim", runtime="docker"))
    assert dk.reap_stale_containers() == []


def test_gpu_reason_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dk.shutil, "which", lambda name: None)
    monkeypatch.setattr(dk.Path, "exists", lambda self: False)
    assert "no NVIDIA GPU" in (dk.gpu_unavailable_reason({}) or "")


def test_gpu_reason_without_nvidia_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        dk.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None
    )
    monkeypatch.setattr(dk.Path, "exists", lambda self: False)
    assert "nvidia-container-toolkit" in (
        dk.gpu_unavailable_reason({"Runtimes": {"runc": {}}}) or ""
    )
    assert dk.gpu_unavailable_reason({"Runtimes": {"nvidia": {}}}) is None


def test_missing_package_for_process_engine(tmp_path) -> None:
    import sys

    cfg = EngineConfig(kind="vllm", model="m", python=sys.executable)
    with pytest.raises(EngineUnavailable, match="'vllm' is not installed"):
        start_engine(cfg)


def test_missing_python_for_process_engine(tmp_path) -> None:
    cfg = EngineConfig(kind="vllm", model="m", python=str(tmp_path / "nope" / "python"))
    with pytest.raises(EngineUnavailable, match="cannot run"):
        start_engine(cfg)


def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common.shutil, "which", lambda name: None)
    monkeypatch.setattr(common.Path, "exists", lambda self: False)


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("sglang", {}),
        ("trtllm", {}),
        ("dynamo", {"worker": "sglang"}),
        ("dynamo", {"worker": "trtllm", "mode": "disagg"}),
    ],
)
def test_gpu_only_process_engine_without_gpu_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, kind: str, options: dict
) -> None:
    _no_gpu(monkeypatch)
    # As if the engine's package were installed: the missing GPU is what stops it.
    monkeypatch.setattr(process_runtime, "require_module", lambda *a: None)
    cfg = EngineConfig(kind=kind, name="gpu-only", model="m", options=options)
    with pytest.raises(EngineUnavailable, match=r"gpu-only: no NVIDIA GPU on this machine"):
        start_engine(cfg)


@pytest.mark.parametrize(
    ("kind", "options"),
    [("vllm", {}), ("dynamo", {"worker": "vllm"}), ("dynamo", {"worker": "mocker"})],
)
def test_engines_that_run_without_gpu_are_not_refused(
    monkeypatch: pytest.MonkeyPatch, kind: str, options: dict
) -> None:
    _no_gpu(monkeypatch)
    monkeypatch.setattr(process_runtime, "require_module", lambda *a: None)
    launched: list[LaunchPlan] = []

    def start(self: object, plan: LaunchPlan) -> None:
        launched.append(plan)
        raise _Launched

    monkeypatch.setattr(process_runtime.ProcessRuntime, "start", start)
    cfg = EngineConfig(kind=kind, model="m", options=options)
    with pytest.raises(_Launched):
        start_engine(cfg)  # vLLM has a CPU build; the mocker needs no GPU
    assert len(launched) == 1
    remove_dirs(launched[0].temp_dirs)


class _Launched(Exception):
    """The checks passed and the units would start now."""


def test_gpu_check_uses_the_host_part_of_the_docker_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_gpu(monkeypatch)
    assert common.host_gpu_reason() == dk.gpu_unavailable_reason({"Runtimes": {"nvidia": {}}})
    monkeypatch.setattr(common.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert common.host_gpu_reason() is None


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [("0,1", "0,1"), ("device=2,3", "2,3"), (" device=5 ", "5"),
     ("all", None), ("2", None), ("none", None), (None, None)],
)  # fmt: skip
def test_process_engines_get_the_gpu_ids_they_are_given(gpus: str | None, expected) -> None:
    for kind in ("vllm", "sglang", "trtllm"):
        cfg = EngineConfig(kind=kind, model="m", gpus=gpus, env={"HF_TOKEN": "t"})
        (proc,) = plan_engine(cfg).processes
        assert proc.env.get("CUDA_VISIBLE_DEVICES") == expected, kind
        assert proc.env["HF_TOKEN"] == "t"


def test_env_cuda_visible_devices_wins_over_gpus() -> None:
    cfg = EngineConfig(kind="vllm", model="m", gpus="0,1", env={"CUDA_VISIBLE_DEVICES": "7"})
    (proc,) = plan_engine(cfg).processes
    assert proc.env["CUDA_VISIBLE_DEVICES"] == "7"
