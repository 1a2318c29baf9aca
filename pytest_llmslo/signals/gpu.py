"""GPU telemetry over a level: NVML (``nvidia-ml-py``), or a DCGM exporter's /metrics.

NVML: every visible device (``CUDA_VISIBLE_DEVICES`` is not consulted: an engine in a
container sees other indices), sampled with the engine scrapes: utilisation (%), memory
used (MiB) and power (W) as mean and max, and the energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver loaded, Volta and later) as
its change over the level, in joules. Without ``pynvml`` or without a GPU, ``NvmlSampler.open``
returns None and the GPU figures are absent: no error. A DCGM exporter gives the same four
figures from its default counters (``names.DCGM``). Energy per output token (J/token) is
the level's energy over its output tokens (``per_token``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .exposition import Snapshot
from .names import DCGM


class NvmlSampler:
    """Samples every NVML device; ``open()`` is None where NVML is not there."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles
        self._util: list[float] = []
        self._mem: list[float] = []
        self._power: list[float] = []
        self._energy0: list[float | None] = [self._energy(h) for h in handles]

    @classmethod
    def open(cls) -> NvmlSampler | None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
        try:
            nvml.nvmlInit()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception:  # NVMLError: no driver, no device
            return None
        if not handles:
            return None
        return cls(nvml, handles)

    def _energy(self, h: Any) -> float | None:
        try:
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h))
        except Exception:  # not supported before Volta
            return None

    def sample(self) -> None:
        nvml = self._nvml
        for h in self._handles:
            try:
                self._util.append(float(nvml.nvmlDeviceGetUtilizationRates(h).gpu))
                self._mem.append(float(nvml.nvmlDeviceGetMemoryInfo(h).used) / 2**20)
                self._power.append(float(nvml.nvmlDeviceGetPowerUsage(h)) / 1e3)
            except Exception:
                continue

    def result(self) -> dict[str, Any]:
        ends = [self._energy(h) for h in self._handles]
        deltas = [
            b - a
            for a, b in zip(self._energy0, ends, strict=True)
            if a is not None and b is not None
        ]
        energy = sum(deltas) / 1e3 if len(deltas) == len(ends) else None
        out: dict[str, Any] = {"source": "nvml", "devices": len(self._handles)}
        out.update(_stats("util_pct", self._util))
        out.update(_stats("mem_used_mib", self._mem))
        out.update(_stats("power_w", self._power))
        if energy is not None:
            out["energy_j"] = energy
        return out


def _stats(key: str, values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    return {f"{key}_mean": sum(values) / len(values), f"{key}_max": max(values)}


def from_dcgm(
    before: Snapshot, during: Sequence[Snapshot], after: Snapshot
) -> dict[str, Any] | None:
    """The GPU figures of a DCGM exporter's scrapes (None when it has none of its names)."""
    if DCGM["gpu_util"] not in after.values and DCGM["energy_mj"] not in after.values:
        return None
    samples = list(during) or [after]
    out: dict[str, Any] = {"source": "dcgm", "devices": after.counts.get(DCGM["gpu_util"], 0)}
    for key, name in (
        ("util_pct", "gpu_util"),
        ("mem_used_mib", "mem_used_mib"),
        ("power_w", "power_w"),
    ):
        vals = [s.values[DCGM[name]] for s in samples if DCGM[name] in s.values]
        if key == "util_pct":  # summed over devices: the mean device
            n = max(after.counts.get(DCGM[name], 1), 1)
            vals = [v / n for v in vals]
        out.update(_stats(key, vals))
    a, b = before.values.get(DCGM["energy_mj"]), after.values.get(DCGM["energy_mj"])
    if a is not None and b is not None:
        out["energy_j"] = max(b - a, 0.0) / 1e3
    return out


def per_token(gpu: dict[str, Any] | None, output_tokens: float) -> float | None:
    """Joules per output token over the level."""
    if not gpu or gpu.get("energy_j") is None or output_tokens <= 0:
        return None
    return float(gpu["energy_j"]) / output_tokens
