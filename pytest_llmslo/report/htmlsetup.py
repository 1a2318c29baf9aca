"""The HTML report's setup (``html.py``): the run's constants (harness, model served,
client, each engine's version, kind, model, precision and hardware, every constant the
document holds) and what each test ran (workload, lengths, levels, warm-up, requests)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from pytest_llmslo.document.results import Results
from pytest_llmslo.report import htmlruns
from pytest_llmslo.report.htmlcells import kv_table
from pytest_llmslo.report.markdown import warmup_text

__all__ = ["run_constants", "settings_of_test"]


def _flat(value: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, str]]:
    if isinstance(value, Mapping) and value and depth < 3:
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out.extend(_flat(v, f"{prefix}.{k}" if prefix else str(k), depth + 1))
        return out
    if isinstance(value, str):
        return [(prefix, value)]
    return [(prefix, json.dumps(value, sort_keys=True, default=str))]


def _text(value: Any) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return "–"
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_text(v)}" for k, v in value.items() if v not in (None, ""))
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value)
    return str(value)


def _setup(meta: Mapping[str, Any], own: Mapping[str, Any]) -> tuple[str, str, str]:
    """An engine's (model, precision, hardware) as the page shows them: for the sim engine
    the setup it simulates, else what the engine reported (its GPUs, its machine)."""
    sim = meta.get("simulated")
    if isinstance(sim, Mapping):
        simulated = f"{_text(sim.get('hardware'))} (simulated: {_text(sim.get('deployment'))})"
        return _text(sim.get("model")), _text(sim.get("precision")), simulated
    precision = own.get("precision") or meta.get("quantization") or meta.get("dtype")
    hardware = own.get("hardware") or meta.get("gpus") or meta.get("hardware")
    return _text(own.get("model") or meta.get("model")), _text(precision), _text(hardware)


def _engines_table(results: Results) -> str:
    per_engine = results.constants.get("per_engine")
    per_engine = per_engine if isinstance(per_engine, Mapping) else {}
    rows = []
    for name in dict.fromkeys(p.engine for p in results.points):
        entry = results.engines.get(name)
        meta = dict(entry.metadata) if entry else {}
        own = per_engine.get(name)
        model, precision, hardware = _setup(meta, own if isinstance(own, Mapping) else {})
        cells: tuple[str, ...] = (
            name,
            _text(meta.get("kind")),
            _text(entry.version if entry else None),
        )
        cells += (model, precision, hardware)
        rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>" for h in ("engine", "kind", "version", "model", "precision", "hardware")
    )
    return f'<table class="engines"><tr>{head}</tr>{"".join(rows)}</table>'


def run_constants(results: Results, runs: htmlruns.Runs) -> str:
    """The run's constants section: harness, model, client, each engine, and every constant
    the document holds (folded)."""
    harness = results.harness
    consts = results.constants
    shown = [
        ("harness", f"{harness.get('name', '')} {harness.get('version', '')}".strip()),
        ("model served", _text(consts.get("model"))),
        ("client", _text(consts.get("client"))),
        ("results made", results.created_utc or "–"),
    ]
    parts = [
        '<section class="consts" id="constants"><h2>Run constants</h2>',
        kv_table(shown, "run"),
        _engines_table(results),
        "<details><summary>Every constant the results hold</summary>",
        kv_table(_flat({k: v for k, v in consts.items() if k != "per_engine"}), "all"),
    ]
    if isinstance(consts.get("per_engine"), Mapping):
        parts.append("<h3>Per engine</h3>" + kv_table(_flat(consts["per_engine"]), "per-engine"))
    parts.append("</details>")
    parts.extend(runs.constants_lines())
    parts.append("</section>")
    return "\n".join(parts)


def _warmup(results: Results, test: str, setting: Any) -> str:
    """The warm-up each level really ran (``warm-up 16-48 (c16 16, ...)``), as report.md
    says it; the setting where the document has neither."""
    points = [p for p in results.points if p.test == test]
    ran = warmup_text(points, setting)
    return ran.removeprefix("warm-up ") if ran else _text(setting)


def settings_of_test(results: Results, test: str, slo: str) -> str:
    """What the test ran: its workload or dataset, lengths, levels, warm-up and requests."""
    tests = results.constants.get("tests")
    own = tests.get(test) if isinstance(tests, Mapping) else None
    own = own if isinstance(own, Mapping) else {}
    workload = own.get("workload") or results.constants.get("workload")
    workload = workload if isinstance(workload, Mapping) else {}
    dataset = own.get("dataset") or workload.get("path")
    kind = _text(workload.get("kind"))
    if dataset:
        kind += f" {Path(str(dataset)).name}"
    lengths = f"ISL {_text(own.get('isl'))}, OSL {_text(own.get('osl'))}"
    if workload.get("distribution"):
        lengths += f" ({workload['distribution']})"
    rows = [
        ("SLO", slo),
        ("workload", kind),
        ("lengths (tokens)", lengths),
        ("levels", _text(own.get("levels"))),
        ("requests per level", _text(own.get("requests"))),
        ("warm-up", _warmup(results, test, own.get("warmup"))),
        ("duration bound (s)", _text(own.get("duration_s"))),
    ]
    return kv_table(rows, "setup")
