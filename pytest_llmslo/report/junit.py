"""JUnit properties: flat ``("llmslo.<name>", str)`` pairs.

``testcase_properties`` goes on each test case (the plugin appends it to
``item.user_properties``, which reaches the JUnit file under the default xunit2 without the
``record_property`` warning); ``suite_properties`` carries the run constants (model,
workload, precision, hardware, ...) as suite properties.

Names use only ``[A-Za-z0-9_.]`` so every CI system that parses them (Jenkins, GitLab,
Buildkite) keeps them intact; values are ``str()``. Milliseconds and tok/s are rounded to
3 decimals (µs is below the clock's meaning for a request); attainment is a fraction 0..1.
A value that is undefined (no samples, no objectives) is left out rather than written as an
empty string, so that numeric parsers never meet a non-number.
"""

from __future__ import annotations

import math
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmslo.catalog import CATALOGUE, parse_stat
from pytest_llmslo.document.jsonable import SupportsToDict
from pytest_llmslo.judged import (
    LevelOutcome,
    judged_stat,
    level_outcome,
    stat_count,
    weight_note,
)
from pytest_llmslo.sweep import Knee, SweepPoint, run_status

if TYPE_CHECKING:
    from pytest_llmslo.metrics import RunSummary
    from pytest_llmslo.slo import Verdict

__all__ = [
    "PREFIX",
    "cold_start_properties",
    "fault_properties",
    "outcome_properties",
    "property_name",
    "quality_properties",
    "scale_up_properties",
    "set_properties",
    "suite_properties",
    "testcase_properties",
]

PREFIX = "llmslo."

_BAD = re.compile(r"[^A-Za-z0-9_.]+")


def _latencies() -> list[tuple[str, str, float | str]]:
    """(property, metric, stat): the latency figures each test case carries, each catalogue
    metric's headline statistics (``catalog.Metric.headline``): ``ttft_p99_ms``, ..."""
    return [
        (f"{m.name}_{st}_ms", m.name, parse_stat(st))
        for m in CATALOGUE.values()
        for st in m.headline
    ]


#: The engine signals a test case's properties carry (``signals.<name>``).
_SIGNALS = (
    "running_mean",
    "waiting_mean",
    "kv_usage_max",
    "preemptions",
    "prefix_hit_rate",
    "queue_time_p50_ms",
    "queue_time_p99_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "client_minus_engine_ttft_p99_ms",
    "prompt_tok_s",
    "generation_tok_s",
    "energy_j_per_token",
)


def property_name(*parts: object) -> str:
    """``llmslo.`` + the parts joined by ``.``, each reduced to ``[A-Za-z0-9_]`` runs."""
    cleaned = [_BAD.sub("_", str(p)).strip("_.") for p in parts]
    return PREFIX + ".".join(c for c in cleaned if c)


def _value(v: object) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        r = round(v, 3)
        return str(int(r)) if r.is_integer() and abs(r) < 1e15 else repr(r)
    return str(v)


def testcase_properties(
    summary: RunSummary,
    verdict: Verdict | None,
    *,
    engine: str | None = None,
    test: str | None = None,
    interrupted: bool = False,
    knee: Knee | None = None,
    point: SweepPoint | None = None,
) -> list[tuple[str, str]]:
    """The flat properties of one test case's run (and its verdict, when it evaluated one);
    ``knee``, its sweep's knee once the sweep is done, makes a miss above it the expected
    miss every other output calls it (``outcome_properties``); ``point``, the level as
    kept, brings its quality verdict and whether it ran the workload asked to its outcome.

    Keys: ``engine``, ``test``, ``level``, ``level_mode``, ``level_value``, ``requests``,
    ``completed``, ``failed``, ``error_rate``, ``failures.<kind>``, ``duration_s``, the
    latency percentiles (``ttft_p50_ms``, ``ttft_p99_ms``, ``itl_p50_ms``, ``tpot_p50_ms``,
    ``e2e_p99_ms``, ...) each with its sample count (``ttft_p99_n``) and, for a tail
    percentile from fewer samples than it needs, how the gate judged it
    (``ttft_p99_too_few``: ``judged.weight_note``), ``output_tok_s``, ``total_tok_s``, ``req_s``,
    ``goodput_tok_s``, ``goodput_req_s``, ``attainment``, ``valid``, ``invalid_reasons``,
    the most frequent error messages (``errors.<n>.{kind,count,message}``), the client's
    health (``client.{schedule_lag_p99_ms,schedule_lag_max_ms,loop_lag_p99_ms,
    loop_lag_max_ms,cpu_util,processes,idle_share,stalled_share,receive_stamps,load_kind,
    load_asked,load_achieved,load_share}``: the load applied against the load asked),
    ``short_outputs``, ``usage_mismatches`` (completed requests whose usage disagreed with
    their stream), ``level_timeout``,
    the traffic (``traffic.{offered_req_s,sent_req_s,cap_delayed,cap_wait_max_ms}``,
    multi-turn ``turn.<k>.{ttft_p50_ms,ttft_p99_ms}`` and
    ``sessions.{started,completed,duration_p50_s,duration_p99_s}``),
    ``verdict`` (pass/fail/invalid/unchecked), ``outcome`` and ``outcome_reason``
    (``judged.level_outcome``), ``strict``, and per objective
    ``slo.<metric_stat>.{objective,op,threshold_ms,observed_ms,bound_ms,count,samples_needed,passed}``.
    """
    out = _Properties()
    point = point or SweepPoint(
        engine or "", test or "", summary.level, summary, verdict, interrupted=interrupted
    )
    _level(out, point, engine, test)
    _traffic(out, summary)
    _signals(out, summary)
    _health(out, summary, verdict)
    _verdict(out, summary, verdict)
    out.items.extend(outcome_properties(level_outcome(point, knee)))
    return out.items


def outcome_properties(outcome: LevelOutcome) -> list[tuple[str, str]]:
    """``llmslo.outcome`` and ``llmslo.outcome_reason``: the level's outcome as
    ``judged.level_outcome`` gives it, the one every output prints."""
    return [
        (property_name("outcome"), outcome.outcome),
        (property_name("outcome_reason"), outcome.reason),
    ]


def _judged(v: float | None) -> float | str | None:
    if v is not None and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


class _Properties:
    """The properties of one test case, in order; an undefined value is left out."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, name: str, value: object) -> None:
        text = _value(value)
        if text is not None:
            self.items.append((name, text))


def _level(out: _Properties, point: SweepPoint, engine: str | None, test: str | None) -> None:
    """What ran and what came of its requests: the level, the counts, the most frequent
    errors, the latencies and the throughput."""
    add = out.add
    summary = point.summary
    level = summary.level
    add(property_name("engine"), engine)
    add(property_name("test"), test)
    add(property_name("level"), level.label)
    add(property_name("level_mode"), level.mode)
    add(property_name("level_value"), level.value)
    if level.mode == "rate":
        add(property_name("level_arrival"), level.arrival)
    add(property_name("requests"), summary.requests)
    add(property_name("completed"), summary.completed)
    add(property_name("failed"), summary.failed)
    add(property_name("error_rate"), summary.error_rate)
    for kind, count in sorted((summary.failures or {}).items()):
        add(property_name("failures", kind), count)
    for i, err in enumerate(summary.errors, 1):
        add(property_name("errors", i, "kind"), err.kind)
        add(property_name("errors", i, "count"), err.count)
        add(property_name("errors", i, "message"), err.message)
    add(property_name("duration_s"), summary.duration_s)
    for name, metric, stat in _latencies():
        # The figure as the gate judged it, as every other report prints it; ``inf`` where
        # failed requests decide it.
        add(property_name(name), _judged(judged_stat(point, metric, stat)))
        # Its weight: the samples behind it, and how the gate judged it when they are fewer
        # than the percentile needs.
        add(property_name(name.removesuffix("_ms") + "_n"), stat_count(point, metric, stat))
        add(property_name(name.removesuffix("_ms") + "_too_few"), weight_note(point, metric, stat))
    add(property_name("output_tok_s"), summary.output_tok_s)
    add(property_name("total_tok_s"), summary.total_tok_s)
    add(property_name("req_s"), summary.req_s)


def _traffic(out: _Properties, summary: RunSummary) -> None:
    """The offered against the sent rate, a cap's waits, TTFT by turn."""
    add = out.add
    traffic = summary.traffic or {}
    for name in ("offered_req_s", "sent_req_s"):
        add(property_name("traffic", name), traffic.get(name))
    cap = traffic.get("cap")
    if isinstance(cap, Mapping):
        add(property_name("traffic", "cap_delayed"), cap.get("delayed"))
        add(property_name("traffic", "cap_wait_max_ms"), cap.get("wait_max_ms"))
    for turn in traffic.get("turns") or ():
        k = int(turn["turn"]) + 1
        add(property_name("turn", k, "ttft_p50_ms"), turn.get("ttft_p50_ms"))
        add(property_name("turn", k, "ttft_p99_ms"), turn.get("ttft_p99_ms"))


def _signals(out: _Properties, summary: RunSummary) -> None:
    """The engine's own signals and GPU figures, then the conversations' (multi-turn)."""
    add = out.add
    signals = summary.signals or {}
    if signals:
        add(property_name("signals", "engines"), "+".join(signals.get("engines") or ()) or None)
        add(property_name("signals", "note"), signals.get("note"))
        for name in _SIGNALS:
            add(property_name("signals", name), signals.get(name))
        gpu = signals.get("gpu")
        if isinstance(gpu, Mapping):
            for name in ("util_pct_mean", "mem_used_mib_max", "power_w_mean", "energy_j"):
                add(property_name("gpu", name), gpu.get(name))
    sessions = (summary.traffic or {}).get("sessions")
    if isinstance(sessions, Mapping):
        for name in ("started", "completed", "duration_p50_s", "duration_p99_s"):
            add(property_name("sessions", name), sessions.get(name))


def _health(out: _Properties, summary: RunSummary, verdict: Verdict | None) -> None:
    """Goodput (the verdict's, from the objectives the test asserted), the client's
    health, and what the requests' outputs and usage said."""
    add = out.add
    for name in ("goodput_tok_s", "goodput_req_s", "attainment"):
        value = None if verdict is None else getattr(verdict, name)
        add(property_name(name), getattr(summary, name) if value is None else value)
    add(property_name("valid"), summary.valid)
    if summary.invalid_reasons:
        add(property_name("invalid_reasons"), "; ".join(summary.invalid_reasons))
    health = summary.health
    if health is not None:
        for name in (
            "schedule_lag_p99_ms",
            "schedule_lag_max_ms",
            "loop_lag_p99_ms",
            "loop_lag_max_ms",
            "cpu_util",
            "processes",
            "idle_share",
            "stalled_share",
            "receive_stamps",
        ):
            add(property_name("client", name), getattr(health, name))
        if health.load_kind:
            for name in ("load_kind", "load_asked", "load_achieved", "load_share"):
                add(property_name("client", name), getattr(health, name))
    if summary.output_pinned:
        add(property_name("short_outputs"), summary.short_outputs)
    add(property_name("usage_mismatches"), summary.usage_mismatches)
    add(property_name("level_timeout"), summary.level_timeout)


def _verdict(out: _Properties, summary: RunSummary, verdict: Verdict | None) -> None:
    """The outcome, and per objective what it asked and what was observed."""
    add = out.add
    status = run_status(summary, verdict)
    add(property_name("verdict"), status)
    if summary.early_stop:
        add(property_name("early_stop"), summary.early_stop)
    add(property_name("throughput_window"), summary.throughput_window)
    if verdict is None:
        return
    add(property_name("strict"), verdict.strict)
    add(property_name("min_attainment"), verdict.min_attainment)
    add(property_name("min_goodput_tok_s"), verdict.min_goodput_tok_s)
    seen: dict[str, int] = {}
    for r in verdict.results:
        obj = r.objective
        base = _objective_key(obj)
        seen[base] = seen.get(base, 0) + 1
        key = base if seen[base] == 1 else f"{base}_{seen[base]}"
        add(property_name("slo", key, "objective"), obj.label)
        add(property_name("slo", key, "op"), obj.op)
        add(property_name("slo", key, "threshold_ms"), obj.threshold)
        add(property_name("slo", key, "observed_ms"), r.observed)
        add(property_name("slo", key, "bound_ms"), r.bound)
        add(property_name("slo", key, "count"), r.count)
        add(property_name("slo", key, "samples_needed"), r.samples_needed)
        add(property_name("slo", key, "passed"), r.passed)


# Its name starts with "test": keep pytest from collecting it where a test module imports it.
# attr-defined: a function declares no __test__; pytest reads it all the same.
testcase_properties.__test__ = False  # type: ignore[attr-defined]


def _objective_key(obj: Any) -> str:
    """The objective's flat name (``ttft_p99``, ``itl_p50``, ``e2e_p999``, ``tpot_mean``)."""
    return _BAD.sub("_", str(obj.name))


def cold_start_properties(
    cold: Mapping[str, Any] | None, engine: str | None = None
) -> list[tuple[str, str]]:
    """An engine's cold start (``engines.coldstart``): ``llmslo.cold_start.<phase>`` (each
    phase's seconds from the start: ``spawned_s``, ``port_open_s``, ``ready_s``,
    ``model_listed_s``, ``first_token_s``, ...) and ``llmslo.cold_start.runtime``; with
    ``engine`` under ``llmslo.engines.<engine>.cold_start`` (the suite's, one per engine).
    A phase not seen is left out."""
    if not isinstance(cold, Mapping) or not isinstance(cold.get("phases"), Mapping):
        return []
    head: tuple[str, ...] = ("engines", engine, "cold_start") if engine else ("cold_start",)
    out = _Properties()
    out.add(property_name(*head, "runtime"), cold.get("runtime"))
    for phase, seconds in cold["phases"].items():
        out.add(property_name(*head, phase), seconds)
    return out.items


def scale_up_properties(record: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """A level's scale-up (``metrics.timetocapacity``): ``llmslo.scale_up.{at,replicas,asked_s,
    done_s,before_tok_s,after_tok_s,gain,shows_at_s,capacity_s,window_s,share,error,why}``."""
    if not isinstance(record, Mapping):
        return []
    out = _Properties()
    asked = record.get("asked") or {}
    out.add(property_name("scale_up", "at"), asked.get("at"))
    out.add(property_name("scale_up", "replicas"), asked.get("replicas"))
    for key in ("asked_s", "done_s", "before_tok_s", "after_tok_s", "gain", "shows_at_s",
                "capacity_s", "window_s", "share", "error", "why"):  # fmt: skip
        out.add(property_name("scale_up", key), record.get(key))
    return out.items


def fault_properties(records: Sequence[Mapping[str, Any]] | None) -> list[tuple[str, str]]:
    """A level's faults (``faults.faultcost``), numbered from 0: ``llmslo.fault.<i>.{kind,
    at,asked_s,asked_unix,failed,before_tok_s,goodput_min_tok_s,goodput_dip,attainment_min,
    recovered_at_s,recovery_s,window_s,share,error,why}``."""
    out = _Properties()
    for i, record in enumerate(records or ()):
        if not isinstance(record, Mapping):
            continue
        asked = record.get("asked") or {}
        out.add(property_name("fault", str(i), "kind"), asked.get("kind"))
        out.add(property_name("fault", str(i), "at"), asked.get("at"))
        for key in ("asked_s", "asked_unix", "failed", "before_tok_s", "goodput_min_tok_s",
                    "goodput_dip", "attainment_min", "recovered_at_s", "recovery_s",
                    "window_s", "share", "error", "why"):  # fmt: skip
            out.add(property_name("fault", str(i), key), record.get(key))
    return out.items


def quality_properties(record: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """A level's eval answers (``evals.answers``) and their verdict: ``llmslo.quality.{task,
    items,correct,failed,accuracy,outcome}`` and per objective, numbered from 0,
    ``llmslo.quality.<i>.{objective,lower,upper,outcome}``."""
    if not isinstance(record, Mapping):
        return []
    out = _Properties()
    for key in ("task", "items", "correct", "failed"):
        out.add(property_name("quality", key), record.get(key))
    items, correct = record.get("items"), record.get("correct")
    if isinstance(items, int) and isinstance(correct, int) and items:
        out.add(property_name("quality", "accuracy"), correct / items)
    verdict = record.get("verdict")
    if isinstance(verdict, Mapping):
        out.add(property_name("quality", "outcome"), verdict.get("outcome"))
        for i, obj in enumerate(verdict.get("objectives") or ()):
            for key in ("objective", "lower", "upper", "outcome"):
                out.add(property_name("quality", str(i), key), obj.get(key))
    return out.items


def suite_properties(constants: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The run constants flattened to ``llmslo.<path>`` pairs: nested mappings by ``.``,
    lists of scalars joined by ``,``, lists of mappings by index (``llmslo.slo.0.metric``);
    objects with ``to_dict()`` are expanded. None values are left out."""
    out: list[tuple[str, str]] = []
    _flatten(constants, (), out)
    return out


def _is_scalar(v: object) -> bool:
    return not isinstance(v, (Mapping, list, tuple, SupportsToDict))


def _flatten(value: Any, path: tuple[str, ...], out: list[tuple[str, str]]) -> None:
    if isinstance(value, SupportsToDict) and not isinstance(value, type):
        value = value.to_dict()
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(v, (*path, str(k)), out)
        return
    if isinstance(value, (list, tuple)):
        if all(_is_scalar(v) for v in value):
            texts = [t for t in (_value(v) for v in value) if t is not None]
            if path:
                out.append((property_name(*path), ",".join(texts)))
            return
        for i, v in enumerate(value):
            _flatten(v, (*path, str(i)), out)
        return
    text = _value(value)
    if text is not None and path:
        out.append((property_name(*path), text))


def testcase_address(nodeid: str, prefix: str | None = None) -> tuple[str, str]:
    """The (classname, name) pytest's JUnit XML gives the test ``nodeid`` (its
    ``mangle_test_address``, and ``--junitprefix``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    classname = ".".join(names[:-1])
    if prefix:
        classname = f"{prefix}.{classname}"
    return classname, names[-1]


SYSTEM_OUT_HEADER = " llmslo ".center(80, "-")


def add_system_out(xml_path: str | os.PathLike[str], texts: Mapping[str, str], *,
                   prefix: str | None = None) -> int:  # fmt: skip
    """Add each test's SLO numbers (``texts`` by node id) to its ``system-out`` in a JUnit
    XML file pytest wrote, whatever ``junit_logging`` says: pytest writes there only the
    captured output, never a plugin's report section. Appended under a ``- llmslo -``
    header when pytest wrote a system-out, the whole system-out otherwise. The file is
    rewritten atomically; returns how many test cases got the text."""
    if not texts:
        return 0
    tree = ET.parse(xml_path)
    by_address = {testcase_address(n, prefix): t for n, t in texts.items() if t}
    done = 0
    for case in tree.getroot().iter("testcase"):
        text = by_address.get((case.get("classname", ""), case.get("name", "")))
        if not text:
            continue
        outs = case.findall("system-out")
        if outs:
            node = outs[0]
            if text not in (node.text or ""):
                node.text = f"{node.text or ''}{SYSTEM_OUT_HEADER}\n{text}\n"
        else:
            node = ET.SubElement(case, "system-out")
            node.text = text
        done += 1
    _write_tree(tree, xml_path)
    return done


def set_properties(
    xml_path: str | os.PathLike[str],
    props: Mapping[str, Sequence[tuple[str, str]]],
    *,
    prefix: str | None = None,
) -> int:
    """Set test cases' properties (``props`` by node id) in a JUnit XML file pytest wrote:
    a property of the same name takes the new value, another one is added. A test case is
    judged before its sweep's knee exists, so the session sets its final outcome here once
    the sweep is done. The file is rewritten atomically; returns how many test cases
    changed."""
    if not props:
        return 0
    tree = ET.parse(xml_path)
    by_address = {testcase_address(n, prefix): p for n, p in props.items() if p}
    done = 0
    for case in tree.getroot().iter("testcase"):
        wanted = by_address.get((case.get("classname", ""), case.get("name", "")))
        if not wanted:
            continue
        node = case.find("properties")
        if node is None:
            node = ET.Element("properties")
            case.insert(0, node)
        have = {p.get("name"): p for p in node.findall("property")}
        for name, value in wanted:
            prop = have.get(name)
            if prop is None:
                prop = have[name] = ET.SubElement(node, "property", name=name)
            prop.set("value", value)
        done += 1
    _write_tree(tree, xml_path)
    return done


def _write_tree(tree: ET.ElementTree[ET.Element], xml_path: str | os.PathLike[str]) -> None:
    tmp = f"{os.fspath(xml_path)}.llmslo.tmp"
    tree.write(tmp, encoding="utf-8", xml_declaration=True)
    os.replace(tmp, xml_path)


class SystemOutCollector:
    """Each test's SLO numbers reach its JUnit ``system-out`` whatever ``junit_logging``
    says (pytest writes there only captured output, never a plugin's report section).
    Registered as a pytest plugin object by the plugin: it keeps each test's "llmslo"
    report section as the test reports, and ``write`` adds them to the file pytest wrote
    (at ``pytest_unconfigure``, after pytest wrote it), with each test case's final
    ``properties`` (its outcome against its sweep's knee: ``set_properties``)."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.properties: dict[str, list[tuple[str, str]]] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when != "call":
            return
        text = "\n".join(c for name, c in report.sections if "llmslo" in name)
        if text:
            self.texts[report.nodeid] = text

    def write(
        self, xmlpath: str, base: str | os.PathLike[str], *, prefix: str | None = None
    ) -> str | None:
        """Add the kept sections to ``xmlpath`` (``--junitxml``: ``~`` and ``$VARS``
        expanded, relative to ``base``); returns an error message instead of raising."""
        path = Path(base) / os.path.expanduser(os.path.expandvars(xmlpath))
        try:
            if path.exists():
                add_system_out(path, self.texts, prefix=prefix)
                set_properties(path, self.properties, prefix=prefix)
        except Exception as exc:  # reporting must never break the run
            return f"could not add the SLO numbers to {path}: {exc!r}"
        finally:
            self.texts.clear()
            self.properties.clear()
        return None
