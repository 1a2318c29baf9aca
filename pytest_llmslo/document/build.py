"""The results document of a session (``schema`` has its layout), built from its
``Results``: the points as they were measured, each sweep with its knee and capacity, the
results at each knee, and each sweep restated as one self-contained report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_llmslo._version import __version__
from pytest_llmslo.document.jsonable import jsonable
from pytest_llmslo.document.results import EngineEntry, Results, Sweep
from pytest_llmslo.document.schema import HARNESS, SCHEMA, SCHEMA_VERSION
from pytest_llmslo.judged import judged_entry, judged_stat
from pytest_llmslo.sweep import (
    Knee,
    SweepPoint,
    point_attainment,
    point_goodput,
)

__all__ = ["build_document"]


def build_document(results: Results) -> dict[str, Any]:
    """The results document of ``results`` (see ``schema``), as JSON data. An engine that
    has points but no entry gets an empty one; each sweep's knee is the stored one or
    ``find_knee``'s (``Results.sweeps``); a test's capacity goes on its sweep of the same
    load mode."""
    points = results.points
    engines = dict(results.engines)
    for p in points:
        engines.setdefault(p.engine, EngineEntry())
    sweeps: list[dict[str, Any]] = []
    at_knee: list[dict[str, Any]] = []
    reports: list[dict[str, Any]] = []
    knee_of: dict[int, Knee] = {}
    for sweep in results.sweeps():
        knee_of.update(dict.fromkeys(sweep.indices, sweep.knee))
        sweeps.append(_sweep_entry(results, sweep))
        index = sweep.knee_point()
        at = None if index is None else points[index]
        if index is not None:
            at_knee.append(jsonable(_knee_result(points[index], index, sweep.knee)))
        report = _engine_report(
            results.constants, engines, sweep.engine, sweep.test, sweep.points, at
        )
        reports.append(jsonable(report))
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "harness": {"name": HARNESS, "version": __version__},
        "created_utc": results.created_utc,
        "complete": bool(results.complete),
        "constants": jsonable(dict(results.constants)),
        "engines": {name: e.to_dict() for name, e in engines.items()},
        "points": [
            jsonable({**p.to_dict(), "judged": judged_entry(p, knee_of.get(i))})
            for i, p in enumerate(points)
        ],
        "sweeps": sweeps,
        "results_at_knee": at_knee,
        "reports": reports,
    }


def _sweep_entry(results: Results, sweep: Sweep) -> dict[str, Any]:
    levels = sorted(
        {p.level.value: p.level for p in sweep.points}.values(), key=lambda lv: lv.value
    )
    capacity = results.capacities.get((sweep.engine, sweep.test))
    return {
        "engine": sweep.engine,
        "test": sweep.test,
        "mode": sweep.mode,
        "levels": [lv.label for lv in levels],
        "points": list(sweep.indices),
        "knee": jsonable(sweep.knee.to_dict()),
        "capacity": jsonable(capacity)
        if capacity is not None and capacity.mode == sweep.mode
        else None,
    }


def _knee_result(point: SweepPoint, index: int, knee: Knee) -> dict[str, Any]:
    s = point.summary
    return {
        "engine": point.engine,
        "test": point.test,
        "level": point.level.to_dict(),
        "label": point.level.label,
        "point": index,
        "status": knee.status,
        "goodput_tok_s": point_goodput(point),
        "output_tok_s": s.output_tok_s,
        "attainment": point_attainment(point),
        "ttft_p50_ms": judged_stat(point, "ttft", 50),
        "ttft_p99_ms": judged_stat(point, "ttft", 99),
        "itl_p50_ms": judged_stat(point, "itl", 50),
        "tpot_p50_ms": judged_stat(point, "tpot", 50),
        "e2e_p99_ms": judged_stat(point, "e2e", 99),
        "saturation_level": None
        if knee.saturation_level is None
        else knee.saturation_level.to_dict(),
    }


def _level_result(p: SweepPoint) -> dict[str, Any]:
    s = p.summary
    attainment = point_attainment(p)
    return {
        p.level.mode: p.level.value,
        "ttft_p50_ms": judged_stat(p, "ttft", 50),
        "ttft_p99_ms": judged_stat(p, "ttft", 99),
        "itl_p50_ms": judged_stat(p, "itl", 50),
        "output_tok_s": s.output_tok_s,
        "goodput_tok_s": point_goodput(p),
        "goodput_pct": None if attainment is None else 100.0 * attainment,
        "error_rate": s.error_rate,
        "outcome": p.outcome,
    }


def _asserted_slo(sweep: Sequence[SweepPoint]) -> list[str]:
    """The objectives a test asserted in its body (no marker objectives), from a verdict."""
    for p in sweep:
        if p.verdict is not None and p.verdict.results:
            return [r.objective.label for r in p.verdict.results]
    return []


def _engine_report(
    constants: Mapping[str, Any],
    engines: Mapping[str, EngineEntry],
    engine: str,
    test: str,
    sweep: Sequence[SweepPoint],
    at_knee: SweepPoint | None,
) -> dict[str, Any]:
    """One engine's sweep of one test as a self-contained record: the harness, what was
    served on what (for the sim engine, the setup it simulates), the dataset and SLO, every
    level and the results at the knee (``schema``'s ``reports``)."""
    entry = engines.get(engine) or EngineEntry()
    meta = entry.metadata
    own = (constants.get("per_engine") or {}).get(engine) or {}
    test_consts = (constants.get("tests") or {}).get(test) or {}
    simulated = meta.get("simulated") if isinstance(meta.get("simulated"), Mapping) else None
    hardware: Any = own.get("hardware", constants.get("hardware"))
    if simulated and simulated.get("hardware"):
        hardware = {"simulated": simulated["hardware"], **(hardware or {})}
    workload = test_consts.get("workload", constants.get("workload"))
    return {
        "harness": {"name": HARNESS, "version": __version__},
        "engine": {"name": engine, "kind": meta.get("kind"), "version": entry.version},
        "model": own.get("model", constants.get("model")),
        "precision": own.get("precision") or (simulated or {}).get("precision"),
        "hardware": hardware,
        "simulated": simulated,
        "dataset": {
            "path": test_consts.get("dataset", constants.get("dataset")),
            "workload": workload,
        },
        "slo": test_consts.get("slo") or _asserted_slo(sweep) or constants.get("slo"),
        "test": test,
        "mode": sweep[0].level.mode if sweep else None,
        "sweep": [_level_result(p) for p in sweep],
        "results_at_knee": None if at_knee is None else _level_result(at_knee),
    }
