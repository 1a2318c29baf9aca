"""The settings in a few words: the plan line of each test after collection
(``describe_workload``) and the report header's line of the active settings (``describe``)."""

from __future__ import annotations

from .resolved import SessionSettings, TestSettings


def describe_workload(test: TestSettings) -> str:
    """The workload and request counts of one test, in a few words (the plugin prints it
    per test after collection)."""
    kind, path = test.dataset_kind()
    if path is not None:
        wl = f"{kind}:{path}"
    else:
        isl = f"{test.isl}" + (f"±{test.isl_stddev:g}" if test.isl_stddev else "")
        osl = f"{test.osl}" + (f"±{test.osl_stddev:g}" if test.osl_stddev else "")
        wl = f"{kind} isl={isl} osl={osl}"
    if test.turns > 1:
        think = f" think={test.think_time_s:g}s" if test.think_time_s else ""
        wl += f" turns={test.turns}{think}"
    parts = [wl, f"warmup={test.warmup}", f"requests={test.requests or 'none'}"]
    if test.duration_s:
        parts.append(f"duration={test.duration_s:g}s")
    if test.objectives:
        parts.append(f"slo={test.slo_text}")
    return " ".join(parts)


def describe(session: SessionSettings, test: TestSettings, engines: str | None = None) -> str:
    """One line of the active settings (for the report header); ``engines``: the engines
    with what each measures (``session.engines_text``), in place of their names."""
    levels = ",".join(lv.label for lv in test.levels)
    kind, path = test.dataset_kind()
    wl = f"{kind} isl={test.isl} osl={test.osl}" if path is None else f"{kind}:{path}"
    parts = [
        f"engines={engines or ','.join(session.engines)}",
        f"levels={levels}",
        f"workload={wl}",
        f"warmup={test.warmup}",
        f"requests={test.requests or 'none'}",
    ]
    if test.duration_s:
        parts.append(f"duration={test.duration_s:g}s")
    parts.append(f"endpoint={test.endpoint}")
    if test.objectives:
        parts.append(f"slo={test.slo_text}")
    if test.strict:
        parts.append("strict")
    if test.extend:
        parts.append("extend")
    if test.capacity:
        parts.append("capacity-search")
    return " ".join(parts)
