"""Clear reasons (``EngineUnavailable``) when docker, a GPU or a package is missing."""

from __future__ import annotations

import pytest

from pytest_llmslo.engines import EngineConfig, start_engine
from pytest_llmslo.engines import docker as dk
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
