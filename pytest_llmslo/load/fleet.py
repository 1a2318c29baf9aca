"""A level's remote workers as the report sees them: one entry a worker (its name, its
clock, its own client health) in ``run.meta["remote"]``, and the reasons that make the
level invalid, each naming the worker.

``run.meta["traffic"]["workers"]`` keeps one line a worker (its clock offset and
uncertainty, CPU, lag, load share, validity), which ``metrics.summarize`` carries into the
level's summary and so into the results document.

The merged run's health (``health.assess`` over every worker) says whether the client as a
whole kept up; with workers on several hosts it also matters *which* one did not: a
level is invalid (so its verdict inconclusive) when any one worker was the bottleneck
(its schedule lag or turnaround, its in-flight profile against its share of the level, its
event loop, its CPU), when a worker's clock offset is known less precisely than
``max_clock_uncertainty_ms``, or when a worker was lost during the level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..records import Run
from ..runmeta import RunMeta
from .drive import WorkerResult
from .health import HealthThresholds, assess
from .remote_pool import RemoteLevel

__all__ = ["with_workers"]


def _entry(res: WorkerResult, level: RemoteLevel, th: HealthThresholds) -> dict[str, Any]:
    w = res.worker
    clock = level.clocks.get(w)
    entry: dict[str, Any] = {
        "worker": w,
        "name": level.names.get(w, str(w)),
        "requests": len(res.records),
        "clock": None if clock is None else clock.to_dict(),
        "lost": level.lost.get(w),
    }
    if w in level.lost:
        return entry
    h = assess([res], th, 1)
    entry.update(
        schedule_lag_p50_ms=h.schedule_lag_p50_ms,
        schedule_lag_p99_ms=h.schedule_lag_p99_ms,
        idle_share=h.idle_share,
        loop_lag_p99_ms=h.loop_lag_p99_ms,
        cpu_util=h.cpu_util,
        cpu_s=h.cpu_s,
        load_kind=h.load_kind,
        load_asked=h.load_asked,
        load_achieved=h.load_achieved,
        valid=h.valid,
        reasons=list(h.reasons),
    )
    return entry


def _brief(e: dict[str, Any]) -> dict[str, Any]:
    """A worker's entry as the results document keeps it."""
    clock = e["clock"] or {}
    asked = e.get("load_asked") or 0.0
    return {
        "name": e["name"],
        "requests": e["requests"],
        "offset_ms": (clock.get("before") or {}).get("offset_ms"),
        "uncertainty_ms": clock.get("uncertainty_ms"),
        "drift_ms": clock.get("drift_ms"),
        "cpu_util": e.get("cpu_util"),
        "schedule_lag_p99_ms": e.get("schedule_lag_p99_ms"),
        "load_share": e.get("load_achieved", 0.0) / asked if asked else None,
        "valid": e.get("valid", False),
        "lost": e["lost"],
    }


def _reasons(entries: Sequence[dict[str, Any]], th: HealthThresholds) -> list[str]:
    out: list[str] = []
    for e in entries:
        name = e["name"]
        if e["lost"] is not None:
            out.append(
                f"{name} was lost during the level ({e['lost'].splitlines()[0]}): its share of "
                "the load stopped there; what it sent before and what the other workers "
                "measured are kept"
            )
            continue
        out.extend(f"{name} was the bottleneck: {r}" for r in e["reasons"])
        clock = e["clock"]
        if clock is not None and clock["uncertainty_ms"] > th.max_clock_uncertainty_ms:
            out.append(
                f"{name}: its clock offset is known to ±{clock['uncertainty_ms']:.3f} ms "
                f"(> {th.max_clock_uncertainty_ms:g} ms, --client-max-clock): its requests "
                "cannot be placed against the other workers' that precisely"
            )
        elif clock is not None and clock["after"] is None:
            out.append(f"{name}: its clock could not be measured after the level")
    return out


def with_workers(
    run: Run, results: Sequence[WorkerResult], level: RemoteLevel, th: HealthThresholds
) -> Run:
    """``run`` with its remote workers' entries in its meta and their reasons, if any, in
    its health (which is then invalid)."""
    entries = [_entry(r, level, th) for r in sorted(results, key=lambda r: r.worker)]
    seen = {e["worker"] for e in entries}
    entries += [
        {"worker": w, "name": level.names.get(w, str(w)), "requests": 0, "clock": None,
         "lost": why}
        for w, why in sorted(level.lost.items()) if w not in seen
    ]  # fmt: skip
    reasons = _reasons(entries, th)
    meta = dict(run.meta)
    meta["remote"] = {
        "workers": entries,
        "lost": {level.names.get(w, str(w)): why for w, why in level.lost.items()},
        "clock_uncertainty_ms": max(
            (e["clock"]["uncertainty_ms"] for e in entries if e["clock"]), default=0.0
        ),
    }
    # Carried into the level's summary (``metrics.traffic``) and so into the results
    # document: one line a worker.
    meta["traffic"] = {**dict(meta.get("traffic") or {}), "workers": [_brief(e) for e in entries]}
    health = run.health
    if reasons:
        health = dataclasses.replace(health, valid=False, reasons=(*health.reasons, *reasons))
    return dataclasses.replace(run, health=health, meta=RunMeta.from_dict(meta))
