"""Doing a fault to a running engine (``inject``), on the target its kind and runtime have:

- ``drop`` and ``delay``: the proxy the harness put in front of the engine for the level
  (``faults.proxy``), whatever the engine;
- the **sim** (any runtime): ``POST /admin/fault`` (``sim/replicafaults.py``) kills, restarts or
  stalls one of its replicas; its own log of them is ``GET /admin/events``;
- an engine started here as processes or containers: ``kill`` and ``restart`` on the
  runtime (``runtimes/runtime.Runtime.kill``/``restart``: the process group SIGKILLed and
  started again, the container killed and started again), on the unit ``replica`` names
  (its role, e.g. ``decode-worker``, or its number in start order; the last by default:
  a Dynamo deployment's worker rather than its frontend); ``stall`` on the runtime too
  (the process group stopped then continued; the container paused then unpaused);
- an engine on **Kubernetes**: ``kill`` and ``restart`` on its started unit
  (``runtimes/kubernetes.KubeEngine``: a pod deleted with no grace period, or with its
  grace period; its controller makes a new one), on the pod ``replica`` names (its index
  among the pods behind the Service, or its name; the first by default). A pod cannot be
  stalled through the API.

Each returns what was done as JSON data; an engine that cannot take the fault raises
``ConfigError`` saying so, recorded on the fault (the level goes on).
"""

from __future__ import annotations

from typing import Any

from pytest_llmslo.engines.base import EngineHandle
from pytest_llmslo.engines.managed import StartedHere
from pytest_llmslo.engines.runtimes.runtime import PodFaults, Runtime, StartedUnit, UnitFaults
from pytest_llmslo.errors import ConfigError

from ..sim.admintoken import admin_headers
from .faultspec import Fault
from .proxy import FaultProxy

__all__ = ["inject", "pick_unit"]


def inject(
    handle: EngineHandle, fault: Fault, proxy: FaultProxy | None = None, timeout_s: float = 30.0
) -> dict[str, Any]:
    """Do ``fault`` to the engine ``handle`` (module docstring); what was done."""
    if fault.kind in ("drop", "delay"):
        if proxy is None:
            raise ConfigError(f"{fault.label}: no proxy runs in front of the engine")
        assert fault.for_s is not None
        if fault.kind == "drop":
            return proxy.drop(fault.rate, fault.for_s)
        return proxy.delay(fault.by_s, fault.for_s)
    config = handle.config
    if config.kind == "sim":
        return _sim(handle, fault, timeout_s)
    runtime: Runtime | None = None
    units: tuple[StartedUnit, ...] = ()
    if isinstance(handle, StartedHere):  # an engine not started here (external) has neither
        runtime, units = handle.runtime, tuple(handle.units)
    if config.runtime == "kubernetes":
        return _kubernetes(config, units, fault)
    if runtime is None or not units:
        raise ConfigError(
            f"engine {config.display_name!r} ({config.kind}, {config.runtime}) was not started "
            f"here: the harness cannot {fault.kind} it (drop and delay work on any engine)"
        )
    unit, index = pick_unit(units, fault.replica)
    target: Runtime | UnitFaults = runtime
    if not callable(getattr(runtime, fault.kind, None)):
        target = UnitFaults()  # its default: this runtime cannot
        target.name = str(getattr(runtime, "name", config.runtime))
    if fault.kind == "stall":
        assert fault.for_s is not None
        done = target.stall(unit, fault.for_s)
    elif fault.kind == "kill":
        done = target.kill(unit)
    else:
        done = target.restart(unit)
    return {"how": f"{config.runtime} {fault.kind}", "unit": index, **dict(done)}


def pick_unit(units: tuple[Any, ...], replica: str | None) -> tuple[Any, int]:
    """The unit ``replica`` names (its role or its number in start order; None: the
    last) and its number. ``ConfigError`` naming the units when none matches."""
    if replica is None:
        return units[-1], len(units) - 1
    for i, unit in enumerate(units):
        role = getattr(getattr(unit, "spec", None), "role", None)
        if replica == str(i) or (role is not None and replica == role):
            return unit, i
    names = ", ".join(
        f"{i} ({getattr(getattr(u, 'spec', None), 'role', '?')})" for i, u in enumerate(units)
    )
    raise ConfigError(f"no unit {replica!r} in the engine; its units: {names}")


def _kubernetes(config: Any, units: tuple[Any, ...], fault: Fault) -> dict[str, Any]:
    """``kill``/``restart`` of one pod through the engine's started unit (``KubeEngine``)."""
    if fault.kind == "stall":
        raise ConfigError(
            f"engine {config.display_name!r} runs on Kubernetes: a pod cannot be stalled "
            "through the API (kill or restart it, or stall the sim's replica on any runtime)"
        )
    unit = next((u for u in units if isinstance(u, PodFaults)), None)
    if unit is None:
        raise ConfigError(
            f"engine {config.display_name!r} (kubernetes) has no started unit to "
            f"{fault.kind}: was it started by this session?"
        )
    replica: int | str | None = fault.replica
    if isinstance(replica, str) and replica.isdigit():
        replica = int(replica)
    done = unit.kill(replica) if fault.kind == "kill" else unit.restart(replica)
    return {"how": f"kubernetes {fault.kind}", **dict(done)}


def _sim(handle: Any, fault: Fault, timeout_s: float) -> dict[str, Any]:
    import httpx

    body: dict[str, Any] = {"kind": fault.kind}
    if fault.replica is not None:
        body["replica"] = fault.replica
    if fault.kind == "restart":
        body["startup_s"] = fault.startup_s
    if fault.kind == "stall":
        body["for_s"] = fault.for_s
    with httpx.Client(timeout=timeout_s, trust_env=False) as client:
        resp = client.post(handle.base_url + "/admin/fault", json=body, headers=admin_headers())
    if not resp.is_success:
        raise ConfigError(f"POST /admin/fault answered HTTP {resp.status_code}: {resp.text[:300]}")
    return {"how": "POST /admin/fault", "asked": body, "answer": resp.json()}
