"""The testbed of a run in a few words, for the reports' titles: the model served, its
precision and the hardware it ran on (``describe``: ``Llama-3.1-70B-Instruct FP8 on 4x
H100-SXM-80GB (simulated)``).

The words come from the run's constants and each engine's metadata: a sim engine's
simulated setup (``metadata["simulated"]``) names what it stands for; another engine's
GPUs come from its pinned constants (``constants["per_engine"][engine]["hardware"]``);
without either, the document's ``model``, ``precision`` and ``hardware``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_llmslo.document.results import Results

__all__ = ["describe"]


def _simulated(results: Results, engine: str) -> Mapping[str, Any]:
    entry = results.engines.get(engine)
    sim = None if entry is None else entry.metadata.get("simulated")
    return sim if isinstance(sim, Mapping) else {}


def _hardware(hardware: Any) -> str | None:
    """``4x NVIDIA H100 80GB HBM3`` from a list of ``"NAME, MEMORY"`` GPU strings
    (``{"gpus": [...]}``), else the words of a mapping such as ``{"gpu": "4x H100"}``."""
    if isinstance(hardware, str):
        return hardware or None
    if not isinstance(hardware, Mapping):
        return None
    if "gpus" not in hardware:
        words = [str(v) for k, v in hardware.items() if isinstance(v, str) and k != "sim_profile"]
        return ", ".join(words) or None
    if not hardware["gpus"]:
        return None
    names = [str(g).split(",")[0].strip() for g in hardware["gpus"]]
    counts = dict.fromkeys(names, 0)
    for n in names:
        counts[n] += 1
    return " + ".join(f"{k}x {n}" if k > 1 else n for n, k in counts.items())


def _engine_words(results: Results, engine: str) -> tuple[str, str | None]:
    """What ``engine`` served (model and precision) and on what."""
    constants = results.constants
    own = (constants.get("per_engine") or {}).get(engine) or {}
    sim = _simulated(results, engine)
    model = sim.get("model") or own.get("model") or constants.get("model") or ""
    model = str(model).rstrip("/").rsplit("/", 1)[-1] if model else ""
    precision = own.get("precision") or sim.get("precision") or constants.get("precision")
    served = " ".join(str(x) for x in (model, precision) if x)
    if sim.get("hardware"):
        return served, f"{sim['hardware']} (simulated)"
    return served, _hardware(own.get("hardware", constants.get("hardware")))


def describe(results: Results) -> str:
    """The model, precision and hardware of the engines that were measured, in one line
    (empty when none is known); engines that differ are listed once each."""
    engines = list(dict.fromkeys(p.engine for p in results.points)) or list(results.engines)
    served: list[str] = []
    hardware: list[str] = []
    for engine in engines:
        what, where = _engine_words(results, engine)
        if what and what not in served:
            served.append(what)
        if where and where not in hardware:
            hardware.append(where)
    text = ", ".join(served)
    if hardware:
        text = f"{text} on {', '.join(hardware)}" if text else ", ".join(hardware)
    return text
